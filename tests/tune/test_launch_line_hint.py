"""`tune --apply -- bash ds_pretrain_gpt_350M.sh` (Megatron-DeepSpeed examples_deepspeed/offload_pp, whose eval'd
run_cmd has no "$@") is refused, rightly: flags appended to `bash script.sh` never reach pretrain_gpt.py. The refusal
now quotes the script's own launch line and the one change that passes the arguments on, and that change is what lets
--apply run (H212 item 5)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmperf_hook.tune.script_forward import launch_line_hint

from .helpers import run_cli
from .test_sed_template_ds_config import SCRIPT, TEMPLATE

LINE = 'run_cmd="deepspeed ${DIR}/../../pretrain_gpt.py ${megatron_options} ${deepspeed_options} &> ${DIR}/log.txt"'


def test_refusal_quotes_the_launch_line_and_its_fix(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    (tmp_path / "run.sh").write_text(SCRIPT)
    (tmp_path / "ds_config_gpt_TEMPLATE.json").write_text(TEMPLATE)
    (tmp_path / "s.yaml").write_text("micro_batch_size: [4]\ntensor_parallel: [1]\npipeline_parallel: [1]\n"
                                     "recompute: [full]\nzero_stage: [1, 3]\n")
    tune = ["tune", "--cluster", "dgx-h100", "--nnodes", "2", "--nproc-per-node", "8", "--search", "s.yaml",
            "--apply", "--dry-run", "--", "bash", "run.sh"]
    code, _, err = run_cli(tune, capsys)
    number = SCRIPT.splitlines().index(LINE) + 1
    hint = re.search(rf"change run\.sh line {number} from `(.+?)` to `(.+?)`\.", err)
    assert code == 2 and hint is not None and hint.group(1) == LINE, err
    assert hint.group(2) == LINE.replace('} &>', '} "$@" &>')
    (tmp_path / "run.sh").write_text(SCRIPT.replace(hint.group(1), hint.group(2)))
    code, out, err = run_cli(tune, capsys)
    assert code == 0 and "would run: bash run.sh --micro-batch-size 4 --deepspeed_config" in out + err, err


MEGATRON_FLAGS = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 "
                  "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --vocab-size 1024")


@pytest.mark.parametrize(("lines", "fixed"), [
    # a trailing quoted argument stays whole: "$@" after it, not inside it (4b2b5426)
    ([f'deepspeed pretrain_gpt.py {MEGATRON_FLAGS} --name "foo"'],
     f'deepspeed pretrain_gpt.py {MEGATRON_FLAGS} --name "foo" "$@"'),
    # a trailing comment ends the command: "$@" inside it would pass nothing on
    ([f"deepspeed pretrain_gpt.py {MEGATRON_FLAGS}  # launch"],
     f'deepspeed pretrain_gpt.py {MEGATRON_FLAGS} "$@"  # launch'),
    # a quoted assignment that eval runs, with a comment after it: "$@" inside the quotes, before the comment
    ([f'opts="{MEGATRON_FLAGS}"', 'run_cmd="deepspeed pretrain_gpt.py ${opts}"  # the launch', "eval ${run_cmd}"],
     'run_cmd="deepspeed pretrain_gpt.py ${opts} "$@""  # the launch'),
])
def test_the_hint_puts_the_arguments_where_the_shell_passes_them(lines: list[str], fixed: str, tmp_path: Path,
                                                                 monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.sh").write_text("\n".join(["#!/bin/bash", *lines]) + "\n")
    hint = launch_line_hint(["bash", "run.sh"], (1, 8))
    assert hint.endswith(f" to `{fixed}`."), hint

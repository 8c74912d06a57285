"""Launch scripts read as bash would run them, without running them: `if` branches decided from the script's
variables (Pai-Megatron-Patch's `if [ $MODEL_SIZE = 7B ]`, Megatron-DeepSpeed's `if [[ "${no_pp}" = "true" ]]`),
`$(( ))` arithmetic, the script's own arguments ($1 ... ${10}, ${3:-MOCK}), a ds_config written by `sed ... > FILE`
and a process count only a command gives. Each checked against bash itself where bash can say."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.errors import ConfigError, UsageError
from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job
from llmperf_hook.launch.batch_script import _arithmetic
from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.shell_conditions import decide_test

GPT = ("--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
       "--vocab-size 50257 --micro-batch-size 1 --bf16")
BASH = shutil.which("bash")

SIZED = """#!/bin/bash
MODEL_SIZE=$1
TP=${2:-1}
no_pp="false"
pp_size=2
if [ $MODEL_SIZE = 1B ]; then
    LAYERS=24
elif [ $MODEL_SIZE = 7B ]; then
    LAYERS=32
else
    LAYERS=80
fi
if [[ "${no_pp}" = "true" ]]; then pp_size=1; fi
if [ -z ${MP_VP} ]; then vp=""; else vp="--num-layers-per-virtual-pipeline-stage ${MP_VP}"; fi
GPUS=$(( 4 * 2 ))
torchrun --nproc_per_node $GPUS pretrain_gpt.py --num-layers $LAYERS --tensor-model-parallel-size $TP \\
    --pipeline-model-parallel-size ${pp_size} $vp --hidden-size 4096 --num-attention-heads 32 --seq-length 2048 \\
    --max-position-embeddings 2048 --vocab-size 32000 --micro-batch-size 1 --global-batch-size 16 --bf16
"""


@pytest.mark.parametrize("args, env, expected", [
    (["1B"], {}, (24, 1, 2, None)), (["7B", "2"], {}, (32, 2, 2, None)), (["70B", "4"], {}, (80, 4, 2, None)),
    (["7B", "2"], {"MP_VP": "4"}, (32, 2, 2, 4)),
])
def test_branches_arguments_and_arithmetic(args: list[str], env: dict[str, str], expected: tuple, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.sh").write_text(SIZED)
    monkeypatch.chdir(tmp_path)
    job, cfg = resolve_job(["bash", "train.sh", *args], env)
    vpp_layers = cfg.model.num_layers // cfg.parallel.pp // cfg.parallel.vpp if cfg.parallel.vpp > 1 else None
    assert (cfg.model.num_layers, cfg.parallel.tp, cfg.parallel.pp, vpp_layers) == expected
    assert job.world_size == 8


def test_an_undecidable_test_leaves_what_one_branch_sets_unknown(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """TP is 2, or 1 where the test fails: the launch names both (H177; it was priced with the branch's 2)."""
    text = ("#!/bin/bash\nN=$(nvidia-smi -L | wc -l)\nTP=1\nif [ $N -gt 4 ]; then TP=2; fi\n"
            f"torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $TP {GPT}\n")
    (tmp_path / "train.sh").write_text(text)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"line 4 \(TP='2'\) or as before that `if` .*\(TP='1'\)"):
        resolve_job(["bash", "train.sh"], {})


TEST_WORDS = st.tuples(st.sampled_from(["[", "[["]), st.sampled_from(["", "!"]),
                       st.sampled_from(["a", "7", "-3", "", "abc"]),
                       st.sampled_from(["=", "!=", "-eq", "-ne", "-gt", "-ge", "-lt", "-le", "=="]),
                       st.sampled_from(["a", "7", "10", "", "a*"]))


@pytest.mark.skipif(BASH is None, reason="needs bash")
@settings(max_examples=60, deadline=None)
@given(TEST_WORDS)
def test_tests_decide_as_bash_does(parts: tuple[str, str, str, str, str]) -> None:
    bracket, bang, left, op, right = parts
    close = "]" if bracket == "[" else "]]"
    if op == "==" and bracket == "[":
        op = "="
    words = [bracket, *([bang] if bang else []), "$L", op, "$R", close]
    ours = decide_test(words, lambda w: {"$L": left, "$R": right}.get(w, w))
    script = f'L={left!r}; R={right!r}; {" ".join(w if w[0] != "$" else chr(34) + w + chr(34) for w in words)}'
    proc = subprocess.run([BASH, "-c", script], capture_output=True, text=True)
    if proc.returncode > 1 or proc.stderr:  # bash itself refuses (a non-integer with -eq in [ ]): undecided
        assert ours is None
        return
    if ours is None:  # undecided is allowed only where bash reads arithmetic or a glob llmperf does not
        assert op in ("-eq", "-ne", "-gt", "-ge", "-lt", "-le") or (bracket == "[[" and "*" in right), script
        return
    assert ours is (proc.returncode == 0), (script, proc.returncode)


@pytest.mark.skipif(BASH is None, reason="needs bash")
@settings(max_examples=80, deadline=None)
@given(st.recursive(st.integers(-40, 40).map(str),
                    lambda inner: st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%"]), inner).map(
                        lambda t: f"({t[0]} {t[1]} {t[2]})"), max_leaves=6))
def test_arithmetic_matches_bash(expr: str) -> None:
    proc = subprocess.run([BASH, "-c", f"echo $(( {expr} ))"], capture_output=True, text=True)
    ours = _arithmetic(expr, {})
    if proc.returncode != 0:  # division by zero
        assert ours.startswith("$((")
    else:
        assert ours == proc.stdout.strip()


def test_a_ds_config_written_by_sed_is_named_with_its_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = ("#!/bin/bash\nconfig_json=ds_config_gbs64.json\n"
            "sed \"s/CONFIG_BATCH_SIZE/64/\" ds_config_TEMPLATE.json > ${config_json}\n"
            f"deepspeed --num_gpus 8 pretrain_gpt.py {GPT} --global-batch-size 64 --deepspeed --deepspeed_config "
            "${config_json}\n")
    (tmp_path / "train.sh").write_text(text)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="ds_config_gbs64.json does not exist: the script writes it at train.sh line 3 "
                                         "with `sed s/CONFIG_BATCH_SIZE/64/ ds_config_TEMPLATE.json`"):
        resolve_job(["bash", "train.sh"], {})
    (tmp_path / "ds_config_gbs64.json").write_text('{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1}')
    assert resolve_job(["bash", "train.sh"], {})[1].batch.global_batch_size == 64  # an earlier run wrote it


def test_a_process_count_only_a_command_gives_asks_for_the_override(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.sh").write_text('GPUS=`python -c "import torch; print(torch.cuda.device_count())"`\n'
                                       f"torchrun --nproc_per_node $GPUS pretrain_gpt.py {GPT}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"--nproc-per-node \$GPUS is a variable whose value only running the "
                                         "launch script gives.*Give it with llmperf's --nproc-per-node N"):
        parse_launch(["bash", "train.sh"], {})
    job, _ = resolve_job(["bash", "train.sh"], {}, JobOverrides(nproc_per_node=8))
    assert job.world_size == 8


ARG_LOOP = """#!/bin/bash
ZERO_STAGE=1
while [[ $# -gt 0 ]]
do
key="$1"
case $key in
    -z|--zero-stage)
    ZERO_STAGE=$2;
    shift
    ;;
esac
done
VENV_PREFIX="uv run"
ARGS=(--num-layers 24)
if [ "${USE_MORE:-1}" = 1 ]; then
    ARGS=( "${ARGS[@]}" --hidden-size 2048 )
fi
$VENV_PREFIX python -m torch.distributed.run --nproc_per_node 8 pretrain_gpt.py ${ARGS[@]} --num-attention-heads 16 \\
    --seq-length 2048 --max-position-embeddings 2048 --vocab-size 50257 --micro-batch-size 1 --bf16 \\
    --deepspeed-zero-stage-hint=${ZERO_STAGE}
"""


def test_an_argument_loop_not_entered_a_wrapper_variable_and_a_growing_array(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Megatron-DeepSpeed universal_checkpointing/run_bf16.sh's `while [[ $# -gt 0 ]]; do case ... esac; done` (no
    arguments: bash never enters it), Megatron-LM megatron_fsdp's `$VENV_PREFIX ... python -m torch.distributed.run`
    and `TRAINING_ARGS=( "${TRAINING_ARGS[@]}" ... )`."""
    (tmp_path / "train.sh").write_text(ARG_LOOP)
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "train.sh"], {})
    assert (job.launcher, job.world_size) == ("torchrun", 8)
    assert job.script_args[:4] == ("--num-layers", "24", "--hidden-size", "2048")
    assert job.script_args[-1] == "--deepspeed-zero-stage-hint=1"
    entered = parse_launch(["bash", "train.sh", "--zero-stage", "3"], {})  # the loop runs: its value is unknown
    assert entered.script_args[-1] == "--deepspeed-zero-stage-hint=${ZERO_STAGE}"

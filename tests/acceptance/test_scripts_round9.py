"""Issues 2, 3, 5 through the real CLI, as a user pastes launch lines: a Megatron-DeepSpeed-style script that builds
its command in a string and evals it, `bash -x train.sh`, an empty `predict --batch` file, Megatron-LM CI's
ft_launcher line, a Pai-Megatron-Patch launch and an epfLLM Megatron-LLM finetune needing --model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.cli import error_lines, run_cli

EVAL_SCRIPT = """#!/bin/bash
dir=`pwd`
num_gpus=$(ds_ssh nvidia-smi --list-gpus | wc -l)
mp_size=2
megatron_options=" \\
    --tensor-model-parallel-size ${mp_size} \\
    --num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 \\
    --max-position-embeddings 2048 --micro-batch-size 2 --global-batch-size 64 --bf16 --vocab-size 50257"
run_cmd="deepspeed --num_gpus 8 ${dir}/pretrain_gpt.py ${megatron_options} &> ${dir}/log/train.log"
echo ${run_cmd}
eval ${run_cmd}
set +x
"""


@pytest.mark.parametrize("shell", [["bash"], ["bash", "-x"], ["bash", "-e"], ["sh"], ["bash", "-o", "pipefail"]])
def test_an_eval_script_run_with_shell_options_is_predicted(shell: list[str], tmp_path: Path, capsys,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.sh").write_text(EVAL_SCRIPT)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["explain", "--format", "json", "--", *shell, "train.sh"], capsys)
    data = json.loads(out)
    assert code == 0, err
    assert (data["world_size"], data["tp"], data["dp"], data["global_batch_size"]) == (8, 2, 4, 64)


def test_an_eval_of_a_command_substitution_is_one_clear_refusal(tmp_path: Path, capsys,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.sh").write_text('#!/bin/bash\neval "$(python make_cmd.py)"\n')
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["predict", "--", "bash", "-x", "train.sh"], capsys)
    assert code == 2 and len(error_lines(err)) == 1 and "Traceback" not in err
    assert "line 2 evals a command substitution" in err and "never runs its commands" in err


def test_an_empty_batch_file_exits_2(tmp_path: Path, capsys) -> None:
    (tmp_path / "cmds.txt").write_text("# nothing yet\n\n")
    code, out, err = run_cli(["predict", "--batch", str(tmp_path / "cmds.txt")], capsys)
    assert code == 2 and out == "" and "holds no launch command (2 line(s), all blank or comments)" in err


def test_megatron_ci_ft_launcher_line(capsys) -> None:
    argv = ["ft_launcher", "--nproc_per_node", "8", "--nnodes", "1", "--max-restarts=3", "--tee", "0:3,7:3",
            "--ft-cfg-path", "ft.yaml", "pretrain_gpt.py", "--num-layers", "12", "--hidden-size", "512",
            "--num-attention-heads", "8", "--seq-length", "1024", "--max-position-embeddings", "1024",
            "--micro-batch-size", "4", "--global-batch-size", "32", "--tensor-model-parallel-size", "2",
            "--vocab-size", "50257", "--bf16"]
    code, out, err = run_cli(["predict", "--format", "json", "--", *argv], capsys)
    data = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and data["config"]["world_size"] == 8 and data["step_time_s"] > 0
    assert any("fault-tolerance options --ft-cfg-path accepted, not modelled" in w for w in data["warnings"])


def test_pai_megatron_patch_and_megatron_llm(capsys) -> None:
    pai = ["torchrun", "--nproc_per_node", "8", "pretrain_qwen.py", "--num-layers", "24", "--hidden-size", "896",
           "--num-attention-heads", "14", "--ffn-hidden-size", "4864", "--group-query-attention", "--num-query-groups",
           "2", "--seq-length", "128", "--max-position-embeddings", "32768", "--swiglu", "--micro-batch-size", "1",
           "--global-batch-size", "8", "--bf16", "--patch-tokenizer-type", "Qwen2Tokenizer", "--extra-vocab-size", "293",
           "--load", "/nowhere/qwen", "--train-mode", "pretrain", "--dataset", "MMAP"]
    code, out, err = run_cli(["explain", "--", *pai], capsys)
    assert code == 2 and "add --padded-vocab-size N" in err and len(error_lines(err)) == 1
    code, out, err = run_cli(["explain", "--format", "json", "--", *pai, "--padded-vocab-size", "151936"], capsys)
    assert code == 0 and json.loads(out)["world_size"] == 8
    epfl = ["torchrun", "--nproc_per_node", "8", "finetune.py", "--tensor_model_parallel_size", "8", "--model_name",
            "llama2", "--micro_batch_size", "1", "--global_batch_size", "12", "--seq_length", "4096", "--bf16",
            "--use_checkpoint_args", "--load", "/ckpt"]
    code, out, err = run_cli(["predict", "--", *epfl], capsys)
    assert code == 2 and "llmperf --model PRESET|FILE" in err
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama2-7b", "--", *epfl], capsys)
    assert code == 0 and (json.loads(out)["tp"], json.loads(out)["global_batch_size"]) == (8, 12)

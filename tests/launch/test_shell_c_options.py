"""`bash -x -c "torchrun ..."`: the command string of a shell given -c after other options is the command, as the
shell itself reads it (bash manual 6.1 Invoking Bash). Each form is run by the real shell, with a `torchrun` on PATH
that prints the tensor-parallel size it is given, and through the real `llmperf explain`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llmperf_hook.launch.parse import shell_command_index
from tests.launch.cli_run import llmperf

GPT = ("--num-layers 2 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
       "--micro-batch-size 1 --global-batch-size 8 --tokenizer-type NullTokenizer --vocab-size 1000")
CMD = f"TP=2; torchrun --nproc_per_node 8 pretrain_gpt.py {GPT} --tensor-model-parallel-size $TP"
FORMS = [["bash", "-x", "-c"], ["bash", "-c"], ["sh", "-c"], ["sh", "-e", "-c"], ["bash", "-x", "-e", "-c"],
         ["bash", "-o", "pipefail", "-c"], ["bash", "--norc", "-c"], ["/bin/bash", "+x", "-c"], ["dash", "-e", "-c"]]


def _shell_tp(form: list[str], tmp_path: Path) -> str:
    """The TP the shell's torchrun receives (a stand-in on PATH that prints the word after the flag)."""
    fake = tmp_path / "bin" / "torchrun"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text('#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = --tensor-model-parallel-size ] && echo "$2"; shift; done\n')
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}
    return subprocess.run([*form, CMD], capture_output=True, text=True, env=env, check=True).stdout.strip()


@pytest.mark.parametrize("form", FORMS, ids=[" ".join(f) for f in FORMS])
def test_shell_options_before_c(form: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which(form[0]) is None:
        pytest.skip(f"needs {form[0]}")
    out = llmperf(capsys, "explain", "--format", "json", "--", *form, CMD)
    assert out.code == 0, out.err
    assert '"tp": 2' in out.out and '"world_size": 8' in out.out
    assert _shell_tp(form, tmp_path) == "2"


def test_the_command_index() -> None:
    assert shell_command_index(["bash", "-x", "-c", "CMD"], 0) == 3
    assert shell_command_index(["bash", "-o", "pipefail", "-c", "CMD"], 0) == 4
    assert shell_command_index(["bash", "-x", "train.sh"], 0) is None
    assert shell_command_index(["bash", "-x", "-c"], 0) is None
    assert shell_command_index(["bash", "-xc", "CMD"], 0) == 2


def test_srun_running_bash_x_c(capsys: pytest.CaptureFixture[str]) -> None:
    out = llmperf(capsys, "explain", "--format", "json", "--", "srun", "--nodes", "2", "--ntasks-per-node", "1",
                  "bash", "-x", "-c", CMD.replace("--nproc_per_node 8", "--nnodes 2 --nproc_per_node 8"))
    assert out.code == 0, out.err
    assert '"world_size": 16' in out.out


def test_an_empty_or_missing_command(capsys: pytest.CaptureFixture[str]) -> None:
    out = llmperf(capsys, "explain", "--", "bash", "-x", "-c", "")
    assert out.code == 2 and "empty command" in out.err
    out = llmperf(capsys, "explain", "--", "bash", "-x", "-c")
    assert out.code == 2 and out.err.startswith("llmperf: error: ")


def test_a_command_string_without_a_launch(capsys: pytest.CaptureFixture[str]) -> None:
    out = llmperf(capsys, "explain", "--", "bash", "-x", "-c", "echo a; echo b")
    assert out.code == 2 and "the command string of bash -c 'echo a; echo b' has no launch line" in out.err, out.err


REDIRECTED = [f"python pretrain_gpt.py {GPT} --tensor-model-parallel-size 1 > log 2>&1",
              f"python pretrain_gpt.py {GPT} --tensor-model-parallel-size 1 >>log.txt 2> err < /dev/null",
              f"torchrun --nproc_per_node 8 pretrain_gpt.py {GPT} --tensor-model-parallel-size 2 &> log"]


@pytest.mark.parametrize("command", REDIRECTED, ids=["gt-2>&1", "append-err-in", "torchrun-&>"])
def test_one_command_with_redirections(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`bash -c "python pretrain_gpt.py ... > log 2>&1"`: bash takes the redirections off the one command, so the
    training script never receives `>`, `log` or `2>&1` (bash manual 3.6 Redirections); the real bash, with a
    stand-in `python` / `torchrun` that prints its last argument, is the oracle."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python", "torchrun"):
        (bin_dir / name).write_text('#!/bin/sh\nfor a; do last="$a"; done; echo "$last" > "$LAST_ARG"\n')
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin", "LAST_ARG": str(tmp_path / "last")}
    subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, check=True)
    tp = (tmp_path / "last").read_text().strip()
    assert tp in command.split()
    out = llmperf(capsys, "explain", "--format", "json", "--", "bash", "-c", command)
    assert out.code == 0, out.err
    assert f'"tp": {tp}' in out.out
    assert '">"' not in out.out and "2>&1" not in out.out and '"log"' not in out.out

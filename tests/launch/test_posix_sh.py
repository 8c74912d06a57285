"""A script run by dash (`dash train.sh`, `sh train.sh` where sh is dash, a `#!/bin/sh` / `#!/bin/dash` first line):
a bash-only construct dash reaches before the launch is refused, naming its line, where dash itself would stop, fail
or read it otherwise; a POSIX script is read as before. Each script is also run by dash itself, with a `torchrun` on
PATH that prints the tensor-parallel size it is given."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llmperf_hook.launch.posix_shell import bash_only, script_shell
from tests.launch.cli_run import llmperf

DASH = shutil.which("dash")
BASH = shutil.which("bash")
GPT = ("--num-layers 2 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
       "--micro-batch-size 1 --global-batch-size 8 --tokenizer-type NullTokenizer --vocab-size 1000")
LAUNCH = f"torchrun --nproc_per_node 8 pretrain_gpt.py {GPT} --tensor-model-parallel-size $TP\n"

BASH_ONLY = {
    "array": ("TP=2\nARGS=(--bf16)\n", 2, "bash array assignment"),
    "[[ test": ("TP=1\nif [[ 1 = 1 ]]; then TP=2; fi\n", 2, "[[ ... ]]"),
    "${X//a/b}": ("X=a2\nTP=${X//a/}\n", 2, "bash expansion"),
    "${X:1}": ("X=a2\nTP=${X:1}\n", 2, "bash expansion"),
    "$'...'": ("TP=$'2'\n", 1, "$'...'"),
    "X+=": ("TP=\nTP+=2\n", 2, "NAME+=value"),
    "source": ("TP=2\nsource /dev/null\n", 2, "bash builtin"),
    "function": ("TP=2\nfunction f { :; }\n", 2, "function NAME"),
}
POSIX = {
    "plain": "TP=2\n",
    "[ test and ${X:-d}": 'X=\nTP=1\nif [ "${X:-a}" = a ]; then TP=2; fi\n',
    "quoted bash text": "TP=2\nY='A=(1) [[ x ]] ${X//a}'\nY=\"[[ not a test ]]\"\n",
    "bash-only text in a branch dash does not run": 'TP=2\nif [ 1 = 2 ]; then Y=${X//a/b}; fi\n',
    "after the launch line": "TP=2\n",
}


def _fake_path(tmp_path: Path) -> dict[str, str]:
    fake = tmp_path / "bin" / "torchrun"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text('#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = --tensor-model-parallel-size ] && echo "$2"; shift; done\n')
    fake.chmod(0o755)
    return {"PATH": f"{fake.parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}


def _run(shell: str, script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([shell, script.name], capture_output=True, text=True, env=_fake_path(script.parent),
                          cwd=script.parent)


@pytest.mark.skipif(DASH is None or BASH is None, reason="needs dash and bash")
@pytest.mark.parametrize("body, line, what", BASH_ONLY.values(), ids=BASH_ONLY.keys())
def test_dash_runs_it_otherwise_and_llmperf_refuses(body: str, line: int, what: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n" + body + LAUNCH)
    bash, dash = _run(BASH or "bash", script), _run(DASH or "dash", script)
    assert bash.returncode == 0 and bash.stdout.strip() == "2"
    assert dash.returncode != 0 or dash.stderr or dash.stdout.strip() != "2", (dash.stdout, dash.stderr)
    monkeypatch.chdir(tmp_path)
    out = llmperf(capsys, "explain", "--", "dash", "train.sh")
    assert out.code == 2 and f"line {line + 1} uses" in out.err and what in out.err and "bash train.sh" in out.err, out.err
    under_bash = llmperf(capsys, "explain", "--format", "json", "--", "bash", "train.sh")  # bash's value, or unknown
    assert (under_bash.code, '"tp": 2' in under_bash.out) == (0, True) or \
        (under_bash.code, "unexpanded shell variable" in under_bash.err) == (2, True), under_bash.err


@pytest.mark.skipif(DASH is None, reason="needs dash")
@pytest.mark.parametrize("body", POSIX.values(), ids=POSIX.keys())
def test_a_posix_script_reads_as_dash_runs_it(body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.sh"
    after = "A=(1 2)\n" if "after" in body or body == POSIX["after the launch line"] else ""
    script.write_text("#!/bin/sh\n" + body + LAUNCH + after)
    dash = _run(DASH or "dash", script)
    monkeypatch.chdir(tmp_path)
    out = llmperf(capsys, "explain", "--format", "json", "--", "dash", "train.sh")
    assert out.code == 0, out.err
    assert f'"tp": {dash.stdout.strip().splitlines()[0]}' in out.out


@pytest.mark.parametrize("first_line, shell", [("#!/bin/dash", "dash"), ("#!/usr/bin/env dash", "dash"),
                                               ("#!/bin/bash", "bash"), ("", "bash"), ("#!/usr/bin/env bash", "bash")])
def test_a_script_run_as_a_file_is_read_by_its_first_line(first_line: str, shell: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.sh").write_text(f"{first_line}\nTP=2\nARGS=(--bf16)\n{LAUNCH}")
    monkeypatch.chdir(tmp_path)
    assert script_shell(None, (tmp_path / "train.sh").read_text())[0] == shell
    out = llmperf(capsys, "explain", "--", "./train.sh")
    assert out.code == (2 if shell == "dash" else 0), out.err
    (tmp_path / "job.sh").write_text(f"{first_line}\n#SBATCH -N 1\nTP=2\nARGS=(--bf16)\n{LAUNCH}")
    assert llmperf(capsys, "explain", "--", "sbatch", "job.sh").code == (2 if shell == "dash" else 0)


def test_sh_is_the_machines_sh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    """`sh train.sh` and `sbatch --wrap` (a `#!/bin/sh` wrapper) follow what sh is here: dash on Debian / Ubuntu."""
    dash_sh = os.path.basename(os.path.realpath(shutil.which("sh") or "/bin/sh")).startswith("dash")
    (tmp_path / "train.sh").write_text(f"TP=2\nif [[ 1 = 1 ]]; then TP=2; fi\n{LAUNCH}")
    monkeypatch.chdir(tmp_path)
    assert llmperf(capsys, "explain", "--", "sh", "train.sh").code == (2 if dash_sh else 0)
    out = llmperf(capsys, "explain", "--", "sh", "-c", f"TP=2; [[ 1 = 1 ]] && {LAUNCH}")
    assert out.code == (2 if dash_sh else 0) and ("is run by sh, which is" in out.err) is dash_sh, out.err


def test_constructs_inside_quotes_or_comments_are_text() -> None:
    assert bash_only("echo 'A=(1)' \"[[ x ]]\" # ${X//a}", True) is None
    assert bash_only('Y="${X//a/b}"', True) is not None  # expanded inside double quotes
    assert bash_only("if [[ -n $X ]]; then", False) is None  # a line dash does not run
    assert bash_only("A=(1 2)", False) is not None  # a syntax error wherever it is


@pytest.mark.skipif(DASH is None, reason="needs dash")
def test_a_bash_redirection_still_launches_under_dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`cmd &> log`: dash runs `cmd &` then `> log`, the same launch in the background, so it is read, not refused."""
    script = tmp_path / "train.sh"
    script.write_text("TP=2\n" + LAUNCH.rstrip("\n") + " &> train.log\n")
    assert _run(DASH or "dash", script).stdout.strip() == "2"
    monkeypatch.chdir(tmp_path)
    out = llmperf(capsys, "explain", "--format", "json", "--", "dash", "train.sh")
    assert out.code == 0 and '"tp": 2' in out.out, out.err

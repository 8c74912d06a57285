"""A relative $LLMPERF_HOME is made absolute once, when a command starts (resources.pin_llmperf_home), so a command
that changes folder (predict --batch reads each line from its file's folder) and the processes it starts see the same
home. It was resolved per access against the current folder: LLMPERF_HOME=home found no home/hardware/NAME.yaml
from the batch file's folder ("hardware 'my-box' not found"), exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmperf_hook.resources import configs_dir, llmperf_home, pin_llmperf_home
from tests.acceptance.cli import run_cli

JOB = ("torchrun --nproc-per-node 1 pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
       "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 2 --global-batch-size 4 --vocab-size 1000")


def test_predict_batch_finds_a_hardware_file_under_a_relative_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "home" / "hardware").mkdir(parents=True)
    text = (configs_dir() / "hardware" / "h100-sxm5-80gb.yaml").read_text()
    (tmp_path / "home" / "hardware" / "my-box.yaml").write_text(text.replace("name: h100-sxm5-80gb", "name: my-box"))
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "commands.txt").write_text(JOB + "\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", "home")  # restored after the test, as pin_llmperf_home rewrites it
    code, out, err = run_cli(["predict", "--hardware", "my-box", "--batch", "jobs/commands.txt"], capsys)
    assert code == 0, err
    assert "my-box" in out and "not found" not in err
    assert os.environ["LLMPERF_HOME"] == str(tmp_path / "home")  # what the job under `llmperf run` inherits


def test_pinned_once_and_an_absolute_home_is_left_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", "~/../x/./h")
    pin_llmperf_home()
    assert os.environ["LLMPERF_HOME"] == "~/../x/./h"  # absolute once ~ is expanded, which llmperf_home() does
    monkeypatch.setenv("LLMPERF_HOME", "a/b")
    pin_llmperf_home()
    monkeypatch.chdir("/")
    pin_llmperf_home()
    assert llmperf_home() == tmp_path / "a" / "b"


DUMP_ENV = "import json, os, sys; json.dump(dict(os.environ), sys.stdout)"


@pytest.mark.parametrize("entry", ["python -m llmperf_hook", "llmperf"])
def test_the_job_under_llmperf_run_inherits_the_absolute_home_and_nothing_else(tmp_path: Path, entry: str) -> None:
    """`llmperf run` execs the job with the environment it was given, LLMPERF_HOME made absolute: the job's hook
    records into the run folder and the session's refine at the job's end reads that same home, whatever folder
    the job's script changes to."""
    script = Path(sys.executable).with_name("llmperf")
    if entry == "llmperf" and not script.is_file():
        pytest.skip("no llmperf console script beside this interpreter")
    argv = [sys.executable, "-m", "llmperf_hook"] if entry != "llmperf" else [str(script)]
    env = {**os.environ, "LLMPERF_HOME": "home", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([*argv, "run", "--", sys.executable, "-c", DUMP_ENV], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    child = json.loads(done.stdout)
    assert child.pop("LLMPERF_HOME") == str(tmp_path / "home")
    assert child == {k: v for k, v in env.items() if k != "LLMPERF_HOME"}


def test_a_home_of_an_unknown_user_is_a_usage_error_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture) -> None:
    """~name/ of no user on this machine (pathlib's expanduser raises RuntimeError): pin_llmperf_home ran before
    cli.main's error handling, so every command, explain too, died with a traceback; a command reading the home said
    'internal error' (exit 1) before the pin existed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", "~no-such-user-r63/home")
    code, out, err = run_cli(["explain", "--", *JOB.split()], capsys)
    assert code == 0 and "Traceback" not in err, err  # explain reads no home
    code, out, err = run_cli(["predict", "--hardware", "my-box", "--", *JOB.split()], capsys)
    assert code == 2 and out == "" and "Traceback" not in err, (code, err)
    assert "$LLMPERF_HOME=~no-such-user-r63/home" in err and "user" in err, err

"""A relative $LLMPERF_HOME is made absolute once, when a command starts (resources.pin_llmperf_home), so a command
that changes folder (predict --batch reads each line from its file's folder) and the processes it starts see the same
home. It was resolved per access against the current folder: LLMPERF_HOME=home found no home/hardware/NAME.yaml
from the batch file's folder ("hardware 'my-box' not found"), exit 2."""

from __future__ import annotations

import os
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

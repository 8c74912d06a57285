"""Review R64 of H177's round 2 of the launch-script reading: what it missed, checked against bash 5.2."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import FrameType

import pytest

from llmperf_hook.launch.parse import parse_launch

T = "torchrun --nproc_per_node $NP pretrain_gpt.py --num-layers 2"


def _timed_out(signum: int, frame: FrameType | None) -> None:
    pytest.fail("the reading blocked on the script's input")  # not an OSError, which the reading may catch


@pytest.mark.parametrize("target", ["pipe", "/dev/stdin"])
def test_input_that_is_no_regular_file_is_never_opened(target: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`read X < FIFO` (or `< /dev/stdin`): opening a FIFO blocks until a writer comes, and /dev/stdin is llmperf's
    own input, not the job's; what bash reads there only running gives, so X is named, and the reading never waits."""
    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nNP=2\nread -r X < {target}\nmapfile -t L < {target}\n"
                                       + T + " --save $X ${#L[@]}\n")
    previous = signal.signal(signal.SIGALRM, _timed_out)
    signal.alarm(10)
    try:
        job = parse_launch(["bash", "train.sh"], {})
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert job.nproc_per_node == 2 and job.script_args[-2:] == ("$X", "${#L[@]}")

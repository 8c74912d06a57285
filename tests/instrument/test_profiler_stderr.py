"""--profile-ops: the lines torch 2.13's Kineto prints at a profiler's start and stop stay out of the job's stderr;
everything else written to descriptor 2 meanwhile comes through, in order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from llmperf_hook.instrument.profiler_stderr import without_kineto_usdt_lines

REPO = Path(__file__).resolve().parents[2]

ORDER_JOB = """
import os, sys
from llmperf_hook.instrument.profiler_stderr import without_kineto_usdt_lines
sys.stderr.write("job line before\\n")  # left in Python's buffer: must come out before the captured text
with without_kineto_usdt_lines():
    os.write(2, b"USDT:2026-11-27 10:09:19 25188:25188 SyncActivityProfilerHandler.cpp:52] profiler_start\\n")
    os.write(2, b"WARNING:2026-11-27 kineto warning kept\\n")
    sys.stderr.write("job line inside\\n")
os.write(2, b"USDT: after the window: not ours to drop\\n")
"""


def test_only_kinetos_usdt_lines_are_dropped() -> None:
    done = subprocess.run([sys.executable, "-c", ORDER_JOB], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0
    assert done.stderr == ("job line before\nWARNING:2026-11-27 kineto warning kept\njob line inside\n"
                           "USDT: after the window: not ours to drop\n")


def test_the_capture_is_undone_when_the_block_raises(capfd) -> None:
    try:
        with without_kineto_usdt_lines():
            os.write(2, b"kept\n")
            raise RuntimeError("profiler failed")
    except RuntimeError:
        pass
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "kept\nafter\n"


def test_real_profiler_start_and_stop_print_nothing(capfd) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU])
    with without_kineto_usdt_lines():
        prof.start()
    torch.ones(4).sum()
    with without_kineto_usdt_lines():
        prof.stop()
    assert "USDT" not in capfd.readouterr().err


def test_no_descriptor_is_left_open_when_the_capture_cannot_be_made(monkeypatch, capfd) -> None:
    """No temporary directory: the block runs uncaptured, and the copy of descriptor 2 made for the capture is
    not leaked (one per profiler start and stop)."""
    import tempfile

    def no_tmp(*args, **kwargs):
        raise FileNotFoundError("no usable temporary directory")

    monkeypatch.setattr(tempfile, "TemporaryFile", no_tmp)
    before = len(os.listdir("/proc/self/fd"))
    with without_kineto_usdt_lines():
        os.write(2, b"USDT: shown\n")
    assert len(os.listdir("/proc/self/fd")) == before
    assert capfd.readouterr().err == "USDT: shown\n"

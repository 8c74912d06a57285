"""A job killed by a signal before its N steps end keeps the steps it recorded more than a second before."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from instrument_helpers import make_child_env, read_records, run_session, steps_by_rank

JOB = """
import os, signal, sys, time, torch
# as from a terminal, whatever disposition the test process hands down: a process started in the background by a
# non-interactive shell inherits SIGINT ignored, Python then installs no KeyboardInterrupt handler, and the SIGINT
# case ran on to its end (CI on a fresh clone, 14:36: exit 0 after 48 recorded steps)
signal.signal(signal.SIGINT, signal.default_int_handler)
torch.set_num_threads(1)
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    model(torch.randn(4, 8)).sum().backward()
    time.sleep(0.2)
    opt.step()
    opt.zero_grad()
    print("step", step, flush=True)
    if step == 9:
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
"""


SIGNALS = ("SIGTERM", "SIGKILL", "SIGINT")


def _killed_run(folder: Path, name: str) -> subprocess.CompletedProcess:
    script = folder / "job.py"
    script.write_text(JOB)
    return run_session(folder, make_child_env(folder), [sys.executable, str(script), name], steps=50)


@pytest.fixture(scope="module")
def killed_runs(tmp_path_factory) -> Iterator[dict[str, tuple[Path, Future]]]:
    """The three jobs, each in a folder and $LLMPERF_HOME of its own, run side by side (each sleeps most of its
    2 s of steps; one at a time they left the machine idle): {signal name: (folder, future of its session)}. Each
    test waits for its own, so one that fails or times out fails alone."""
    with ThreadPoolExecutor(len(SIGNALS)) as pool:
        runs = {}
        for name in SIGNALS:
            folder = tmp_path_factory.mktemp(f"killed-{name}")
            runs[name] = (folder, pool.submit(_killed_run, folder, name))
        yield runs


@pytest.mark.parametrize("name", SIGNALS)
def test_steps_before_the_kill_are_on_disk(killed_runs: dict[str, tuple[Path, Future]], name: str) -> None:
    """Killed at step 9 of --instrument 50, with 0.2 s steps: by SIGTERM or SIGKILL no atexit runs, so only what
    the writer flushed on the way is there. Buffering up to 64 records lost every step; with the one-second bound,
    the steps up to about a second before the kill are kept (at least 0-3), in order, with the job's own exit
    status."""
    tmp_path, future = killed_runs[name]
    done = future.result()
    assert done.returncode == 128 + getattr(signal, name), done.stderr[-2000:]
    assert done.stdout.count("step ") == 10
    recorded = steps_by_rank(read_records(tmp_path / "run")).get(0, [])
    assert len(recorded) >= 4 and recorded == list(range(len(recorded))), recorded
    if name == "SIGINT":  # KeyboardInterrupt: the interpreter unwinds and runs atexit, so every step is there
        assert recorded == list(range(10))

"""Processes a rank starts are not ranks: data-loader workers it forks and scripts it runs with subprocess do
not record steps under its rank number, even when they step an optimizer themselves."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from instrument_helpers import read_records, run_session, steps_by_rank

JOB = """
import subprocess, sys, torch
from torch.utils.data import DataLoader, TensorDataset
torch.set_num_threads(1)
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(32, 8)), batch_size=8, num_workers=2)  # forked again each epoch
for epoch in range(2):
    for (x,) in loader:
        model(x).sum().backward(); opt.step(); opt.zero_grad()
# an evaluation script of its own, which steps a tiny optimizer too
subprocess.run([sys.executable, "-c", "import torch; m = torch.nn.Linear(2, 2); o = torch.optim.SGD("
                "m.parameters(), lr=0.1)\\nfor _ in range(6): m(torch.randn(1, 2)).sum().backward(); o.step()\\n"
                "print('helper done')"], check=True)
print("job done")
"""


def test_workers_and_subprocesses_of_a_rank_record_nothing(tmp_path: Path, child_env: dict[str, str]) -> None:
    """8 optimizer steps of the rank, 6 of the helper: before, the helper's steps 0-5 were appended to rank0.jsonl
    as rank 0's too (every step index twice, the helper's meta record beside the rank's)."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    done = run_session(tmp_path, child_env, [sys.executable, str(script)], steps=6)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("helper done") == 1 and done.stdout.endswith("job done\n")
    records = read_records(tmp_path / "run")
    assert steps_by_rank(records) == {0: [0, 1, 2, 3, 4, 5]}
    assert len({r["pid"] for r in records}) == 1 and [r["kind"] for r in records].count("meta") == 1


def test_a_process_started_by_a_stepping_one_is_no_rank(monkeypatch) -> None:
    from llmperf_hook.instrument.recorder import STEPPING_ENV, _started_by_a_stepping_process

    monkeypatch.setenv(STEPPING_ENV, f"job-1:{os.getpid() + 1}")
    assert _started_by_a_stepping_process("job-1")
    assert not _started_by_a_stepping_process("job-2")  # a job nested in another: its own ranks record
    monkeypatch.setenv(STEPPING_ENV, f"job-1:{os.getpid()}")  # this very process set it: it steps
    assert not _started_by_a_stepping_process("job-1")
    monkeypatch.delenv(STEPPING_ENV)
    assert not _started_by_a_stepping_process("job-1")

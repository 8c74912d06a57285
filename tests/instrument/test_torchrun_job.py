"""A 2-rank plain-DDP job under torchrun (gloo, CPU): both ranks recorded through the torch fallback."""

from __future__ import annotations

import sys
from pathlib import Path

from instrument_helpers import SMALL_GPT, TRAIN_GPT, free_port, read_records, run_session, steps_by_rank


def test_torchrun_ddp_two_ranks(tmp_path: Path, child_env: dict[str, str]) -> None:
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
            str(TRAIN_GPT), *SMALL_GPT, "--global-batch-size", "8", "--train-iters", "5"]
    done = run_session(tmp_path, child_env, argv, steps=4)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "done: 5 steps" in done.stdout
    records = read_records(tmp_path / "run")
    assert steps_by_rank(records) == {0: [0, 1, 2, 3], 1: [0, 1, 2, 3]}  # accumulation 2: one record per optimizer step
    assert {(r["framework"], r["world_size"]) for r in records if r["kind"] == "step"} == {("torch", 2)}
    assert len({r["pid"] for r in records}) == 2

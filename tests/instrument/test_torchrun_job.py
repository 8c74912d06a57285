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


def test_ranks_started_by_the_script_itself(tmp_path: Path, child_env: dict[str, str]) -> None:
    """torch.multiprocessing.spawn workers have no RANK in their environment: the rank comes from the process
    group they initialise, so each writes its own file."""
    script = tmp_path / "spawn_train.py"
    script.write_text(f'''
import os, torch, torch.distributed as dist, torch.multiprocessing as mp
def worker(rank):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{free_port()}", rank=rank, world_size=2)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        model(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad()
    del model, opt  # DDP's reducer outliving its process group aborts ~1 exit in 3 (torch 2.13, gloo)
    import gc; gc.collect()
    dist.destroy_process_group()
if __name__ == "__main__":
    mp.spawn(worker, nprocs=2)
    print("spawned job done")
''')
    done = run_session(tmp_path, child_env, [sys.executable, str(script)], steps=3)
    assert done.returncode == 0 and "spawned job done" in done.stdout, done.stderr[-2000:]
    records = read_records(tmp_path / "run")
    assert steps_by_rank(records) == {0: [0, 1, 2], 1: [0, 1, 2]}
    assert {(r["rank"], r["world_size"]) for r in records if r["kind"] == "step"} == {(0, 2), (1, 2)}

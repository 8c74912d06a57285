"""A two-node torchrun with the c10d rendezvous and no --rdzv-id, one `llmperf run --instrument` per node, played on
this machine without a scheduler (R71/H184: the `torchrun-<endpoint>` id, instrument/rendezvous_id.py, was unit-tested
only). torch/distributed/run.py gives every agent run id "none" at the --rdzv-endpoint; the rendezvous, not a node
rank, numbers the ranks. Both nodes' ranks must land in one job, refined once with both."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from instrument_helpers import SMALL_GPT, TRAIN_GPT, free_port, make_child_env, read_records, steps_by_rank

from llmperf_hook.instrument.shared_job import _safe

pytestmark = pytest.mark.slow  # two llmperf sessions, two torchrun agents and their ranks: 29 s wall, ~15 s CPU at load 7


@pytest.fixture(scope="module")
def c10d_nodes(tmp_path_factory) -> tuple[Path, str, list[subprocess.CompletedProcess]]:
    root = tmp_path_factory.mktemp("c10d")
    env = make_child_env(root)
    endpoint = f"127.0.0.1:{free_port()}"
    procs = []
    for _ in range(2):
        argv = [sys.executable, "-m", "llmperf_hook", "run", "--instrument", "2", "--run-dir", str(root / "run"), "--",
                sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, str(TRAIN_GPT), *SMALL_GPT,
                "--max-position-embeddings", "16", "--train-iters", "4"]
        procs.append(subprocess.Popen(argv, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    done = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return root, f"torchrun-{_safe(endpoint)}", done


def test_both_agents_land_in_one_job_named_after_the_endpoint(c10d_nodes) -> None:
    root, job_id, done = c10d_nodes
    assert [d.returncode for d in done] == [0, 0], [d.stderr[-2000:] for d in done]
    run = root / "run"
    assert sorted(p.name for p in (run / "jobs").iterdir() if p.is_dir()) == [job_id]
    assert len(list((run / "jobs" / job_id / "nodes").glob("*.json"))) == 2
    records = read_records(run)
    assert {r["job_id"] for r in records} == {job_id}
    assert steps_by_rank(records) == {0: [0, 1], 1: [0, 1]}
    assert "this node joins it" in "".join(d.stderr for d in done)


def test_the_job_is_refined_once_with_both_ranks(c10d_nodes) -> None:
    root, job_id, done = c10d_nodes
    refined = [d for d in done if "llmperf refine:" in d.stderr]
    assert len(refined) == 1 and f"job {job_id}: torch on cpu, 2/2 ranks" in refined[0].stderr, \
        [d.stderr[-1500:] for d in done]
    with sqlite3.connect(root / "home" / "store.sqlite") as conn:
        assert conn.execute("SELECT job_id, world_size FROM refine_runs").fetchall() == [(job_id, 2)]
    assert not (root / "home" / "job_ids" / job_id).exists()  # its claim released by the session that refined

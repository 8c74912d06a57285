"""A two-node launch with one `llmperf run --instrument` per node (as `srun -N 2 llmperf run ...` starts it),
played on this machine: two torchrun "nodes" (--nnodes 2, --node-rank 0/1, static rendezvous on loopback) share a
--run-dir and a SLURM_JOB_ID. Both nodes' ranks record under one job, and the session that ends last refines it,
once, with both ranks (before, each node made its own job id: two jobs of 1/2 ranks)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from instrument_helpers import SMALL_GPT, TRAIN_GPT, free_port, make_child_env, read_records, steps_by_rank

pytestmark = pytest.mark.slow  # two llmperf sessions, two torchrun agents and their ranks: 42 s wall, 16 s CPU at load 9


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory) -> tuple[Path, list[subprocess.CompletedProcess]]:
    root = tmp_path_factory.mktemp("two-nodes")
    env = {**make_child_env(root), "SLURM_JOB_ID": "4242"}
    port = str(free_port())
    procs = []
    for node_rank in ("0", "1"):
        argv = [sys.executable, "-m", "llmperf_hook", "run", "--instrument", "3", "--run-dir", str(root / "run"), "--",
                sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", node_rank,
                "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port, str(TRAIN_GPT),
                *SMALL_GPT, "--max-position-embeddings", "16", "--train-iters", "5"]
        procs.append(subprocess.Popen(argv, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return root, done


def test_both_nodes_run_their_part(two_nodes) -> None:
    _, done = two_nodes
    assert [d.returncode for d in done] == [0, 0], [d.stderr[-2000:] for d in done]
    assert "done: 5 steps" in done[0].stdout  # rank 0 (node 0) prints the job's lines


def test_one_job_holds_the_ranks_of_both_nodes(two_nodes) -> None:
    root, _ = two_nodes
    run = root / "run"
    assert sorted(p.name for p in (run / "jobs").iterdir() if p.is_dir()) == ["slurm-4242"]
    assert len(list((run / "jobs" / "slurm-4242" / "nodes").glob("*.json"))) == 2
    records = read_records(run)
    assert {r["job_id"] for r in records} == {"slurm-4242"}
    assert steps_by_rank(records) == {0: [0, 1, 2], 1: [0, 1, 2]}


def test_the_session_that_ends_last_refines_the_whole_job_once(two_nodes) -> None:
    root, done = two_nodes
    refined = [d for d in done if "llmperf refine:" in d.stderr]
    waited = [d for d in done if "the llmperf run that ends last refines it" in d.stderr]
    assert len(refined) == len(waited) == 1, [d.stderr[-1500:] for d in done]
    assert "job slurm-4242: torch on cpu, 2/2 ranks" in refined[0].stderr
    assert "this node joins it" in "".join(d.stderr for d in done)
    with sqlite3.connect(root / "home" / "store.sqlite") as conn:
        runs = conn.execute("SELECT job_id, world_size FROM refine_runs").fetchall()
        steps = conn.execute("SELECT rank, COUNT(*) FROM refine_steps GROUP BY rank").fetchall()
    assert runs == [("slurm-4242", 2)] and sorted(steps) == [(0, 3), (1, 3)]

"""One job id for every node of a multi-node launch that runs one `llmperf run --instrument` per node
(instrument/shared_job.py): the scheduler's id when there is one, joined only by the same launch's other parts."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from llmperf_hook.instrument.shared_job import (SharedId, end_node, launch_part, process_start_ticks,
                                                 same_launch_command, shared_job_id, start_or_join)
from llmperf_hook.profile.machine_identity import host_identity

SETTINGS = {"steps": 5, "profile_ops": 0, "stop_after": None}
NODE = ["torchrun", "--nnodes", "2", "--node-rank", "0", "--master-addr", "n1", "train.py", "--bf16"]


def _other_node(argv: list[str] = NODE) -> list[str]:
    return [w if w != "0" else "1" for w in argv]


def test_the_schedulers_id_names_the_job() -> None:
    assert shared_job_id({"SLURM_JOB_ID": "4242"}, NODE) == SharedId("slurm-4242", "SLURM_JOB_ID=4242 (environment)")
    assert shared_job_id({"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "3"}, NODE).base == "slurm-4242.3"
    assert shared_job_id({"PBS_JOBID": "77.pbs/x"}, NODE).base == "pbs-77.pbs_x"  # no '/' in a folder name
    assert shared_job_id({}, [*NODE[:1], "--rdzv-id=abc", *NODE[1:]]).base == "torchrun-abc"
    assert shared_job_id({}, ["torchrun", "--rdzv_id", "none", "t.py"]) is None  # torchrun's default names nothing
    assert shared_job_id({"TORCHELASTIC_RUN_ID": "r9"}, NODE).base == "torchrun-r9"
    assert shared_job_id({}, ["torchrun", "--nproc-per-node", "8", "train.py"]) is None  # one node: nothing to share


def test_node_rank_options_are_what_nodes_differ_in() -> None:
    assert same_launch_command(NODE) == same_launch_command(_other_node())
    assert same_launch_command(["deepspeed", "--node_rank=1", "t.py"]) == ["deepspeed", "t.py"]
    assert launch_part({"SLURM_PROCID": "3"}, NODE) == "SLURM_PROCID=3"
    assert launch_part({}, NODE) == "--node-rank=0"
    assert launch_part({}, ["python", "t.py"]) is None


def test_a_second_node_joins_a_running_job(tmp_path: Path) -> None:
    """The first session writes the job's hook folder (prepare) before it lets go of the lock; a joining one
    writes nothing of it (it removed the folder the first node's ranks were starting from)."""
    shared, prepared = SharedId("slurm-4242", "test"), []

    def prepare(job_id: str) -> None:
        assert not (tmp_path / "jobs" / job_id / "nodes").exists()  # before the job is there to be joined
        prepared.append(job_id)

    first = start_or_join(tmp_path, "own-1", shared, NODE, {}, SETTINGS, tmp_path / "store.sqlite", prepare)
    second = start_or_join(tmp_path, "own-2", shared, _other_node(), {}, SETTINGS, tmp_path / "store.sqlite", prepare)
    assert (first.job_id, first.joined, second.job_id, second.joined) == ("slurm-4242", False, "slurm-4242", True)
    assert prepared == ["slurm-4242"]
    assert end_node(first, 0) == [os.uname().nodename]  # the other session still runs: it refines
    assert end_node(second, 0) == []  # the last one to end


def test_what_is_not_another_part_of_the_same_launch_starts_its_own_job(tmp_path: Path) -> None:
    shared, store = SharedId("slurm-4242", "test"), tmp_path / "store.sqlite"
    first = start_or_join(tmp_path, "own-1", shared, NODE, {}, SETTINGS, store)
    same_part = start_or_join(tmp_path, "own-2", shared, NODE, {}, SETTINGS, store)  # node rank 0 again
    other_command = start_or_join(tmp_path, "own-3", shared, [*_other_node(), "--lr", "1"], {}, SETTINGS, store)
    other_steps = start_or_join(tmp_path, "own-4", shared, _other_node(), {}, {**SETTINGS, "steps": 3}, store)
    assert [n.job_id for n in (first, same_part, other_command, other_steps)] == \
        ["slurm-4242", "slurm-4242-2", "slurm-4242-3", "slurm-4242-4"]
    assert not any(n.joined for n in (same_part, other_command, other_steps))


def test_one_command_run_twice_on_one_host_in_an_allocation_is_two_jobs(tmp_path: Path) -> None:
    """`python train.py &` twice in an salloc shell (SLURM_JOB_ID, no SLURM_PROCID, no node rank): nothing tells
    the two apart but the host, which nodes of one launch never share; both joined, their rank 0 wrote one
    rank0.jsonl. Under torchrun's rendezvous id the same command on one host is one launch (a loopback test)."""
    plain, store = ["python", "train.py", "--bf16"], tmp_path / "store.sqlite"
    first = start_or_join(tmp_path, "own-1", SharedId("slurm-4242", "test"), plain, {}, SETTINGS, store)
    again = start_or_join(tmp_path, "own-2", SharedId("slurm-4242", "test"), plain, {}, SETTINGS, store)
    assert (first.job_id, again.job_id, again.joined) == ("slurm-4242", "slurm-4242-2", False)
    rdzv = shared_job_id({}, ["torchrun", "--nnodes", "2", "--rdzv-id", "r1", "train.py"])
    one = start_or_join(tmp_path, "own-3", rdzv, ["torchrun", "--rdzv-id", "r1", "t.py"], {}, SETTINGS, store)
    two = start_or_join(tmp_path, "own-4", rdzv, ["torchrun", "--rdzv-id", "r1", "t.py"], {}, SETTINGS, store)
    assert (one.job_id, two.job_id, two.joined) == ("torchrun-r1", "torchrun-r1", True)


def test_a_job_that_ended_is_not_joined_by_the_next_run_of_the_allocation(tmp_path: Path) -> None:
    shared, store = SharedId("slurm-4242", "test"), tmp_path / "store.sqlite"
    end_node(start_or_join(tmp_path, "own-1", shared, NODE, {}, SETTINGS, store), 0)
    later = start_or_join(tmp_path, "own-2", shared, _other_node(), {}, SETTINGS, store)
    assert (later.job_id, later.joined) == ("slurm-4242-2", False)


def test_a_dead_session_of_this_host_is_not_joined(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    shared = SharedId("slurm-4242", "test")
    first = start_or_join(tmp_path, "own-1", shared, NODE, {}, SETTINGS, tmp_path / "store.sqlite")
    record = json.loads(first.node_file.read_text())
    first.node_file.write_text(json.dumps({**record, "pid": int(dead.stdout)}))  # killed without its end
    later = start_or_join(tmp_path, "own-2", shared, _other_node(), {}, SETTINGS, tmp_path / "store.sqlite")
    assert later.job_id == "slurm-4242-2"


def test_a_killed_session_whose_pid_names_another_process_now_is_not_joined(tmp_path: Path) -> None:
    """A session killed without its end whose pid the kernel gave to another process since (a long allocation
    reuses pids): the pid is alive, but it started at another time; the next run of the allocation is its own job."""
    shared, store = SharedId("slurm-4242", "test"), tmp_path / "store.sqlite"
    first = start_or_join(tmp_path, "own-1", shared, NODE, {}, SETTINGS, store)
    record = json.loads(first.node_file.read_text())
    assert record["pid_start_ticks"] == process_start_ticks(os.getpid()) is not None
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as other:
        try:
            first.node_file.write_text(json.dumps({**record, "pid": other.pid}))  # its start time is ours, not its
            later = start_or_join(tmp_path, "own-2", shared, _other_node(), {}, SETTINGS, store)
            first.node_file.write_text(json.dumps({**record, "pid": other.pid,
                                                   "pid_start_ticks": process_start_ticks(other.pid)}))
            joining = start_or_join(tmp_path, "own-3", shared, _other_node(), {}, SETTINGS, store)
        finally:
            other.kill()
    assert (later.job_id, later.joined) == ("slurm-4242-2", False)
    assert (joining.job_id, joining.joined) == ("slurm-4242", True)  # the same process still: it runs


def test_an_id_the_store_holds_from_another_run_directory_is_not_reused(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite"
    with sqlite3.connect(store) as conn:
        conn.execute("CREATE TABLE refine_runs (job_id TEXT PRIMARY KEY, run_dir TEXT)")
        conn.execute("INSERT INTO refine_runs VALUES ('slurm-4242', '/elsewhere')")
    conn.close()
    node = start_or_join(tmp_path / "run", "own-1", SharedId("slurm-4242", "test"), NODE, {}, SETTINGS, store)
    assert node.job_id == "slurm-4242-2"


def test_an_id_a_running_job_of_another_run_directory_took_is_not_reused(tmp_path: Path) -> None:
    """Two jobs of one allocation started into two run directories, neither refined yet: both were slurm-4242,
    and the second one's refine replaced the first one's run in the store (refine_runs' key is the job id)."""
    store, shared = tmp_path / "home" / "store.sqlite", SharedId("slurm-4242", "test")
    first = start_or_join(tmp_path / "a", "own-1", shared, ["python", "a.py"], {}, SETTINGS, store)
    other = start_or_join(tmp_path / "b", "own-2", shared, ["python", "b.py"], {}, SETTINGS, store)
    assert (first.job_id, other.job_id) == ("slurm-4242", "slurm-4242-2")
    assert (tmp_path / "home" / "job_ids" / "slurm-4242").read_text() == f"{host_identity()}:{tmp_path / 'a'}\n"
    end_node(first, 0)
    again = start_or_join(tmp_path / "a", "own-3", shared, ["python", "a.py"], {}, SETTINGS, store)
    assert again.job_id == "slurm-4242-3"  # its own folder holds the ended slurm-4242; slurm-4242-2 is b's


def test_a_node_local_run_directory_of_another_host_is_another_run_directory(tmp_path: Path) -> None:
    """`srun -N2 llmperf run --run-dir /tmp/x`: the other node took slurm-4242 in its own /tmp/x, whose job folder
    this node cannot see; one id made the second refine replace the first one's run in the store."""
    store = tmp_path / "home" / "store.sqlite"
    (tmp_path / "home" / "job_ids").mkdir(parents=True)
    (tmp_path / "home" / "job_ids" / "slurm-4242").write_text(f"other-node:{tmp_path / 'x'}\n")
    node = start_or_join(tmp_path / "x", "own-1", SharedId("slurm-4242", "test"), _other_node(), {}, SETTINGS, store)
    assert (node.job_id, node.joined) == ("slurm-4242-2", False)


def test_a_job_folder_another_node_made_at_the_same_moment_is_left_to_it(tmp_path: Path, monkeypatch) -> None:
    """Where the flock locks nothing (NFS mounted `nolock`), another node may make slurm-4242 between this
    session's look and its prepare: it must not write (rmtree) that job's hook folder, it takes the next id."""
    from llmperf_hook.instrument import shared_job

    def other_node_made_it(job_id: str, run_dir: Path, store_file: Path | None) -> bool:
        (run_dir / "jobs" / "slurm-4242").mkdir(parents=True, exist_ok=True)
        return False
    monkeypatch.setattr(shared_job, "_held_elsewhere", other_node_made_it)
    prepared: list[str] = []
    node = start_or_join(tmp_path, "own-1", SharedId("slurm-4242", "test"), NODE, {}, SETTINGS,
                         tmp_path / "store.sqlite", prepared.append)
    assert (node.job_id, node.joined, prepared) == ("slurm-4242-2", False, ["slurm-4242-2"])


def test_without_a_shared_id_the_session_keeps_its_own(tmp_path: Path) -> None:
    node = start_or_join(tmp_path, "20261128T000000Z-1", None, NODE, {}, SETTINGS, tmp_path / "store.sqlite")
    assert (node.job_id, node.joined) == ("20261128T000000Z-1", False)
    assert node.node_file.parent == tmp_path / "jobs" / "20261128T000000Z-1" / "nodes"

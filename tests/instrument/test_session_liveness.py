"""When a node session of a multi-node job counts as ended, which job-id claims are removed, and the job id of
`deepspeed --no_ssh` launches (instrument/shared_job.py; refine_run.session_notes says it in refine's report)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import time
from pathlib import Path

from llmperf_hook.instrument.shared_job import (STALE_AFTER_S, SharedId, end_node, heartbeat, release_claims,
                                                 session_states, shared_job_id, start_or_join)
from llmperf_hook.refine.refine_run import session_notes

SETTINGS = {"steps": 5, "profile_ops": 0, "stop_after": None}
NODE = ["torchrun", "--nnodes", "2", "--node-rank", "0", "--master-addr", "n1", "train.py"]
OTHER = ["torchrun", "--nnodes", "2", "--node-rank", "1", "--master-addr", "n1", "train.py"]
SHARED = SharedId("slurm-4242", "test")
MONTH_S = 30 * 24 * 3600.0


def _as_other_host(node_file: Path, silent_s: float) -> None:
    """The session's record as another host's session wrote it, its last heartbeat `silent_s` ago."""
    record = json.loads(node_file.read_text())
    node_file.write_text(json.dumps({**record, "hostname": "other-node", "pid": 4242}))
    then = time.time() - silent_s
    os.utime(node_file, (then, then))


def test_another_hosts_session_silent_past_the_limit_counts_as_ended(tmp_path: Path) -> None:
    """A session on another host that crashed without its end record counted as running forever: every later run of
    the allocation joined it, and no session ever ended last to refine. Now its silence ends it."""
    store = tmp_path / "store.sqlite"
    first = start_or_join(tmp_path, "own-1", SHARED, NODE, {}, SETTINGS, store)
    _as_other_host(first.node_file, STALE_AFTER_S + 60)
    later = start_or_join(tmp_path, "own-2", SHARED, OTHER, {}, SETTINGS, store)
    assert (later.job_id, later.joined) == ("slurm-4242-2", False)
    [state] = session_states(tmp_path / "jobs" / "slurm-4242")
    assert (state.hostname, state.state) == ("other-node", "stale") and state.quiet_s > STALE_AFTER_S
    [note] = session_notes(tmp_path / "jobs" / "slurm-4242")
    assert "other-node (pid 4242) never recorded its end and has been silent for 11 min" in note
    assert "counted as ended" in note


def test_another_hosts_session_that_signalled_lately_still_runs(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite"
    first = start_or_join(tmp_path, "own-1", SHARED, NODE, {}, SETTINGS, store)
    _as_other_host(first.node_file, STALE_AFTER_S - 60)
    joining = start_or_join(tmp_path, "own-2", SHARED, OTHER, {}, SETTINGS, store)
    assert (joining.job_id, joining.joined) == ("slurm-4242", True)
    assert end_node(joining, 0) == ["other-node"]  # it still runs: it refines when it ends
    [note] = session_notes(tmp_path / "jobs" / "slurm-4242")
    assert "other-node (pid 4242) has not recorded its end: it still runs" in note


def test_the_last_live_session_refines_beside_a_stale_one(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite"
    first = start_or_join(tmp_path, "own-1", SHARED, NODE, {}, SETTINGS, store)
    joining = start_or_join(tmp_path, "own-2", SHARED, OTHER, {}, SETTINGS, store)
    _as_other_host(first.node_file, STALE_AFTER_S + 1)
    assert end_node(joining, 0) == []


def test_a_running_session_keeps_its_node_file_fresh(tmp_path: Path) -> None:
    node_file = tmp_path / "node.json"
    node_file.write_text("{}")
    os.utime(node_file, (1.0, 1.0))
    stop = heartbeat(node_file, every_s=0.02)
    try:
        deadline = time.time() + 10
        while node_file.stat().st_mtime < 2.0 and time.time() < deadline:
            time.sleep(0.02)
    finally:
        stop()
    assert node_file.stat().st_mtime > time.time() - 60


def test_llmperf_run_beats_while_its_job_runs_and_stops_once_it_ended(tmp_path: Path, monkeypatch) -> None:
    """session.run_instrumented_job starts the heartbeat on its node file before the launch and stops it once the
    job ended; without it another host counts the running session ended after STALE_AFTER_S."""
    import sys

    from llmperf_hook.instrument import session

    marker, calls = tmp_path / "ran", []

    def recording(node_file: Path) -> object:
        calls.append(("start", node_file.is_file(), marker.exists()))
        return lambda: calls.append(("stop", marker.exists()))
    monkeypatch.setattr(session, "heartbeat", recording)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    session.run_instrumented([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], env=dict(os.environ), steps=1,
                             run_dir=str(tmp_path / "run"))
    assert calls == [("start", True, False), ("stop", True)]


def test_a_heartbeat_without_a_thread_leaves_the_job_alone(tmp_path: Path, monkeypatch) -> None:
    """`llmperf run` starts the heartbeat just before it launches the job: a process out of threads must still run
    the job (the hook and launcher never break it), not stop with a traceback."""
    import threading

    def no_thread(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")
    monkeypatch.setattr(threading.Thread, "start", no_thread)
    heartbeat(tmp_path / "node.json", every_s=0.01)()


def test_a_killed_session_of_this_host_is_said_ended_by_refine(tmp_path: Path) -> None:
    first = start_or_join(tmp_path, "own-1", None, ["python", "t.py"], {}, SETTINGS, tmp_path / "store.sqlite")
    record = json.loads(first.node_file.read_text())
    first.node_file.write_text(json.dumps({**record, "pid_start_ticks": -1}))  # the pid names another process now
    [note] = session_notes(first.node_file.parent.parent)
    assert f"{socket.gethostname()} (pid {os.getpid()}) ended without recording its end" in note
    end_node(first, 0)
    assert session_notes(first.node_file.parent.parent) == []


def _ds(*options: str) -> list[str]:
    return ["deepspeed", *options, "train.py", "--deepspeed_config", "ds.json"]


def test_deepspeed_no_ssh_nodes_share_their_rendezvous_address(tmp_path: Path) -> None:
    """deepspeed/launcher/runner.py --no_ssh: each node runs the launcher with its --node_rank; every node is given
    the same --master_addr/--master_port (default 29500), where node 0 listens for the whole job."""
    node0 = _ds("--hostfile", "hf", "--no_ssh", "--node_rank", "0", "--master_addr", "10.0.0.1",
                "--master_port", "29600")
    shared = shared_job_id({}, node0)
    assert shared is not None and shared.base == "deepspeed-10.0.0.1-29600"
    assert "--master_addr 10.0.0.1, --master_port 29600" in shared.origin
    one = shared_job_id({}, _ds("--no_ssh", "--node_rank=1", "--master_addr=10.0.0.1"))
    assert one.base == "deepspeed-10.0.0.1-29500"
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("worker-7 slots=8\nworker-8 slots=8\n")
    first_host = shared_job_id({}, _ds("-H", str(hostfile), "--no_ssh", "--node_rank", "1"))
    assert first_host.base == "deepspeed-worker-7-29500"
    # runner.py main: 'hostname -I' of list(active_resources)[0], after --include/--exclude (R94)
    excluded = shared_job_id({}, _ds("-H", str(hostfile), "--no_ssh", "--node_rank", "1", "--exclude", "worker-7"))
    assert excluded.base == "deepspeed-worker-8-29500" and "first active host worker-8" in excluded.origin
    assert shared_job_id({}, _ds("--no_ssh", "--node_rank", "1", "--include", "localhost:0,1")) is None  # no hostfile
    assert shared_job_id({}, _ds("--hostfile", str(tmp_path / "none"), "--no_ssh", "--node_rank", "1")) is None
    assert shared_job_id({}, _ds("--num_gpus", "2", "--master_addr", "10.0.0.1")) is None  # one launcher for all nodes
    assert shared_job_id({}, ["deepspeed", "train.py", "--no_ssh", "--master_addr", "x"]) is None  # the script's own
    assert shared_job_id({"SLURM_JOB_ID": "7"}, node0).base == "slurm-7"  # a scheduler's id first, as for torchrun


def test_deepspeed_no_ssh_nodes_record_one_job_and_the_next_launch_another(tmp_path: Path) -> None:
    store, options = tmp_path / "store.sqlite", ("--no_ssh", "--master_addr", "10.0.0.1")
    node0, node1 = _ds(*options, "--node_rank", "0"), _ds(*options, "--node_rank", "1")
    first = start_or_join(tmp_path, "own-1", shared_job_id({}, node0), node0, {}, SETTINGS, store)
    second = start_or_join(tmp_path, "own-2", shared_job_id({}, node1), node1, {}, SETTINGS, store)
    assert (first.job_id, second.job_id, second.joined) == ("deepspeed-10.0.0.1-29500",) * 2 + (True,)
    end_node(first, 0), end_node(second, 0)
    again = start_or_join(tmp_path, "own-3", shared_job_id({}, node0), node0, {}, SETTINGS, store)
    assert (again.job_id, again.joined) == ("deepspeed-10.0.0.1-29500-2", False)


def test_torchrun_nodes_ranked_by_pet_node_rank_on_one_host_record_one_job(tmp_path: Path) -> None:
    """Two static torchrun nodes given their rank by PET_NODE_RANK (run.py's env fallback for --node-rank) on one host:
    both were the part `host=<this host>`, so the second took `-2` (two partial jobs) instead of joining."""
    store, node = tmp_path / "store.sqlite", ["torchrun", "--nnodes", "2", "--master-addr", "n1", "t.py"]
    first, second = ({"PET_NODE_RANK": rank} for rank in ("0", "1"))
    one = start_or_join(tmp_path, "own-1", shared_job_id(first, node), node, first, SETTINGS, store)
    two = start_or_join(tmp_path, "own-2", shared_job_id(second, node), node, second, SETTINGS, store)
    assert (one.job_id, two.job_id, two.joined) == ("torchrun-n1-29500", "torchrun-n1-29500", True)


def _store_with(store: Path, job_id: str, run_dir: Path) -> None:
    with sqlite3.connect(store) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS refine_runs (job_id TEXT PRIMARY KEY, run_dir TEXT)")
        conn.execute("INSERT OR REPLACE INTO refine_runs VALUES (?, ?)", (job_id, str(run_dir)))
    conn.close()


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_claims_are_removed_only_when_their_job_provably_finished(tmp_path: Path) -> None:
    """The rule (shared_job module docstring): the claimed job's sessions all ended, and the store holds its refined
    run from that run directory or its folder is gone; never a running job's, never one whose run directory cannot be
    read here, never an unrefined job's whose records are still there, however old (test below)."""
    home = tmp_path / "home"
    store, claims = home / "store.sqlite", home / "job_ids"

    def job(name: str, run_dir: str, ended: bool = True) -> None:
        node = start_or_join(tmp_path / run_dir, "own", SharedId(name, "test"), ["python", f"{name}.py"], {},
                             SETTINGS, store)
        if ended:
            end_node(node, 0)

    job("refined", "a")
    job("unrefined", "a")
    job("old", "a")
    job("running", "a", ended=False)
    job("gone", "gone")
    for name in ("refined", "running", "gone"):
        _store_with(store, name, tmp_path / ("gone" if name == "gone" else "a"))
    _age(claims / "old", MONTH_S)
    _age(claims / "running", MONTH_S)
    shutil.rmtree(tmp_path / "gone")
    _age(claims / "gone", STALE_AFTER_S + 60)
    (claims / "node-local").write_text(f"other-node:{tmp_path / 'a'}\n")  # its /tmp/x, not this host's
    _age(claims / "node-local", MONTH_S)
    assert sorted(release_claims(store)) == ["gone", "refined"]
    assert sorted(p.name for p in claims.iterdir()) == ["node-local", "old", "running", "unrefined"]


NO_SSH_NODE0 = _ds("--no_ssh", "--master_addr", "10.0.0.1", "--node_rank", "0")


def test_an_id_whose_claim_was_released_is_not_taken_again_by_a_later_launch(tmp_path: Path, monkeypatch) -> None:
    """Adversarial (R67's data loss, session 21): another host ran `deepspeed --no_ssh ...` into its node-local
    /tmp/x, refined it (the store row names /tmp/x) and released its claim. This host's next launch at the same
    master address, into its own /tmp/x (no such job folder), took `deepspeed-10.0.0.1-29500` again, and its refine
    would replace that run in the store (INSERT OR REPLACE keyed on the job id). Also a run directory removed since.
    A store row holds its id whatever run directory it names."""
    home, run = tmp_path / "home", tmp_path / "x"
    store, shared = home / "store.sqlite", shared_job_id({}, NO_SSH_NODE0)
    monkeypatch.setattr(socket, "gethostname", lambda: "other-node")
    theirs = start_or_join(run, "own-1", shared, NO_SSH_NODE0, {}, SETTINGS, store)
    end_node(theirs, 0)
    _store_with(store, theirs.job_id, run)  # their refine
    assert release_claims(store) == [shared.base]
    monkeypatch.undo()
    shutil.rmtree(run)  # this host's /tmp/x is another folder
    mine = start_or_join(run, "own-2", shared, NO_SSH_NODE0, {}, SETTINGS, store)
    assert mine.job_id == f"{shared.base}-2"


def test_an_unrefined_jobs_claim_stays_while_its_records_can_be_refined(tmp_path: Path) -> None:
    """Adversarial: a launch ended unrefined in run directory a (its llmperf run killed, or no store then). With its
    claim removed after a week, the next launch at the same master address into run directory b took its id, and
    `llmperf refine a` then replaced b's refined run in the store (or b's refine a's). Its claim stays until the store
    holds it or its folder is gone, however old."""
    home = tmp_path / "home"
    store, shared = home / "store.sqlite", shared_job_id({}, NO_SSH_NODE0)
    end_node(start_or_join(tmp_path / "a", "own-1", shared, NO_SSH_NODE0, {}, SETTINGS, store), 0)
    _age(home / "job_ids" / shared.base, MONTH_S)
    assert release_claims(store) == []
    later = start_or_join(tmp_path / "b", "own-2", shared, NO_SSH_NODE0, {}, SETTINGS, store)
    assert later.job_id == f"{shared.base}-2"


def test_another_hosts_claim_in_a_shared_run_directory_is_judged_by_its_sessions(tmp_path: Path) -> None:
    home, run = tmp_path / "home", tmp_path / "shared"
    store = home / "store.sqlite"
    node = start_or_join(run, "own", SHARED, NODE, {}, SETTINGS, store)
    (home / "job_ids" / "slurm-4242").write_text(f"other-node:{run}\n")
    _store_with(store, "slurm-4242", run)
    _as_other_host(node.node_file, 5)  # its session, still heartbeating
    assert release_claims(store) == []
    _as_other_host(node.node_file, STALE_AFTER_S + 60)  # silent since: crashed
    assert release_claims(store) == ["slurm-4242"]


def test_torchrun_nodes_share_their_rendezvous_address() -> None:
    """torch/distributed/run.py: with the default static rendezvous every node is started with --nnodes N, its
    --node-rank, and node 0's --master-addr/--master-port (defaults 127.0.0.1 and 29500; PET_* variables stand in
    for absent options). Before, without a scheduler, each node recorded a job of its own ('1/2 ranks' each)."""
    node = ["torchrun", "--nnodes", "2", "--node-rank", "1", "--master-addr", "n1", "train.py", "--bf16"]
    assert shared_job_id({}, node).base == "torchrun-n1-29500"
    assert shared_job_id({}, ["torchrun", "--nnodes=2", "--node_rank=0", "--master_port=1234", "t.py"]).base == \
        "torchrun-127.0.0.1-1234"
    assert shared_job_id({"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "h"}, ["torchrun", "t.py"]).base \
        == "torchrun-h-29500"
    assert shared_job_id({}, ["python", "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", "1",
                              "t.py"]).base == "torchrun-127.0.0.1-29500"
    c10d = ["torchrun", "--nnodes", "1:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:29400", "t.py"]
    shared = shared_job_id({}, c10d)  # no --rdzv-id: its nodes meet at the endpoint under the run id "none"
    assert (shared.base, shared.rendezvous) == ("torchrun-h_29400", True)  # one rendezvous, also on one host
    assert shared_job_id({}, [*c10d[:5], "t.py"]) is None  # no endpoint: nothing the nodes share
    assert shared_job_id({"PET_RDZV_ID": "r7"}, c10d).base == "torchrun-r7"  # run.py reads --rdzv-id from there too
    assert shared_job_id({}, ["torchrun", "--standalone", "--nnodes", "1", "t.py"]) is None
    assert shared_job_id({}, ["torchrun", "--nnodes", "1", "--node-rank", "0", "t.py"]) is None
    static = ["torchrun", "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "h:1234", "t.py"]
    assert shared_job_id({}, static).base == "torchrun-h_1234"  # run.py get_rdzv_endpoint: it replaces master addr
    node0 = shared_job_id({}, ["torchrun", "--nnodes", "2", "--master-addr", "n1", "t.py"])  # --node-rank default 0
    assert node0.base == "torchrun-n1-29500" and not node0.rendezvous  # the node rank (or host) tells nodes apart
    assert shared_job_id({}, ["torchrun", "--nnodes", "2", "t.py", "--master-addr", "x"]).base == \
        "torchrun-127.0.0.1-29500"  # the script's own option is not torchrun's

"""Another machine with this host's name (a pod rescheduled with a fixed name, `docker --hostname`) is another host
for run's job records (R86, H213): its sessions' pids are not looked up here, and its claim of a node-local run
directory of the same path is not this host's."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from llmperf_hook.instrument.shared_job import SharedId, session_states, start_or_join
from llmperf_hook.profile.machine_identity import boot_id, host_identity, pid_namespace, same_host

SETTINGS = {"steps": 5, "profile_ops": 0, "stop_after": None}
NODE = ["torchrun", "--nnodes", "2", "--node-rank", "0", "--master-addr", "n1", "train.py"]
GONE_PID = 4_194_303  # above Linux's default pid_max: no process of this machine has it

pytestmark = pytest.mark.skipif(not boot_id(), reason="no kernel boot id here")


@pytest.mark.parametrize(("boot", "state"), [("another-kernel", "running"), (None, "dead"), ("mine", "dead")])
def test_a_session_of_another_machine_with_this_name_is_not_dead_here(boot: str | None, state: str,
                                                                      tmp_path: Path) -> None:
    """Its pid names no process here; it was taken as this host's session and counted dead at once (refine then
    treated the still running job as ended). A record without a boot id (older) or with this one is this host's."""
    node = start_or_join(tmp_path, "own-1", SharedId("slurm-7", "test"), NODE, {}, SETTINGS, tmp_path / "s.sqlite")
    record = {k: v for k, v in json.loads(node.node_file.read_text()).items() if k != "boot_id"}
    given = {"another-kernel": {"boot_id": "another-kernel"}, None: {}, "mine": {"boot_id": boot_id()}}[boot]
    node.node_file.write_text(json.dumps({**record, **given, "pid": GONE_PID, "pid_start_ticks": None}))
    assert [s.state for s in session_states(tmp_path / "jobs" / node.job_id)] == [state]


def test_a_session_in_another_pid_namespace_of_this_host_is_not_dead_here(tmp_path: Path) -> None:
    """Two containers of one fixed host name on one kernel (same boot id) see other pids: a session recorded in
    another pid namespace is not looked up here (R94: its live session was counted dead at once). A record without
    a namespace (older) is looked up, as before."""
    node = start_or_join(tmp_path, "own-1", SharedId("slurm-11", "test"), NODE, {}, SETTINGS, tmp_path / "s.sqlite")
    record = json.loads(node.node_file.read_text())
    if not pid_namespace():
        pytest.skip("no pid namespace here")
    assert record.get("pid_namespace") == pid_namespace()
    for namespace, state in (("pid:[1]", "running"), (None, "dead")):
        given = {"pid_namespace": namespace} if namespace else {}
        kept = {k: v for k, v in record.items() if k != "pid_namespace"}
        node.node_file.write_text(json.dumps({**kept, **given, "pid": GONE_PID, "pid_start_ticks": None}))
        assert [s.state for s in session_states(tmp_path / "jobs" / node.job_id)] == [state]


def test_a_claim_of_the_same_path_by_another_machine_with_this_name_is_elsewhere(tmp_path: Path) -> None:
    """`srun` over two nodes whose containers share one host name, each with a node-local /tmp/x: the claim text was
    `hostname:/tmp/x` on both, so the second took the first's job id (and its refine replaced the first's run)."""
    store = tmp_path / "s.sqlite"
    claim = tmp_path / "job_ids" / "slurm-8"
    claim.parent.mkdir()
    claim.write_text(f"{socket.gethostname()}/another-kernel:{tmp_path}\n")
    taken = start_or_join(tmp_path, "own-1", SharedId("slurm-8", "test"), NODE, {}, SETTINGS, store)
    assert taken.job_id == "slurm-8-2"
    claim = tmp_path / "job_ids" / "slurm-9"
    claim.write_text(f"{host_identity()}:{tmp_path}\n")  # this host's own claim: the id is still its own
    assert start_or_join(tmp_path, "own-2", SharedId("slurm-9", "test"), NODE, {}, SETTINGS, store).job_id == "slurm-9"


def test_same_host_reads_old_bare_names_by_name() -> None:
    name = socket.gethostname()
    assert same_host(name) and same_host(host_identity()) and not same_host(f"{name}/another-kernel")
    assert not same_host(f"not-{name}/{boot_id()}") and same_host("a/1", "a") and not same_host("a/1", "a/2")


def test_this_hosts_claim_written_before_boot_ids_is_still_its_own(tmp_path: Path) -> None:
    """A claim of this host written before host identities (`hostname:/tmp/x`) is read by the name alone, as the
    sweep (_claim_finished) and the node records are: a relaunch in the same run directory keeps its job id (R94)."""
    claim = tmp_path / "job_ids" / "slurm-10"
    claim.parent.mkdir()
    claim.write_text(f"{socket.gethostname()}:{tmp_path}\n")
    node = start_or_join(tmp_path, "own-1", SharedId("slurm-10", "test"), NODE, {}, SETTINGS, tmp_path / "s.sqlite")
    assert node.job_id == "slurm-10"
    claim.write_text(f"{socket.gethostname()}:{tmp_path / 'other'}\n")  # this host, another run directory
    assert start_or_join(tmp_path, "own-2", SharedId("slurm-10", "test"), NODE, {}, SETTINGS,
                         tmp_path / "s.sqlite").job_id == "slurm-10-2"

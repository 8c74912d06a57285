"""Stage [7]: one job id for every node of a multi-node launch that runs one `llmperf run --instrument` per node.

Under a scheduler the user often starts llmperf once per node (`srun -N 4 llmperf run --instrument 5 -- torchrun
--nnodes 4 --node-rank $SLURM_NODEID ...`, `mpirun -np 4 --map-by node llmperf run ...`, or one `deepspeed
--no_ssh --node_rank N` per node). Each of those sessions used to make its own job id (UTC second + pid), so
refine saw one job per node, each with a part of the ranks ("2/8 ranks"), and two nodes could draw the same id.
Now a session takes the id the launch already has, the same on every node:
- the scheduler's job (and step) id: SLURM_JOB_ID (+ SLURM_STEP_ID, which srun sets per job step: two training
  runs of one allocation are two steps), PBS_JOBID, LSB_JOBID (+ LSB_JOBINDEX), FLUX_JOB_ID;
- else the elastic run id: TORCHELASTIC_RUN_ID in the environment, or torchrun's `--rdzv-id` / `--rdzv_id`
  (torch/distributed/run.py: default "none", which names nothing);
- else, for a launch run once per node without a scheduler (`deepspeed --no_ssh --node_rank N`, torchrun's static
  `--node-rank N`, or its c10d `--rdzv-endpoint`), the rendezvous address every node is given (rendezvous_id.py): no
  two running launches share it, and a later launch reusing it finds the earlier job ended and takes `-2`, ...;
- else the session's own id, as before.
Every session of a job registers under jobs/<id>/nodes/<host>-<pid>-<ns>.json, under an flock of jobs/.lock.
A session joins the job folder of that id only when the job is still running there (a node session without its
end, not dead), its command is the same as ours once the node-rank options are left out (every node of a launch
runs the same command; `--node-rank`/`--node_rank` differ), and no session of it is the same part of the launch as
ours (SLURM_PROCID, OMPI/PMI rank, the launcher's node rank, RANK; under a scheduler's id with none of them, the
host: the nodes of a launch are different hosts, and two runs of one command on one host are two jobs, whose rank 0
must not write one file); else it takes `<id>-2`, `<id>-3`, ...: a second training run of one allocation
(sequential, or beside another with another command), or an id another run directory has: the store holds it from
there (refine_runs.job_id is the store's key) or a session there claimed it (job_ids/<id> beside the store,
_held_elsewhere). The last session of a job to end refines it (the others' ranks may still be writing their last
records).

When a session ended: its node record says so (`ended_unix_s`). A session killed without it is ended when its pid
is gone (this host), or, on another host, when it has not signalled for STALE_AFTER_S: every session touches its
node file every HEARTBEAT_S while its job runs (`heartbeat`), so a session that crashed (or whose node was lost)
stops counting as running after STALE_AFTER_S instead of forever; `session_states` says which, for refine.

Claims (job_ids/<id>) are removed by `release_claims` only when provably finished: the claimed run directory's job
folder is readable here and every session in it ended (as above), or that run directory is gone from this, the
claim's host; and then either the store holds the job's refined run from that run directory (its row keeps the id
held, as the claim did: _held_elsewhere counts a store row whatever run directory it names) or the job's folder is
gone (nothing is left to refine). An unrefined job's claim stays while its records can still be refined: without
it the next launch at the same rendezvous address took the id, and `llmperf refine` of the earlier run directory
then replaced that job's run in the store (INSERT OR REPLACE keyed on refine_runs.job_id), or the reverse. A claim
of another host's node-local run directory (not readable here) is never removed, nor one whose job has a session
still running.

"This host" is the host name on this booted kernel (profile/machine_identity.host_identity; records and claims keep
both, older ones the name alone): another machine of the same name (a rescheduled pod, `docker --hostname`) is
another host, whose pids are not looked up here and whose node-local run directory is not this one's. A session's pid
is looked up only in the pid namespace it recorded (machine_identity.pid_namespace): another container of this name on
this kernel is not seen.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import sys
import threading
import time
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Iterator, Mapping, Sequence

from llmperf_hook.profile.machine_identity import boot_id, host_identity, pid_namespace, same_host

SCHEDULER_IDS = (("SLURM_JOB_ID", "slurm", "SLURM_STEP_ID"), ("PBS_JOBID", "pbs", ""),
                 ("LSB_JOBID", "lsf", "LSB_JOBINDEX"), ("FLUX_JOB_ID", "flux", ""))
"""(variable, prefix, sub-id variable): the batch scheduler's id of the allocation, and of the step in it."""
PART_VARIABLES = ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "NODE_RANK", "GROUP_RANK", "RANK")
"""Which part of a launch this session is, when llmperf itself was started once per node or per rank."""
NODE_RANK_OPTIONS = ("--node-rank", "--node_rank")
"""torchrun (--node-rank, --node_rank) and the deepspeed launcher (--node_rank): the one word nodes differ in."""
RDZV_ID_OPTIONS = ("--rdzv-id", "--rdzv_id")
MAX_SUFFIX = 1000
HEARTBEAT_S = 60.0
"""How often a running session touches its node file (the mtime is what another host reads)."""
STALE_AFTER_S = 600.0
"""A session of another host without its end record that has not touched its node file for this long is ended
(crashed, killed, or its node lost): ten heartbeats, well above an NFS client's attribute cache (acregmax 60 s by
default, nfs(5)) and a hung mount's minute."""
CLAIM_CHECK_S = 10.0
"""How long release_claims waits for one claimed run directory (a stat and a read of its jobs/<id>/nodes/ files,
milliseconds on a live mount) before it skips that folder: an NFS hard mount whose server is gone blocks every
call on it (nfs(5): 'hard' retries indefinitely)."""


@dataclass(frozen=True)
class SharedId:
    """The id a launch already has on every node."""

    base: str
    """`slurm-4242.0`, `torchrun-myrun`, ...: safe as a folder name."""
    origin: str
    """Where it came from, for the session's message: `SLURM_JOB_ID=4242, SLURM_STEP_ID=0 (environment)`."""
    rendezvous: bool = False
    """Torchrun's rendezvous id: every session started with it is a part of one launch, also on one host."""


@dataclass(frozen=True)
class NodeSession:
    """This session's place in its job."""

    job_id: str
    node_file: Path
    joined: bool
    """Another session of the launch started the job folder (its hook folder and prediction are used as they are)."""


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:80]


def shared_job_id(env: Mapping[str, str], argv: Sequence[str]) -> SharedId | None:
    """The scheduler's (or elastic rendezvous') id of this launch, or None when it has none."""
    for variable, prefix, sub in SCHEDULER_IDS:
        value = env.get(variable, "").strip()
        if value:
            step = env.get(sub, "").strip() if sub else ""
            origin = f"{variable}={value}" + (f", {sub}={step}" if step else "") + " (environment)"
            return SharedId(f"{prefix}-{_safe(value)}" + (f".{_safe(step)}" if step else ""), origin)
    run_id = env.get("TORCHELASTIC_RUN_ID", "").strip()
    if run_id and run_id != "none":
        return SharedId(f"torchrun-{_safe(run_id)}", f"TORCHELASTIC_RUN_ID={run_id} (environment)", True)
    rdzv = option_value(argv, RDZV_ID_OPTIONS) or env.get("PET_RDZV_ID", "").strip()  # run.py's env fallback
    if rdzv and rdzv != "none":
        return SharedId(f"torchrun-{_safe(rdzv)}", f"--rdzv-id {rdzv} (command, or PET_RDZV_ID)", True)
    from llmperf_hook.instrument.rendezvous_id import deepspeed_no_ssh_id, torchrun_rendezvous_id

    return deepspeed_no_ssh_id(argv) or torchrun_rendezvous_id(argv, env)


def option_value(argv: Sequence[str], names: Sequence[str]) -> str | None:
    """The value of the first of `names` in `argv` (`--name V` or `--name=V`), None when absent."""
    for i, word in enumerate(argv):
        name, eq, value = word.partition("=")
        if name in names:
            return value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return None


def launch_part(env: Mapping[str, str], argv: Sequence[str]) -> str | None:
    """Which part of the launch this session is (`SLURM_PROCID=3`, `--node-rank=1`), None when nothing says.
    torchrun takes an absent --node-rank from PET_NODE_RANK (torch/distributed/argparse_util.py `env`)."""
    for variable in PART_VARIABLES:
        if env.get(variable, "").strip():
            return f"{variable}={env[variable].strip()}"
    node_rank = option_value(argv, NODE_RANK_OPTIONS) or env.get("PET_NODE_RANK", "").strip() or None
    return f"--node-rank={node_rank}" if node_rank is not None else None


def same_launch_command(argv: Sequence[str]) -> list[str]:
    """The command without its node-rank options: what every node of one launch runs alike."""
    out: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in NODE_RANK_OPTIONS:
            skip = True
        elif not ("=" in word and word.partition("=")[0] in NODE_RANK_OPTIONS):
            out.append(word)
    return out


@contextmanager
def _jobs_lock(jobs_dir: Path) -> Iterator[None]:
    """flock(LOCK_EX) on jobs/.lock: one session at a time picks or joins a job, and marks its end. A filesystem
    without locks (some network mounts) goes unlocked."""
    if jobs_dir.exists() and not jobs_dir.is_dir():  # mkdir would say 'File exists' of a file in the way
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(jobs_dir))
    jobs_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(jobs_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        except (ImportError, OSError):
            pass
        yield
    finally:
        os.close(fd)  # releases the lock


def _node_records(job_dir: Path) -> list[dict[str, Any]]:
    """The job's node records, each with `touched_unix_s`: its file's mtime, the session's last heartbeat."""
    records = []
    for path in sorted((job_dir / "nodes").glob("*.json")):
        try:
            record, touched = json.loads(path.read_text()), path.stat().st_mtime
        except (OSError, ValueError):
            continue
        if isinstance(record, dict):
            records.append({**record, "touched_unix_s": touched})
    return records


def process_start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (proc(5): /proc/PID/stat field 22, `starttime`),
    None where there is no /proc. With the pid it names one process: a pid the kernel handed out again after a
    session was killed names another."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[19])  # fields after `(comm)` start at field 3
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class SessionState:
    """One node session of a job, as another session (or refine) sees it."""

    hostname: str
    pid: int | None
    state: str
    """`ended` (its end record), `running`, `dead` (this host: its pid is gone or names another process, no end
    record: killed), `stale` (another host: no end record and no heartbeat for STALE_AFTER_S)."""
    quiet_s: float
    """Seconds since its node file was last written or touched (its last heartbeat)."""


def _state(record: Mapping[str, Any], now_s: float) -> str:
    if "ended_unix_s" in record:
        return "ended"
    pid = record.get("pid")
    if not same_host(_record_host(record)) or not isinstance(pid, int) or record.get("pid_namespace") not in (
            None, pid_namespace()):  # another container on this kernel: its pids are not ours
        touched = record.get("touched_unix_s")
        return "stale" if isinstance(touched, float) and now_s - touched > STALE_AFTER_S else "running"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "dead"
    except OSError:  # alive, and another user's
        pass
    started = record.get("pid_start_ticks")
    return "running" if started is None or process_start_ticks(pid) in (None, started) else "dead"


def _record_host(record: Mapping[str, Any]) -> str:
    """The host identity of a node record (machine_identity.host_identity; its bare host name when it kept no boot
    id)."""
    boot = record.get("boot_id")
    return f"{record.get('hostname')}/{boot}" if boot else str(record.get("hostname"))


def _running(record: Mapping[str, Any], now_s: float | None = None) -> bool:
    """A node session without its end that is not known dead (a session of this host whose pid is gone, or now
    names a process started at another time) or stale (another host's, silent for STALE_AFTER_S)."""
    return _state(record, time.time() if now_s is None else now_s) == "running"


def session_states(job_dir: Path) -> list[SessionState]:
    """Every node session of the job in `job_dir` (jobs/<id>), oldest first."""
    records = sorted(_node_records(job_dir), key=lambda r: r.get("started_unix_s") or 0.0)
    now_s = _filesystem_now(job_dir.parent)
    return [SessionState(str(r.get("hostname")), r.get("pid") if isinstance(r.get("pid"), int) else None,
                         _state(r, now_s), max(0.0, now_s - r["touched_unix_s"])) for r in records]


def _filesystem_now(jobs_dir: Path) -> float:
    """Now on the clock that stamps the node files' mtimes: on a network mount the file server's, whatever this
    host's clock says (utime with no times asks the server to set its own time; nfs(5)). Read by touching
    jobs/.lock; this host's clock where that cannot be written."""
    try:
        lock = jobs_dir / ".lock"
        os.utime(lock)
        return lock.stat().st_mtime
    except OSError:
        return time.time()


def heartbeat(node_file: Path, every_s: float = HEARTBEAT_S) -> Callable[[], None]:
    """Touch `node_file` every `every_s` from a daemon thread while the job runs (so other hosts see this session
    alive, _state); returns the function that stops it. Best effort: a failed touch is tried again next time, and
    where no thread can be started (a process limit) the job runs without it (other hosts count this session ended
    after STALE_AFTER_S; refine says so)."""
    import threading

    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            try:
                os.utime(node_file)
            except OSError:
                pass

    try:
        threading.Thread(target=beat, name="llmperf-heartbeat", daemon=True).start()
    except RuntimeError:  # "can't start new thread"
        pass
    return stop.set


def _can_join(job_dir: Path, command: Mapping[str, Any], part: str | None) -> bool:
    records, now_s = _node_records(job_dir), _filesystem_now(job_dir.parent)
    return (any(_running(r, now_s) for r in records) and all(r.get("command") == command for r in records)
            and all(part is None or r.get("part") != part for r in records))


def _held_elsewhere(job_id: str, run_dir: Path, store_file: Path | None) -> bool:
    """Whether an earlier job has `job_id`, which `run_dir` holds no folder of (start_or_join): the store holds a
    refined run of it, from another run directory or from this one's path (its folder gone since: a removed run
    directory, a node-local /tmp/x cleaned, or another host's /tmp/x of that path; launch-derived ids such as
    `deepspeed-<addr>-<port>` come back with every launch), or a session elsewhere claimed it (best effort). Taking
    it would make this job's refine replace that run (refine_runs' key is the job id). A claim is a file
    job_ids/<id> beside the store naming its run directory, created once (O_EXCL): two jobs of one allocation
    started into two run directories at once both took `slurm-N`, and the second one's refine replaced the first
    one's run in the store."""
    import sqlite3

    try:
        if store_file is None:
            from llmperf_hook.store import default_store_path

            store_file = default_store_path()
        if store_file.is_file():
            with closing(sqlite3.connect(f"file:{store_file}?mode=ro", uri=True, timeout=5)) as conn:
                row = conn.execute("SELECT 1 FROM refine_runs WHERE job_id = ?", (job_id,)).fetchone()
            if row is not None:
                return True
        return _claimed_elsewhere(store_file.parent / "job_ids" / job_id, run_dir)
    except (sqlite3.Error, OSError, ImportError):
        return False


def _claimed_elsewhere(claim: Path, run_dir: Path) -> bool:
    """The claim names the host too: `srun -N2 llmperf run --run-dir /tmp/x` writes two node-local /tmp/x, where
    no node sees the other's job folder; one id for both made the second refine replace the first's run."""
    claim.parent.mkdir(parents=True, exist_ok=True)
    mine = f"{host_identity()}:{run_dir}"
    try:
        fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        host, _, claimed_dir = claim.read_text().strip().partition(":")
        return claimed_dir != str(run_dir) or not same_host(host)  # an older claim: the host name alone
    with os.fdopen(fd, "w") as out:
        out.write(f"{mine}\n")
    return False


def start_or_join(run_dir: Path, own_id: str, shared: SharedId | None, argv: Sequence[str],
                  env: Mapping[str, str], settings: Mapping[str, Any], store_file: Path | None = None,
                  prepare: Callable[[str], Any] = lambda job_id: None) -> NodeSession:
    """Pick this session's job id (module docstring) and register it under jobs/<id>/nodes/. `settings` (the
    --instrument options) must be the same too: the job's hook folder, written by its first session, holds them.
    `prepare(job_id)` writes a new job's files (its hook folder) while the lock is held, so a session that joins it
    never launches its ranks before that folder is whole."""
    jobs_dir = run_dir / "jobs"
    command, part = {"argv": same_launch_command(argv), **settings}, launch_part(env, argv)
    if part is None and shared is not None and not shared.rendezvous:
        part = f"host={host_identity()}"
    with _jobs_lock(jobs_dir):
        job_id, joined = own_id, False
        if shared is not None:
            for n in range(1, MAX_SUFFIX):
                candidate = shared.base if n == 1 else f"{shared.base}-{n}"
                folder = jobs_dir / candidate
                if folder.exists():
                    if _can_join(folder, command, part):
                        job_id, joined = candidate, True
                        break
                elif not _held_elsewhere(candidate, run_dir, store_file) and _made(folder):
                    job_id = candidate
                    break
        node_file = jobs_dir / job_id / "nodes" / f"{_safe(socket.gethostname())}-{os.getpid()}-{time.time_ns()}.json"
        if not joined:
            prepare(job_id)
        node_file.parent.mkdir(parents=True, exist_ok=True)
        _write_json(node_file, {"hostname": socket.gethostname(), "boot_id": boot_id(),
                                "pid_namespace": pid_namespace() or None, "pid": os.getpid(),
                                "pid_start_ticks": process_start_ticks(os.getpid()), "part": part,
                                "command": command, "started_unix_s": time.time()})
    return NodeSession(job_id, node_file, joined)


def _made(folder: Path) -> bool:
    """Create a new job's folder, False when another session made it first. Under the lock nobody can; where the
    flock is a no-op (an NFS mount with `nolock` takes it locally only) two nodes starting at once would both
    write the job's hook folder, the second removing the one the first node's ranks start from: the second takes
    the next id instead (two partial jobs, nothing broken)."""
    try:
        folder.mkdir(parents=True)
    except FileExistsError:
        return False
    return True


def end_node(node: NodeSession, exit_code: int) -> list[str]:
    """Mark this session's end; the hosts of the job's sessions still running ([] when this one ends last)."""
    job_dir = node.node_file.parent.parent
    with _jobs_lock(job_dir.parent):
        try:
            record = json.loads(node.node_file.read_text())
        except (OSError, ValueError):
            record = {"hostname": socket.gethostname(), "boot_id": boot_id(), "pid_namespace": pid_namespace() or None,
                      "pid": os.getpid()}
        _write_json(node.node_file, {**record, "exit_code": exit_code, "ended_unix_s": time.time()})
        now_s = _filesystem_now(job_dir.parent)
        return sorted({str(r.get("hostname")) for r in _node_records(job_dir) if _running(r, now_s)})


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data) + "\n")
    os.replace(tmp, path)


def release_claims(store_file: Path | None = None, now_s: float | None = None, job_ids: Collection[str] | None = None,
                   limit_s: float = CLAIM_CHECK_S) -> list[str]:
    """Remove the job-id claims beside the store that are provably finished (module docstring: the rule); the ids
    whose claim was removed. `job_ids`: only those claims (a session releases its own job's: its sweep of every
    claim stat-ed other run directories, and one on a dead hard NFS mount hung `llmperf run` after its job had
    ended); None: every claim (`llmperf refine`). A run directory that does not answer within `limit_s` (all are
    checked side by side under that one limit) is skipped, with its other claims, and said on stderr. Best effort: nothing here may fail a refine."""
    try:
        if store_file is None:
            from llmperf_hook.store import default_store_path

            store_file = default_store_path()
        claims = sorted(c for c in (store_file.parent / "job_ids").iterdir() if job_ids is None or c.name in job_ids)
    except (OSError, ImportError):
        return []
    now_s = time.time() if now_s is None else now_s
    by_dir: dict[str, list[tuple[Path, str]]] = {}
    for claim in claims:
        try:
            host, _, run_dir = claim.read_text().strip().partition(":")
        except OSError:
            continue
        by_dir.setdefault(run_dir, []).append((claim, host))
    released: list[str] = []
    # one daemon thread per run directory, all under one deadline: directories on one dead mount cost the limit once
    deadline = time.monotonic() + limit_s
    workers = {run_dir: _started(_release_dir, items, run_dir, store_file, now_s, released, deadline)
               for run_dir, items in by_dir.items()}
    for run_dir, worker in workers.items():
        if worker is not None:
            worker.join(max(0.0, deadline - time.monotonic()))
        if worker is not None and worker.is_alive():
            ids = [claim.name for claim, _ in by_dir[run_dir]]
            others = f" (and {', '.join(ids[1:])})" if len(ids) > 1 else ""
            print(f"llmperf: warning: the claim of job id {ids[0]}{others} was not checked: its run directory "
                  f"{run_dir} did not answer within {limit_s:g} s (a hung network mount?); its claims stay, and a "
                  "later `llmperf refine` checks them again", file=sys.stderr)
    return sorted(released)  # a copy: a thread past the deadline may still add to `released`


def _started(fn: Callable[..., None], *args: Any) -> threading.Thread | None:
    """fn(*args) on a started daemon thread, left unwaited past the deadline (a call stuck on a hung mount cannot be
    interrupted, and a daemon thread does not hold the process's exit); None when no thread could be had and fn ran
    here, unbounded, as before."""
    worker = threading.Thread(target=fn, args=args, daemon=True, name="llmperf-claim-check")
    try:
        worker.start()
    except RuntimeError:
        fn(*args)
        return None
    return worker


def _release_dir(items: Sequence[tuple[Path, str]], run_dir: str, store_file: Path, now_s: float,
                 released: list[str], deadline: float) -> None:
    """The run directory's claims, one after another, until the deadline: past it the sweep said they stay."""
    for claim, host in items:
        if time.monotonic() >= deadline:
            return
        _release_one(claim, host, run_dir, store_file, now_s, released)


def _release_one(claim: Path, host: str, run_dir: str, store_file: Path, now_s: float, released: list[str]) -> None:
    import sqlite3

    try:
        job_dir = Path(run_dir) / "jobs" / claim.name
        if _claim_finished(claim.name, host, Path(run_dir), now_s - claim.stat().st_mtime) and (
                not job_dir.exists() or _refined_from(store_file, claim.name, run_dir)):
            claim.unlink()
            released.append(claim.name)
    except (OSError, ValueError, sqlite3.Error):
        pass


def _claim_finished(job_id: str, host: str, run_dir: Path, age_s: float) -> bool:
    """Whether the claimed job provably runs nowhere: its folder is readable here (this host's run directory, or a
    shared one where a session of the claim's host registered) and every session in it ended; or, on the claim's
    host, the run directory or the job's folder is gone, the claim older than STALE_AFTER_S (a session claims an
    id just before it makes the folder)."""
    job_dir = run_dir / "jobs" / job_id
    records = _node_records(job_dir)
    here = same_host(host)
    if records and (here or any(same_host(_record_host(r), host) for r in records)):
        now_s = _filesystem_now(job_dir.parent)
        return not any(_running(r, now_s) for r in records)
    return here and not job_dir.exists() and age_s > STALE_AFTER_S


def _refined_from(store_file: Path, job_id: str, run_dir: str) -> bool:
    import sqlite3

    if not store_file.is_file():
        return False
    with closing(sqlite3.connect(f"file:{store_file}?mode=ro", uri=True, timeout=5)) as conn:
        row = conn.execute("SELECT run_dir FROM refine_runs WHERE job_id = ?", (job_id,)).fetchone()
    return row is not None and str(row[0]) == run_dir

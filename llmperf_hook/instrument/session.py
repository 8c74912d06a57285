"""`llmperf run --instrument N`: launch the user's command with the step hook in every rank, then refine.

    run_instrumented(argv, env=..., steps=N, profile_ops=K, stop_after=S, run_dir=DIR, prediction=...)

1. Prepare the run directory (default `./llmperf-runs/<job id>`): jobs/<job id>/ holds this job's
   prediction.json, session.json and hook/ (the generated sitecustomize.py and its llmperf_hook_config.json),
   so several jobs may share one run directory; prediction.json and session.json at the top are the latest
   job's. Ranks append to rank<R>.jsonl at the top, every line tagged with the job id. The job id is the
   scheduler's where the launch has one (SLURM_JOB_ID, torchrun's --rdzv-id, ...), so the `llmperf run` of every
   node of a multi-node launch records under one job, else `<UTC time>-<pid>` (shared_job.py).
2. Environment: PYTHONPATH = hook/ + the existing PYTHONPATH (kept, in order); the user's own sitecustomize
   still runs (the generated one chains to it). PYTHONPATH is all a launcher must forward: torchrun and
   DeepSpeed's local launcher copy the whole environment to their ranks, DeepSpeed's multi-node runners
   (pdsh, mpi, slurm) export every PYTHON*-prefixed variable (deepspeed/launcher/runner.py EXPORT_ENVS), and
   the hook's settings travel in the run directory, not in the environment. (Multi-node runs need the run
   directory on a filesystem all nodes share, as they need the training script.) Where the job sets its own
   PYTHONPATH, the hook's folder still goes first: a `.deepspeed_env` line, which DeepSpeed's multi-node
   runners export over ours (deepspeed_env.py), and an `env PYTHONPATH=...` / `env -i` at the front of the
   command (env_command.py).
3. Launch the command as a child (argument list, no shell), its stdout/stderr passed through untouched;
   forward SIGTERM/SIGHUP/SIGUSR1/SIGUSR2, and SIGINT/SIGQUIT unless the terminal already sent them to the
   child (same foreground process group).
4. When it ends, `refine` its records (this job's: others sharing the run directory may still run), in the
   session of the job that ends last when several nodes' sessions share it; a refine failure is a warning, never
   our exit code.
5. Return the child's exit code (128 + signal number when a signal killed it, as shells report it);
   `run_instrumented_job` also says which signal, so `llmperf run` can end by that same signal
   (`end_like_the_job`) as the exec path does.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, NoReturn, Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.instrument.bootstrap import write_hook_dir
from llmperf_hook.instrument.config import HookConfig, write_hook_config
from llmperf_hook.instrument.hook_reach import job_has_record, no_step_hint
from llmperf_hook.instrument.jsonl_writer import shared_lock
from llmperf_hook.instrument.shared_job import end_node, heartbeat, release_claims, shared_job_id, start_or_join

FORWARDED_SIGNALS = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGINT")
TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGQUIT)
"""What the terminal itself sends to the whole foreground process group (Ctrl-C, Ctrl-\\; termios ISIG): the job
already got it when we are in that group, and a second copy from us would reach a job that handles it twice."""


def default_warmup_steps(num_steps: int) -> int:
    """Leading steps marked warm-up: none of 1, one of 2-4, two of 5 or more (first-step allocation and lazy
    initialisation, then one more for allocator/autotuner settling)."""
    return 0 if num_steps <= 1 else 1 if num_steps <= 4 else 2


def new_job_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"


def prepare_run_dir(run_dir: str | None, job_id: str) -> Path:
    path = Path(run_dir) if run_dir else Path("llmperf-runs") / job_id
    path = path.expanduser().resolve()
    if os.pathsep in str(path):  # the hook's folder goes on PYTHONPATH, which splits at it: no rank would find it
        origin = f"--run-dir {run_dir!r}" if run_dir else f"the working directory {os.getcwd()!r}"
        raise UsageError(f"the run directory {str(path)!r} (from {origin}) contains {os.pathsep!r}, which splits "
                         f"PYTHONPATH: the hook could not reach the job's ranks. Pass a --run-dir without "
                         f"{os.pathsep!r}.")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot create the run directory {str(path)!r} (from --run-dir "
                         f"{run_dir!r}): {err.strerror}. Pass a writable --run-dir.") from err
    _check_rank_files_are_ours(path)
    return path


RANK_FILE = re.compile(r"rank\d+\.jsonl")
"""The files the ranks append their records to (recorder.StepRecorder: rank<R>.jsonl)."""


def _check_rank_files_are_ours(path: Path) -> None:
    """A rank<R>.jsonl already in the run directory that no instrumented job wrote (the user's own file of that name
    in a reused --run-dir), or that is no file, stops the launch: a rank would append its records to it."""
    for file in sorted(path.iterdir()):
        if RANK_FILE.fullmatch(file.name) and not file.is_file():  # a folder (or a FIFO ...) no rank can append to
            raise UsageError(f"the run directory {str(path)!r} (from --run-dir) holds {file.name}, which is not a "
                             f"file: the job's ranks append their records to rank<R>.jsonl there, and the hook would "
                             f"fail at its first write, recording nothing. Pass another --run-dir, or move it away; "
                             f"the job was not started.")
        if RANK_FILE.fullmatch(file.name) and not _written_by_the_hook(file):
            raise UsageError(f"the run directory {str(path)!r} (from --run-dir) holds {file.name}, which no "
                             f"`llmperf run --instrument` wrote (no hook record in its first lines): the job's ranks "
                             f"append their records to rank<R>.jsonl there and would write into it. Pass another "
                             f"--run-dir, or move that file away; the job was not started.")


def _written_by_the_hook(file: Path) -> bool:
    """An empty file, or one whose first 64 KiB hold a record of the hook (schema, kind and job id). Read under a
    shared flock: a job writing into the same run directory right now holds it exclusively while it writes
    (jsonl_writer), so its first record is never seen half written."""
    try:
        with file.open("rb") as f:
            with shared_lock(f.fileno()):
                head = f.read(1 << 16)
    except OSError:
        return False
    for line in head.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and {"schema", "kind", "job_id"} <= record.keys():
            return True
    return not head


def build_child_env(env: Mapping[str, str], hook_dir: Path, run_dir: Path) -> dict[str, str]:
    child = dict(env)
    existing = child.get("PYTHONPATH", "")
    child["PYTHONPATH"] = str(hook_dir) + (os.pathsep + existing if existing else "")
    child["LLMPERF_RUN_DIR"] = str(run_dir)  # informational: the hook reads its settings from hook/
    return child


def _deepspeed_env_file(child_env: dict[str, str], hook_dir: Path, job_dir: Path) -> dict[str, str]:
    """DS_ENV_FILE pointing at our copy of the `.deepspeed_env` files when one sets PYTHONPATH (deepspeed_env.py:
    DeepSpeed's multi-node runners export that file's PYTHONPATH over ours), said once on stderr."""
    from llmperf_hook.instrument.deepspeed_env import keep_hook_in_deepspeed_env, runner_env_files

    added = keep_hook_in_deepspeed_env(child_env, hook_dir, job_dir, Path.cwd())
    if added:
        files = ", ".join(str(p) for p in runner_env_files(child_env, Path.cwd()))
        print(f"llmperf: {files} sets PYTHONPATH, which DeepSpeed's multi-node runners export over the job's: they "
              f"read {added['DS_ENV_FILE']} instead (DS_ENV_FILE), the same lines with the hook's folder first in "
              f"PYTHONPATH; your file is unchanged.", file=sys.stderr)
    return added


def _keep_hook_in_env_command(argv: Sequence[str], hook_dir: Path) -> list[str]:
    """The command to launch: `env PYTHONPATH=...` / `env -i` at its front keep the hook's folder first in the
    PYTHONPATH they give the job (env_command.py), said once on stderr."""
    from llmperf_hook.instrument.env_command import keep_hook_in_env_command

    launched = keep_hook_in_env_command(argv, hook_dir)
    changed = [word for word in launched if word.startswith("PYTHONPATH=") and word not in argv]
    if changed:
        print(f"llmperf: the command's `env` sets the job's own PYTHONPATH (or clears it): launched with "
              f"{' and '.join(changed)}, the hook's folder first; the job's entries follow in their order.",
              file=sys.stderr)
    return launched


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    os.replace(tmp, path)


@dataclass(frozen=True)
class JobEnd:
    """How the launched job ended."""

    exit_code: int
    """Its exit status as a shell reports it: the code it exited with, or 128 + N when signal N killed it."""
    signal_number: int | None = None
    """The signal that killed it; None when it exited by itself."""


def run_instrumented(argv: Sequence[str], *, env: Mapping[str, str], steps: int, profile_ops: int = 0,
                     stop_after: int | None = None, run_dir: str | None = None,
                     prediction: dict | None = None) -> int:
    """Launch `argv` with the step hook in every rank; refine from what it recorded; return its exit code."""
    return run_instrumented_job(argv, env=env, steps=steps, profile_ops=profile_ops, stop_after=stop_after,
                                run_dir=run_dir, prediction=prediction).exit_code


def run_instrumented_job(argv: Sequence[str], *, env: Mapping[str, str], steps: int, profile_ops: int = 0,
                         stop_after: int | None = None, run_dir: str | None = None,
                         prediction: dict | None = None) -> JobEnd:
    """run_instrumented, saying how the job ended (its exit code, or the signal that killed it)."""
    _check_arguments(argv, steps, profile_ops, stop_after)
    shared, own_id = shared_job_id(env, argv), new_job_id()
    path = prepare_run_dir(run_dir, shared.base if shared else own_id)

    def prepare(new_id: str) -> None:  # a new job's files, written before any other node may join it
        _write_job_files(path, path / "jobs" / new_id, new_id, steps, profile_ops, stop_after, prediction,
                         _session_record(new_id, argv, steps, profile_ops, stop_after))

    try:
        node = start_or_join(path, own_id, shared, argv, env,
                             {"steps": steps, "profile_ops": profile_ops, "stop_after": stop_after}, prepare=prepare)
        job_id = node.job_id
        job_dir, hook_dir = path / "jobs" / job_id, path / "jobs" / job_id / "hook"
        session = _session_record(job_id, argv, steps, profile_ops, stop_after)
        child_env = build_child_env(env, hook_dir, path)
        child_env.update(_deepspeed_env_file(child_env, hook_dir, job_dir))
    except OSError as err:  # a full disk, a quota: before the launch, so the job is not started half-instrumented
        where = f" ({err.filename})" if err.filename else ""  # e.g. a file `jobs` where the jobs/ folder goes
        raise UsageError(f"cannot write the hook's files in the run directory {str(path)!r} (from "
                         f"{'--run-dir' if run_dir else 'the default ./llmperf-runs'}): {err.strerror or err}{where}. "
                         f"Free space there, move what is in the way, or pass another --run-dir; the job was not "
                         f"started.") from err
    print(f"llmperf: instrumenting the first {steps} steps of every rank; records in {path}", file=sys.stderr)
    if shared is not None:  # shared_job.py: every node's `llmperf run` of this launch records under one job
        print(f"llmperf: job {job_id} (from {shared.origin}): "
              + ("this node joins it, started by another node's llmperf run" if node.joined else
                 "the llmperf runs of this launch's other nodes, if any, join it"), file=sys.stderr)
    for warning in hook_reach_warnings(argv):
        print(f"llmperf: warning: {warning}", file=sys.stderr)
    remember_latest_run(path)
    stop_heartbeat = heartbeat(node.node_file)  # other hosts' sessions see this one alive (shared_job._state)
    try:
        end = launch_and_wait(_keep_hook_in_env_command(argv, hook_dir), child_env)
    finally:
        stop_heartbeat()
    try:  # the job has ended: nothing after this may change its exit code (which is ours)
        _record_end(path, job_dir, job_id, session, end, stop_after, end_node(node, end.exit_code))
    except Exception as err:  # noqa: BLE001 - e.g. the run directory removed or replaced while the job ran
        print(f"llmperf: warning: the job ended with exit code {end.exit_code}, but its end could not be recorded "
              f"in {path} ({type(err).__name__}: {err}); nothing refined.", file=sys.stderr)
    return end


def end_like_the_job(end: JobEnd) -> NoReturn:
    """End this process as the job ended: killed by the same signal when a signal killed it (so a parent's
    waitpid sees what it would have seen from the job itself, or from `llmperf run` without --instrument, which
    execs the job; a shell still reports 128 + N), else exiting with the job's code. Our own core dump is
    turned off first: the job already dumped its own where that is allowed."""
    if end.signal_number is not None:
        import resource

        sys.stdout.flush()
        sys.stderr.flush()
        sig = end.signal_number
        for step in (lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1])),
                     lambda: signal.signal(sig, signal.SIG_DFL),  # refused for SIGKILL, whose action is fixed
                     lambda: signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig}),
                     lambda: os.kill(os.getpid(), sig)):
            try:
                step()
            except (OSError, ValueError):
                pass  # if we outlive it (a signal we may not re-raise): the shell's 128 + N below
    sys.exit(end.exit_code)


def _record_end(path: Path, job_dir: Path, job_id: str, session: dict, end: JobEnd, stop_after: int | None,
                still_running: Sequence[str] = ()) -> None:
    """Record how the job ended and refine it; `still_running`: hosts of the job's other nodes (shared_job.py)
    whose sessions have not ended yet, which leaves the checks and the refine to the last of them."""
    code = end.exit_code
    ended = {**session, "exit_code": code, "signal": end.signal_number, "ended_unix_s": time.time()}
    write_latest_copy(path, "session.json", ended)  # first: it recognises its own copy by the job's start record
    write_json_atomic(job_dir / "session.json", ended)
    if still_running:
        print(f"llmperf: this node's part of job {job_id} ended (exit code {code}); the job still runs on "
              f"{', '.join(still_running)}: the llmperf run that ends last refines it (if that one is killed, "
              f"`llmperf refine {path}` does it).", file=sys.stderr)
        return
    if stop_after is not None and code == 0 and job_has_record(path, job_id, "stop"):
        print(f"llmperf: --stop-after {stop_after}: the job was stopped cleanly after {stop_after} optimizer "
              f"steps (exit code 0); the rest of the script did not run.", file=sys.stderr)
    if not job_has_record(path, job_id, "step"):
        print(f"llmperf: warning: the job (exit code {code}) recorded no step: {no_step_hint(job_dir / 'hook')}",
              file=sys.stderr)
        # also beside another job's steps in a shared --run-dir (it was ingested as '0 timed steps' then)
        print("llmperf: nothing refined: the job has no step time to refine from.", file=sys.stderr)
        return
    _refine_quietly(path, job_id)


def _write_job_files(path: Path, job_dir: Path, job_id: str, steps: int, profile_ops: int, stop_after: int | None,
                     prediction: dict | None, session: dict) -> Path:
    """The hook's folder and config, the prediction and the session record; the hook folder's path. The warm-up
    share follows the steps the job will really run: `--instrument 5 --stop-after 2` marks one warm-up step, not
    two, so one step is timed instead of none."""
    hook_dir = write_hook_dir(job_dir / "hook")
    write_hook_config(HookConfig(run_dir=str(path), job_id=job_id, num_steps=steps,
                                 num_warmup_steps=default_warmup_steps(min(steps, stop_after or steps)),
                                 profile_ops_steps=profile_ops,
                                 stop_after_steps=stop_after, package_root=_package_root()), hook_dir)
    if prediction is not None:
        write_json_atomic(job_dir / "prediction.json", prediction)
        write_latest_copy(path, "prediction.json", prediction)
    write_json_atomic(job_dir / "session.json", session)
    write_latest_copy(path, "session.json", session)
    return hook_dir


def _session_record(job_id: str, argv: Sequence[str], steps: int, profile_ops: int, stop_after: int | None) -> dict:
    return {"schema": 1, "job_id": job_id, "argv": list(argv), "cwd": os.getcwd(), "hostname": socket.gethostname(),
            "steps": steps, "profile_ops": profile_ops, "stop_after": stop_after, "started_unix_s": time.time(),
            "load_avg_1m": os.getloadavg()[0]}


LATEST_RUN_FILE = "latest_run_dir"
"""In $LLMPERF_HOME: the run directory of the latest `llmperf run --instrument`, for `llmperf refine` without one."""


def remember_latest_run(path: Path) -> None:
    """Best effort: a state folder that cannot be written must not stop the job (refine then warns)."""
    from llmperf_hook.resources import llmperf_home

    try:
        home = llmperf_home()
        home.mkdir(parents=True, exist_ok=True)
        tmp = home / f".{LATEST_RUN_FILE}.{os.getpid()}.tmp"
        tmp.write_text(str(path) + "\n")
        os.replace(tmp, home / LATEST_RUN_FILE)
    except OSError:
        pass


def write_latest_copy(run_dir: Path, name: str, data: Mapping[str, Any]) -> None:
    """The latest job's copy at the top of the run directory, unless a file of that name is there that no job of
    ours wrote (a user's own file in a reused --run-dir is never overwritten; refine reads jobs/<id>/ first)."""
    target = run_dir / name
    if target.exists() and not _written_by_a_job(run_dir, name, target):
        return
    write_json_atomic(target, data)


def _written_by_a_job(run_dir: Path, name: str, target: Path) -> bool:
    try:
        text = target.read_bytes()
        if any(p.read_bytes() == text for p in run_dir.glob(f"jobs/*/{name}")):
            return True
        doc = json.loads(text)  # a session record names its job, whose folder is here
        return isinstance(doc, dict) and isinstance(doc.get("job_id"), str) and "/" not in doc["job_id"] \
            and bool(doc["job_id"]) and (run_dir / "jobs" / doc["job_id"]).is_dir()
    except (OSError, ValueError):
        return False


def _check_arguments(argv: Sequence[str], steps: int, profile_ops: int, stop_after: int | None) -> None:
    if not argv:
        raise UsageError("llmperf run --instrument needs a command to launch after `--`, e.g. "
                         "`llmperf run --instrument 5 -- deepspeed --num_gpus 2 train.py ...`.")
    if steps < 1:
        raise UsageError(f"--instrument {steps}: the number of steps to record must be at least 1.")
    if profile_ops < 0:
        raise UsageError(f"--profile-ops {profile_ops}: the profiler window must be 0 (off) or more steps.")
    if stop_after is not None and stop_after < 1:
        raise UsageError(f"--stop-after {stop_after}: must be at least 1 step (or left out to let the job run on).")
    if profile_ops and stop_after is not None and stop_after < steps + profile_ops:
        # the window opens after the timed steps (recorder.py), so the job would stop before it, or inside it
        window = f"step {steps + 1}" if profile_ops == 1 else f"steps {steps + 1}-{steps + profile_ops}"
        raise UsageError(f"--stop-after {stop_after} stops the job before the end of the --profile-ops {profile_ops} "
                         f"window, which follows the {steps} timed step(s) of --instrument {steps} ({window}): "
                         f"{'none' if stop_after <= steps else 'only part'} of it would be profiled. Give "
                         f"--stop-after {steps + profile_ops} or more, or drop --profile-ops.")


def hook_reach_warnings(argv: Sequence[str]) -> list[str]:
    """A Python started with -I, -S or -E never runs the generated sitecustomize (isolated mode, no site
    module, or PYTHONPATH ignored), so the hook cannot reach it."""
    if not argv or not os.path.basename(argv[0]).startswith("python"):
        return []
    for word in argv[1:]:
        if not word.startswith("-") or word in ("-m", "-c") or word.startswith("--"):
            break
        bad = sorted(set(word[1:]) & set("ISE"))
        if bad:
            return [f"{argv[0]} -{''.join(bad)} skips sitecustomize or PYTHONPATH: the hook cannot reach that "
                    f"process (ranks it starts without those flags are still instrumented)."]
    return []


def _package_root() -> str:
    return str(Path(__file__).resolve().parent.parent.parent)


def launch_and_wait(argv: Sequence[str], env: Mapping[str, str]) -> JobEnd:
    try:
        child = subprocess.Popen(list(argv), env=dict(env))
    except FileNotFoundError as err:
        raise UsageError(f"cannot launch {argv[0]!r}: no such file or command on PATH (from the command after "
                         f"`--`). Check the spelling, or activate the environment that provides it.") from err
    except PermissionError as err:
        raise UsageError(f"cannot launch {argv[0]!r}: permission denied. Make it executable or name its "
                         f"interpreter first.") from err
    except OSError as err:  # e.g. ENOEXEC: an executable script without a #! line
        raise UsageError(f"cannot launch {argv[0]!r}: {err.strerror or err}. If it is a script, name its "
                         f"interpreter first (python {argv[0]} ...) or give it a #! line.") from err
    previous = _forward_signals(child)
    try:
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return JobEnd(128 - code, -code) if code < 0 else JobEnd(code)


def _forward_signals(child: subprocess.Popen) -> dict[int, Any]:
    def forward(signum: int, frame: Any) -> None:
        if signum in TERMINAL_SIGNALS and _terminal_sent_it_to_child():
            return
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    previous: dict[int, Any] = {}
    for name in FORWARDED_SIGNALS:
        signum = getattr(signal, name, None)
        if signum is not None:
            previous[signum] = signal.signal(signum, forward)
    return previous


def _terminal_sent_it_to_child() -> bool:
    """Ctrl-C / Ctrl-\\ on a terminal signal the whole foreground process group, which includes the child."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


def _refine_quietly(run_dir: Path, job_id: str) -> None:
    """Refine this job only: another job of a shared run directory may still be running (its steps so far would be
    calibrated from, and said to be 'fewer than --instrument asked for'), and one refined earlier under other options
    (`llmperf refine --cluster ...`) would be moved back to its prediction's key. `llmperf refine DIR` does them all."""
    try:
        from llmperf_hook.commands.refine import check_has_jobs
        from llmperf_hook.refine.refine_run import refine_run, render_refine_report

        check_has_jobs(run_dir)  # as `llmperf refine` would: no step of any job is nothing to refine
        report = refine_run(run_dir, job_ids=(job_id,))
        if report.jobs:  # else the job wrote no record: _record_end said so
            print(render_refine_report(report), file=sys.stderr)
        # this job's claim only, now that the store holds it: the sweep of every claim (other run directories, some
        # maybe on a dead mount) is `llmperf refine`'s
        release_claims(Path(report.store_path), job_ids=(job_id,))
    except UsageError as err:  # nothing to refine (the job never reached an optimizer step): rerunning won't help
        print(f"llmperf: nothing refined: {err}", file=sys.stderr)
    except Exception as err:  # noqa: BLE001 - the job's exit code is what matters here
        print(f"llmperf: warning: refining from {run_dir} failed ({type(err).__name__}: {err}); the run's records "
              f"are kept there: rerun `llmperf refine {run_dir}`.", file=sys.stderr)

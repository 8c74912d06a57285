"""`llmperf run [options] -- <command>` (and the prefix form `llmperf torchrun|deepspeed|python ...`).

1. Predict the command (as `llmperf predict` does) and print the report to STDERR, so the job's own stdout
   stays untouched (with --dry-run the report and the command go to stdout).
2. Gates: --max-step-time S exits 3 when the predicted step time exceeds S seconds; --require-fit exits 3 when
   the predicted peak memory less its allocator fragmentation exceeds the GPU's capacity (a tight fit passes,
   schedule/memory_fit.py). A gate that needs a prediction which could not be made
   exits 2.
3. --dry-run prints the exact argument list and the environment variables the launch reads, then exits 0.
4. Otherwise replace this process with the command (os.execvp, the argument list unchanged, environment
   inherited), so the job's exit code is ours; with --instrument N run it under the step hook instead
   (instrument.session.run_instrumented_job) and exit with its code, or die by the signal that killed it.
A command llmperf cannot predict (unknown launcher, a plain script without a model shape) still launches,
with a warning; a configuration the framework itself would reject (Megatron/DeepSpeed rules) stops with exit 2.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Mapping, NoReturn, Sequence

import click

from llmperf_hook.commands.common import launch_argv, overrides
from llmperf_hook.commands.folder_checks import lookup_problem, working_dir
from llmperf_hook.errors import ConfigError, InfeasibleError, LlmperfError, UsageError
from llmperf_hook.launch.parse import leading_assignments
from llmperf_hook.launch.sbatch import SBATCH_JOB_ID
from llmperf_hook.frameworks.resolve import JobOverrides


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--cluster", default=None, help="Cluster preset name or YAML file (default: the shipped cluster of "
              "the --hardware GPU, else dgx-h100; with a warning).")
@click.option("--hardware", default=None, help="GPU preset name or YAML file (overrides the cluster's GPU).")
@click.option("--dry-run", is_flag=True, help="Print the prediction and the exact command to stdout, then stop (with --format json: two JSON lines, the "
                   "prediction, then {\"dry_run\": true, \"command\": [...], ...}).")
@click.option("--max-step-time", type=float, default=None, help="Exit 3 if the predicted step time exceeds S seconds.")
@click.option("--require-fit", is_flag=True, help="Exit 3 if the predicted memory per GPU, less the caching allocator's reserve (the bytes the job allocates), exceeds the GPU's, or the offloads' host memory per node the cluster's host RAM. A job that fits only tightly (its peak over the GPU by no more than that reserve, or under it by less than the model's error band) is not refused: predict says 'fits, tight' and warns.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--instrument", type=int, default=None, help="Run under the step hook, record the first N steps, then refine from them when the job ends.")
@click.option("--profile-ops", type=int, default=0, help="With --instrument: profile operators of K steps.")
@click.option("--stop-after", type=int, default=None, help="With --instrument: stop the job cleanly after N steps.")
@click.option("--run-dir", default=None, help="With --instrument: where to keep the run's records.")
@click.option("--nnodes", type=int, default=None, help="Override the number of nodes of the command.")
@click.option("--nproc-per-node", type=int, default=None, help="Override GPUs per node of the command.")
@click.option("--model", default=None, help="Model preset or file for scripts that do not state the model shape.")
@click.argument("launch", nargs=-1, type=click.UNPROCESSED)
def command(cluster: str | None, hardware: str | None, dry_run: bool, max_step_time: float | None,
            require_fit: bool, fmt: str, instrument: int | None, profile_ops: int, stop_after: int | None,
            run_dir: str | None, nnodes: int | None, nproc_per_node: int | None, model: str | None,
            launch: Sequence[str]) -> None:
    """Predict, then launch the command (exec); gates for dry-run, step-time budget and fit.

    The prediction goes to stderr, then the command replaces llmperf (its exit code is ours); with --dry-run the
    prediction and the command go to stdout. Gates exit 3.

    \b
      llmperf run --cluster dgx-h100 --dry-run --require-fit -- torchrun ... pretrain_gpt.py ...
      llmperf torchrun ...          (same as llmperf run -- torchrun ...)
    """
    argv = launch_argv(launch, "run")
    working_dir("the job's relative paths, its script and the default ./llmperf-runs")
    if max_step_time is not None and not 0 < max_step_time < float("inf"):  # nan compared False: no gate at all
        raise UsageError(f"--max-step-time {max_step_time:g}: the step-time budget must be a positive, finite number of "
                         f"seconds per optimizer step (llmperf option). Give one, or leave the option out.")
    check_instrument_options(argv, instrument, profile_ops, stop_after, run_dir)
    env = dict(os.environ)
    _check_entry(argv, env, dry_run)
    gated = max_step_time is not None or require_fit
    if instrument is not None and hardware is None and cluster is None:
        hardware = _local_cpu(argv, env)
    pred, problem = predict_or_explain(argv, env, cluster, hardware, overrides(nnodes, nproc_per_node, model))
    out_err = not dry_run
    if pred is None:
        if gated:
            raise UsageError(f"--max-step-time/--require-fit need a prediction, but none could be made: {problem}")
        click.echo(f"llmperf: warning: nothing could be predicted for this command ({problem}); launching it anyway.",
                   err=True)
    else:
        _print_prediction(pred, fmt, err=out_err)
        check_gates(pred, max_step_time, require_fit)
    if dry_run:
        _print_dry_run(argv, pred, fmt, instrument, run_dir)
        return
    assigned, argv = leading_assignments(argv)  # `FOO=1 torchrun ...`: FOO in the job's environment, as a shell does
    env.update(assigned)
    check_launchable(argv)  # after the gates (their verdict stands), before a run directory is made
    if instrument is not None:
        # ends the process (sys.exit, or the job's signal), not click's Exit: the CLI runs click with
        # standalone_mode=False, which turns Exit into a return value that would be lost.
        _run_instrumented(argv, env, instrument, profile_ops, stop_after, run_dir, pred)
    exec_command(argv, env)


def _check_entry(argv: list[str], env: dict[str, str], dry_run: bool) -> None:
    """The training script (module) python would open, before the command is predicted (run_entry.py): refused when
    launching, a warning in a dry run (the job may be meant for another machine's files) and for a multi-node
    deepspeed launch (its runner opens it on the hostfile's hosts, not here)."""
    from llmperf_hook.commands.run_entry import entry_verdict

    problem, refuse = entry_verdict(argv, env, Path.cwd())
    if refuse and not dry_run:
        raise UsageError(problem)
    if problem:
        click.echo(f"llmperf: warning: {problem.replace('Nothing was predicted or started: ', 'Launched here, it would fail: ')}",
                   err=True)


def _local_cpu(argv: list[str], env: dict[str, str]) -> str | None:
    """An instrumented job that runs on this machine's CPU is predicted for a CPU (hardware/local_cpu.py), so refine
    can calibrate from it."""
    from llmperf_hook.hardware.local_cpu import local_cpu_hardware

    try:
        hardware = local_cpu_hardware(argv, env)
    except OSError as err:  # its description goes under $LLMPERF_HOME: an unwritable one must not stop the job
        click.echo(f"llmperf: warning: this machine's CPU could not be described for the prediction ({err.strerror or err}: "
                   f"{err.filename or '$LLMPERF_HOME'}; $LLMPERF_HOME must be a writable folder): predicted for the "
                   "default hardware instead; pass --hardware, or fix $LLMPERF_HOME.", err=True)
        return None
    if hardware is not None:
        click.echo(f"llmperf: the job runs on this machine's CPU (no --hardware given): predicted for hardware "
                   f"{hardware!r}, which refine calibrates from its steps (`llmperf profile --device cpu` fits a "
                   "better one; --hardware chooses another)", err=True)
    return hardware


def predict_or_explain(argv: list[str], env: dict[str, str], cluster: str | None, hardware: str | None,
                       job_overrides: JobOverrides) -> tuple[Any, str]:
    """(prediction, "") or (None, why) when the command cannot be predicted but may still be launched.

    Raises the ConfigError when a Megatron/DeepSpeed configuration is invalid (the framework would reject it)
    and UsageError for llmperf's own bad options (cluster/hardware files)."""
    from llmperf_hook import api
    from llmperf_hook.frameworks.flags import parse_flags
    from llmperf_hook.frameworks.resolve import detect_framework
    from llmperf_hook.frameworks.script_flags import SCRIPT_FLAGS
    from llmperf_hook.launch.parse import parse_launch

    api.resolve_cluster(cluster, hardware)  # a bad --cluster/--hardware is our user's error: exit 2 now
    try:
        return api.predict_command(argv, env, cluster=cluster, hardware=hardware, overrides=job_overrides), ""
    except ConfigError as err:
        try:
            job = parse_launch(argv, env, job_overrides.nnodes, job_overrides.nproc_per_node)
            framework = detect_framework(parse_flags(job.script_args, SCRIPT_FLAGS), job.env, job.script)
        except LlmperfError:
            return None, str(err)
        if framework != "torch":
            raise
        return None, str(err)
    except UsageError as err:
        return None, str(err)


def check_gates(pred: Any, max_step_time: float | None, require_fit: bool) -> None:
    est = pred.estimate
    if max_step_time is not None and est.step_time_s > max_step_time:
        raise InfeasibleError(
            f"predicted step time {est.step_time_s:.3f} s exceeds --max-step-time {max_step_time:g} s (llmperf "
            f"option) on {pred.cluster.name}. Change the parallel layout or micro-batch size (see `llmperf tune`), "
            f"or raise the budget.")
    mem = est.memory
    if not require_fit or (mem.fits and mem.host_fits):
        return
    from llmperf_hook.schedule.memory_knobs import describe_knobs

    knobs = describe_knobs(pred.config, pred.cluster, mem)  # by how much each knob shrinks the side that is short
    if not mem.fits and pred.cluster.gpu.device == "cpu":
        from llmperf_hook.schedule.memory_cpu import cpu_short_message

        raise InfeasibleError(f"{cpu_short_message(mem, pred.config)} {knobs}")
    if not mem.fits:
        raise InfeasibleError(
            f"predicted peak memory {mem.peak_bytes_per_gpu / 2**30:.2f} GiB per GPU (pipeline stage {mem.stage}) "
            f"exceeds the {mem.capacity_bytes / 2**30:.2f} GiB of {pred.cluster.gpu.name} by "
            f"{-mem.headroom_bytes / 2**30:.2f} GiB, more than its "
            f"{(mem.peak_bytes_per_gpu - mem.must_fit_bytes) / 2**30:.2f} GiB of allocator reserve: what it "
            f"allocates ({mem.must_fit_bytes / 2**30:.2f} GiB) does not fit (--require-fit). {knobs}")
    parts = ", ".join(f"{k.removeprefix('host_')} {v / 2**30:.1f}" for k, v in mem.host_components.items())
    raise InfeasibleError(
        f"predicted host memory {mem.host_bytes_per_node / 2**30:.1f} GiB per node ({parts} GiB: what the "
        f"job's ranks on one host keep there) exceeds the {mem.host_capacity_bytes / 2**30:.0f} GiB of host RAM "
        f"of {pred.cluster.name} (its preset's host_memory_GiB) by "
        f"{(mem.host_bytes_per_node - mem.host_capacity_bytes) / 2**30:.1f} GiB (--require-fit). {knobs}")


def _print_prediction(pred: Any, fmt: str, err: bool) -> None:
    from llmperf_hook.commands.predict import render

    click.echo(render(pred, fmt), err=err)


def check_instrument_options(argv: list[str], instrument: int | None, profile_ops: int, stop_after: int | None,
                             run_dir: str | None) -> None:
    """The hook's options only mean something with --instrument: refuse them alone (they were silently ignored and the
    job ran uninstrumented), and check their ranges before anything is predicted or launched."""
    given = [name for name, value in (("--profile-ops", profile_ops or None), ("--stop-after", stop_after),
                                      ("--run-dir", run_dir)) if value is not None]
    if instrument is None:
        if given:
            raise UsageError(f"{', '.join(given)} only work with --instrument N (the hook that records the first N steps); "
                             "add --instrument N, or drop them.")
        return
    from llmperf_hook.instrument.session import _check_arguments

    _check_arguments(argv, instrument, profile_ops, stop_after)
    _check_run_dir(run_dir)


def _check_run_dir(run_dir: str | None) -> None:
    """--run-dir must be (or become) a folder: a file there, or a file among its parents, a path that cannot be looked
    up (a name too long, a symbolic link loop: folder_checks.py) is refused before the prediction and the launch (it
    failed only after both were under way, or as an internal error)."""
    if run_dir is None:  # ./llmperf-runs/<job id>
        _check_pythonpath_safe(os.path.abspath("llmperf-runs"), "the default ./llmperf-runs (no --run-dir given)")
        return
    if not run_dir.strip():
        raise UsageError("--run-dir '' is empty: give the folder for the run's records, or leave --run-dir out "
                         "(default ./llmperf-runs/<time>-<pid>).")
    try:
        path = Path(run_dir).expanduser()
    except RuntimeError as err:  # pathlib: `~name` of no user here
        raise UsageError(f"--run-dir {run_dir!r}: there is no user {run_dir[1:].split(os.sep)[0]!r} on this machine, "
                         "so its ~ has no home folder. Pass the folder's full path.") from err
    problem = lookup_problem(path)
    if problem:
        raise UsageError(f"--run-dir {run_dir!r} cannot hold the run's records: {problem}.")
    _check_pythonpath_safe(os.path.abspath(path), f"--run-dir {run_dir!r}")
    for part in (path, *path.parents):
        if part.exists():
            if not part.is_dir():
                raise UsageError(f"--run-dir {run_dir!r}: {str(part)!r} is a file, not a folder, so the run's records "
                                 "cannot go there. Pass a folder (it is created if missing).")
            if not os.access(part, os.W_OK | os.X_OK):
                raise UsageError(f"--run-dir {run_dir!r}: {str(part)!r} is not writable by this user. Pass a "
                                 "writable folder.")
            break
    from llmperf_hook.commands.run_entry import check_run_dir_writable

    check_run_dir_writable(run_dir)  # what os.access passes for root: /proc, a read-only mount


def _check_pythonpath_safe(folder: str, named: str) -> None:
    """The run folder has no os.pathsep, as instrument/session.prepare_run_dir requires, checked before the
    prediction: the hook's folder inside it goes on the ranks' PYTHONPATH, which splits at it."""
    if os.pathsep in folder:
        raise UsageError(f"{named} ({folder}) cannot hold the run's records: the hook's folder inside it goes on the "
                         f"ranks' PYTHONPATH, which splits at {os.pathsep!r}, so no rank would load the hook. Pass "
                         f"--run-dir with a folder whose path has no {os.pathsep!r}.")


def _instrument_plan(instrument: int | None, run_dir: str | None) -> dict[str, str] | None:
    """What an instrumented launch adds to the environment (nothing is created by a dry run)."""
    if instrument is None:
        return None
    from llmperf_hook.instrument.deepspeed_env import DS_ENV_FILE, JOB_ENV_FILE, runner_sets_python_path

    where = str(Path(run_dir).expanduser().resolve()) if run_dir else str(Path("llmperf-runs").resolve() / "<job id>")
    plan = {"PYTHONPATH": f"{where}/jobs/<job id>/hook" + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
            "LLMPERF_RUN_DIR": where}
    if runner_sets_python_path(os.environ, Path.cwd()):  # instrument/deepspeed_env.py
        plan[DS_ENV_FILE] = f"{where}/jobs/<job id>/{JOB_ENV_FILE}"
    return plan


def _print_dry_run(argv: list[str], pred: Any, fmt: str, instrument: int | None = None, run_dir: str | None = None) -> None:
    read = dict(pred.job.env) if pred is not None else {}
    added = _instrument_plan(instrument, run_dir)
    if fmt == "json":
        click.echo(json.dumps({"dry_run": True, "command": argv, "environment": read,
                               "environment_inherited": True, "environment_added": added or {}}))
        return
    if added:
        click.echo(f"\ndry run: would launch and wait (argument list, this shell's environment plus the hook's "
                   f"variables below), recording the first {instrument} steps of every rank:")
    else:
        click.echo("\ndry run: would exec (argument list, environment inherited unchanged from this shell):")
    click.echo(f"  {shlex.join(argv)}")
    for key, value in (added or {}).items():
        click.echo(f"  + {key}={value}")
    if read.get("SLURM_JOB_ID") == SBATCH_JOB_ID:  # launch/sbatch.py: the allocation the batch step will get
        del read["SLURM_JOB_ID"]
        click.echo("environment variables the launch reads (SLURM_* as sbatch will set them for the batch step, "
                   "from its #SBATCH and command-line options):")
    elif read:
        click.echo("environment variables the launch reads:")
    if read:
        for key, value in sorted(read.items()):
            click.echo(f"  {key}={shlex.quote(value)}")


def _run_instrumented(argv: list[str], env: dict[str, str], steps: int, profile_ops: int, stop_after: int | None,
                      run_dir: str | None, pred: Any) -> NoReturn:
    """Run under the hook, then end as the job ended: its exit code, or killed by the signal that killed it."""
    from llmperf_hook import api
    from llmperf_hook.instrument.session import end_like_the_job, run_instrumented_job

    prediction = api.prediction_json(pred) if pred is not None else None
    end_like_the_job(run_instrumented_job(argv, env=env, steps=steps, profile_ops=profile_ops, stop_after=stop_after,
                                          run_dir=run_dir, prediction=prediction))


def check_launchable(argv: Sequence[str]) -> None:
    """The command's program exists and may be executed, or a UsageError (exit 2: bad input, DESIGN.md; a shell
    would say 127 / 126, but no job ran, so there is no child exit code to pass through)."""
    import shutil

    program = argv[0]
    if shutil.which(program):
        return
    where = "the first word of the command after `--`"
    if "/" not in program:
        raise UsageError(f"cannot launch {program!r} ({where}): no such command on PATH. Check the spelling, or "
                         f"activate the environment that provides it.")
    path = Path(program)
    if not path.exists():
        raise UsageError(f"cannot launch {program!r} ({where}): no such file. Check the path.")
    if path.is_dir():
        raise UsageError(f"cannot launch {program!r} ({where}): it is a directory. Name the launcher or script "
                         f"inside it.")
    raise UsageError(f"cannot launch {program!r} ({where}): it is not executable. Make it executable "
                     f"(chmod +x) or name its interpreter first (python {program} ...).")


def exec_command(argv: list[str], env: Mapping[str, str] | None = None) -> None:
    """Replace this process with `argv` (never a shell), in `env` (default: ours); its exit code becomes ours."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], argv, dict(os.environ if env is None else env))
    except OSError as err:  # e.g. ENOEXEC: an executable script without a #! line
        raise UsageError(f"cannot launch {argv[0]!r}: {err.strerror or err}. If it is a script, name its interpreter "
                         f"first (python {argv[0]} ...) or give it a #! line; check that it is installed and on "
                         f"PATH.") from err

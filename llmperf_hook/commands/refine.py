"""`llmperf refine [RUN_DIR]`: ingest an instrumented run's actuals, refit, recalibrate; print before/after.

RUN_DIR defaults to the newest folder under ./llmperf-runs (where `llmperf run --instrument` writes).
`llmperf run --instrument` runs this automatically when the job ends.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from llmperf_hook.errors import UsageError

DEFAULT_RUNS_DIR = Path("llmperf-runs")

CALIBRATION_FRAMEWORKS = ("megatron", "deepspeed", "megatron-deepspeed", "hf-deepspeed", "torch")
"""TrainingConfig.framework values: the calibration key's framework part, as predictions look it up."""


def newest_run_dir(parent: Path = DEFAULT_RUNS_DIR) -> Path:
    """The newest of the runs under ./llmperf-runs and the latest `llmperf run --instrument` recorded in
    $LLMPERF_HOME (a run given --run-dir elsewhere)."""
    from llmperf_hook.commands.folder_checks import working_dir

    runs = [p for p in parent.iterdir() if p.is_dir()] if parent.is_dir() else []
    latest = _recorded_latest_run()
    runs += [latest] if latest is not None else []
    if not runs:
        working_dir("./llmperf-runs, where RUN_DIR is looked for when none is given,")
        raise UsageError(f"no RUN_DIR given, no run under {str(parent)!r} (from the working directory "
                         f"{str(Path.cwd())!r}) and no instrumented run recorded in $LLMPERF_HOME. Pass the run "
                         f"directory `llmperf run --instrument` printed.")
    return max(runs, key=lambda p: p.stat().st_mtime)


def _recorded_latest_run() -> Path | None:
    from llmperf_hook.instrument.session import LATEST_RUN_FILE
    from llmperf_hook.resources import llmperf_home

    try:
        text = (llmperf_home() / LATEST_RUN_FILE).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return Path(text) if text and Path(text).is_dir() else None


def check_run_dir_path(path: Path) -> None:
    """RUN_DIR can be looked up (folder_checks.py: a name too long, a symbolic link loop), and a relative one has a
    working directory to be read from."""
    from llmperf_hook.commands.folder_checks import lookup_problem, working_dir

    if not path.is_absolute():
        working_dir(f"the relative RUN_DIR {str(path)!r} and ./llmperf-runs")
    problem = lookup_problem(path)
    if problem:
        raise UsageError(f"run directory {str(path)!r} cannot be read: {problem}.")
    if path.exists() and not path.is_dir():  # click's file_okay=False stops a regular file only (a FIFO, a device)
        raise UsageError(f"run directory {str(path)!r} is not a folder. Pass the folder `llmperf run --instrument` "
                         "printed ('records in DIR').")


def check_has_jobs(path: Path) -> None:
    """A run directory whose records name no job (corrupt, or truncated before the first step), or whose jobs all
    ended before their first optimizer step, is bad input: say so instead of reporting an empty refinement."""
    from llmperf_hook.refine.run_records import read_run_dir

    run = read_run_dir(path)
    if not run.job_ids():
        raise UsageError(
            f"run directory {str(path)!r} holds no step record of any job ({len(run.records)} readable record(s) without a "
            f"job id, {run.num_bad_lines} unreadable line(s) in its rank*.jsonl files): nothing to refine. Pass the "
            "folder of a run that reached its first optimizer step under `llmperf run --instrument`.")
    if not any(r.get("kind") == "step" and "job_id" in r for r in run.records):
        raise UsageError(
            f"run directory {str(path)!r} holds no step record: job(s) {', '.join(run.job_ids())} started under the "
            "hook but ended (failed, or were killed) before their first optimizer step ended, so there is no step "
            "time to refine from. Rerun the job under `llmperf run --instrument N` until it takes a step.")


def _preset_names(hardware: str | None, cluster: str | None) -> tuple[str | None, str | None]:
    """--hardware/--cluster as the names `predict` looks calibrations up by: a preset name or YAML file that must
    exist (a misspelt one stored a calibration no prediction would ever find), a file read for its `name`."""
    from llmperf_hook.hardware.load import load_cluster, load_hardware

    return (load_hardware(hardware).name if hardware else None,
            load_cluster(cluster).name if cluster else None)


@click.command(name="refine")
@click.argument("run_dir", required=False, type=click.Path(file_okay=False))
@click.option("--hardware", default=None, help="Hardware name for the calibration key (default: from prediction.json).")
@click.option("--cluster", default=None, help="Cluster name for the calibration key (default: from prediction.json).")
@click.option("--framework", default=None, help="Framework for the calibration key (default: from prediction.json, else what the hook saw).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def command(run_dir: str | None, hardware: str | None, cluster: str | None, framework: str | None, fmt: str) -> None:
    """Ingest an instrumented run into the store, refit the per-op models and the cluster calibration."""
    from llmperf_hook.instrument.shared_job import release_claims
    from llmperf_hook.refine.refine_run import refine_run, render_refine_report, report_json

    hardware, cluster = _preset_names(hardware, cluster)
    if framework is not None and framework not in CALIBRATION_FRAMEWORKS:
        raise UsageError(f"--framework {framework!r}: predictions look calibrations up by one of "
                         f"{', '.join(CALIBRATION_FRAMEWORKS)} (`llmperf explain` names a job's), so one stored under "
                         f"another name would never be used. Pass one of those, or leave --framework out.")
    path = Path(run_dir) if run_dir else newest_run_dir()
    check_run_dir_path(path)
    check_has_jobs(path)
    report = refine_run(path, hardware=hardware, cluster=cluster, framework=framework)
    release_claims(Path(report.store_path))  # instrument/shared_job.py: finished jobs' claims the store now holds
    if fmt == "json":
        click.echo(json.dumps(report_json(report), indent=1))
    else:
        click.echo(render_refine_report(report))

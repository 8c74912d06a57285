"""`llmperf refine RUN_DIR`: ingest an instrumented run, refit, recalibrate, and show the difference.

For each job found in the run directory:
  1. summarise its steps (run_records.summarize_job) and ingest runs, steps and op samples into the store;
  2. with the op samples of `--profile-ops`: refit the per-op models of that hardware (op_refit);
  3. with the prediction saved at launch: refit the (hardware, cluster, framework) calibration over every
     run of that key in the store, and report predicted vs measured before and after.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.instrument.op_profile import by_gelu_variant
from llmperf_hook.refine import observation_store as store
from llmperf_hook.refine.calibration import Calibration
from llmperf_hook.refine.config_fingerprint import fingerprint_from_config_json
from llmperf_hook.refine.contention import ContendedStep, contended_step, sampling_sd_beyond_contention
from llmperf_hook.refine.contention import describe as describe_contended
from llmperf_hook.refine.op_rebase import describe as describe_rebased
from llmperf_hook.refine.op_rebase import repredict_uncalibrated
from llmperf_hook.refine.recalibrate import recalibrate
from llmperf_hook.refine.run_records import JobSteps, op_records, read_json_object, read_run_dir, summarize_job
from llmperf_hook.refine.shrinkage import median_sampling_sd
from llmperf_hook.refine.transfer import cost_shares

MAX_WALL_PER_CPU = 1.5
"""A CPU run whose ranks' step wall time exceeds 1.5x their CPU time waited for a core (or a peer) for a third
of the step: on an oversubscribed machine a calibration from its wall time would learn the machine's load, not
the cluster. Such a run is calibrated from its step CPU time instead, as a noisier reading
(refine/contention.py); GPU runs: CPU time says nothing, never treated so. The environment variable
LLMPERF_REFINE_MAX_WALL_PER_CPU overrides the limit (e.g. for CPU jobs that legitimately wait on slow
communication; "inf": every run calibrates from its wall time)."""


def max_wall_per_cpu() -> float:
    raw = os.environ.get("LLMPERF_REFINE_MAX_WALL_PER_CPU", "")
    try:
        return float(raw) if raw else MAX_WALL_PER_CPU
    except ValueError:
        raise UsageError(f"LLMPERF_REFINE_MAX_WALL_PER_CPU={raw!r} (environment) is not a number: give a ratio "
                         f"such as 2.0, or inf to calibrate from every run.") from None

HOOK_TO_FRAMEWORK = {"deepspeed": "deepspeed", "deepspeed-pipeline": "deepspeed", "megatron": "megatron",
                     "megatron-core": "megatron", "torch": "torch"}


@dataclass(frozen=True)
class CalibrationKey:
    hardware: str
    cluster: str
    framework: str


@dataclass(frozen=True)
class JobRefinement:
    """What refining one job did."""

    job: JobSteps
    key: CalibrationKey | None
    """None when neither the saved prediction nor the options name the hardware and cluster."""
    predicted_before_s: float | None
    """The step time predicted at launch (with the calibration in force then, if any)."""
    uncalibrated_s: float | None
    """The same prediction without any calibration."""
    predicted_after_s: float | None
    """The uncalibrated prediction with the calibration refitted now."""
    calibration: Calibration | None
    num_op_samples: int = 0
    op_refit: str = ""
    """What the per-op refit did (or why it did not run)."""
    notes: tuple[str, ...] = ()
    fingerprint: str | None = None
    """The run's configuration (refine/config_fingerprint.py); None when prediction.json names none."""
    contended: ContendedStep | None = None
    """A CPU run whose ranks waited for a core: the CPU-time reading it was calibrated from (None: a quiet run,
    calibrated from its measured wall time)."""

    @property
    def calibrated_from_s(self) -> float | None:
        """The step time the calibration compared the prediction with."""
        return self.contended.step_time_s if self.contended else self.job.step_time_s


@dataclass(frozen=True)
class RefineReport:
    run_dir: str
    store_path: str
    jobs: tuple[JobRefinement, ...]


def _name(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, Mapping):
        return _name(value.get("name"))
    return None


def calibration_key(prediction: Mapping[str, Any] | None, job: JobSteps, hardware: str | None = None,
                    cluster: str | None = None, framework: str | None = None) -> CalibrationKey | None:
    """Options first, then the prediction saved at launch (its cluster, the cluster's GPU, the config's
    framework), then the framework the hook saw."""
    pred = prediction or {}
    cluster_v = pred.get("cluster")
    config = pred.get("config") if isinstance(pred.get("config"), Mapping) else {}
    hw = hardware or _name(pred.get("hardware")) or (_name(cluster_v.get("gpu")) if isinstance(cluster_v, Mapping) else None)
    cl = cluster or _name(cluster_v)
    fw = framework or _name(config.get("framework")) or _name(pred.get("framework")) or HOOK_TO_FRAMEWORK.get(job.framework)
    if not (hw and cl and fw):
        return None
    return CalibrationKey(hw, cl, fw)


def _seconds(value: Any) -> float | None:
    """A step time from prediction.json: a positive, finite number (not a bool, not NaN), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        return None
    return float(value)


def uncalibrated_prediction_s(prediction: Mapping[str, Any] | None) -> tuple[float | None, float | None]:
    """(as launched, without calibration): undo a calibration the prediction says it applied. A prediction.json
    whose step time is not a positive, finite number (edited, or from a broken prediction) counts as none."""
    shown = _seconds((prediction or {}).get("step_time_s"))
    if shown is None:
        return None, None
    raw = _seconds(prediction.get("uncalibrated_step_time_s"))
    if raw is not None:
        return shown, raw
    breakdown = prediction.get("breakdown")
    if isinstance(breakdown, Mapping) and isinstance(breakdown.get("calibration"), (int, float)):
        return shown, _seconds(shown - float(breakdown["calibration"]))  # api.predict_config: calibrated - uncalibrated
    cal = prediction.get("calibration")
    try:
        if isinstance(cal, Mapping) and _seconds(cal.get("step_time_scale")):
            return shown, _seconds((shown - float(cal.get("step_overhead_s") or 0.0)) / float(cal["step_time_scale"]))
    except (TypeError, ValueError):
        return shown, None
    return shown, shown


def refine_run(run_dir: str | Path, *, hardware: str | None = None, cluster: str | None = None,
               framework: str | None = None, store_file: Path | None = None,
               job_ids: Sequence[str] | None = None) -> RefineReport:
    """Every job of the run directory, or those of `job_ids` it holds."""
    run = read_run_dir(run_dir)
    conn = store.connect(store_file)
    try:
        jobs = tuple(_refine_job(conn, run, job_id, hardware, cluster, framework) for job_id in run.job_ids()
                     if job_ids is None or job_id in job_ids)
    finally:
        conn.close()
    return RefineReport(run.path, str(store_file or store.store_path()), jobs)


def _refine_job(conn: Any, run: Any, job_id: str, hardware: str | None, cluster: str | None,
                framework: str | None) -> JobRefinement:
    job = summarize_job(run.records, job_id)
    bad_lines = [f"{run.num_bad_lines} unreadable or malformed line(s) in the run's rank*.jsonl files skipped "
                 f"(a rank killed mid-write, or an edited file)"] if run.num_bad_lines else []
    elsewhere = stored_elsewhere(conn, job_id, run.path)
    if elsewhere:  # what the reading found is still said
        return JobRefinement(job, None, None, None, None, None,
                             notes=(elsewhere, *_completeness_notes(job), *bad_lines))
    prediction = run.prediction_for(job_id)
    key = calibration_key(prediction, job, hardware, cluster, framework)
    shown, raw = uncalibrated_prediction_s(prediction)
    fingerprint = fingerprint_from_config_json((prediction or {}).get("config"))
    shares = cost_shares((prediction or {}).get("breakdown"), (prediction or {}).get("config"))  # refine/transfer.py
    notes = [*_damaged_prediction_note(Path(run.path), job_id), *_completeness_notes(job),
             *_short_run_note(Path(run.path), job_id, job),
             *session_notes(Path(run.path) / "jobs" / job_id), *bad_lines]  # sessions without their end record
    wall_per_cpu = job.step_time_s / job.cpu_time_s if job.device == "cpu" and job.step_time_s and job.cpu_time_s else None
    mismatch = device_mismatch(job.device, key, hardware)
    contended = _contended_step(conn, job, key, wall_per_cpu)
    if contended is not None:
        notes.append(describe_contended(contended, max_wall_per_cpu(), _load_text(job.load_avg_1m)))
    if mismatch:
        notes.append(mismatch)
    earlier_key = store.calibrating_key(conn, job_id)  # before this refine re-keys or replaces the run
    store.record_run(conn, {
        "job_id": job_id, "run_dir": run.path, "hardware": key and key.hardware, "cluster": key and key.cluster,
        "framework": key.framework if key else HOOK_TO_FRAMEWORK.get(job.framework, job.framework),
        "device": job.device, "world_size": job.world_size, "num_timed_steps": job.num_timed_steps,
        "measured_step_time_s": job.step_time_s, "predicted_step_time_s": shown, "uncalibrated_step_time_s": raw,
        "peak_memory_bytes": job.peak_memory_bytes, "load_avg_1m": job.load_avg_1m,
        "config_json": json.dumps((prediction or {}).get("config"), default=str), "wall_per_cpu": wall_per_cpu,
        # recorded, not applied: the hook's machine-speed reading does not track this testbed's step-time drift
        # (instrument/reference_speed.py, benchmarks/bench_cpu_testbed.py --drift-check)
        "usable_for_calibration": 0 if mismatch else 1, "reference_cpu_s": job.reference_cpu_s,
        "config_fingerprint": fingerprint,
        "calibration_step_time_s": contended.step_time_s if contended else job.step_time_s,
        "observation_sd": contended.observation_sd if contended else 0.0,
        # how far the cost mix of this configuration carries to others, and how well its steps fix its median
        "sampling_sd": _sampling_sd(job, contended),
        "cost_shares_json": json.dumps(shares)})
    steps = [r for r in run.records if r.get("kind") == "step" and str(r.get("job_id")) == job_id]
    store.record_steps(conn, job_id, steps)
    usable_key = None if mismatch else key
    store.record_shared_steps(conn, job_id, usable_key and (key.hardware, key.cluster, key.framework), shown, steps)
    # the profiler cannot tell which GELU ran; the job's config at launch can (instrument/op_profile.py)
    samples = by_gelu_variant(op_records(run.records, job_id),
                              str(((prediction or {}).get("config") or {}).get("gelu_approximate", "tanh")))
    op_hardware = None if mismatch else key.hardware if key else hardware  # the key needs a cluster; samples do not
    earlier_ops = store.op_sample_groups(conn, job_id)  # an earlier refine's, maybe under another hardware
    store.forget_op_samples(conn, job_id)
    op_refit = _refit_ops(conn, job_id, op_hardware, samples)
    notes.extend(_leave_earlier_op_hardware(earlier_ops, op_hardware))
    if op_refit.startswith("refitted") and raw and usable_key:  # refine/op_rebase.py: not counted twice
        rebased = repredict_uncalibrated(prediction, usable_key.cluster)
        notes.append(describe_rebased(raw, rebased))
        if rebased.uncalibrated_s is not None:
            raw = rebased.uncalibrated_s
            store.set_uncalibrated_prediction(conn, job_id, raw)
    calibration, variance_source = (recalibrate(conn, key.hardware, key.cluster, key.framework)
                                    if key and raw and job.step_time_s and not mismatch else (None, ""))
    if calibration is not None and calibration.num_configs:
        notes.append(_shrinkage_note(calibration, fingerprint, variance_source))
    notes.extend(_leave_earlier_key(conn, earlier_key, calibration))
    if prediction is None and not (Path(run.path) / "jobs" / job_id / "prediction.json").is_file():
        notes.append("no calibration: no prediction was saved when the job was launched (llmperf could not predict "
                     "the command, and `llmperf run` said why then; give it what it asked for, e.g. --model, and "
                     "rerun the job under --instrument): there is nothing to compare its steps with")
    elif key is None:
        notes.append("no calibration: the run's prediction.json does not name the hardware and cluster "
                     "(pass --hardware and --cluster to `llmperf refine`)")
    elif raw is None:
        notes.append("no calibration: no usable prediction was saved at launch (prediction.json missing, or its "
                     "step_time_s not a positive number)")
    elif job.step_time_s is None:
        notes.append("no calibration: no timed step " + ("(all recorded steps were warm-up or profiled)" if steps
                                                         else "(the job recorded no step)"))
    after = calibration.apply(raw, fingerprint, shares, job.world_size) if calibration and raw else None
    return JobRefinement(job, key, shown, raw, after, calibration, len(samples), op_refit, tuple(notes),
                         fingerprint=fingerprint, contended=contended)


def stored_elsewhere(conn: Any, job_id: str, run_dir: str) -> str:
    """Why this job is not stored, or "": the store holds a run of the same job id from another run directory that
    still exists (refine_runs is keyed on the job id: INSERT OR REPLACE would drop that run's row, steps and op
    samples). Launch-derived ids (`slurm-N`, `torchrun-<endpoint>`) recur; start_or_join's claims keep two jobs apart,
    and this makes any hole in them loud instead of a silent loss. A stored run directory that is gone is taken as
    moved here (or removed: nothing else can refine it) and replaced as before; a relative one (`llmperf refine x`
    from a cwd unknown now) cannot be compared and is replaced as before too."""
    row = conn.execute("SELECT run_dir FROM refine_runs WHERE job_id = ?", (job_id,)).fetchone()
    stored = Path(str(row[0])) if row is not None and row[0] else None
    if stored is None or str(stored) == str(run_dir) or not stored.is_absolute():  # relative: to a cwd unknown now
        return ""
    try:
        if os.path.samefile(stored, run_dir):  # one folder named two ways (`refine x`, `refine /w/x`)
            return ""
    except OSError:  # the stored folder is gone (or unreadable): moved here, or removed
        return ""
    return (f"not stored: the store already holds job {job_id} from another run directory, {stored}, which still "
            f"exists, and refining this one would replace that run (the store keeps one run per job id). Nothing was "
            f"changed. If this folder is a copy of that one, its run is stored already; if it is another job, move "
            f"or remove {stored} and refine this folder again")


def _leave_earlier_key(conn: Any, earlier: tuple[str, str, str] | None, calibration: Calibration | None) -> list[str]:
    """An earlier refine of this run calibrated `earlier`; this one calibrated another key, or none (--hardware /
    --cluster / --framework changed, or the run no longer calibrates): `earlier` is refitted without the run, or
    removed when no run is left to it. Left as it was, the run counted in two calibrations, and a calibration
    fitted from it alone outlived its move."""
    now = calibration and (calibration.hardware, calibration.cluster, calibration.framework)
    if earlier is None or tuple(earlier) == now:
        return []
    name = "/".join(earlier)
    if recalibrate(conn, *earlier)[0] is not None:
        return [f"an earlier refine of this run calibrated {name}: refitted without it"]
    store.forget_calibration(conn, *earlier)
    return [f"an earlier refine of this run calibrated {name}, which has no other run: its calibration is removed"]


def _leave_earlier_op_hardware(earlier: Mapping[str, set[tuple[str, str, str]]], now: str | None) -> list[str]:
    """An earlier refine stored the run's op samples under other hardware and refitted its user profile with them:
    that profile's models are refitted without them (op_refit.refit_without_job)."""
    from llmperf_hook.refine.op_refit import refit_without_job

    notes = []
    for hardware, groups in sorted(earlier.items()):
        if hardware != now:
            said = refit_without_job(hardware, groups)
            notes.append(f"an earlier refine stored this run's op samples for {hardware}" + (f"; {said}" if said else
                                                                                              ""))
    return notes


def _sampling_sd(job: JobSteps, contended: ContendedStep | None) -> float:
    """The sampling sd of the median the calibration reads: the wall times' for a quiet run; for a contended one
    its CPU times', less what its contention spread already holds (refine/contention.py)."""
    if contended is None:
        return median_sampling_sd(job.step_times_s)
    return sampling_sd_beyond_contention(contended, median_sampling_sd(job.cpu_step_times_s))


def _contended_step(conn: Any, job: JobSteps, key: CalibrationKey | None,
                    wall_per_cpu: float | None) -> ContendedStep | None:
    """The CPU-time reading of a run whose ranks waited for a core (refine/contention.py); None for a quiet run
    (or a GPU one)."""
    limit = max_wall_per_cpu()
    if wall_per_cpu is None or not wall_per_cpu > limit or not job.cpu_time_s:
        return None
    quiet = store.quiet_wall_per_cpu_for_key(conn, key.hardware, key.cluster, key.framework, job.world_size,
                                             limit) if key else []
    return contended_step(wall_per_cpu, job.cpu_time_s, job.world_size, limit, quiet)


def _shrinkage_note(cal: Calibration, fingerprint: str | None, variance_source: str) -> str:
    """What the calibration does for the other configurations, and where its variances came from."""
    seen = ("this configuration has its own calibration; " if cal.own_scale(fingerprint) is not None else
            "the run's prediction.json names no configuration, so it only informs the shared part; ")
    return (f"{seen}other configurations get the {cal.describe()} [variances: {variance_source}; shared-bias "
            f"prior and its source: refine/shrinkage.py]")


def device_mismatch(device: str, key: CalibrationKey | None, hardware_option: str | None) -> str:
    """Why this run may not calibrate `key.hardware` ("" when it may): a job the hook saw on the CPU cannot
    calibrate a GPU's predictions, nor a GPU job a CPU profile's (the saved prediction, or --hardware, named
    other hardware than the job ran on: e.g. a CPU test job predicted for the default dgx-h100)."""
    if key is None or device not in ("cpu", "cuda"):
        return ""
    kind = hardware_device(key.hardware)
    if kind is None or kind == device:
        return ""
    origin = "--hardware" if hardware_option else "the prediction saved at launch"
    wanted = "a CPU profile's name (`llmperf profile --device cpu --name NAME`)" if device == "cpu" else "the GPU's preset"
    return (f"not calibrated from: the job ran on {'the CPU' if device == 'cpu' else 'a GPU'}, but the hardware "
            f"{key.hardware!r} (from {origin}) is {'a GPU' if kind == 'cuda' else 'a CPU profile'}; a calibration "
            f"from it would change that hardware's predictions. Rerun `llmperf refine --hardware ...` with {wanted}.")


def hardware_device(name: str) -> str | None:
    """'cpu' or 'cuda' for a hardware name: its fitted profile's fingerprint (a CPU clock, or a GPU's SM count),
    else its hardware file read as predict reads it (_hardware_file_device); None when nothing says."""
    from llmperf_hook.predict.fitted import profile_dirs

    for directory in profile_dirs(name):
        try:
            fingerprint = json.loads((directory / "profile.json").read_text()).get("hardware") or {}
        except (OSError, ValueError, AttributeError):
            continue
        if "cpu" in str(fingerprint.get("clock", "")).lower():
            return "cpu"
        if "num_sms" in fingerprint or str(fingerprint.get("device", "")).upper().startswith("NVIDIA"):
            return "cuda"
    return _hardware_file_device(name)


def _hardware_file_device(name: str) -> str | None:
    """The hardware file's device as predict takes it (hardware/load.py hardware_device_of: the `device` key, else
    `llmperf profile --device cpu`'s mark in the description, else a GPU), found where predict looks (find_config_file:
    $LLMPERF_HOME/hardware, then the shipped presets); None without a readable file."""
    import yaml

    from llmperf_hook.hardware.load import SAFE_LOADER, find_config_file, hardware_device_of

    for candidate in dict.fromkeys((name, name.lower())):
        try:
            path = find_config_file("hardware", candidate)
            raw = yaml.load(path.read_text(errors="replace"), Loader=SAFE_LOADER)
            return "cpu" if hardware_device_of(raw, str(path)) == "cpu" else "cuda"
        except (UsageError, OSError, yaml.YAMLError, AttributeError, TypeError):
            continue
    return None


def _completeness_notes(job: JobSteps) -> list[str]:
    notes = []
    if len(job.ranks_seen) < job.world_size:
        missing = sorted(set(range(job.world_size)) - set(job.ranks_seen))
        notes.append(f"ranks {missing} recorded no step (of world size {job.world_size})")
    lengths = {len(v) for v in job.steps_by_rank.values()}
    if len(lengths) > 1:
        notes.append(f"ranks recorded different numbers of steps: { {r: len(v) for r, v in job.steps_by_rank.items()} }")
    notes.extend(f"hook error: {e}" for e in job.errors)
    return notes


def _damaged_prediction_note(run_dir: Path, job_id: str) -> list[str]:
    """The job's prediction.json is there but is no JSON object (damaged, truncated, edited): said as such, where
    the calibration notes would only say that no usable prediction names the hardware and cluster."""
    path = run_dir / "jobs" / job_id / "prediction.json"
    if not path.is_file() or read_json_object(path) is not None:
        return []
    return [f"{path} is not a JSON object (damaged, truncated or edited): the prediction made at launch is lost, "
            "so this run cannot be calibrated against it; its steps are stored. Rerun the job under `llmperf run "
            "--instrument` for a calibration"]


def session_notes(job_dir: Path) -> list[str]:
    """The job's `llmperf run` sessions that did not record their end (instrument/shared_job.py): still running (its
    ranks may still be writing), or counted as ended without it (killed on this host, or silent on another)."""
    from llmperf_hook.instrument.shared_job import HEARTBEAT_S, STALE_AFTER_S, session_states

    notes = []
    for s in session_states(job_dir):
        who = f"the llmperf run on {s.hostname} (pid {s.pid})"
        if s.state == "running":
            notes.append(f"{who} has not recorded its end: it still runs (last heard of {s.quiet_s:.0f} s ago), so "
                         "its ranks may still be writing; refine again when it ends")
        elif s.state == "dead":
            notes.append(f"{who} ended without recording its end (its process is gone: killed, or crashed): counted "
                         "as ended; its ranks' records so far are used")
        elif s.state == "stale":
            notes.append(f"{who} never recorded its end and has been silent for {s.quiet_s / 60:.0f} min (a running "
                         f"session signals every {HEARTBEAT_S:.0f} s; {STALE_AFTER_S / 60:.0f} min of silence count as "
                         "ended): crashed, killed, or its node lost; counted as ended, its ranks' records so far used")
    return notes


def _short_run_note(run_dir: Path, job_id: str, job: JobSteps) -> list[str]:
    """The job ended before the steps --instrument asked for (jobs/<id>/session.json records the request)."""
    try:
        asked = json.loads((run_dir / "jobs" / job_id / "session.json").read_text()).get("steps")
    except (OSError, ValueError, AttributeError):
        return []
    got = max((len(v) for v in job.steps_by_rank.values()), default=0)
    if isinstance(asked, int) and not job.stopped and got < asked:
        return [f"the job ran {got} optimizer step(s), fewer than the {asked} of --instrument {asked}: it ended first"]
    return []


def _refit_ops(conn: Any, job_id: str, hardware: str | None, samples: list) -> str:
    """Store the op samples under the hardware they were measured on and refit its user profile. Without its name
    they are not stored: they were stored as "unknown", and the note advised `llmperf profile --name unknown`."""
    if not samples:
        return ""
    if hardware is None:
        return (f"{len(samples)} op samples not stored: no hardware of this run to store them under (no prediction "
                f"at launch, or one for a device the job did not run on); `llmperf refine RUN_DIR --hardware NAME` "
                f"stores them for NAME and refits its profile")
    usable = [s for s in samples if s.get("op_class")]
    store.record_op_samples(conn, job_id, hardware, usable)
    store.record_shared_op_samples(conn, job_id, hardware, usable)
    from llmperf_hook.refine.op_refit import refit_op_models

    return refit_op_models(hardware, store.op_samples_for_hardware(conn, hardware))


def _pct(pred: float | None, meas: float | None) -> str:
    return f"{(pred - meas) / meas * 100:+.1f}%" if pred and meas else "-"


def _ms(v: float | None) -> str:
    return f"{v * 1e3:.2f} ms" if v else "-"


def render_refine_report(report: RefineReport) -> str:
    lines = [f"llmperf refine: {report.run_dir} -> {report.store_path}"]
    for r in report.jobs:
        j = r.job
        lines.append(f"  job {j.job_id}: {j.framework} on {j.device}, {len(j.ranks_seen)}/{j.world_size} ranks, "
                     f"{j.num_timed_steps} timed steps, measured {_ms(j.step_time_s)}"
                     + (f" (CPU {_ms(j.cpu_time_s)} per rank)" if j.device == "cpu" and j.cpu_time_s else "")
                     + _load_text(j.load_avg_1m))
        if r.predicted_before_s:
            lines.append(f"    predicted before: {_ms(r.predicted_before_s)} ({_pct(r.predicted_before_s, j.step_time_s)} vs measured)")
        if r.predicted_after_s:
            versus = (f"vs measured" if r.contended is None else
                      f"vs the contended run's quiet-equivalent {_ms(r.contended.step_time_s)}")
            lines.append(f"    predicted after:  {_ms(r.predicted_after_s)} ({_pct(r.predicted_after_s, r.calibrated_from_s)} "
                         f"{versus})  [{r.calibration.describe(r.fingerprint)}]")
            cal = r.calibration  # a plain `llmperf predict` defaults to the cluster's GPU: say how to get this one
            lines.append(f"    later predictions use it: `llmperf predict --hardware {cal.hardware} --cluster "
                         f"{cal.cluster} -- <command>` (and `llmperf run` / `tune` with the same options)")
        if r.num_op_samples:
            lines.append(f"    op samples: {r.num_op_samples} ingested; {r.op_refit}")
        lines.extend(f"    note: {n}" for n in r.notes)
    return "\n".join(lines)


def report_json(report: RefineReport) -> dict[str, Any]:
    return {"schema": 1, "run_dir": report.run_dir, "store": report.store_path, "jobs": [{
        "job_id": r.job.job_id, "framework": r.job.framework, "device": r.job.device,
        "world_size": r.job.world_size, "ranks_seen": list(r.job.ranks_seen),
        "steps_by_rank": {str(k): list(v) for k, v in r.job.steps_by_rank.items()},
        "measured_step_time_s": r.job.step_time_s, "cpu_time_s": r.job.cpu_time_s,
        "load_avg_1m": r.job.load_avg_1m, "predicted_before_s": r.predicted_before_s,
        "uncalibrated_step_time_s": r.uncalibrated_s, "predicted_after_s": r.predicted_after_s,
        "calibration": None if r.calibration is None else {
            "hardware": r.calibration.hardware, "cluster": r.calibration.cluster, "framework": r.calibration.framework,
            "step_time_scale": r.calibration.step_time_scale, "step_overhead_s": r.calibration.step_overhead_s,
            "num_runs": r.calibration.num_runs, "shared_weight": r.calibration.shared_weight,
            "num_configs": r.calibration.num_configs, "sd_config": r.calibration.sd_config,
            "sd_run": r.calibration.sd_run, "config_fingerprint": r.fingerprint,
            "own_scale": _own_scale(r)},
        "num_op_samples": r.num_op_samples, "op_refit": r.op_refit, "notes": list(r.notes),
        "contended": None if r.contended is None else {
            "wall_per_cpu": r.contended.wall_per_cpu, "cpu_time_s": r.contended.cpu_time_s,
            "quiet_wall_per_cpu": r.contended.quiet_wall_per_cpu, "calibrated_from_s": r.contended.step_time_s,
            "observation_sd": r.contended.observation_sd}} for r in report.jobs]}


def _own_scale(r: JobRefinement) -> float | None:
    """The job's configuration's own calibrated ratio, or None when it has none."""
    own = r.calibration.own_scale(r.fingerprint) if r.calibration else None
    return own.step_time_scale if own else None


def _load_text(load_avg_1m: float | None) -> str:
    """', load 5.58' for a note, or nothing when the run recorded no load."""
    return f", load {load_avg_1m:.2f}" if load_avg_1m is not None else ""

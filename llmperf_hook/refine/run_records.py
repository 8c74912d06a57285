"""Stage [8] input: what an instrumented run left in its run directory, read and summarised.

    <run_dir>/rank<R>.jsonl    one JSON object per line: kind = meta | step | op | end | stop | error
    <run_dir>/jobs/<job id>/prediction.json  what `llmperf run` predicted before launching that job
    <run_dir>/jobs/<job id>/session.json     the command, start/end time, exit code
    <run_dir>/prediction.json, session.json  the latest job's (also what older run directories hold)

Files are read at the edge (`read_run_dir`); `summarize_job` is pure. A truncated last line (a rank killed
mid-write) is skipped, never fatal.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from llmperf_hook.errors import UsageError


@dataclass(frozen=True)
class RunDir:
    """Everything found in one run directory."""

    path: str
    records: tuple[Mapping[str, Any], ...]
    """All JSONL records of all ranks and jobs, in file order."""
    prediction: Mapping[str, Any] | None
    session: Mapping[str, Any] | None
    num_bad_lines: int = 0
    """Lines that were not complete JSON objects (skipped)."""
    job_predictions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per job id, from jobs/<job id>/prediction.json (jobs sharing one run directory)."""

    def job_ids(self) -> list[str]:
        return sorted({str(r["job_id"]) for r in self.records if "job_id" in r})

    job_folders: frozenset[str] = frozenset()
    """The job ids with a folder under jobs/ (run directories written since jobs could share one have one per job)."""

    def prediction_for(self, job_id: str) -> Mapping[str, Any] | None:
        """The job's own jobs/<id>/prediction.json; else the one at the top when it is this job's: the only job, or
        one without a jobs/ folder (a run directory of the earlier layout) that the top session.json names. A job
        added to such a folder by --run-dir writes its files under jobs/ and leaves the top ones to it."""
        if job_id in self.job_predictions:
            return self.job_predictions[job_id]
        if len(self.job_ids()) <= 1:
            return self.prediction
        own_top = job_id not in self.job_folders and (self.session or {}).get("job_id") == job_id
        return self.prediction if own_top else None


@dataclass(frozen=True)
class JobSteps:
    """One job's measured steps, summarised the way the predictor's step time is defined."""

    job_id: str
    framework: str
    """Which layer owned the step: megatron | deepspeed | deepspeed-pipeline | megatron-core | torch."""
    device: str
    world_size: int
    ranks_seen: tuple[int, ...]
    steps_by_rank: Mapping[int, tuple[int, ...]]
    """Step indices recorded per rank (to check nothing was lost)."""
    step_time_s: float | None
    """Median over the timed steps of the slowest rank's wall time (a synchronous step ends with its slowest
    rank); warm-up and profiler-window steps excluded. None when no such step was recorded."""
    num_timed_steps: int
    step_times_s: tuple[float, ...] = ()
    """The per-step slowest-rank times that went into the median."""
    peak_memory_bytes: int | None = None
    """Largest per-step peak over ranks: GPU reserved bytes on CUDA, peak RSS on CPU."""
    load_avg_1m: float | None = None
    """Machine load when the job's first step ended (max over ranks' meta records)."""
    errors: tuple[str, ...] = ()
    stopped: bool = False
    """True when --stop-after ended the job."""
    facts: Mapping[str, Any] = field(default_factory=dict)
    """Rank 0's meta record (argv, thread counts, library versions)."""
    cpu_time_s: float | None = None
    """Median over the timed steps of the largest per-rank CPU time (process CPU seconds in the step). On a
    CPU job with one thread per rank, wall time well above it means ranks waited: for peers or for a core."""
    cpu_step_times_s: tuple[float, ...] = ()
    """The per-step largest per-rank CPU times that went into cpu_time_s."""
    reference_cpu_s: float | None = None
    """CPU job: median over ranks of the reference workload's reading taken by the hook after the last recorded step
    (before step 0 in runs recorded before 28 Nov 2026; instrument/reference_speed.py): the machine's speed around
    the run. None when no rank took one (a GPU job, a job that ended before its last recorded step)."""
    reference_concurrent: int = 1
    """How many ranks on the machine read the reference at once (their readings share caches and bandwidth)."""


def _read_jsonl(path: Path) -> tuple[list[dict[str, Any]], int]:
    records, bad = [], 0
    try:
        text = path.read_text(errors="replace")
    except OSError as err:  # unreadable (permissions, removed meanwhile): say which file, as bad input
        raise UsageError(f"cannot read {str(path)!r} ({err.strerror or err}) in the run directory; make it readable, "
                         f"or move it out of the folder to refine from the other ranks.") from None
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(obj, dict) and well_formed(obj):
            records.append(obj)
        else:
            bad += 1
    return records, bad


_INT_FIELDS = ("rank", "world_size", "local_rank", "step", "count")
_NUMBER_FIELDS = ("wall_time_s", "cpu_time_s", "seconds", "load_avg_1m", "peak_rss_bytes",
                  "gpu_peak_allocated_bytes", "gpu_peak_reserved_bytes")
_MAX_NUMBER = 2 ** 63
"""Counts and sizes the store keeps must fit SQLite's signed 64-bit INTEGER (no real step, rank or memory comes
near; a larger one is a corrupted line, not a run)."""


def _is_number(value: Any, integral: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return 0 <= value < _MAX_NUMBER and (not integral or float(value).is_integer())


def well_formed(record: Mapping[str, Any]) -> bool:
    """Whether a record has the types the hook writes (a hand-edited or corrupted line that still parses as JSON
    is skipped and counted like an unreadable one, instead of failing refine): string kind and job id,
    non-negative integral ranks and steps, non-negative finite times and sizes (or null; all below 2^63, what the
    store holds), op dims as numbers and the op's torch names as strings."""
    if not isinstance(record.get("kind", ""), str) or not isinstance(record.get("job_id", ""), str):
        return False
    if any(k in record and not _is_number(record[k], integral=True) for k in _INT_FIELDS):
        return False
    if any(record.get(k) is not None and not _is_number(record[k]) for k in _NUMBER_FIELDS):
        return False
    if record.get("kind") == "step" and ("rank" not in record or "step" not in record):
        return False
    if record.get("kind") == "op":
        dims = record.get("dims")
        return isinstance(dims, dict) and all(_is_number(v) for v in dims.values()) \
            and _is_number(record.get("seconds")) and isinstance(record.get("op_class"), str) \
            and isinstance(record.get("phase"), str) and isinstance(record.get("dtype", ""), str) \
            and isinstance(record.get("torch_names", []), list) \
            and all(isinstance(name, str) for name in record.get("torch_names", []))
    return True


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The file's JSON object; None when absent, unreadable, or not an object (a user's file of that name)."""
    try:
        doc = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _not_a_run_dir_hint(run: Path) -> str:
    """What a folder without rank files is: a job's or a hook's folder inside a run directory (pass the run
    directory), or a run whose job recorded no step."""
    for parent in (run.resolve(), *run.resolve().parents):  # the jobs/ folder itself too
        if parent.name == "jobs" and any(parent.parent.glob("rank*.jsonl")):
            return (f"it is inside the run directory {str(parent.parent)!r} (jobs/ holds each job's prediction, "
                    f"session and hook; the records are at the top). Pass {str(parent.parent)!r}.")
    if not (run / "jobs").is_dir() and not (run / "session.json").is_file():
        return ("it is no run directory (`llmperf run --instrument` makes one holding jobs/ and the ranks' "
                "rank<R>.jsonl files). Pass the folder it printed ('records in DIR'), or leave RUN_DIR out for the "
                "latest instrumented run.")
    return "the job recorded no step (it failed before its first optimizer step, or ran without `--instrument`)."


def read_run_dir(path: str | Path) -> RunDir:
    run = Path(path)
    if not run.is_dir():
        raise UsageError(f"run directory {str(run)!r} does not exist. Pass the folder `llmperf run --instrument` "
                         f"printed (default ./llmperf-runs/<time>-<pid>).")
    # a folder or other non-file that happens to match is no rank's record
    files = sorted((p for p in run.glob("rank*.jsonl") if p.is_file()), key=lambda p: (len(p.name), p.name))
    if not files:
        raise UsageError(f"run directory {str(run)!r} holds no rank*.jsonl records: "
                         + _not_a_run_dir_hint(run))
    records: list[dict[str, Any]] = []
    bad = 0
    for file in files:
        got, nbad = _read_jsonl(file)
        records.extend(got)
        bad += nbad
    per_job = {p.parent.name: read_json_object(p) for p in run.glob("jobs/*/prediction.json")}
    return RunDir(str(run), tuple(records), read_json_object(run / "prediction.json"), read_json_object(run / "session.json"),
                  bad, {k: v for k, v in per_job.items() if v is not None},
                  frozenset(p.name for p in run.glob("jobs/*") if p.is_dir()))


def summarize_job(records: Sequence[Mapping[str, Any]], job_id: str) -> JobSteps:
    mine = [r for r in records if str(r.get("job_id")) == job_id]
    steps = [r for r in mine if r.get("kind") == "step"]
    metas = [r for r in mine if r.get("kind") == "meta"]
    by_rank: dict[int, list[int]] = defaultdict(list)
    for r in steps:
        by_rank[int(r["rank"])].append(int(r["step"]))
    times, cpu_times = _slowest_rank_times(steps), _slowest_rank_times(steps, "cpu_time_s")
    rank0 = min(metas, key=lambda r: int(r.get("rank", 0)), default={})
    return JobSteps(
        # The last step's owner: a framework can take over from the plain-torch fallback after steps it did not
        # drive (DeepSpeed's bf16 optimizer runs one torch step at initialize to create the Adam states).
        job_id=job_id, framework=str(_first(steps[::-1], "framework") or _first(mine, "framework") or "unknown"), device=str(_first(steps, "device") or "cpu"),
        world_size=int(_first(mine, "world_size") or 1), ranks_seen=tuple(sorted(by_rank)),
        steps_by_rank={k: tuple(sorted(v)) for k, v in sorted(by_rank.items())},
        step_time_s=statistics.median(times) if times else None, num_timed_steps=len(times),
        step_times_s=tuple(times), peak_memory_bytes=_peak_memory(steps),
        load_avg_1m=max((float(m["load_avg_1m"]) for m in metas if m.get("load_avg_1m") is not None), default=None),
        errors=tuple(str(r.get("error")) for r in mine if r.get("kind") == "error"),
        stopped=any(r.get("kind") == "stop" for r in mine), facts=dict(rank0),
        cpu_time_s=_median_or_none(cpu_times), cpu_step_times_s=tuple(cpu_times),
        **_reference_fields([r for r in mine if r.get("kind") in ("end", "stop", "meta")]))


def _reference_fields(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """reference_cpu_s and reference_concurrent from the ranks' `end` (or `stop`) records (read after the last
    recorded step), or their meta records (runs recorded before 28 Nov 2026 read it before step 0); readings of this
    workload only."""
    from llmperf_hook.instrument.reference_speed import reading_from_json

    readings = [r for r in (reading_from_json(m.get("reference")) for m in records) if r is not None]
    if not readings:
        return {}
    return {"reference_cpu_s": statistics.median(r.cpu_s for r in readings),
            "reference_concurrent": max(r.concurrent for r in readings)}


def _first(records: Sequence[Mapping[str, Any]], key: str) -> Any:
    return next((r[key] for r in records if r.get(key) is not None), None)


def _slowest_rank_times(steps: Sequence[Mapping[str, Any]], key: str = "wall_time_s") -> list[float]:
    per_step: dict[int, float] = {}
    for r in steps:
        if r.get("warmup") or r.get("profiled") or r.get(key) is None:
            continue
        s = int(r["step"])
        per_step[s] = max(per_step.get(s, 0.0), float(r[key]))
    return [per_step[s] for s in sorted(per_step)]


def _median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _peak_memory(steps: Sequence[Mapping[str, Any]]) -> int | None:
    keys = ("gpu_peak_reserved_bytes", "peak_rss_bytes")
    values = [int(r[k]) for r in steps for k in keys[:1] if r.get(k) is not None]
    values = values or [int(r[k]) for r in steps for k in keys[1:] if r.get(k) is not None]
    return max(values) if values else None


def op_records(records: Sequence[Mapping[str, Any]], job_id: str) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("kind") == "op" and str(r.get("job_id")) == job_id]

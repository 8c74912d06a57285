"""The CPU testbed's measurement record: rotated passes, every raw step time, and the scores read from it.

bench_cpu_testbed.py measures the twelve configurations in P passes whose order is rotated (pass p starts at
configuration p x 12 / P), so a configuration is not always measured at the same point of the machine's drift,
and the instrumented configurations' calibration runs take their configuration's place in the middle pass: their
reference (the median of their other passes) is measured in the same rotation, minutes before and after. Every
run is kept in a JSON record (format RECORD_FORMAT): each rank's step wall and CPU times, the load, the machine-speed
readings, the prediction saved at launch (its breakdown and resolved configuration). `--replay FILE` scores a
record again without running a job: refinement strategies are compared offline on the same runs.

Why medians of run medians: one run's median over its timed steps moves with the machine between runs (on this
2-core shared machine two passes of one configuration minutes apart differ by x1.06 in the median and up to
x1.37: session 11), far more than its own steps' sampling error (~1-2 %); the median of P runs of a configuration
resists one disturbed run, where the mean of two does not. `pass_effects` splits that drift into what a whole pass
shared (the machine's state for minutes) and what each run had alone.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Sequence

RECORD_FORMAT = 1


def rotation(num_configs: int, num_passes: int, pass_index: int) -> list[int]:
    """Configuration order of one pass: pass p starts at p x num_configs / num_passes (rounded down)."""
    offset = (pass_index * num_configs) // max(num_passes, 1)
    return [(offset + i) % num_configs for i in range(num_configs)]


def calibration_pass(num_passes: int) -> int:
    """The pass whose runs of the instrumented configurations are their calibration runs: the middle one, so
    their reference passes lie on both sides of them in time."""
    return num_passes // 2


def rank_steps(records: Sequence[dict], job_id: str) -> dict[str, list[list]]:
    """{rank: [[step, wall s, CPU s or None, warm-up], ...]} of one job's step records, in step order."""
    out: dict[str, list[list]] = {}
    for r in records:
        if r.get("kind") == "step" and str(r.get("job_id")) == job_id and r.get("wall_time_s") is not None:
            out.setdefault(str(r["rank"]), []).append([int(r["step"]), float(r["wall_time_s"]), r.get("cpu_time_s"),
                                                       bool(r.get("warmup") or r.get("profiled"))])
    return {k: sorted(v) for k, v in sorted(out.items())}


def reference_runs(record: dict, index: int, exclude_calibration: bool = True) -> list[dict]:
    """The runs of configuration `index` that measure it (its calibration runs left out unless asked)."""
    return [r for r in record["runs"] if r["config"] == index and not (exclude_calibration and r.get("calibration"))]


def summarise(runs: Sequence[dict]) -> dict[str, Any]:
    """One configuration's measurement from its runs: the median of the runs' step medians (and CPU time, load),
    the spread max / min of the runs, the log sd of their step times (the run-to-run spread), contended if most
    of its runs were."""
    times = sorted(r["measured_s"] for r in runs)
    cpu = [r["cpu_s"] for r in runs if r.get("cpu_s")]
    return {"measured_s": statistics.median(times), "cpu_s": statistics.median(cpu) if cpu else None,
            "load": statistics.median(r["load_before"] for r in runs), "load_max": max(r["load_before"] for r in runs),
            "spread": times[-1] / times[0], "log_sd": statistics.stdev(map(math.log, times)) if len(times) > 1 else 0.0,
            "runs_s": times, "contended": 2 * sum(bool(r.get("contended")) for r in runs) > len(runs)}


def pass_effects(record: dict) -> dict[str, float]:
    """Two-way additive fit of log step time = configuration + pass + residual over the measurement runs (balanced:
    each configuration once per pass; alternating means, 20 sweeps converge). sd_pass: how much a whole pass moved
    (the machine's state shared by the configurations run in the same minutes); sd_residual: what one run moved
    alone; sd_run: the log sd of one run about its configuration's mean (both together)."""
    runs = [r for r in record["runs"] if not r.get("calibration")]
    configs, passes = sorted({r["config"] for r in runs}), sorted({r["pass"] for r in runs})
    y = {(r["config"], r["pass"]): math.log(r["measured_s"]) for r in runs}
    c_eff = {c: statistics.fmean(v for (ci, _), v in y.items() if ci == c) for c in configs}
    p_eff = {p: 0.0 for p in passes}
    for _ in range(20):
        p_eff = {p: statistics.fmean(v - c_eff[c] for (c, pi), v in y.items() if pi == p) for p in passes}
        c_eff = {c: statistics.fmean(v - p_eff[p] for (ci, p), v in y.items() if ci == c) for c in configs}
    resid = [v - c_eff[c] - p_eff[p] for (c, p), v in y.items()]
    dof = max(len(resid) - len(configs) - len(passes) + 1, 1)
    within = [v - statistics.fmean(w for (ci, _), w in y.items() if ci == c) for (c, _), v in y.items()]
    return {"sd_pass": statistics.pstdev(p_eff.values()) if len(passes) > 1 else 0.0,
            "sd_residual": math.sqrt(sum(e * e for e in resid) / dof),
            "sd_run": math.sqrt(sum(e * e for e in within) / max(len(within) - len(configs), 1)),
            "passes": len(passes), "runs": len(runs)}


def save_record(record: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, sort_keys=True))
    return path


def load_record(path: Path, option: str = "--replay") -> dict:
    """A record written by save_record; exit 2 with the reason for anything else (`option`: what gave the path)."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        _bad_input(f"{option} {path}: not a readable JSON record ({err}); pass a file bench_cpu_testbed.py wrote "
                   f"(it prints 'raw runs saved to ...')")
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT or not record.get("runs"):
        _bad_input(f"{option} {path}: not a testbed record of format {RECORD_FORMAT} with runs (format "
                   f"{record.get('format') if isinstance(record, dict) else None!r}); pass a file "
                   f"bench_cpu_testbed.py wrote")
    return record


def _bad_input(message: str) -> None:
    """Exit 2 (bad input) with the message on stderr, no traceback."""
    import sys

    print(message, file=sys.stderr)
    raise SystemExit(2)


def pct(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas


def mape(errors: list[float]) -> float:
    return statistics.mean(abs(e) for e in errors)

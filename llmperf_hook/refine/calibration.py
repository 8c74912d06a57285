"""End-to-end calibrations learned from instrumented runs, per (hardware, cluster, framework).

What the per-op models cannot see on a given cluster and framework (launcher and Python overhead per step,
the framework's bookkeeping, a slower-than-profiled interconnect, clock and thermal state) shows up as a
systematic ratio between measured and predicted step time. `fit_calibration` learns it from the runs
ingested by `llmperf refine`; the predictor applies it as

    step_time = step_time_scale * predicted_step_time + step_overhead_s

- one run, or runs that all predict about the same time: the scale only, the geometric mean of the
  measured/predicted ratios (least squares on log(measured/predicted), so a 2x over- and a 2x
  under-prediction weigh the same);
- three or more runs whose predictions span at least 1.5x: scale and a fixed per-step overhead by weighted
  least squares on relative error (weights 1/measured^2), kept only when it fits the runs better than the
  scale alone and both terms come out non-negative.
`find_calibration` is on the predict path: stdlib sqlite3 only, never raises (a broken store means None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

MIN_RUNS_FOR_OVERHEAD = 3
MIN_SPREAD_FOR_OVERHEAD = 1.5


@dataclass(frozen=True)
class Calibration:
    hardware: str
    cluster: str
    framework: str
    step_time_scale: float
    """Measured / predicted step time, fitted on instrumented runs (1.0 = no correction)."""
    num_runs: int
    """How many instrumented runs the fit used."""
    step_overhead_s: float = 0.0
    """Fixed seconds per step added after scaling (0 unless >= 3 runs of different sizes support it)."""

    def apply(self, predicted_step_time_s: float) -> float:
        """The calibrated step time for an uncalibrated prediction."""
        return self.step_time_scale * predicted_step_time_s + self.step_overhead_s

    def describe(self) -> str:
        extra = f" + {self.step_overhead_s * 1e3:.2f} ms" if self.step_overhead_s else ""
        return (f"calibrated x{self.step_time_scale:.3f}{extra} from {self.num_runs} instrumented run(s) of "
                f"{self.framework} on {self.cluster} ({self.hardware})")


def fit_calibration(predicted_s: Sequence[float], measured_s: Sequence[float]) -> tuple[float, float]:
    """(step_time_scale, step_overhead_s) from paired uncalibrated predictions and measurements."""
    pairs = [(p, m) for p, m in zip(predicted_s, measured_s) if p > 0 and m > 0]
    if not pairs:
        raise ValueError("no run has both a positive predicted and a positive measured step time")
    scale = math.exp(sum(math.log(m / p) for p, m in pairs) / len(pairs))
    if len(pairs) < MIN_RUNS_FOR_OVERHEAD:
        return scale, 0.0
    preds = [p for p, _ in pairs]
    if max(preds) / min(preds) < MIN_SPREAD_FOR_OVERHEAD:
        return scale, 0.0
    affine = _weighted_affine(pairs)
    if affine is None:
        return scale, 0.0
    a, b = affine
    if _relative_sse(pairs, a, b) < _relative_sse(pairs, scale, 0.0):
        return a, b
    return scale, 0.0


def _weighted_affine(pairs: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Minimise sum(((a p + b - m) / m)^2): normal equations of a 2x2 weighted least-squares problem."""
    w = [1.0 / (m * m) for _, m in pairs]
    spp = sum(wi * p * p for wi, (p, _) in zip(w, pairs))
    sp = sum(wi * p for wi, (p, _) in zip(w, pairs))
    s1 = sum(w)
    spm = sum(wi * p * m for wi, (p, m) in zip(w, pairs))
    sm = sum(wi * m for wi, (_, m) in zip(w, pairs))
    det = spp * s1 - sp * sp
    if abs(det) < 1e-30 * max(spp * s1, 1e-300):
        return None
    a = (spm * s1 - sp * sm) / det
    b = (spp * sm - sp * spm) / det
    return (a, b) if a > 0 and b >= 0 else None


def _relative_sse(pairs: Sequence[tuple[float, float]], a: float, b: float) -> float:
    return sum(((a * p + b - m) / m) ** 2 for p, m in pairs)


_MEMO: dict[tuple, Calibration | None] = {}


def find_calibration(hardware: str, cluster: str, framework: str) -> Calibration | None:
    """The stored calibration for this key from $LLMPERF_HOME's store, or None.

    Memoised on the store files' identity (path, sizes, mtimes): `tune` and `validate` call this thousands of
    times, and opening SQLite costs ~20 ms; a refine that writes the store changes its mtime and so the key."""
    try:
        from llmperf_hook.refine.observation_store import store_path

        db = store_path()
        if not db.is_file():
            return None
        # WAL mode: committed writes may sit in the -wal file until a checkpoint, so both files make the key.
        files = [db, db.with_name(db.name + "-wal")]
        identity = tuple((f.stat().st_size, f.stat().st_mtime_ns) if f.is_file() else None for f in files)
    except Exception:  # noqa: BLE001 - a missing or unreadable store never breaks a prediction
        return None
    key = (str(db), identity, hardware, cluster, framework)
    if key not in _MEMO:
        if len(_MEMO) > 1024:
            _MEMO.clear()
        _MEMO[key] = _load_calibration(hardware, cluster, framework)
    return _MEMO[key]


def _load_calibration(hardware: str, cluster: str, framework: str) -> Calibration | None:
    """Read-only: opening the store for writing (schema upkeep) would change its mtime and so defeat the memo of
    find_calibration, one SQLite open per prediction (a third of `predict --batch` time)."""
    import sqlite3

    from llmperf_hook.refine.observation_store import load_calibration_row, store_path

    try:
        conn = sqlite3.connect(f"{store_path().resolve().as_uri()}?mode=ro", uri=True)
    except Exception:  # noqa: BLE001 - a missing or locked store never breaks a prediction
        return None
    try:
        row = load_calibration_row(conn, hardware, cluster, framework)
    except Exception:  # noqa: BLE001
        return None
    finally:
        conn.close()
    if row is None:
        return None
    scale, overhead, num_runs = row
    return Calibration(hardware, cluster, framework, float(scale), int(num_runs), float(overhead or 0.0))

"""End-to-end calibrations learned from instrumented runs, per (hardware, cluster, framework).  (Being written: issue 6.)"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Calibration:
    hardware: str
    cluster: str
    framework: str
    step_time_scale: float
    """Measured / predicted step time, fitted on instrumented runs (1.0 = no correction)."""
    num_runs: int
    """How many instrumented runs the fit used."""


def find_calibration(hardware: str, cluster: str, framework: str) -> Calibration | None:
    """The stored calibration for this key from $LLMPERF_HOME's store, or None."""
    return None

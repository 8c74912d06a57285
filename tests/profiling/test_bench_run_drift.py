"""The operator benchmark's run-drift diagnostic tells measurement drift shared by one run's rows from noise."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

pytest.importorskip("lightgbm")

from bench_operator_accuracy import DRIFT_MIN_CORR, run_drift  # noqa: E402

from llmperf_hook.profile.features import build_features  # noqa: E402
from llmperf_hook.profile.public_samples import SampleSet  # noqa: E402
from llmperf_hook.profile.shipped import SHIPPED  # noqa: E402

HW = SHIPPED["a100-sxm4-80gb"]


def _sweep(run_spread: float, rows: int = 800, per_run: int = 100) -> SampleSet:
    """A GEMM file measured run after run; each run sweeps random shapes and is `run_spread` slower or faster."""
    rng = np.random.default_rng(3)
    dims = {k: 2.0 ** rng.integers(9, 14, size=rows).astype(float) for k in ("m", "n", "k")}
    roof = build_features("gemm", False, dims, HW.roofline).roofline_s
    eff = 0.45 + 0.25 * np.tanh(np.log2(dims["m"] * dims["n"] * dims["k"]) / 6 - 5)
    drift = np.repeat(rng.normal(0.0, run_spread, rows // per_run), per_run)
    t = roof / eff * np.exp(drift + rng.normal(0.0, 0.01, rows))
    return SampleSet("linear1", "gemm", "fwd", dims, t, {})


def test_drift_shared_by_a_run_is_found_and_taken_off() -> None:
    corr, rest = run_drift(HW, [_sweep(0.06)], np.random.default_rng(0))["linear1"]
    assert corr > 0.5
    assert rest < 0.03  # the 1 % noise and the model's error, not the 6 % spread between runs


def test_no_drift_without_shared_run_effects() -> None:
    corr, _ = run_drift(HW, [_sweep(0.0)], np.random.default_rng(0))["linear1"]
    assert corr < DRIFT_MIN_CORR

"""benchmarks/bench_profile_holdout.py scores only the shapes a profile never saw, with the errors it names."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_profile_holdout import score, shipped_holdout  # noqa: E402

from llmperf_hook.profile.build_profile import Samples  # noqa: E402
from llmperf_hook.profile.predictor import FittedProfile  # noqa: E402

PROFILE = ROOT / "configs" / "profiles" / "h100-sxm5-80gb"
KEY = ("gemm", "fwd", "bf16")


def _gemms(m: list[float], time_s: np.ndarray | None = None) -> Samples:
    dims = {"m": np.asarray(m), "n": np.full(len(m), 4096.0), "k": np.full(len(m), 4096.0)}
    return Samples("gemm", "fwd", dims, np.ones(len(m)) if time_s is None else time_s)


def test_score_leaves_out_trained_shapes_and_measures_the_error() -> None:
    profile = FittedProfile(PROFILE)
    m = [512.0, 2048.0, 8192.0, 16384.0]
    truth = profile.predict_class_s(*KEY, _gemms(m).dims)
    test = _gemms(m, truth / np.array([1.1, 1.1, 0.8, 0.9]))  # predicted = measured x 1.1, 1.1, 0.8, 0.9
    row = score(profile, KEY, test, _gemms([512.0]))
    assert row["n"] == 3
    assert row["mape"] == pytest.approx((0.1 + 0.2 + 0.1) / 3)
    big = test.time_s[1:] >= 100e-6
    assert row["big_n"] == int(big.sum())
    measured = test.time_s[1:]
    assert row["weighted"] == pytest.approx(np.abs(truth[1:] - measured).sum() / measured.sum())


def test_score_skips_a_key_without_model_or_new_shapes() -> None:
    profile = FittedProfile(PROFILE)
    same = _gemms([1024.0, 2048.0])
    assert score(profile, KEY, same, same) is None
    assert score(profile, ("gemm", "fwd", "fp8"), same, None) is None


def test_shipped_holdout_reads_every_regressor() -> None:
    per, line = shipped_holdout(PROFILE)
    assert len(per) == 27 and all(0 < v < 1 for v in per.values())
    assert "h100-sxm5-80gb-2026-11-26, h100-sxm5-80gb-2026-11-26-b" in line

"""The operator benchmark's inner cross-validation (`--inner`): held-out rows come from the training split
only, the test draws do not move, and the figure tracks how well the recipe fits the shapes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

pytest.importorskip("lightgbm")

import bench_operator_accuracy  # noqa: E402
from bench_operator_accuracy import INNER_SHARE, bench_group, inner_split  # noqa: E402

from llmperf_hook.profile.features import build_features  # noqa: E402
from llmperf_hook.profile.public_samples import SampleSet  # noqa: E402
from llmperf_hook.profile.shipped import SHIPPED  # noqa: E402

HW = SHIPPED["a100-sxm4-80gb"]


def test_inner_split_holds_out_a_share_of_the_training_rows_only() -> None:
    train = np.random.default_rng(1).permutation(1000)[:250]
    fit_rows, val = inner_split(train, 0)
    assert len(val) == round(INNER_SHARE * len(train))
    assert set(fit_rows) | set(val) == set(train) and not set(fit_rows) & set(val)
    again, _ = inner_split(train, 0)
    other, _ = inner_split(train, 1)
    assert np.array_equal(fit_rows, again) and not np.array_equal(fit_rows, other)


def _gemm_file(noise: float, rows: int = 400) -> SampleSet:
    rng = np.random.default_rng(5)
    dims = {k: 2.0 ** rng.integers(9, 14, size=rows).astype(float) for k in ("m", "n", "k")}
    roof = build_features("gemm", False, dims, HW.roofline).roofline_s
    eff = 0.45 + 0.25 * np.tanh(np.log2(dims["m"] * dims["n"] * dims["k"]) / 6 - 5)
    raw = {"dim": dims["n"], "l": dims["m"]}
    return SampleSet("linear1", "gemm", "fwd", dims, roof / eff * np.exp(rng.normal(0.0, noise, rows)), raw)


def _rows(sets: list[SampleSet], inner: bool) -> list[tuple]:
    return bench_group(HW, sets, 0.5, {}, np.random.default_rng(0), extrap=False, inner=inner)


def test_inner_figure_follows_the_noise_and_leaves_the_test_figure_alone(monkeypatch) -> None:
    monkeypatch.setattr(bench_operator_accuracy, "SEEDS", 1)  # one draw keeps the test fast
    quiet, noisy = _rows([_gemm_file(0.01)], True)[0], _rows([_gemm_file(0.08)], True)[0]
    assert quiet[8] < 0.03 < 0.05 < noisy[8]  # E|N(0, 0.08)| is 6.4 %: noise no regressor can predict
    plain = _rows([_gemm_file(0.01)], False)[0]
    assert plain[8] is None and plain[2] == pytest.approx(quiet[2], rel=1e-12)

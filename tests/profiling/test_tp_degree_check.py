"""The TP-degree checks of the operator benchmarks: bench_tp_degree's held-out-run folds, and
bench_operator_accuracy's `--tp-column` (log2 of the run's TP degree appended to the shipped features)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_operator_accuracy  # noqa: E402
import bench_tp_degree  # noqa: E402
from llmperf_hook.profile.build_profile import Samples  # noqa: E402
from llmperf_hook.profile.features import RooflineConstants  # noqa: E402

RC = RooflineConstants(312e12, 2039e9, 108, 2)


def test_each_run_is_held_out_once_beside_its_same_tp_siblings() -> None:
    mp, b = (np.repeat(v, 3) for v in np.array([(m, bv) for m in (1, 2, 4, 8, 16) for bv in (4, 8)]).T)
    folds = bench_tp_degree.run_folds(mp, b)
    assert len(folds) == 5 and np.array_equal(np.sum(folds, axis=0), np.ones(len(mp)))
    for test in folds:
        runs = set(zip(mp[test], b[test]))
        assert len(runs) == 2 and {bv for _, bv in runs} == {4, 8}  # one run per micro-batch
        assert all(((mp == m) & (b != bv) & ~test).any() for m, bv in runs)  # its sibling trains


def test_the_tp_column_reaches_the_fit() -> None:
    """GEMMs whose time carries a 30 % offset at TP >= 4 that no shape dim tells: only the column finds it."""
    pytest.importorskip("lightgbm")
    rng = np.random.default_rng(0)
    n = 240
    dims = {k: 2.0 ** rng.integers(10, 14, n) for k in ("m", "n", "k")}
    tp = 2.0 ** rng.integers(0, 5, n)
    time_s = 2.0 * dims["m"] * dims["n"] * dims["k"] / 200e12 * np.where(tp >= 4, 1.3, 1.0)
    s = Samples("gemm", "fwd", dims, time_s * np.exp(rng.normal(0.0, 0.01, n)))
    train, test = np.arange(180), np.arange(180, n)
    without = bench_operator_accuracy.evaluate(s, train, test, RC)[0].mean()
    with_tp = bench_operator_accuracy.evaluate(s, train, test, RC, np.log2(tp))[0].mean()
    assert with_tp < 0.05 < without

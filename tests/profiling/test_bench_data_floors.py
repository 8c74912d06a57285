"""The accuracy benchmarks' data-floor diagnostics: same-run drift of operator rows (bench_operator_accuracy.
sibling_drift) and the best predictor of a collective's message size alone (bench_comm_accuracy.size_floor)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_comm_accuracy import TARGET, miss_cause, size_floor  # noqa: E402
from bench_operator_accuracy import DRIFT_MIN_CORR, sibling_drift  # noqa: E402

from llmperf_hook.profile.comm_fit import CommSamples  # noqa: E402


def _runs(run_spread: float, noise: float = 0.02, num_runs: int = 300, seed: int = 0):
    """Log errors of two files measured in the same runs (one row each per run) plus a third file's rows."""
    rng = np.random.default_rng(seed)
    run = rng.normal(0.0, run_spread, num_runs) if run_spread else np.zeros(num_runs)
    keys = np.column_stack([np.arange(num_runs), np.full(num_runs, 2.0)])
    err = np.concatenate([run + rng.normal(0.0, noise, num_runs) for _ in range(2)])
    source = np.repeat(["linear1", "linear3"], num_runs)
    return err, source, np.vstack([keys, keys])


def test_error_shared_by_a_run_shows_as_same_run_drift() -> None:
    err, source, keys = _runs(0.03)
    r, rest, pairs = sibling_drift((err, source, keys))["linear1"]
    assert pairs == 300
    assert 0.55 < r < 0.85  # variance share of the run: 0.03^2 / (0.03^2 + 0.02^2) = 0.69
    assert rest < 0.7 * np.mean(np.abs(np.exp(err[source == "linear1"]) - 1.0))


def test_independent_errors_show_no_same_run_drift() -> None:
    err, source, keys = _runs(0.0)
    r, _, _ = sibling_drift((err, source, keys))["linear1"]
    assert r < DRIFT_MIN_CORR


def test_other_direction_pairs_the_same_file_and_run() -> None:
    fwd, source, keys = _runs(0.03, seed=1)
    bwd = (fwd[:300] * 2.0, source[:300], keys[:300])  # linear1's backward: the same run effect, doubled
    out = sibling_drift((fwd, source, keys), bwd)
    assert set(out) == {"linear1"}  # linear3 has no backward rows here
    assert out["linear1"][0] > 0.99


def _layout(levels: tuple[float, ...], seed: int = 0, n: int = 300) -> CommSamples:
    rng = np.random.default_rng(seed)
    nbytes = np.linspace(2.7e8, 1.2e9, n)
    busbw = rng.choice(levels, n) * np.exp(rng.normal(0.0, 0.005, n))
    return CommSamples("allgather", 2, 1, nbytes, 1e-5 + nbytes / busbw, "large")


def test_size_floor_is_small_for_one_bandwidth_level() -> None:
    assert size_floor(_layout((40e9,))) < 0.01


def test_size_floor_sees_bandwidth_levels_that_alternate_between_sizes() -> None:
    floor = size_floor(_layout((37e9, 46e9, 62e9)))
    assert floor > TARGET
    assert miss_cause(0.12, 0.0, 0.07, 0.12, floor) == "data floor"


def test_miss_cause_names_corrupt_rows_only_when_the_rest_meets_the_target() -> None:
    assert miss_cause(0.30, 0.2, 0.5, 0.02, 0.25) == "corrupt data"
    assert miss_cause(0.07, 0.0, 0.0, 0.07, 0.03) == ""
    assert miss_cause(0.04, 0.0, 0.0, 0.04, 0.08) == ""

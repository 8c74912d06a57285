"""Calibration fit (properties), storage round trip, and find_calibration's never-raise contract."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.refine import observation_store as store
from llmperf_hook.refine.calibration import Calibration, find_calibration, fit_calibration

times = st.floats(min_value=1e-4, max_value=10.0, allow_nan=False)


@given(p=times, m=times)
def test_one_run_is_matched_exactly(p: float, m: float) -> None:
    scale, overhead = fit_calibration([p], [m])
    assert overhead == 0.0 and math.isclose(scale * p, m, rel_tol=1e-9)


@given(st.lists(times, min_size=1, max_size=8), st.floats(min_value=0.05, max_value=50.0))
def test_pure_scale_is_recovered(preds: list[float], factor: float) -> None:
    scale, overhead = fit_calibration(preds, [p * factor for p in preds])
    assert math.isclose(scale, factor, rel_tol=1e-6) and overhead == pytest.approx(0.0, abs=1e-9 * max(preds) * factor)


@settings(max_examples=50)
@given(st.floats(min_value=0.2, max_value=5.0), st.floats(min_value=1e-3, max_value=0.05))
def test_scale_and_overhead_recovered_from_three_sizes(a: float, b: float) -> None:
    preds = [0.01, 0.03, 0.1, 0.3]
    scale, overhead = fit_calibration(preds, [a * p + b for p in preds])
    assert math.isclose(scale, a, rel_tol=1e-6) and math.isclose(overhead, b, rel_tol=1e-6)


@given(st.lists(st.tuples(times, times), min_size=1, max_size=10))
def test_fit_is_positive_and_never_worse_than_geometric_mean(pairs: list[tuple[float, float]]) -> None:
    preds, meas = [p for p, _ in pairs], [m for _, m in pairs]
    scale, overhead = fit_calibration(preds, meas)
    assert scale > 0 and overhead >= 0
    g = math.exp(sum(math.log(m / p) for p, m in pairs) / len(pairs))
    err = sum(((scale * p + overhead - m) / m) ** 2 for p, m in pairs)
    assert err <= sum(((g * p - m) / m) ** 2 for p, m in pairs) * (1 + 1e-9) + 1e-12


def test_no_usable_pair_is_an_error() -> None:
    with pytest.raises(ValueError):
        fit_calibration([0.0], [1.0])


def test_apply_and_describe() -> None:
    cal = Calibration("cpu", "local", "deepspeed", 2.0, 3, step_overhead_s=0.001)
    assert cal.apply(0.01) == pytest.approx(0.021)
    assert "x2.000" in cal.describe() and "3 instrumented run" in cal.describe()


def test_find_calibration_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    assert find_calibration("cpu", "local", "deepspeed") is None  # no store yet: None, and no file created
    assert not (tmp_path / "store.sqlite").exists()
    conn = store.connect()
    store.save_calibration(conn, Calibration("cpu", "local", "deepspeed", 1.25, 4, 0.002))
    conn.close()
    assert find_calibration("cpu", "local", "deepspeed") == Calibration("cpu", "local", "deepspeed", 1.25, 4, 0.002)
    assert find_calibration("cpu", "local", "megatron") is None


def test_find_calibration_on_a_corrupt_store_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    (tmp_path / "store.sqlite").write_bytes(b"this is not a database" * 100)
    assert find_calibration("cpu", "local", "deepspeed") is None


def test_find_calibration_reads_without_writing_the_store(tmp_path, monkeypatch) -> None:
    """A read that opened the store for writing changed its mtime and so defeated find_calibration's memo."""
    import os
    import sqlite3

    from llmperf_hook.refine.calibration import find_calibration

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    db = tmp_path / "store.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE calibrations (hardware, cluster, framework, step_time_scale, num_runs, t)")
        conn.execute("INSERT INTO calibrations VALUES ('h', 'c', 'megatron', 1.25, 3, 'now')")
    conn.close()
    os.utime(db, ns=(1, 1))
    found = find_calibration("h", "c", "megatron")
    assert found is not None and found.step_time_scale == 1.25 and found.step_overhead_s == 0.0
    assert find_calibration("h", "c", "deepspeed") is None
    assert db.stat().st_mtime_ns == 1 and not (tmp_path / "store.sqlite-wal").exists()

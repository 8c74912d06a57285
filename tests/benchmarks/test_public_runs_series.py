"""benchmarks/bench_public_runs.py's data-parallel series: rows that differ only in dp, fitted as
measured = (1 + r) x predicted + x."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.validate.runs_csv import build_measured_runs, read_runs_csv
from script_module import load_script

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_CSV = ROOT / "benchmarks" / "data" / "public_runs.csv"


def _bench():  # type: ignore[no-untyped-def]
    return load_script(ROOT / "benchmarks" / "bench_public_runs.py")


def test_fit_recovers_a_share_of_the_work_and_seconds_per_step() -> None:
    predicted = np.array([40.0, 20.0, 8.0, 4.0, 2.0])
    r, x, fit_mape = _bench().fit_series(predicted, 1.075 * predicted + 0.21)
    assert r == pytest.approx(0.075) and x == pytest.approx(0.21) and fit_mape == pytest.approx(0.0, abs=1e-12)


def test_series_hold_rows_that_differ_only_in_data_parallel_size() -> None:
    runs = {r.row_id: r for r in build_measured_runs(read_runs_csv(PUBLIC_CSV))}
    series = _bench().dp_series(runs, {row_id: 1.0 for row_id in runs})
    by_first = {g[0].row_id: g for g in series}
    # NeMo 22.06's GPT3-5B table (P08): one layout at 1-20 nodes
    assert [r.dp for r in by_first["p71"]] == [4, 8, 20, 36, 40, 72, 80]
    for group in series:
        assert len({r.dp for r in group}) == len(group) >= 3
        assert len({(r.source_id, r.hidden_size, r.num_layers, r.tp, r.pp, r.micro_batch_size,
                     r.global_batch_size) for r in group}) == 1

"""The --misses diagnostics of benchmarks/bench_tune_ranking.py (benchmarks/ranking_diagnostics.py) on hand-made
rows: the tuner's pick, the 5 % hit rule with and without a noise band, the bilinear split of a step time, and the
oracle that takes one part of it from the measurements."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import ranking_diagnostics as diag  # noqa: E402


def _point(measured_s: float, predicted_s: float, fits: bool = True, layers: int = 12, n: int = 2,
           family: tuple = ("S24", 1024, 1, 1, 1, 1)) -> diag.RowPoint:
    return diag.RowPoint(f"{measured_s}", family[1:3] + family[4:5], family, layers, n, measured_s, predicted_s, fits)


def test_choice_is_the_fastest_predicted_row_that_fits() -> None:
    pts = [_point(1.0, 0.5, fits=False), _point(1.2, 0.9), _point(1.1, 1.0)]
    assert diag.choice_index(pts, [p.predicted_s for p in pts]) == 1
    assert diag.choice_index(pts[:1], [0.5]) is None


def test_hit_rule_and_noise_band() -> None:
    pts = [_point(1.000, 1.2), _point(1.015, 1.1), _point(1.06, 1.0)]
    predicted = [p.predicted_s for p in pts]
    assert not diag.is_hit(pts, predicted)  # 1.06 > 1.05 x 1.000
    assert diag.is_hit(pts, predicted, noise=0.02)  # 1.015 is within 2 % of the fastest: 1.06 <= 1.05 x 1.015
    assert diag.is_hit(pts, [1.0, 1.1, 1.2])
    assert not diag.is_hit([_point(1.0, 1.0, fits=False), _point(1.3, 1.1, fits=False)], [1.0, 1.1])


def _family_rows(a: float, b: float, c: float, d: float, wrong_a: float) -> list[diag.RowPoint]:
    rows = []
    for layers in (12, 16, 24):
        for n in (2, 4):
            t = a * n * layers + b * n + c * layers + d
            rows.append(_point(t, t + (wrong_a - a) * n * layers, layers=layers, n=n))
    return rows


def test_bilinear_fit_recovers_the_four_parts() -> None:
    rows = _family_rows(3e-3, 7e-3, 0.4e-3, 2e-3, wrong_a=3e-3)
    np.testing.assert_allclose(diag.bilinear_fit(rows, lambda p: p.measured_s), [3e-3, 7e-3, 0.4e-3, 2e-3],
                               rtol=1e-9, atol=1e-12)
    assert diag.bilinear_fit([r for r in rows if r.num_layers == 12], lambda p: p.measured_s) is None


def test_component_oracle_replaces_only_the_named_part() -> None:
    rows = _family_rows(3e-3, 7e-3, 0.4e-3, 2e-3, wrong_a=3.5e-3)
    per_layer = diag.component_oracle(rows, (0,))
    per_microbatch = diag.component_oracle(rows, (1,))
    for p in rows:
        assert per_layer[p] == pytest.approx(p.measured_s, rel=1e-9)
        assert per_microbatch[p] == pytest.approx(p.predicted_s, rel=1e-9)


def test_component_oracle_leaves_an_underdetermined_family_as_predicted() -> None:
    rows = [_point(0.1, 0.2, layers=12, n=n) for n in (2, 4)]
    assert diag.component_oracle(rows, (0, 1, 2, 3)) == {p: p.predicted_s for p in rows}

"""benchmarks/ranking_consistency.flagged_cells / report_flagged: the measured cells of bench_tune_ranking.py that
contradict the work order by more than the ranking's 5 %, and the top-1 count without their rows."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import ranking_consistency as consistency  # noqa: E402
import ranking_diagnostics as diag  # noqa: E402


def _family(hidden: int, tp: int, mbs: int, a_s: float, predicted_a_s: float, step_s: float = 0.05) -> list:
    """Rows of one (S24, hidden, TP, pp 1, micro-batch, DP 1) family: t = a n L + 5 ms n + step, at 3 depths x 2
    micro-batch counts, so its bilinear fit's per-layer cost is exactly `a_s` (and `predicted_a_s` predicted)."""
    family = ("S24", hidden, tp, 1, mbs, 1)
    rows = []
    for layers in (12, 16, 24):
        for n in (2, 4):
            t, p = (a * n * layers + 5e-3 * n + step_s for a in (a_s, predicted_a_s))
            rows.append(diag.RowPoint(f"h{hidden} TP{tp} mbs{mbs}", (hidden, tp, mbs), family, layers, n, t, p,
                                      True))
    return rows


def test_more_work_measured_cheaper_beyond_5_percent_flags_both_cells() -> None:
    points = (_family(1024, 1, 1, 3.0e-3, 3.0e-3) + _family(1024, 1, 2, 2.7e-3, 5.5e-3)  # mbs 2: -10 %
              + _family(2048, 1, 1, 5.0e-3, 5.0e-3) + _family(2048, 1, 2, 4.9e-3, 9.0e-3))  # h2048 mbs 2: -2 %, kept
    flags = consistency.flagged_cells(points)
    assert set(flags) == {("S24", 1024, 1, 1), ("S24", 1024, 1, 2)}
    assert "-10.0 %" in flags[("S24", 1024, 1, 2)][0]
    assert consistency.flagged_cells(points, tolerance=0.15) == {}


def test_a_pair_the_prediction_orders_the_same_way_is_not_flagged() -> None:
    # The model too prices the larger micro-batch cheaper (other kernels at the smaller shape): not a contradiction.
    points = _family(1024, 4, 1, 3.0e-3, 3.2e-3) + _family(1024, 4, 2, 2.5e-3, 2.9e-3)
    assert consistency.flagged_cells(points) == {}
    # predicted only 1 % cheaper: that reproduces nothing of the measured -17 %, so both cells are flagged
    points = _family(1024, 4, 1, 3.0e-3, 3.2e-3) + _family(1024, 4, 2, 2.5e-3, 3.17e-3)
    assert set(consistency.flagged_cells(points)) == {("S24", 1024, 4, 1), ("S24", 1024, 4, 2)}


def test_equal_work_tp_step_that_measures_cheaper_is_flagged() -> None:
    # TP 2 mbs 1 -> TP 4 mbs 2 at one hidden size: the same per-rank GEMMs plus all-reduces, measured 19 % cheaper.
    points = _family(2048, 2, 1, 3.45e-3, 2.2e-3) + _family(2048, 4, 2, 2.80e-3, 2.5e-3)
    assert set(consistency.flagged_cells(points)) == {("S24", 2048, 2, 1), ("S24", 2048, 4, 2)}


def test_a_cell_at_odds_with_all_its_neighbours_is_the_one_flagged() -> None:
    # S24's h2048 TP4 mbs2 (2.75 ms) below h2048 TP4 mbs1, h1024 TP4 mbs2 and h2048 TP2 mbs1: only it is flagged
    points = (_family(2048, 4, 2, 2.75e-3, 3.53e-3) + _family(2048, 4, 1, 2.99e-3, 3.43e-3)
              + _family(1024, 4, 2, 3.31e-3, 3.39e-3) + _family(2048, 2, 1, 3.40e-3, 3.52e-3))
    flags = consistency.flagged_cells(points)
    assert set(flags) == {("S24", 2048, 4, 2)}
    assert len(flags[("S24", 2048, 4, 2)]) == 3


@dataclass
class _Result:
    points: tuple


def test_report_counts_the_groups_again_without_the_flagged_rows(capsys) -> None:
    good = _family(2048, 1, 1, 5.0e-3, 5.0e-3)
    bad_small, bad_large = _family(1024, 1, 1, 3.0e-3, 3.0e-3), _family(1024, 1, 2, 2.5e-3, 5.5e-3)
    other = _family(2048, 2, 2, 5.6e-3, 5.2e-3)
    groups = [
        # a group of only flagged cells drops out; the second keeps two layouts and is a hit.
        _Result(tuple(bad_small[:1] + bad_large[:1])),
        _Result(tuple(good[:1] + other[:1] + bad_large[1:2])),
        # the rest of the flagged cells' rows: both layouts flagged, so this group drops out too
        _Result(tuple(bad_small + bad_large)),
    ]
    consistency.report_flagged(groups)
    out = capsys.readouterr().out
    assert "1 contradictions, 2 cells flagged" in out
    assert "without the rows of flagged cells: 1/1 groups" in out

"""benchmarks/ranking_classes: the micro-batch family bound of a measured cell, and the class of each ranking miss
(bench_tune_ranking.py --classify)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import ranking_classes as classes  # noqa: E402
import ranking_diagnostics as diag  # noqa: E402

CHOICE = ("S24", 2048, 2, 2)


def _family(hidden: int, tp: int, mbs: int, a_s: float, predicted_a_s: float) -> list:
    """Rows of one (S24, hidden, TP, pp 1, micro-batch, DP 1) family, t = a n L + 5 ms n + 50 ms at 3 depths x 2
    micro-batch counts: its bilinear fit's per-layer cost is exactly `a_s` (`predicted_a_s` predicted)."""
    family = ("S24", hidden, tp, 1, mbs, 1)
    return [diag.RowPoint(f"tp{tp} pp1 mbs{mbs}", (hidden, tp, mbs), family, layers, n, t, p, True)
            for layers in (12, 16, 24) for n in (2, 4)
            for t, p in [tuple(a * n * layers + 5e-3 * n + 0.05 for a in (a_s, predicted_a_s))]]


def _tp2_h2048(mbs2_s: float, predicted_mbs2_s: float = 3.84e-3) -> list:
    """S24's h2048 TP2 cells (ms per layer, measured / predicted): mbs1 3.40 / 3.52, mbs4 6.22 / 6.58, and mbs2 at
    `mbs2_s` / `predicted_mbs2_s`."""
    return (_family(2048, 2, 1, 3.40e-3, 3.52e-3) + _family(2048, 2, 2, mbs2_s, predicted_mbs2_s)
            + _family(2048, 2, 4, 6.22e-3, 6.58e-3))


def test_a_micro_batch_above_its_family_bound_is_flagged() -> None:
    # max(host cap 3.40, GPU cap 6.22 x 3.84 / 6.58 = 3.63) x 1.12 (launch queue) = 4.07 ms; S24 measures 4.63
    flags = classes.family_bound_excess(_tp2_h2048(4.63e-3))
    assert list(flags) == [CHOICE]
    assert "+13.9 %" in flags[CHOICE] and "host cap 3.40" in flags[CHOICE] and "GPU cap 3.63" in flags[CHOICE]
    assert classes.family_bound_excess(_tp2_h2048(4.63e-3), tolerance=0.15) == {}
    # +10 % over the larger cap: what the launch queue adds to a layer whose host and GPU times are close
    assert classes.family_bound_excess(_tp2_h2048(4.00e-3)) == {}


def test_a_family_at_its_host_floor_passes_and_a_cell_needs_both_neighbours() -> None:
    # host-bound family: mbs 1 and 2 both at the host floor pass; the largest micro-batch has no cap above it
    points = (_family(1024, 1, 1, 3.00e-3, 3.04e-3) + _family(1024, 1, 2, 3.16e-3, 3.25e-3)
              + _family(1024, 1, 4, 4.95e-3, 4.88e-3))
    assert classes.family_bound_excess(points) == {}
    lone = _family(1024, 1, 1, 3.00e-3, 3.04e-3) + _family(1024, 1, 2, 9.00e-3, 3.25e-3)
    assert classes.family_bound_excess(lone) == {}


def test_each_miss_gets_one_class() -> None:
    best = _family(2048, 1, 1, 3.24e-3, 3.54e-3)  # measured fastest, predicted dearer: every group below misses
    lone_choice = _family(2048, 2, 2, 4.63e-3, 3.00e-3)
    one = [best + lone_choice]  # a group of whole families: the per-term split needs each family's fit
    (miss,) = classes.classify(one)
    assert miss.kind == "single" and miss.why == "layers: TP step at equal per-rank work"
    assert miss.measured_gap > 0.05 and miss.predicted_gap < 0
    assert "tp1 pp1 mbs1" in miss.best and "tp2 pp1 mbs2" in miss.choice and "dp1" in miss.choice
    two = [best + lone_choice, lone_choice + best]
    assert [m.kind for m in classes.classify(two)] == ["systematic", "systematic"]
    assert [m.kind for m in classes.classify(two, noise=0.5)] == ["noise", "noise"]
    family = best + _tp2_h2048(4.63e-3, 3.00e-3)  # the choice's own micro-batches bound it: one off number
    outliers = classes.classify([family])
    assert [m.kind for m in outliers] == ["outlier cell"]
    assert outliers[0].why == "choice S24 h2048 TP2 mbs2"


def test_hits_without_drops_the_rows_of_the_cells_and_groups_left_with_one_layout() -> None:
    best, choice = _family(2048, 1, 1, 3.24e-3, 3.54e-3), _family(2048, 2, 2, 4.63e-3, 3.00e-3)
    third = _family(2048, 4, 4, 3.30e-3, 3.20e-3)  # dearer than the best by 1.9 %: within 5 %, a hit once alone
    groups = [best + choice, best + choice + third]
    assert classes.hits_without(groups, set()) == (0, 2, 30)
    assert classes.hits_without(groups, {CHOICE}) == (1, 1, 12)

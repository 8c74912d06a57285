"""benchmarks/ranking_miss_parts.py: the S24 misses of bench_tune_ranking.py --miss-parts (flagged cells' rows left
out), the knobs in which best and choice differ, and the excess per TP call of an equal-work TP step."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import ranking_diagnostics as diag  # noqa: E402
import ranking_miss_parts as parts  # noqa: E402


def _row(tp: int, mbs: int, dp: int, measured_s: float, predicted_s: float, pp: int = 1, hidden: int = 2048,
         layers: int = 24, n: int = 2) -> diag.RowPoint:
    return diag.RowPoint(f"tp{tp} pp{pp} mbs{mbs}", (hidden, tp, mbs), ("S24", hidden, tp, pp, mbs, dp), layers, n,
                         measured_s, predicted_s, True)


def _group(*rows) -> SimpleNamespace:
    return SimpleNamespace(key="L24 h2048 4 GPUs gbs 8", points=rows, breakdowns=tuple({"compute": 0.1} for _ in rows))


def test_knobs_differ_names_only_the_knobs_that_change() -> None:
    best, choice = _row(1, 1, 4, 0.2154, 0.2410), _row(2, 2, 2, 0.2534, 0.2230)
    assert parts.knobs_differ(best, choice) == "TP 1->2 mbs 1->2 DP 4->2"
    assert parts.knobs_differ(best, _row(1, 1, 2, 0.3, 0.3, pp=2)) == "PP 1->2 DP 4->2"


def test_a_choice_more_than_5_percent_slower_is_a_miss_with_indices_into_the_group() -> None:
    # S24 L24 h2048 4 GPUs gbs 8 as measured: TP 2 mbs 2 predicted fastest, 17.6 % slower than TP 1 mbs 1
    group = _group(_row(1, 1, 4, 0.2154, 0.2410), _row(2, 2, 2, 0.2534, 0.2230), _row(4, 4, 1, 0.30, 0.25))
    assert parts.s24_misses([group], {}) == [(group, 0, 1)]
    # the choice within 5 % of the best: a hit, not listed
    hit = _group(_row(1, 1, 4, 0.2154, 0.2410), _row(2, 2, 2, 0.2200, 0.2230))
    assert parts.s24_misses([hit], {}) == []


def test_the_flagged_cells_rows_are_left_out_before_the_choice_is_made() -> None:
    # without the flagged TP 4 mbs 4 row, TP 2 mbs 2 is the choice; the indices stay those of the whole group
    group = _group(_row(4, 4, 1, 0.30, 0.20), _row(1, 1, 4, 0.2154, 0.2410), _row(2, 2, 2, 0.2534, 0.2230))
    assert parts.s24_misses([group], {("S24", 2048, 4, 4): ["odd"]}) == [(group, 1, 2)]
    # flagging the best's cell leaves TP 2 mbs 2 (fastest measured of the rest) as best and choice: a hit
    assert parts.s24_misses([group], {("S24", 2048, 1, 1): ["odd"], ("S24", 2048, 4, 4): ["odd"]}) == []


def _family(tp: int, mbs: int, a_s: float, predicted_a_s: float) -> list[diag.RowPoint]:
    """Rows t = a n L + 5 ms n + 50 ms at 3 depths x 2 micro-batch counts: the cell's per-layer cost is `a_s`."""
    return [_row(tp, mbs, 1, a * n * layers + 5e-3 * n + 0.05, p * n * layers + 5e-3 * n + 0.05, layers=layers, n=n)
            for layers in (12, 16, 24) for n in (2, 4) for a, p in [(a_s, predicted_a_s)]]


def test_tp_call_excess_is_the_unpriced_part_of_an_equal_work_step_per_call(capsys) -> None:
    # h2048 TP 1 mbs 1 -> TP 2 mbs 2: measured +1.39 ms per layer, predicted +0.30: (1.39 - 0.30) / 6 = 182 us
    points = _family(1, 1, 3.24e-3, 3.54e-3) + _family(2, 2, 4.63e-3, 3.84e-3)
    parts.report_tp_call_excess(points, {})
    out = capsys.readouterr().out
    assert "h2048 TP 1 mbs 1 -> TP 2 mbs 2: +1.39 / +0.30  excess  +182 us per call" in out
    parts.report_tp_call_excess(points, {("S24", 2048, 2, 2): ["odd"]})
    assert "excess" not in capsys.readouterr().out.split("us:")[-1]


def test_report_prints_each_miss_with_both_rows_parts_and_the_counts(capsys) -> None:
    group = _group(_row(1, 1, 4, 0.2154, 0.2410), _row(2, 2, 2, 0.2534, 0.2230))
    group.breakdowns = ({"compute": 0.1, "host_overhead": 0.02, "data_load": 0.001}, {"compute": 0.1, "comm_tp": 0.01})
    parts.report_miss_parts([group])
    out = capsys.readouterr().out
    assert "flagged cells (1)" in out
    assert "TP 1->2 mbs 1->2 DP 4->2; measured gap +17.6%, predicted -7.5%" in out
    assert "| comp 100.0 host 20.0 other 1.0" in out and "| comp 100.0 tp 10.0 other 0.0" in out
    assert "first knob that differs: TP 1" in out and "error directions: best slow, choice fast 1" in out

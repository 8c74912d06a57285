"""benchmarks/ranking_terms.py on hand-made rows: the step time split into layers (bubble passes included), the part
outside the layers, the data-parallel all-reduce and the per-step rest, and the term that decides each miss."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import ranking_diagnostics as diag  # noqa: E402
import ranking_terms as terms  # noqa: E402


def _rows(layout: str, family: tuple, a: float, b: float, step: float, err_a: float = 0.0, err_b: float = 0.0,
          layers_n=((12, 2), (12, 4), (16, 2), (16, 4), (24, 2), (24, 4)), dp=None) -> list[diag.RowPoint]:
    """Rows of one family with per-layer cost a (whole model), b per micro-batch, a per-step constant, and the
    prediction off by err_a per layer and err_b per micro-batch; dp = (measured, predicted) all-reduce seconds."""
    pp = family[3]
    out = []
    for layers, n in layers_n:
        passes = n + pp - 1
        t = a / pp * layers * passes + b * n + step
        wrong = err_a / pp * layers * passes + err_b * n
        dp_m, dp_p = dp or (0.0, 0.0)
        out.append(diag.RowPoint(layout, family[1:3] + family[4:5], family, layers, n, t + dp_m, t + wrong + dp_p,
                                 True, dp_grad_s=dp_p, composed_dp_s=dp[0] if dp else None))
    return out


def test_terms_put_a_per_layer_error_in_the_layers_bubble_passes_included() -> None:
    rows = _rows("tp1 pp2 mbs1", ("S24", 2048, 1, 2, 1, 1), a=3e-3, b=10e-3, step=5e-3, err_a=0.3e-3)
    errors = terms.term_errors(rows)
    for p in rows:
        expected = 0.3e-3 / 2 * p.num_layers * (p.num_microbatches + 1)  # two stages: n + 1 passes of L / 2 layers
        np.testing.assert_allclose(errors[p], [expected, 0, 0, 0, 0], atol=1e-12)


def test_terms_separate_the_head_and_the_composed_data_parallel_all_reduce() -> None:
    rows = _rows("tp2 pp1 mbs2", ("S24", 2048, 2, 1, 2, 2), a=4e-3, b=5e-3, step=2e-3, err_b=-1e-3,
                 dp=(3e-3, 2.5e-3))
    for p in rows:
        np.testing.assert_allclose(terms.term_errors(rows)[p], [0, -1e-3 * p.num_microbatches, -0.5e-3, 0, 0],
                                   atol=1e-12)


def test_a_family_without_its_own_fit_takes_its_cells_per_layer_cost() -> None:
    fitted = _rows("tp4 pp1 mbs8", ("S24", 1024, 4, 1, 8, 1), a=4e-3, b=5e-3, step=2e-3, err_a=-0.4e-3)
    lone = _rows("tp4 pp2 mbs8", ("S24", 1024, 4, 2, 8, 1), a=4e-3, b=5e-3, step=2e-3, err_a=-0.4e-3,
                 err_b=1e-3, layers_n=((20, 2),))
    errors = terms.term_errors(fitted + lone)
    p = lone[0]
    layers_err = -0.4e-3 / 2 * 20 * 3
    np.testing.assert_allclose(errors[p], [layers_err, 0, 0, 0, p.predicted_s - p.measured_s - layers_err],
                               atol=1e-12)


def test_layer_relation_names_equal_per_rank_work_at_another_tp() -> None:
    def point(cell):
        return diag.RowPoint("x", cell, ("S24", cell[0], cell[1], 1, cell[2], 1), 12, 2, 1.0, 1.0, True)
    assert terms.layer_relation(point((2048, 1, 1)), point((2048, 2, 2))) == "TP step at equal per-rank work"
    assert terms.layer_relation(point((2048, 4, 2)), point((2048, 4, 4))) == "micro-batch at one TP"
    assert terms.layer_relation(point((2048, 4, 2)), point((2048, 1, 1))) == "TP and per-rank work both differ"


def test_the_deciding_term_is_the_one_that_under_prices_the_choice() -> None:
    # Best: TP1 mbs1, priced right. Choice: TP2 mbs2 at equal per-rank work, 20 % dearer per layer as measured, its
    # layers priced below the best's; its head over-priced a little (that favours the best): the layers decide.
    best = _rows("tp1 pp1 mbs1", ("S24", 2048, 1, 1, 1, 1), a=3.0e-3, b=5e-3, step=5e-3)
    chosen = _rows("tp2 pp1 mbs2", ("S24", 2048, 2, 1, 2, 1), a=3.6e-3, b=5e-3, step=5e-3, err_a=-1.0e-3,
                   err_b=0.2e-3)
    groups = [[p, q] for p, q in zip(best, chosen)]
    classified = terms.classify_misses(groups)
    assert len(classified) == len(groups)
    for best_p, chosen_p, delta, term in classified:
        assert best_p.layout == "tp1 pp1 mbs1" and chosen_p.layout == "tp2 pp1 mbs2"
        assert term == "layers: TP step at equal per-rank work"
        np.testing.assert_allclose(delta[:2], [-1.0e-3 * chosen_p.num_layers * chosen_p.num_microbatches,
                                               0.2e-3 * chosen_p.num_microbatches], atol=1e-12)


def test_tp_steps_are_keyed_by_the_collective_bytes_the_larger_tp_adds() -> None:
    # h2048 TP1 mbs1 -> TP2 mbs2 and h1024 TP1 mbs2 -> TP2 mbs4 add the same 8 MiB all-reduces (2 x 1024 x 2048 x 2
    # = 4 x 1024 x 1024 x 2 bytes); h1024 TP1 mbs1 -> TP2 mbs2 adds 4 MiB ones.
    def cell_rows(h: int, tp: int, mbs: int, a: float) -> list[diag.RowPoint]:
        rows = _rows(f"tp{tp} pp1 mbs{mbs}", ("S24", h, tp, 1, mbs, 1), a=a, b=5e-3, step=1e-3)
        return [diag.RowPoint(p.layout, p.cell, p.family, p.num_layers, p.num_microbatches, p.measured_s,
                              p.predicted_s, True, seq_length=1024) for p in rows]
    points = (cell_rows(2048, 1, 1, 3.2e-3) + cell_rows(2048, 2, 2, 4.6e-3) + cell_rows(1024, 1, 2, 3.2e-3)
              + cell_rows(1024, 2, 4, 3.2e-3) + cell_rows(1024, 1, 1, 3.0e-3) + cell_rows(1024, 2, 2, 3.6e-3))
    steps = terms.tp_steps_by_added_work(points)
    assert sorted(steps) == [("S24", 1, 2, 0, 4 * 2**20), ("S24", 1, 2, 0, 8 * 2**20)]
    eight = {h: (m, q) for h, _, m, q in steps[("S24", 1, 2, 0, 8 * 2**20)]}
    np.testing.assert_allclose(eight[2048], (1.4e-3, 1.4e-3), atol=1e-12)  # prediction = measurement here
    np.testing.assert_allclose(eight[1024], (0.0, 0.0), atol=1e-12)


def test_report_marks_a_miss_whose_best_lies_in_a_cell_that_contradicts_the_work_order(capsys) -> None:
    # h1024 TP2: mbs4 measures 11 % cheaper per layer than mbs2 (the same kernels on twice the tokens), predicted
    # dearer: the mbs4 cell is flagged. The miss: mbs4 is the measured best, TP1 mbs2 (equal per-rank work) chosen.
    mbs2 = _rows("tp2 pp1 mbs2", ("S24", 1024, 2, 1, 2, 1), a=3.58e-3, b=4e-3, step=1e-3, err_a=-0.2e-3)
    mbs4 = _rows("tp2 pp1 mbs4", ("S24", 1024, 2, 1, 4, 1), a=3.18e-3, b=6e-3, step=1e-3, err_a=0.43e-3)
    tp1 = _rows("tp1 pp1 mbs2", ("S24", 1024, 1, 1, 2, 1), a=3.40e-3, b=6e-3, step=1e-3, err_a=-0.1e-3)
    groups = [[p, q, r] for p, q, r in zip(mbs2, mbs4, tp1)]
    terms.report_terms(groups)
    out = capsys.readouterr().out
    assert "[flagged cell: best]" in out
    assert "neither cell flagged (0)" in out

"""The --misses diagnostics of benchmarks/bench_tune_ranking.py (benchmarks/ranking_diagnostics.py and
ranking_attribution.py) on hand-made rows: the tuner's pick, the 5 % hit rule with and without a noise band, the
bilinear split of a step time, the oracles that take one part of it from the measurements or from the rows'
composition, and the part that causes each miss."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import ranking_attribution as attr  # noqa: E402
import ranking_consistency as consistency  # noqa: E402
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


def _composed_rows(per_layer_s: float, family: tuple, head_s: float = 5e-3, jitter=None,
                   predicted_per_layer_s: float | None = None) -> list[diag.RowPoint]:
    """Rows of one family built as vTrain's S24 rows are: n micro-batches x (L x per-layer + head) + per step;
    `jitter(L, n)` adds what a separate run of each depth would scatter by; the prediction is the same
    composition with `predicted_per_layer_s` (default: the measured one)."""
    rows = []
    pp = family[3]
    predicted_per_layer_s = per_layer_s if predicted_per_layer_s is None else predicted_per_layer_s
    for layers in (12, 16, 24):
        for n in (2, 4, 8):
            t, p = ((n + pp - 1) * (layers / pp * a + head_s) + 1e-3 * layers for a in (per_layer_s, predicted_per_layer_s))
            t += jitter(layers, n) if jitter else 0.0
            rows.append(_point(t, p, layers=layers, n=n, family=family))
    return rows


def test_composed_rows_share_one_per_layer_cost_across_pp_and_dp() -> None:
    rows = (_composed_rows(3e-3, ("S24", 2048, 2, 1, 2, 1)) + _composed_rows(3e-3, ("S24", 2048, 2, 2, 2, 1))
            + _composed_rows(3e-3, ("S24", 2048, 2, 1, 2, 4)))
    costs = diag.layer_cost_by_family(rows)
    assert set(costs) == {r.family for r in rows}
    for a in costs.values():
        assert a == pytest.approx(3e-3, rel=1e-6)
    audit = diag.composition_audit(rows)["S24"]
    assert (audit["cells"], audit["shared_families"], audit["same"]) == (1, 3, 3)
    families, residual_s, _ = diag.layer_linearity(rows)["S24"]
    assert families == 3 and residual_s < 1e-9


def test_separate_runs_miss_the_line_in_the_layer_count() -> None:
    noise = {12: 0.0, 16: 1.5e-3, 24: -0.5e-3}
    rows = _composed_rows(3e-3, ("S03", 4096, 8, 1, 1, 1), jitter=lambda layers, n: n * noise[layers])
    _, residual_s, relative = diag.layer_linearity(rows)["S03"]
    assert residual_s > 5e-4 and relative > 1e-3


def test_monotonicity_violation_needs_a_measured_drop_the_prediction_does_not_make() -> None:
    small = _composed_rows(3.0e-3, ("S24", 2048, 4, 1, 1, 1))
    large = _composed_rows(2.75e-3, ("S24", 2048, 4, 1, 2, 1), predicted_per_layer_s=3.2e-3)
    bad = diag.monotonicity_violations(small + large)
    assert len(bad) == 1
    key, m1, m2, change, predicted = bad[0]
    assert (key, m1, m2) == (("S24", 2048, 4), 1, 2)
    assert change == pytest.approx(-0.0833, abs=1e-3) and predicted == pytest.approx(0.0667, abs=1e-3)
    # a prediction that drops as well (Megatron's softmax fallback at the smaller micro-batch, say) explains the pair
    explained = _composed_rows(2.75e-3, ("S24", 2048, 4, 1, 2, 1), predicted_per_layer_s=2.9e-3)
    assert diag.monotonicity_violations(small + explained) == []


def test_noise_floor_is_perfect_without_noise_and_falls_with_it() -> None:
    cheap = _composed_rows(3.0e-3, ("S24", 1024, 1, 1, 1, 1))
    dear = _composed_rows(3.6e-3, ("S24", 1024, 2, 1, 1, 1))
    groups = [[a, b] for a, b in zip(cheap, dear)]  # one group per (layers, micro-batches), as a sweep's groups
    assert diag.noise_floor(groups, 0.0, trials=5) == len(groups)
    noisy = diag.noise_floor(groups, 0.3, trials=50)
    assert noisy < len(groups)
    assert diag.noise_floor(groups, 0.3, trials=50) == noisy  # seeded: the bench prints the same figure each run


def test_miss_pair_names_the_best_and_the_choice_of_a_missed_group_only() -> None:
    best, wrong = _point(1.0, 1.2), _point(1.2, 1.0)
    assert diag.miss_pair([best, wrong]) == (best, wrong)
    assert diag.miss_pair([_point(1.0, 1.0), _point(1.2, 1.2)]) == (None, None)
    assert diag.miss_pair([_point(1.0, 1.0, fits=False)]) == (None, None)


def test_only_the_data_parallel_s24_rows_are_composed() -> None:
    # bench_validation.py --audit-s24: an S24 row with DP > 1 is its DP = 1 row + vTrain's LUT all-reduce, not a run
    assert diag.is_composed("S24", 2) and diag.is_composed("S24", 8)
    assert not diag.is_composed("S24", 1)
    assert not diag.is_composed("S23", 8) and not diag.is_composed("S03", 4)


def test_the_bench_fits_rows_with_the_margin_tune_applies() -> None:
    import bench_tune_ranking as bench
    from types import SimpleNamespace

    from llmperf_hook.tune.search_space import load_search_space

    for framework in ("megatron-deepspeed", "deepspeed"):
        cfg = SimpleNamespace(framework=framework)
        assert bench.tune_margin(cfg) == load_search_space(None, framework).memory_margin
    estimate = SimpleNamespace(memory=SimpleNamespace(peak_bytes_per_gpu=92.0, capacity_bytes=100.0))
    assert bench._fits(estimate, 0.05) and not bench._fits(estimate, 0.10)


def test_equal_work_steps_pair_cells_of_the_same_per_rank_work_in_tp_order() -> None:
    from fractions import Fraction

    cost = {(2048, 1, 1): (3.24e-3, 3.5e-3), (2048, 2, 2): (4.63e-3, 3.9e-3), (2048, 4, 4): (4.95e-3, 4.5e-3),
            (2048, 2, 1): (3.40e-3, 3.6e-3), (2048, 4, 2): (2.75e-3, 3.6e-3), (1024, 1, 1): (3.0e-3, 3.1e-3)}
    steps = {(h, w, a, b): (m, p) for h, w, a, b, m, p in diag.equal_work_steps(cost)}
    assert set(steps) == {(2048, Fraction(1), 1, 2), (2048, Fraction(1), 2, 4), (2048, Fraction(1, 2), 2, 4)}
    assert steps[(2048, Fraction(1), 1, 2)] == pytest.approx((1.39e-3, 0.4e-3))
    assert steps[(2048, Fraction(1, 2), 2, 4)][0] == pytest.approx(-0.65e-3)  # less time with more communication


def _split_family(family: tuple, parts_s: tuple, predicted_parts_s: tuple, params: int = 0) -> list[diag.RowPoint]:
    """Rows t = a n L + b n + c L + d of one family, measured with `parts_s` and predicted with `predicted_parts_s`."""
    rows = []
    for layers in (12, 16, 24):
        for n in (2, 4, 8):
            x = np.array([n * layers, n, layers, 1.0])
            rows.append(diag.RowPoint(f"{family}", family[1:3] + family[4:5], family, layers, n,
                                      float(x @ parts_s), float(x @ predicted_parts_s), True, params))
    return rows


def test_miss_attribution_names_the_part_whose_error_flips_the_group() -> None:
    # two layouts of one model: the first is faster per layer, the prediction says the opposite
    fast = _split_family(("S24", 2048, 1, 1, 1, 2), (3.2e-3, 10e-3, 1.5e-3, 4e-3), (3.6e-3, 10e-3, 1.5e-3, 4e-3))
    slow = _split_family(("S24", 2048, 2, 1, 2, 1), (4.6e-3, 5e-3, 0.5e-3, 1e-3), (3.8e-3, 5e-3, 0.5e-3, 1e-3))
    groups = [[a, b] for a, b in zip(fast, slow)]
    attributed = attr.miss_attribution(groups)
    assert attributed and all(flips == ("per layer and micro-batch",) for _, _, flips in attributed)
    assert all(best.family == fast[0].family and chosen.family == slow[0].family for best, chosen, _ in attributed)
    # the same error in the per-step part instead is flipped by that part alone
    fast = _split_family(("S24", 2048, 1, 1, 1, 2), (3.0e-3, 5e-3, 0.5e-3, 4e-3), (3.0e-3, 5e-3, 30e-3, 4e-3))
    slow = _split_family(("S24", 2048, 2, 1, 2, 1), (3.6e-3, 5e-3, 0.5e-3, 1e-3), (3.6e-3, 5e-3, 0.5e-3, 1e-3))
    attributed = attr.miss_attribution([[a, b] for a, b in zip(fast, slow)])
    assert attributed and all(flips == ("per step",) for _, _, flips in attributed)
    hits = [[a, b] for a, b in zip(slow, _split_family(("S24", 2048, 4, 1, 2, 1), (9e-3, 0, 0, 0), (9e-3, 0, 0, 0)))]
    assert attr.miss_attribution(hits) == []


def test_step_cost_per_parameter_reads_the_per_layer_per_step_slope_of_single_stage_dp1_families() -> None:
    params = 25_178_112  # about 12 h^2 / TP: a GPT layer of hidden 2048 at TP 2
    rows = _split_family(("S24", 2048, 2, 1, 2, 1), (4.6e-3, 5e-3, 0.507e-3, 1e-3), (3.8e-3, 5e-3, 0.78e-3, 1e-3),
                         params)
    measured, predicted, families = attr.step_cost_per_param(rows)[("S24", 2048, 2)]
    assert families == 1
    assert measured == pytest.approx(0.507e-3 / params) and predicted == pytest.approx(0.78e-3 / params)
    # a pipeline stage's or a data-parallel family's c is not the optimizer's alone; no parameter count, no figure
    others = (_split_family(("S24", 2048, 2, 2, 2, 1), (2e-3, 5e-3, 1e-3, 1e-3), (2e-3, 5e-3, 1e-3, 1e-3), params)
              + _split_family(("S24", 2048, 2, 1, 2, 4), (4e-3, 5e-3, 1e-3, 1e-3), (4e-3, 5e-3, 1e-3, 1e-3), params)
              + _split_family(("S24", 1024, 2, 1, 2, 1), (4e-3, 5e-3, 1e-3, 1e-3), (4e-3, 5e-3, 1e-3, 1e-3)))
    assert attr.step_cost_per_param(others) == {}


def test_consistency_pairs_order_micro_batch_hidden_and_equal_work_tp() -> None:
    cells = [("S24", 1024, 2, 1), ("S24", 1024, 2, 2), ("S24", 2048, 2, 1), ("S24", 1024, 4, 2), ("S23", 1024, 2, 2)]
    pairs = {(c, d): w for c, d, w in consistency.consistency_pairs(cells)}
    assert pairs == {(cells[0], cells[1]): False, (cells[0], cells[2]): False, (cells[0], cells[3]): True}


def test_consistent_costs_meet_where_the_measurements_break_the_order_and_cap_the_tp_step() -> None:
    # h2048 TP 4 measured cheaper at mbs 2 than at mbs 1: the closest ordered costs meet in between
    rows = (_composed_rows(3.0e-3, ("S24", 2048, 4, 1, 1, 1)) + _composed_rows(2.75e-3, ("S24", 2048, 4, 1, 2, 1)))
    costs = consistency.consistent_layer_costs(rows, lambda cell: None)
    low, high = costs[("S24", 2048, 4, 1)], costs[("S24", 2048, 4, 2)]
    assert low == pytest.approx(high, rel=1e-4) and 2.75e-3 < low < 3.0e-3
    # equal per-rank work: TP 1 mbs 1 -> TP 2 mbs 2 may add at most the cap
    rows = (_composed_rows(3.24e-3, ("S24", 2048, 1, 1, 1, 2)) + _composed_rows(4.63e-3, ("S24", 2048, 2, 1, 2, 1)))
    costs = consistency.consistent_layer_costs(rows, lambda cell: 0.86e-3)
    assert costs[("S24", 2048, 2, 2)] - costs[("S24", 2048, 1, 1)] == pytest.approx(0.86e-3, rel=1e-3)
    uncapped = consistency.consistent_layer_costs(rows, lambda cell: None)
    assert uncapped[("S24", 2048, 2, 2)] == pytest.approx(4.63e-3, rel=1e-6)
    # the rows priced with those costs keep their other parts
    priced = consistency.with_layer_costs(rows, costs)
    p = rows[-1]
    expected = p.measured_s + (costs[("S24", 2048, 2, 2)] - 4.63e-3) * p.num_microbatches * p.num_layers
    assert priced[p] == pytest.approx(expected, rel=1e-6)


def test_tp_step_cap_is_six_all_reduces_on_vtrains_nccl_table_and_their_host_calls() -> None:
    import bench_tune_ranking as bench
    from types import SimpleNamespace

    point = diag.RowPoint("x", (2048, 2, 2), ("S24", 2048, 2, 1, 2, 1), 12, 2, 1.0, 1.0, True, 1, 1024)
    cap = bench.tp_step_cap([SimpleNamespace(points=(point,))])
    # vTrain trace/a100/AR_GPU2_1M_1024M_LUT: 8 MiB on 2 GPUs 86.9 us; one host call 57 us (vtrain-a100 preset)
    assert cap(("S24", 2048, 2, 2)) == pytest.approx(6 * (86.9e-6 + 57e-6), rel=0.03)
    assert cap(("S23", 2048, 2, 2)) is None and cap(("S24", 2048, 16, 2)) is None


def test_miss_cause_names_the_part_that_under_prices_the_choice_against_the_best() -> None:
    best_family, chosen_family = ("S24", 2048, 1, 1, 1, 1), ("S24", 2048, 2, 1, 2, 1)
    best = [_point(t, t + 0.2e-3 * layers, layers=layers, n=n, family=best_family)  # per-layer-step part 0.2 ms high
            for layers in (12, 16, 24) for n in (2, 4) for t in [3e-3 * n * layers + 2e-3 * layers]]
    chosen = [_point(t, t - 0.8e-3 * n * layers, layers=layers, n=n, family=chosen_family)  # 0.8 ms per layer low
              for layers in (12, 16, 24) for n in (2, 4) for t in [3.5e-3 * n * layers + 1e-3 * layers]]
    errors = attr.part_errors(best + chosen)
    b, c = best[1], chosen[1]  # L 12, n 4: measured 0.168 s (best) vs 0.180 s (choice), predicted 0.170 vs 0.142
    part, share = attr.miss_cause(b, c, errors)
    assert part == "per layer and micro-batch"
    assert share == pytest.approx(0.8e-3 * 4 * 12 / (c.measured_s - b.measured_s), rel=1e-6)
    np.testing.assert_allclose(errors[b], [0.0, 0.0, 0.2e-3 * 12, 0.0], atol=1e-12)
    lone = _point(1.0, 0.9, family=("S24", 1024, 8, 1, 4, 1))
    assert attr.miss_cause(lone, c, attr.part_errors(best + chosen + [lone])) is None


def test_composition_oracle_reprices_only_the_composed_rows_data_parallel_part() -> None:
    run_row = _point(0.30, 0.32)
    composed = diag.RowPoint("c", (2048, 1, 1), ("S24", 2048, 1, 1, 1, 8), 24, 2, 0.392, 0.4275, True,
                             dp_grad_s=0.0214, composed_dp_s=0.0115)
    oracle = attr.composition_oracle([run_row, composed])
    assert oracle[run_row] == run_row.predicted_s
    assert oracle[composed] == pytest.approx(0.4275 - 0.0214 + 0.0115)


def test_composed_dp_is_vtrains_table_lookup_without_the_ring_factor_above_one_gib() -> None:
    import bench_tune_ranking as bench
    from types import SimpleNamespace

    lut = bench._vtrain_lut()
    if 8 not in lut:
        pytest.skip("vTrain's NCCL table (../shared/validation/calibration) is not here")

    def run(layers: int, dp: int = 8, pp: int = 1, source: str = "S24"):
        return SimpleNamespace(source_id=source, dp=dp, pp=pp, hidden_size=2048, tp=1, vocab_size=50257,
                               seq_length=1024, num_layers=layers)

    from bench_validation import lut_ring_s, vtrain_gradient_bytes

    big, small = run(24), run(4)
    big_bytes, small_bytes = vtrain_gradient_bytes(big), vtrain_gradient_bytes(small)
    assert big_bytes > 2**30 > small_bytes
    busbw_1gib = lut[8][-1][2] * 2**30
    assert bench.composed_dp_s(big) == pytest.approx(big_bytes / busbw_1gib)  # a ring pays 2 x 7/8 of that
    assert bench.composed_dp_s(small) == pytest.approx(lut_ring_s(lut[8], small_bytes))
    assert bench.composed_dp_s(run(24, dp=1)) is None and bench.composed_dp_s(run(24, pp=2)) is None
    assert bench.composed_dp_s(run(24, source="S23")) is None

"""What a physically consistent cost model could at best predict for the per-layer cells of
benchmarks/bench_tune_ranking.py (its --resolution report): the per-layer costs closest to the measured ones that
obey the rules every cost model here obeys (more work is never cheaper; a larger TP at equal per-rank work adds at
most its all-reduces and their host calls), and the top-1 count the rows reach at them. A count near the target
says a physical model could get there and by which values; the distance of a cell from its consistent value is
error no such model avoids."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ranking_diagnostics import WITHIN, bilinear_fit, cell_costs, cell_key, count_hits
from work_order import CONTRADICTION, contradicts_work_order, fewest_accounting

TP_CALLS_PER_LAYER = 6
"""In-layer TP all-reduces per layer and micro-batch under full recompute without sequence parallelism: 2 forward
(attention and MLP row-parallel outputs), 2 in the recompute, 2 backward (the column-parallel grad inputs)."""


def consistency_pairs(cells) -> list[tuple[tuple, tuple, bool]]:
    """(cheaper, dearer, equal_work) pairs of (source, hidden, TP, micro-batch) cells whose per-layer costs any cost
    model growing with work orders: a larger micro-batch at the same (hidden, TP); a larger hidden at the same
    (TP, micro-batch); and (TP, mbs) -> (2 TP, 2 mbs) at the same hidden (equal_work: the same per-rank GEMM and
    attention FLOPs, more element-wise work over the full hidden and larger all-reduces)."""
    out = []
    for c in cells:
        for d in cells:
            if c[0] != d[0] or c == d:
                continue
            same_h_tp = c[1:3] == d[1:3] and d[3] > c[3]
            same_tp_mbs = (c[2], c[3]) == (d[2], d[3]) and d[1] > c[1]
            equal_work = c[1] == d[1] and d[2] == 2 * c[2] and d[3] == 2 * c[3]
            if same_h_tp or same_tp_mbs or equal_work:
                out.append((c, d, equal_work))
    return out


def consistent_layer_costs(points, tp_step_cap_s) -> dict[tuple, float]:
    """Per-layer costs (cell -> seconds, the cells of cell_costs) closest in relative least squares to the measured
    ones such that every consistency_pairs pair is ordered and an equal-work step (TP, mbs) -> (2 TP, 2 mbs) adds at
    most tp_step_cap_s(dearer cell) seconds (the TP all-reduces and their host calls fully exposed; None = no cap).
    What a model that obeys these rules could at best be asked to predict: its distance from the measured costs is
    error no such model can avoid."""
    from scipy.optimize import minimize

    measured = cell_costs(points)
    keys = sorted(measured)
    index = {c: i for i, c in enumerate(keys)}
    y = np.array([measured[c] for c in keys])
    cons = []
    for c, d, equal_work in consistency_pairs(keys):
        i, j = index[c], index[d]
        cons.append({"type": "ineq", "fun": lambda x, i=i, j=j: (x[j] - x[i]) / y[i]})
        cap = tp_step_cap_s(d) if equal_work else None
        if cap is not None:
            cons.append({"type": "ineq", "fun": lambda x, i=i, j=j, cap=cap: (x[i] + cap - x[j]) / y[i]})
    if not cons:
        return dict(measured)
    fit = minimize(lambda x: float(np.sum((x / y - 1) ** 2)), y, constraints=cons, method="SLSQP",
                   options={"maxiter": 1000, "ftol": 1e-12})
    return {c: float(fit.x[index[c]]) for c in keys}


def with_layer_costs(points, layer_cost: dict) -> dict:
    """RowPoint -> its measured time with its per-layer part (the bilinear fit's a n L) rescaled to `layer_cost`."""
    families: dict = defaultdict(list)
    for p in points:
        families[p.family].append(p)
    measured = cell_costs(points)
    out = {}
    for rows in families.values():
        fit = bilinear_fit(rows, lambda p: p.measured_s)
        for p in rows:
            c = cell_key(p)
            scale = layer_cost[c] / measured[c] - 1 if fit is not None and c in layer_cost else 0.0
            out[p] = p.measured_s + float(fit[0]) * scale * p.num_microbatches * p.num_layers if scale else p.measured_s
    return out


def report_consistency(results: list, tp_step_cap_s) -> None:
    """The consistent per-layer costs (consistent_layer_costs) against the measured and predicted ones, and the
    top-1 count when the rows are priced at the measurements with those per-layer costs."""
    groups = [r.points for r in results if r.points]
    everything = [p for pts in groups for p in pts]
    consistent = consistent_layer_costs(everything, tp_step_cap_s)
    measured, predicted = cell_costs(everything), cell_costs(everything, lambda p: p.predicted_s)
    print("\nper-layer costs closest to the measured ones that a cost model growing with work and pricing TP at most "
          "at its all-reduces + host calls can give (ms, measured -> consistent; predicted):")
    for c in sorted(consistent):
        if abs(consistent[c] / measured[c] - 1) > 1e-3:
            print(f"  {c[0]} h{c[1]} TP{c[2]} mbs{c[3]}: {1e3 * measured[c]:.2f} -> {1e3 * consistent[c]:.2f}"
                  f"  ({1e3 * predicted.get(c, float('nan')):.2f})")
    priced = with_layer_costs(everything, consistent)
    print(f"top-1 within 5 % with the rows priced at the measurements and those per-layer costs: "
          f"{count_hits(groups, priced.__getitem__)}/{len(groups)}")


def flagged_cells(points, tolerance: float = CONTRADICTION) -> dict[tuple, list[str]]:
    """Cells (source, hidden, TP, micro-batch) whose measured per-layer cost contradicts the work order
    (work_order.contradicts_work_order, bench_validation's rule for its rows): of a consistency_pairs pair, the cell
    with more work on every op (a larger micro-batch or hidden size, same kernels and launches; or 2x TP and 2x
    micro-batch, same per-rank GEMMs plus all-reduces) measures more than `tolerance` cheaper than the other and is
    not predicted so (the framework's other kernels at that shape). The flagged cells are the fewest that account
    for every contradiction (work_order.fewest_accounting: a cell in several is the odd one; a lone pair is flagged
    whole, the data not saying which of the two is off). Cell -> its contradictions."""
    measured, predicted = cell_costs(points), cell_costs(points, lambda p: p.predicted_s)
    why: dict[tuple, str] = {}
    for c, d, _ in consistency_pairs(sorted(measured)):
        if c in predicted and d in predicted and contradicts_work_order(measured[d], measured[c], predicted[d],
                                                                        predicted[c], tolerance):
            change = measured[d] / measured[c] - 1
            why[(c, d)] = (f"{_cell_name(d)} {1e3 * measured[d]:.2f} ms is {100 * change:+.1f} % of {_cell_name(c)} "
                           f"{1e3 * measured[c]:.2f} ms")
    flagged = fewest_accounting(list(why), order=lambda cell: cell)
    return {cell: [text for pair, text in why.items() if cell in pair] for cell in flagged}


def _cell_name(cell: tuple) -> str:
    return f"{cell[0]} h{cell[1]} TP{cell[2]} mbs{cell[3]}"


def report_flagged(results: list) -> None:
    """The flagged cells (flagged_cells) and the top-1 count over the groups again without their rows (groups left
    with fewer than two distinct configurations drop out). The headline count stays the one over all rows."""
    groups = [r.points for r in results if r.points]
    everything = [p for pts in groups for p in pts]
    flags = flagged_cells(everything)
    contradictions = sorted({text for texts in flags.values() for text in texts})
    print(f"\nmeasured cells that contradict the work order by more than {100 * CONTRADICTION:.0f} % (more work on "
          f"every op, cheaper per layer and micro-batch, not so predicted; work_order.py): {len(contradictions)} "
          f"contradictions, {len(flags)} cells flagged")
    for why in contradictions:
        print(f"  {why}")
    kept = [[p for p in pts if cell_key(p) not in flags] for pts in groups]
    kept = [pts for pts in kept if len({p.layout for p in pts}) >= 2]
    rows = sum(map(len, kept))
    hits = count_hits(kept, lambda p: p.predicted_s)
    print(f"top-1 within {100 * WITHIN:.0f} % without the rows of flagged cells: {hits}/{len(kept)} groups "
          f"= {hits / max(len(kept), 1):.1%} ({rows} of {len(everything)} rows; all rows: "
          f"{count_hits(groups, lambda p: p.predicted_s)}/{len(groups)})")
    for source in sorted({p.family[0] for pts in kept for p in pts}):
        mine = [pts for pts in kept if pts[0].family[0] == source]
        print(f"  {source:<8} {count_hits(mine, lambda p: p.predicted_s)}/{len(mine)} groups")

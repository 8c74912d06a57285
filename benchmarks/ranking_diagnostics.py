"""The row model, hit rule and bilinear split of benchmarks/bench_tune_ranking.py's diagnostics, and its --resolution
report (the --misses report that builds on them is ranking_attribution.py).

A group's rows are RowPoints; the tuner's choice is the fastest predicted row that fits, a hit is within 5 % of the
measured best. The bilinear split t = a n L + b n + c L + d of a family of rows (same source, hidden, TP, PP,
micro-batch, DP; n micro-batches, L layers: per layer and micro-batch, per micro-batch outside the layers, per
layer and step, per step) and the oracle that takes parts of it from the measurements (component_oracle) say which
error decides the misses, not what to fit.

The --resolution report says how many independent measurements the groups rest on: whether a source's rows were
composed from one per-layer number per (hidden, TP, micro-batch) cell (the per-micro-batch slope exactly linear in
the layer count, one per-layer cost for every pp and DP), the cells that no cost model growing with work can order
(a larger micro-batch measured cheaper), and what a perfect model would score if each cell carried an independent
measurement error.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

WITHIN = 0.05
"""A group is a hit when the measured time of the tuner's choice is within this fraction of its measured best."""


def is_composed(source_id: str, dp: int) -> bool:
    """A row that is not a run of its configuration: each S24 (vTrain single-node) row with data parallelism is the
    same layout's DP = 1 row plus vTrain's own NCCL-table all-reduce of the gradients (to 1 us: `python
    benchmarks/bench_validation.py --audit-s24`, the 'DP cost' column against 'LUT ring ms', and 'bytes/busbw ms'
    above the table's 1 GiB, the simulator's lookup without the ring factor, github.com/VIA-Research/vTrain
    src/predictor.py compute_comm_time). Only its DP = 1 rows were measured."""
    return source_id == "S24" and dp > 1


@dataclass(frozen=True)
class RowPoint:
    """One measured row of a group as the diagnostics need it."""

    layout: str
    """The candidate's description (tp, pp, micro-batch, recompute)."""
    cell: tuple
    """(hidden, tp, micro-batch)."""
    family: tuple
    """(source, hidden, tp, pp, micro-batch, dp): rows that differ only in layers and micro-batch count."""
    num_layers: int
    num_microbatches: int
    measured_s: float
    predicted_s: float
    fits: bool
    """Peak memory within the tuner's fit rule (tune.search_space.SearchSpace.memory_margin): only such rows can be
    chosen."""
    layer_params: int = 0
    """Parameters of one transformer layer on one rank (graph/params.layer_params): what the per-layer part of the
    step's optimizer work scales with (step_cost_per_param)."""
    seq_length: int = 0
    """Tokens per sample: with the micro-batch and hidden size, the bytes of each in-layer TP all-reduce."""
    dp_grad_s: float = 0.0
    """Predicted exposed data-parallel gradient all-reduce of the step (StepEstimate breakdown comm_dp_grad)."""
    composed_dp_s: float | None = None
    """For a composed single-stage row (is_composed), the all-reduce vTrain added to its DP = 1 row: its NCCL table's
    ring time up to 1 GiB of gradients, bytes / the table's 1 GiB bus bandwidth above (no 2(n-1)/n factor;
    bench_validation.py --audit-s24); None for any other row."""


def choice_index(points, predicted) -> int | None:
    """The row the tuner picks: the fastest predicted among the rows that fit (None if none fits)."""
    fitting = [i for i, p in enumerate(points) if p.fits]
    return min(fitting, key=lambda i: predicted[i]) if fitting else None


def is_hit(points, predicted, noise: float = 0.0, measured=None) -> bool:
    """Top-1 within 5 % of the measured best; with `noise`, every row within that fraction of the fastest
    counts as the best (the slowest of them is the reference). `measured` replaces the rows' measured times."""
    i = choice_index(points, predicted)
    if i is None:
        return False
    times = [p.measured_s for p in points] if measured is None else list(measured)
    fastest = min(times)
    best = max(t for t in times if t <= fastest * (1 + noise))
    return times[i] <= (1 + WITHIN) * best


def count_hits(groups, predicted_of, noise: float = 0.0) -> int:
    """Groups (lists of RowPoint) whose pick by `predicted_of` is a hit."""
    return sum(is_hit(pts, [predicted_of(p) for p in pts], noise) for pts in groups)


def bilinear_fit(points, value) -> np.ndarray | None:
    """Least squares t = a n L + b n + c L + d over one family's rows (n micro-batches, L layers): per layer and
    micro-batch, per micro-batch outside the layers, per layer and step, per step. None when under-determined."""
    if len({p.num_layers for p in points}) < 2 or len({(p.num_layers, p.num_microbatches) for p in points}) < 4:
        return None
    a = np.array([bilinear_terms(p) for p in points])
    return np.linalg.lstsq(a, np.array([value(p) for p in points]), rcond=None)[0]


def bilinear_terms(p: RowPoint) -> np.ndarray:
    """(n L, n, L, 1) of a row: what the four parts of bilinear_fit multiply."""
    return np.array([p.num_microbatches * p.num_layers, p.num_microbatches, p.num_layers, 1.0])


def by_family(points) -> dict:
    """family -> its rows (RowPoint.family: the rows one bilinear fit spans)."""
    families: dict = defaultdict(list)
    for p in points:
        families[p.family].append(p)
    return families


COMPONENTS = {"per layer and micro-batch": (0,), "per micro-batch outside the layers": (1,),
              "per step": (2, 3), "per layer and micro-batch + per micro-batch": (0, 1), "all four": (0, 1, 2, 3)}
"""Parts of the step time the --misses oracle takes from the measurements (indices into bilinear_fit)."""


def component_oracle(points, parts: tuple[int, ...]) -> dict:
    """RowPoint -> predicted time with the `parts` of its family's bilinear fit replaced by the measured ones."""
    out = {}
    for rows in by_family(points).values():
        measured, predicted = bilinear_fit(rows, lambda p: p.measured_s), bilinear_fit(rows, lambda p: p.predicted_s)
        delta = np.zeros(4)
        if measured is not None and predicted is not None:
            delta[list(parts)] = (measured - predicted)[list(parts)]
        for p in rows:
            out[p] = p.predicted_s + float(bilinear_terms(p) @ delta)
    return out


# --- How many independent measurements the groups rest on, and what a perfect model could score on them. ---

def cell_key(p: RowPoint) -> tuple:
    """(source, hidden, TP, micro-batch): the rows that share one per-layer cost."""
    return (p.family[0],) + p.cell


def layer_cost_by_family(points, value=lambda p: p.measured_s) -> dict:
    """family -> the cost of one layer and micro-batch over the whole model (the bilinear fit's per-layer slope
    times pp: a stage holds L / pp layers, so a pp-stage family's slope is a / pp), of the measured times or of
    `value`; families whose fit is under-determined are left out."""
    out = {}
    for fam, rows in by_family(points).items():
        fit = bilinear_fit(rows, value)
        if fit is not None:
            out[fam] = float(fit[0]) * fam[3]
    return out


def layer_costs_by_cell(points, value=lambda p: p.measured_s) -> dict:
    """(source, hidden, TP, micro-batch) -> the per-layer costs (layer_cost_by_family) of the families in the cell."""
    by_cell: dict = defaultdict(list)
    for fam, a in layer_cost_by_family(points, value).items():
        by_cell[(fam[0], fam[1], fam[2], fam[4])].append(a)
    return by_cell


SAME_MEASUREMENT = 0.005
"""Relative distance from its cell's median within which a family's per-layer cost counts as the same number:
real runs of other depths, pipeline splits and DP sizes scatter by more than this run to run."""


def composition_audit(points) -> dict:
    """Per source: rows, families with a per-layer fit, (hidden, TP, micro-batch) cells, and how many families of
    cells with several (other pp, other DP) carry their cell's per-layer cost to within SAME_MEASUREMENT. All of
    them doing so says the rows were composed from one per-layer number per cell: the cell is one measurement,
    however many rows and groups carry it."""
    by_cell = layer_costs_by_cell(points)
    out: dict = {}
    for source in sorted({p.family[0] for p in points}):
        cells = {c: v for c, v in by_cell.items() if c[0] == source}
        shared = [v for v in cells.values() if len(v) >= 2]
        same = sum(abs(a / float(np.median(v)) - 1) <= SAME_MEASUREMENT for v in shared for a in v)
        out[source] = {"rows": sum(p.family[0] == source for p in points), "families": sum(map(len, cells.values())),
                       "cells": len(cells), "shared_families": sum(map(len, shared)), "same": same}
    return out


def layer_linearity(points) -> dict:
    """Per source: families with three or more layer counts and the largest residual (seconds, and relative to the
    slope) of their per-micro-batch slope (least squares over the micro-batch count at one depth and DP) against a
    straight line in the layer count. Separate runs of 12, 16, 20 and 24 layers miss a line by their run-to-run
    noise; a residual of microseconds says the per-micro-batch time was composed as layers x one per-layer number."""
    slopes: dict = defaultdict(dict)
    by_run: dict = defaultdict(list)
    for p in points:
        by_run[(p.family, p.num_layers)].append(p)
    for (fam, layers), rows in by_run.items():
        if len({p.num_microbatches for p in rows}) >= 2:
            slopes[fam][layers] = float(np.polyfit([p.num_microbatches for p in rows], [p.measured_s for p in rows], 1)[0])
    out: dict = defaultdict(lambda: [0, 0.0, 0.0])
    for fam, by_layers in slopes.items():
        if len(by_layers) < 3:
            continue
        layers = np.array(sorted(by_layers), dtype=float)
        s = np.array([by_layers[int(x)] for x in layers])
        residual = float(np.abs(s - np.polyval(np.polyfit(layers, s, 1), layers)).max())
        entry = out[fam[0]]
        entry[0] += 1
        entry[1] = max(entry[1], residual)
        entry[2] = max(entry[2], residual / float(s.min()))
    return dict(out)


def cell_costs(points, value=lambda p: p.measured_s) -> dict:
    """(source, hidden, TP, micro-batch) -> median over its families of the per-layer cost (layer_cost_by_family)."""
    return {c: float(np.median(v)) for c, v in layer_costs_by_cell(points, value).items()}


def monotonicity_violations(points) -> list[tuple[tuple, int, int, float, float]]:
    """((source, hidden, TP), smaller micro-batch, larger micro-batch, measured and predicted relative change of
    the per-layer cost) where the larger micro-batch measures cheaper although the prediction (same graph rules:
    e.g. Megatron's fused-softmax fallback at some shapes) does not: more work on the same ops and the same host
    issue, so no cost model that grows with work can order the pair; its size bounds the cells' measurement error."""
    measured, predicted = cell_costs(points), cell_costs(points, lambda p: p.predicted_s)
    out = []
    for (src, h, tp, mbs), a in sorted(measured.items()):
        for (src2, h2, tp2, mbs2), a2 in sorted(measured.items()):
            if (src2, h2, tp2) != (src, h, tp) or mbs2 <= mbs or a2 >= a:
                continue
            pa, pa2 = predicted.get((src, h, tp, mbs)), predicted.get((src2, h2, tp2, mbs2))
            if pa and pa2 and pa2 >= pa:
                out.append(((src, h, tp), mbs, mbs2, a2 / a - 1, pa2 / pa - 1))
    return out


def equal_work_steps(layer_cost: dict) -> list[tuple]:
    """What tensor parallelism adds at equal per-rank work. `layer_cost` maps (hidden, tp, micro-batch) to (measured,
    predicted) seconds per layer and micro-batch. Cells of one hidden size with the same micro-batch / TP run the
    same per-rank GEMM and attention FLOPs (Megatron splits the QKV / MLP columns and the heads by TP; each rank
    sees micro-batch x sequence tokens), so going up in TP at equal work adds only the in-layer all-reduces (6 per
    layer under full recompute, of micro-batch x sequence x hidden x 2 bytes) and their host calls. Returns
    (hidden, micro-batch / TP, tp from, tp to, measured step s, predicted step s) for each pair of consecutive TPs."""
    from fractions import Fraction

    by_work: dict = defaultdict(list)
    for (h, tp, mbs), (measured_s, predicted_s) in layer_cost.items():
        by_work[(h, Fraction(mbs, tp))].append((tp, measured_s, predicted_s))
    steps = []
    for (h, work), cells in sorted(by_work.items()):
        cells.sort()
        for (tp0, m0, p0), (tp1, m1, p1) in zip(cells, cells[1:]):
            steps.append((h, work, tp0, tp1, m1 - m0, p1 - p0))
    return steps


def noise_floor(groups, sigma: float, trials: int = 200, seed: int = 0) -> float:
    """Mean top-1-within-5 % count of a perfect model when each (source, hidden, TP, micro-batch) cell's per-layer
    cost carries an independent measurement error N(0, sigma): the model ranks by the measured times, the error
    moves each cell's rows by sigma x their per-layer part (a n L of the bilinear fit; rows without a fit keep
    their time). The count a model can expect to reach on measurements with that error."""
    everything = [p for pts in groups for p in pts]
    by_fam = layer_cost_by_family(everything)
    per_layer = {p: by_fam.get(p.family, 0.0) / p.family[3] * p.num_microbatches * p.num_layers for p in everything}
    cells = sorted({cell_key(p) for p in everything})
    index = {c: i for i, c in enumerate(cells)}
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(trials):
        eps = rng.normal(0.0, sigma, len(cells))
        for pts in groups:
            observed = [p.measured_s + eps[index[cell_key(p)]] * per_layer[p] for p in pts]
            hits += is_hit(pts, [p.measured_s for p in pts], measured=observed)
    return hits / trials


def report_resolution(results: list, sigmas: tuple[float, ...] = (0.02, 0.04, 0.06, 0.08)) -> None:
    """What the measurements can resolve: the composition audit, the work-monotonicity violations and the noise
    floor of a perfect model (see the functions above)."""
    groups = [r.points for r in results if r.points]
    everything = [p for pts in groups for p in pts]
    print("\nper-layer cost per (hidden, TP, micro-batch) cell, across the families (pp, DP) that share it:")
    for source, a in composition_audit(everything).items():
        print(f"  {source:<6} {a['rows']:4d} rows, {a['families']:3d} families with a per-layer fit in {a['cells']:3d} cells;"
              f" {a['same']}/{a['shared_families']} families of shared cells within {100 * SAME_MEASUREMENT:.1f} % of their cell")
    for source, (n, res_s, rel) in sorted(layer_linearity(everything).items()):
        print(f"  {source:<6} per-micro-batch slope against a line in the layer count, {n} families with >= 3 depths:"
              f" largest residual {1e6 * res_s:.1f} us ({100 * rel:.4f} % of the slope)")
    bad = monotonicity_violations(everything)
    print(f"cells whose larger micro-batch measures cheaper per layer, predicted not ({len(bad)}): " + ", ".join(
        f"{s} h{h} TP{tp} mbs {m1}->{m2} {100 * d:+.1f} % (predicted {100 * pd:+.1f} %)" for (s, h, tp), m1, m2, d, pd in bad))
    unorderable = {(s, h, tp, m) for (s, h, tp), m1, m2, _, _ in bad for m in (m1, m2)}
    misses = [(best, chosen) for best, chosen in (miss_pair(pts) for pts in groups) if best is not None]
    involved = sum(cell_key(b) in unorderable or cell_key(c) in unorderable for b, c in misses)
    print(f"misses whose measured best or choice lies in one of those cells: {involved}/{len(misses)}")
    print("perfect model against a per-cell measurement error sigma (mean over 200 draws): " + ", ".join(
        f"{100 * s:.0f} % -> {noise_floor(groups, s):.1f}/{len(groups)}" for s in sigmas))


def miss_pair(points) -> tuple:
    """(measured best, tuner's choice) of a missed group, (None, None) for a hit or a group with no choice."""
    predicted = [p.predicted_s for p in points]
    i = choice_index(points, predicted)
    if not points or i is None or is_hit(points, predicted):
        return None, None
    return min(points, key=lambda p: p.measured_s), points[i]

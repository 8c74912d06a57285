"""`bench_tune_ranking.py --classify`: every ranking miss in one class, with its pair side by side.

Per missed group: the measured best and the tuner's choice (layout and DP), the measured gap (choice / best - 1), the
predicted gap, and one class, tested in this order:

- noise: the measured gap is within the run-to-run spread given with `--noise PCT`. No dev.csv source states one
  (S24's rows are composed from one per-layer number per cell, ranking_diagnostics.is_composed and composition_audit;
  S23 gives one time per configuration), so at the default 0 no miss is put down to noise;
- outlier cell: the best's or the choice's (source, hidden, TP, micro-batch) cell is at odds with its neighbours by
  more than the ranking's 5 %: it contradicts the work order (ranking_consistency.flagged_cells) or measures above
  what the other micro-batches of its (hidden, TP) family allow, launch queue included (family_bound_excess). A
  source that composes every row of a cell from one number misses every group that number decides;
- systematic: the term whose error most favours the choice (ranking_terms.classify_misses, the layers term named by
  how the two cells relate) is shared by two or more misses not classed above: one model error, several misses;
- single: a term only one such miss has.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ranking_consistency import flagged_cells
from ranking_diagnostics import WITHIN, cell_costs, cell_key, count_hits
from ranking_terms import classify_misses
from work_order import CONTRADICTION


@dataclass(frozen=True)
class ClassifiedMiss:
    """One missed group: its pair, the two gaps and the class (module docstring)."""
    source: str
    best: str
    choice: str
    measured_gap: float
    """Measured time of the choice / the measured best - 1."""
    predicted_gap: float
    """Predicted time of the choice / predicted time of the best - 1 (negative: the model prefers the choice)."""
    kind: str
    """noise, outlier cell, systematic or single."""
    why: str


QUEUE_EXCESS = 0.12
"""How far above max(GPU busy, host issue) the launch queue may put a layer: where the two are close, each pass's
queue starts empty (schedule/compose.chunk_pass) and the GPU waits on the host's first ops. As the schedule prices
S24's cells the excess is largest at h2048 TP8 mbs4 (+11.8 %) and h2048 TP1 mbs1 (+10.4 %), 1-3 % for clearly host-
or GPU-bound ones (`bench_tune_ranking.py --layer-ops`: queued against max)."""


def family_bound_excess(points, tolerance: float = CONTRADICTION) -> dict[tuple, str]:
    """Cells (source, hidden, TP, micro-batch m) whose measured per-layer cost t(m) exceeds by more than `tolerance`
    the most its own family (same source, hidden, TP) allows, max(host cap, GPU cap) x (1 + QUEUE_EXCESS):
    - host cap, min t(lo) over smaller micro-batches lo: the host issues the same ops at every micro-batch (the
      launches do not depend on the shapes, predict/host_issue.py; Megatron's fused softmax only falls back at a
      smaller attention batch, b x heads / TP not a multiple of 4, adding ops to lo, not to m), and no layer is
      shorter than its host time;
    - GPU cap, min t(hi) x p(m) / p(hi) over larger micro-batches hi: the kernels of m take at most the part of
      t(hi) that the predicted per-layer costs p give m (the operator samples' growth with the micro-batch; p holds
      the host floor, which only raises p(m) / p(hi), so the cap is loose);
    - the larger of the two caps, not their sum: the host runs ahead of the GPU through the launch queue, so a layer
      takes its host or its GPU time, whichever is longer (S24's host-bound cells measure their host time: h1024 TP1
      mbs1 3.00 ms per layer against 2.96 ms of host issue and 1.66 ms of kernels; ranking_layer_ops), up to what
      the launch queue adds where the two are close (QUEUE_EXCESS; the caps, measured on clearly host- or GPU-bound
      cells, hold little of it).
    A cell needs a smaller and a larger micro-batch measured. Cell -> why, in words."""
    measured, predicted = cell_costs(points), cell_costs(points, lambda p: p.predicted_s)
    out = {}
    for cell, t in sorted(measured.items()):
        family = [(c, measured[c]) for c in measured if c[:3] == cell[:3] and c in predicted]
        lower = [tc for c, tc in family if c[3] < cell[3]]
        upper = [tc * predicted[cell] / predicted[c] for c, tc in family if c[3] > cell[3]]
        if not lower or not upper or cell not in predicted:
            continue
        host_cap, gpu_cap = min(lower), min(upper)
        bound = max(host_cap, gpu_cap) * (1 + QUEUE_EXCESS)
        if t > (1 + tolerance) * bound:
            out[cell] = (f"{_name(cell)} {1e3 * t:.2f} ms is {100 * (t / bound - 1):+.1f} % over the {1e3 * bound:.2f} "
                         f"ms its family allows (host cap {1e3 * host_cap:.2f}, GPU cap {1e3 * gpu_cap:.2f}, "
                         f"+{100 * QUEUE_EXCESS:.0f} % launch queue)")
    return out


def outlier_cells(points, tolerance: float = CONTRADICTION) -> dict[tuple, list[str]]:
    """The cells at odds with their neighbours: flagged by the work order or over their family's bound."""
    out = {cell: list(why) for cell, why in flagged_cells(points, tolerance).items()}
    for cell, why in family_bound_excess(points, tolerance).items():
        out.setdefault(cell, []).append(why)
    return out


def hits_without(groups, cells) -> tuple[int, int, int]:
    """(top-1 hits, groups, rows) over `groups` without the rows of `cells`; a group left with fewer than two
    distinct configurations drops out (ranking_consistency.report_flagged's rule)."""
    kept = [[p for p in pts if cell_key(p) not in cells] for pts in groups]
    kept = [pts for pts in kept if len({p.layout for p in pts}) >= 2]
    return count_hits(kept, lambda p: p.predicted_s), len(kept), sum(map(len, kept))


def classify(groups, noise: float = 0.0) -> list[ClassifiedMiss]:
    """One ClassifiedMiss per missed group of `groups` (lists of RowPoint), in classify_misses' order."""
    misses = classify_misses(groups)
    odd = outlier_cells([p for pts in groups for p in pts])
    kinds = []
    for best, chosen, _, term in misses:
        sides = [f"{side} {_name(cell_key(p))}" for side, p in (("best", best), ("choice", chosen))
                 if cell_key(p) in odd]
        if chosen.measured_s / best.measured_s - 1 <= noise:
            kinds.append(("noise", f"measured gap within the {100 * noise:.1f} % given"))
        else:
            kinds.append(("outlier cell", " and ".join(sides)) if sides else (None, term))
    shared = Counter(why for kind, why in kinds if kind is None)
    return [ClassifiedMiss(best.family[0], _layout(best), _layout(chosen), chosen.measured_s / best.measured_s - 1,
                           chosen.predicted_s / best.predicted_s - 1,
                           kind or ("systematic" if shared[why] >= 2 else "single"), why)
            for (best, chosen, _, _), (kind, why) in zip(misses, kinds)]


def report_classes(results: list, noise: float = 0.0) -> None:
    """Print the outlier cells, then each miss with its class, then the count per class."""
    groups = [r.points for r in results if r.points]
    everything = [p for pts in groups for p in pts]
    print("\nmeasured cells over their family's bound (family_bound_excess: the larger of host cap = a smaller "
          "micro-batch's time and GPU cap = a larger one's scaled by the predicted growth, plus the launch queue):")
    for why in family_bound_excess(everything).values():
        print(f"  {why}")
    rows = classify(groups, noise)
    print(f"\nmisses by class (noise given: {100 * noise:.1f} %; ranking_classes.py), measured best -> choice, "
          "gap measured / predicted:")
    for m in rows:
        print(f"  {m.source:<4} {m.best:<36} -> {m.choice:<36} {100 * m.measured_gap:+6.1f} / "
              f"{100 * m.predicted_gap:+6.1f} %  {m.kind}: {m.why}")
    counts = Counter(m.kind for m in rows)
    print(f"misses by class ({len(rows)}): " + ", ".join(f"{k} {counts[k]}" for k in
                                                        ("noise", "outlier cell", "systematic", "single")))
    odd = outlier_cells(everything)
    hits, kept, n_rows = hits_without(groups, odd)
    print(f"top-1 within {100 * WITHIN:.0f} % without the rows of the {len(odd)} outlier cells: {hits}/{kept} groups "
          f"({n_rows} of {len(everything)} rows; the headline stays the count over all rows)")


def _layout(p) -> str:
    return f"L{p.num_layers} h{p.cell[0]} {p.layout} dp{p.family[5]}"


def _name(cell: tuple) -> str:
    return f"{cell[0]} h{cell[1]} TP{cell[2]} mbs{cell[3]}"

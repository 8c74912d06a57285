"""Which model term decides each ranking miss (bench_tune_ranking.py --misses): the step time of every row split into
terms with a physical meaning, measured and predicted, and each miss's error on the gap between its measured best
and the tuner's choice split the same way.

A family's rows (ranking_diagnostics.RowPoint.family: same source, hidden, TP, pp, micro-batch, DP) are fitted, as
measured and as predicted, to t - dp = a n L + b n + c L + d (ranking_diagnostics.bilinear_fit; n micro-batches,
L layers, dp the data-parallel all-reduce where it is known on both sides). Under 1F1B with pp stages the slowest
stage runs n + pp - 1 passes of L / pp layers (DeepSpeed's TrainSchedule and Megatron's 1F1B pair the warm-up and
cool-down passes: the bubble is pp - 1 passes), so the per-layer slope a = a_layer / pp, and c holds the bubble's
layers, (pp - 1) a, on top of the per-step work. The terms of a row:

- layers: a L (n + pp - 1), the transformer layers on the critical path, bubble passes included;
- outside the layers: b n (embedding, LM head, loss, engine bookkeeping per micro-batch);
- DP all-reduce: the composed S24 rows' table all-reduce (measured side RowPoint.composed_dp_s, vTrain's own
  addition; predicted side the step's exposed comm_dp_grad); zero for rows without one;
- per step: (c - (pp - 1) a) L + d, what is left: optimizer step, gradient bookkeeping, pipeline fill beyond the
  layers (any other DP all-reduce sits here too).

Per miss, the error of each term on the gap (choice - best; predicted - measured) says which term hides the
measured gap; the layers term is further named by how the two cells relate: equal per-rank work at another TP
(Megatron splits GEMM columns and heads by TP: only the in-layer all-reduces and the ops TP does not split differ),
the same TP at another micro-batch, or neither. The attention and the TP all-reduce inside a layer are not
separable on the measured side (one per-layer number per cell); the relation says which of them can differ."""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

import numpy as np

from ranking_consistency import flagged_cells
from ranking_diagnostics import RowPoint, bilinear_fit, by_family, cell_costs, cell_key, equal_work_steps, miss_pair

TERMS = ("layers", "outside the layers", "DP all-reduce", "per step", "rest")
"""The last, rest, is nonzero only for a row whose family has no fit of its own: its layers are priced from its
cell's per-layer cost (the families of one S24 cell share it, ranking_diagnostics.composition_audit) and everything
else is left unsplit in rest."""


def _dp_parts(p: RowPoint) -> tuple[float, float]:
    """(measured, predicted) seconds of the row's data-parallel all-reduce where both are known, else (0, 0)."""
    if p.composed_dp_s is None:
        return 0.0, 0.0
    return p.composed_dp_s, p.dp_grad_s


def _terms(p: RowPoint, fit: np.ndarray, dp_s: float) -> np.ndarray:
    """The TERMS of one row (rest 0) from its family's fit (a, b, c, d) of t - dp; pp = p.family[3]."""
    a, b, c, d = (float(x) for x in fit)
    pp, n, layers = p.family[3], p.num_microbatches, p.num_layers
    return np.array([a * layers * (n + pp - 1), b * n, dp_s, (c - (pp - 1) * a) * layers + d, 0.0])


def _cell_terms(p: RowPoint, layer_s: float, total_s: float, dp_s: float) -> np.ndarray:
    """TERMS of a row without a family fit: layers from its cell's per-layer cost over the whole model (layer_s;
    a stage holds L / pp of them), the DP all-reduce, the rest of total_s unsplit."""
    layers = layer_s / p.family[3] * p.num_layers * (p.num_microbatches + p.family[3] - 1)
    return np.array([layers, 0.0, dp_s, 0.0, total_s - layers - dp_s])


def term_errors(points) -> dict:
    """RowPoint -> (predicted - measured) seconds of each of TERMS. A family with a bilinear fit on both sides is
    split by it (the terms sum to the row's error up to the fits' residuals); a row of any other family whose cell
    has a per-layer cost on both sides by _cell_terms; rows with neither are left out."""
    out = {}
    cells_m = cell_costs(points, lambda p: p.measured_s - _dp_parts(p)[0])
    cells_p = cell_costs(points, lambda p: p.predicted_s - _dp_parts(p)[1])
    for rows in by_family(points).values():
        measured = bilinear_fit(rows, lambda p: p.measured_s - _dp_parts(p)[0])
        predicted = bilinear_fit(rows, lambda p: p.predicted_s - _dp_parts(p)[1])
        for p in rows:
            dp_m, dp_p = _dp_parts(p)
            if measured is not None and predicted is not None:
                out[p] = _terms(p, predicted, dp_p) - _terms(p, measured, dp_m)
            elif cell_key(p) in cells_m and cell_key(p) in cells_p:
                out[p] = (_cell_terms(p, cells_p[cell_key(p)], p.predicted_s, dp_p)
                          - _cell_terms(p, cells_m[cell_key(p)], p.measured_s, dp_m))
    return out


def layer_relation(best: RowPoint, chosen: RowPoint) -> str:
    """How the two rows' (hidden, TP, micro-batch) cells relate, which says what a per-layer error between them can
    be: at equal per-rank work (same hidden, micro-batch / TP) only the TP all-reduces and the unsplit ops differ."""
    (h0, tp0, m0), (h1, tp1, m1) = best.cell, chosen.cell
    if h0 != h1:
        return "other hidden size"
    if (h0, tp0, m0) == (h1, tp1, m1):
        return "same cell"
    if Fraction(m0, tp0) == Fraction(m1, tp1):
        return "TP step at equal per-rank work"
    if tp0 == tp1:
        return "micro-batch at one TP"
    return "TP and per-rank work both differ"


def classify_misses(groups) -> list[tuple[RowPoint, RowPoint, np.ndarray | None, str]]:
    """(measured best, choice, error of each term on the gap choice - best or None without a fit, deciding term)
    per missed group. The deciding term is the one whose error most favours the choice (most negative), the layers
    term named by layer_relation."""
    errors = term_errors([p for pts in groups for p in pts])
    out = []
    for pts in groups:
        best, chosen = miss_pair(pts)
        if best is None:
            continue
        if best not in errors or chosen not in errors:
            out.append((best, chosen, None, "no bilinear split"))
            continue
        delta = errors[chosen] - errors[best]
        k = int(np.argmin(delta))
        term = TERMS[k] if k else f"layers: {layer_relation(best, chosen)}"
        out.append((best, chosen, delta, term))
    return out


def report_terms(groups) -> None:
    """Per miss, the error of each term on the gap (% of the measured gap) and the deciding term, for the layers
    which side of the pair carries the error, and whether the best's or the choice's cell contradicts the work order
    (ranking_consistency.flagged_cells: no cost model growing with work prices it); then the count per term, over
    all misses and over those with neither cell flagged."""
    rows = classify_misses(groups)
    everything = [p for pts in groups for p in pts]
    errors, flagged = term_errors(everything), flagged_cells(everything)
    print("\nper miss, error of each term on the gap choice - best (predicted - measured, % of the measured gap; "
          "ranking_terms.py):")
    print(f"  {'best':<32} {'choice':<32} {'meas':>6} {'pred':>6}  " + "  ".join(f"{t[:10]:>10}" for t in TERMS)
          + "  deciding")
    counts: dict = defaultdict(int)
    clean: dict = defaultdict(int)
    for best, chosen, delta, term in rows:
        counts[term] += 1
        odd = [side for side, p in (("best", best), ("choice", chosen)) if cell_key(p) in flagged]
        clean[term] += not odd
        gap = chosen.measured_s - best.measured_s
        cols = ("  ".join(f"{100 * x / gap:+10.0f}" for x in delta) if delta is not None
                else "  ".join(f"{'-':>10}" for _ in TERMS))
        side = ""
        if delta is not None and term.startswith("layers"):
            side = (f" (best's layers {100 * errors[best][0] / best.measured_s:+.1f} %, choice's "
                    f"{100 * errors[chosen][0] / chosen.measured_s:+.1f} % of their step)")
        print(f"  {_label(best):<32} {_label(chosen):<32} {chosen.measured_s / best.measured_s:6.3f} "
              f"{chosen.predicted_s / best.predicted_s:6.3f}  {cols}  {term}{side}"
              + (f" [flagged cell: {', '.join(odd)}]" if odd else ""))
    for label, by_term in (("all misses", counts), ("neither cell flagged", clean)):
        print(f"misses by deciding term, {label} ({sum(by_term.values())}): " + ", ".join(
            f"{t} {n}" for t, n in sorted(by_term.items(), key=lambda kv: -kv[1]) if n))
    report_tp_steps(everything)


def tp_steps_by_added_work(points, dtype_bytes: int = 2) -> dict:
    """(source, TP from, TP to, all-reduce bytes at TP from, at TP to) -> [(hidden, micro-batch / TP, measured step
    s, predicted step s)]: the equal-work TP steps (ranking_diagnostics.equal_work_steps, per layer and micro-batch)
    grouped by what the larger TP adds. Megatron's in-layer all-reduces carry micro-batch x sequence x hidden x 2
    bytes and the ops TP does not split (norms, residual adds, hidden dropout) touch the same elements, so two steps
    under one key add the same collective traffic, the same host calls and the same unsplit bytes; only the split
    GEMM and attention shapes differ, at equal FLOPs. A TP-communication or unsplit-op mechanism moves such steps
    alike."""
    seqs = {p.family[0]: p.seq_length for p in points}
    measured, predicted = cell_costs(points), cell_costs(points, lambda p: p.predicted_s)
    out: dict = defaultdict(list)
    for source in sorted({c[0] for c in measured}):
        costs = {c[1:]: (measured[c], predicted[c]) for c in measured if c[0] == source and c in predicted}
        for h, work, tp0, tp1, m_s, p_s in equal_work_steps(costs):
            per_call = [0 if tp == 1 else int(work * tp) * seqs[source] * h * dtype_bytes for tp in (tp0, tp1)]
            out[(source, tp0, tp1, *per_call)].append((h, work, m_s, p_s))
    return dict(out)


def report_tp_steps(points) -> None:
    """tp_steps_by_added_work, printed: keys with several steps are where one mechanism would have to agree."""
    print("\nequal-work TP steps by what the larger TP adds (all-reduce bytes per call from / to; ms per layer and "
          "micro-batch, measured / predicted):")
    for (source, tp0, tp1, b0, b1), steps in sorted(tp_steps_by_added_work(points).items()):
        cells = ", ".join(f"h{h} mbs/TP {str(w)}: {1e3 * m:+.2f} / {1e3 * q:+.2f}" for h, w, m, q in steps)
        print(f"  {source} TP {tp0} -> {tp1}, {b0 / 2**20:4.0f} -> {b1 / 2**20:4.0f} MiB: {cells}")


def _label(p: RowPoint) -> str:
    return f"{p.family[0]} L{p.num_layers} h{p.cell[0]} {p.layout.replace(' rc:full', '')}"

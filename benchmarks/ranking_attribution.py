"""The --misses report of benchmarks/bench_tune_ranking.py (split from ranking_diagnostics.py, which holds the row
model, the hit rule and the bilinear split it uses): per missed group the measured best and the tuner's choice, the
per-layer cost of their cells, the single part of the step time that flips it (miss_attribution) and the part whose
error most favours the choice (miss_cause), then the model term that decides it (ranking_terms.py); the oracles
that re-rank every group with part of the prediction taken from the measurements (component_oracle, one cell,
composition_oracle); and the per-step cost per parameter."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ranking_diagnostics import (COMPONENTS, RowPoint, bilinear_fit, bilinear_terms, by_family, cell_costs, cell_key,
                                 component_oracle, count_hits, is_hit, miss_pair)
from ranking_terms import report_terms


def composition_oracle(points) -> dict:
    """RowPoint -> predicted time with a composed row's data-parallel all-reduce priced as vTrain composed it
    (RowPoint.composed_dp_s) instead of as the model prices it; other rows as predicted. Above 1 GiB of gradients
    the composition leaves out the ring's 2(n-1)/n (1.5x at DP 4, 1.75x at DP 8), which a real all-reduce pays:
    the groups this flips are misses of the rows' composition, not of the model."""
    return {p: p.predicted_s if p.composed_dp_s is None else p.predicted_s - p.dp_grad_s + p.composed_dp_s
            for p in points}


def report_misses(results: list, noise: float) -> None:
    """Which rows decide each miss, which part of the step time and which (hidden, TP, micro-batch) cell flips
    them (oracles: that part or that cell taken from the measurements), and the figure with a noise band.
    `results`: bench_tune_ranking's GroupResult per group (its `key` label and its RowPoint `points`)."""
    groups = [r.points for r in results if r.points]
    pairs: dict = defaultdict(int)
    print("\nmisses: measured best vs the tuner's choice (signed error of the prediction), runner-up gap:")
    for r in results:
        best, chosen = miss_pair(r.points)
        if best is None:
            continue
        gap = sorted(p.measured_s for p in r.points)[1] / best.measured_s - 1
        pairs[(best.cell, chosen.cell)] += 1
        print(f"  {r.key:<52} best {_describe(best)}  chose {_describe(chosen)}  runner-up +{100 * gap:.1f} %")
    print("(hidden, TP, micro-batch) of the best -> of the choice: " + ", ".join(
        f"{b} -> {c} x{n}" for (b, c), n in sorted(pairs.items(), key=lambda kv: -kv[1])))
    report_attribution(groups)
    report_terms(groups)
    base = count_hits(groups, lambda p: p.predicted_s)
    print(f"\noracles (re-ranked by direct prediction; base {base}/{len(groups)}):")
    everything = [p for pts in groups for p in pts]
    for label, parts in COMPONENTS.items():
        print(f"  {label} from the measurements: "
              f"{count_hits(groups, component_oracle(everything, parts).__getitem__)}/{len(groups)}")
    composed = composition_oracle(everything)
    print(f"  composed rows' data-parallel all-reduce as vTrain composed it (composition_oracle): "
          f"{count_hits(groups, composed.__getitem__)}/{len(groups)}")
    cells = sorted({(p.family[0],) + p.cell for p in everything})
    flips = sorted(((count_hits(groups, lambda p, c=c: p.measured_s if (p.family[0],) + p.cell == c
                                else p.predicted_s), c) for c in cells), reverse=True)
    print("  one (source, hidden, TP, micro-batch) cell priced at its measured times: "
          + ", ".join(f"{c[0]} h{c[1]} TP{c[2]} mbs{c[3]} -> {n}" for n, c in flips[:5]))
    if noise > 0:
        ties = sum(1 for pts in groups if len(pts) > 1 and
                   sorted(p.measured_s for p in pts)[1] <= min(p.measured_s for p in pts) * (1 + noise))
        print(f"noise band {100 * noise:.1f} %: {ties} groups have a runner-up within it; top-1 within 5 % "
              f"{base}/{len(groups)} as measured, {count_hits(groups, lambda p: p.predicted_s, noise)}/{len(groups)} "
              "with every row in the band counted as the best")


def _describe(p: RowPoint) -> str:
    return f"{p.layout} {1e3 * p.measured_s:.1f} ms ({100 * (p.predicted_s / p.measured_s - 1):+.1f} %)"


# --- Which part of the step time decides each miss, and what the per-step part costs per parameter. ---

def miss_attribution(groups) -> list[tuple[RowPoint, RowPoint, tuple[str, ...]]]:
    """(measured best, choice, parts) per missed group: the parts of the bilinear split (COMPONENTS' single parts:
    per layer and micro-batch, per micro-batch outside the layers, per step) that, taken from the measurements
    alone, make the group a hit. An empty tuple: no single part does (the misses need two parts right at once)."""
    everything = [p for pts in groups for p in pts]
    single = {label: COMPONENTS[label] for label in ("per layer and micro-batch", "per micro-batch outside the layers",
                                                     "per step")}
    oracles = {label: component_oracle(everything, parts) for label, parts in single.items()}
    out = []
    for pts in groups:
        best, chosen = miss_pair(pts)
        if best is None:
            continue
        flips = tuple(label for label, o in oracles.items() if is_hit(pts, [o[p] for p in pts]))
        out.append((best, chosen, flips))
    return out


PARTS = ("per layer and micro-batch", "per micro-batch outside the layers", "per layer and step", "per step")
"""The four terms of bilinear_fit, in its order (a n L, b n, c L, d)."""


def part_errors(points) -> dict:
    """RowPoint -> (predicted - measured) seconds of each bilinear part at the row's (n, L), from its family's two
    fits; rows of a family without a fit are left out. The four sum to the row's error up to the fits' residuals."""
    out = {}
    for rows in by_family(points).values():
        measured, predicted = bilinear_fit(rows, lambda p: p.measured_s), bilinear_fit(rows, lambda p: p.predicted_s)
        if measured is None or predicted is None:
            continue
        for p in rows:
            out[p] = bilinear_terms(p) * (predicted - measured)
    return out


def miss_cause(best: RowPoint, chosen: RowPoint, errors: dict) -> tuple[str, float] | None:
    """The part whose error most favours the choice over the best: the most negative term of (choice's part error
    - best's part error), and how much of the measured gap (choice - best), which the prediction got the wrong way,
    that term hides (1.0: all of it). None when either row's family has no fit (a bilinear split needs 2 layer
    counts and 4 (L, n) pairs)."""
    if best not in errors or chosen not in errors:
        return None
    delta = errors[chosen] - errors[best]
    k = int(np.argmin(delta))
    return PARTS[k], -float(delta[k]) / (chosen.measured_s - best.measured_s)


def report_attribution(groups) -> None:
    """Per miss: the per-layer cost (measured / predicted, ms per layer and micro-batch over the model) of the cells
    of its best and its choice, and the single part that flips it (miss_attribution)."""
    everything = [p for pts in groups for p in pts]
    measured, predicted = cell_costs(everything), cell_costs(everything, lambda p: p.predicted_s)

    def cell(p: RowPoint) -> str:
        c = cell_key(p)
        if c not in measured or c not in predicted:
            return f"h{c[1]} TP{c[2]} mbs{c[3]} (no per-layer fit)"
        return f"h{c[1]} TP{c[2]} mbs{c[3]} {1e3 * measured[c]:.2f}/{1e3 * predicted[c]:.2f}"

    print("\nper miss: per-layer cost of the best's and the choice's cell (ms, measured/predicted) and the single part"
          " of the step time that, taken from the measurements, makes it a hit:")
    errors = part_errors(everything)
    causes: dict = defaultdict(int)
    for best, chosen, flips in miss_attribution(groups):
        cause = miss_cause(best, chosen, errors)
        causes[cause[0] if cause else "no bilinear split"] += 1
        why = f"; cause {cause[0]} (hides {100 * cause[1]:.0f} % of the gap)" if cause else "; cause: no bilinear split"
        print(f"  {best.family[0]} L{best.num_layers:<3} best {best.layout:<22} {cell(best):<26} chose "
              f"{chosen.layout:<22} {cell(chosen):<26} -> {', '.join(flips) or 'no single part'}{why}")
    print("misses by cause (the part whose error most favours the choice, miss_cause): "
          + ", ".join(f"{label} {n}" for label, n in sorted(causes.items(), key=lambda kv: -kv[1])))


def step_cost_per_param(points) -> dict[tuple, tuple[float, float, int]]:
    """(source, hidden, TP) -> (measured, predicted) seconds per parameter of the per-layer per-step part c of the
    bilinear split, over the single-stage DP = 1 families (where c holds the optimizer step and its bookkeeping,
    not a data-parallel all-reduce), and how many families. c / (layer parameters on a rank) is the step's cost per
    parameter, minus the one micro-batch of gradient accumulation that c L absorbs ((n - 1) x the per-micro-batch
    add is n x it in a n L, less once in c L)."""
    acc: dict = defaultdict(lambda: [0.0, 0.0, 0])
    for fam, rows in by_family(points).items():
        src, h, tp, pp, _, dp = fam
        params = rows[0].layer_params
        if pp != 1 or dp != 1 or params <= 0:
            continue
        fit_m, fit_p = bilinear_fit(rows, lambda p: p.measured_s), bilinear_fit(rows, lambda p: p.predicted_s)
        if fit_m is None or fit_p is None:
            continue
        entry = acc[(src, h, tp)]
        entry[0] += float(fit_m[2]) / params
        entry[1] += float(fit_p[2]) / params
        entry[2] += 1
    return {k: (m / n, q / n, n) for k, (m, q, n) in acc.items()}


def report_step_cost(results: list) -> None:
    """The per-step cost per parameter (step_cost_per_param), measured and predicted, picoseconds."""
    everything = [p for r in results for p in r.points]
    rows = step_cost_per_param(everything)
    if not rows:
        return
    print("\nper-layer per-step cost per parameter on a rank (single-stage, DP = 1 families; ps, measured / predicted):")
    for (src, h, tp), (m, q, n) in sorted(rows.items()):
        print(f"  {src:<5} hidden {h:5d} TP {tp}: {1e12 * m:6.1f} / {1e12 * q:6.1f}  ({n} families)")

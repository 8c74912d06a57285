"""The --misses diagnostics of benchmarks/bench_tune_ranking.py: which rows decide each missed group, which part
of the step time and which (hidden, TP, micro-batch) cell flips the misses.

Per missed group: the measured best and the tuner's choice with the signed error of each and the runner-up's
measured gap. Then oracles that re-rank every group with part of the prediction taken from the measurements:
each part of the bilinear split t = a n L + b n + c L + d of a family of rows (same source, hidden, TP, PP,
micro-batch, DP; n micro-batches, L layers: per layer and micro-batch, per micro-batch outside the layers, per
step), and each (hidden, TP, micro-batch) cell priced at its measured times. They say which error decides the
misses, not what to fit. With a noise band, every row within it of a group's fastest counts as its best.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

WITHIN = 0.05
"""A group is a hit when the measured time of the tuner's choice is within this fraction of its measured best."""


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
    """Peak memory <= 95 % of the GPU (the tuner's fit rule): only such rows can be chosen."""


def choice_index(points, predicted) -> int | None:
    """The row the tuner picks: the fastest predicted among the rows that fit (None if none fits)."""
    fitting = [i for i, p in enumerate(points) if p.fits]
    return min(fitting, key=lambda i: predicted[i]) if fitting else None


def is_hit(points, predicted, noise: float = 0.0) -> bool:
    """Top-1 within 5 % of the measured best; with `noise`, every row within that fraction of the fastest
    counts as the best (the slowest of them is the reference)."""
    i = choice_index(points, predicted)
    if i is None:
        return False
    fastest = min(p.measured_s for p in points)
    best = max(p.measured_s for p in points if p.measured_s <= fastest * (1 + noise))
    return points[i].measured_s <= (1 + WITHIN) * best


def count_hits(groups, predicted_of, noise: float = 0.0) -> int:
    """Groups (lists of RowPoint) whose pick by `predicted_of` is a hit."""
    return sum(is_hit(pts, [predicted_of(p) for p in pts], noise) for pts in groups)


def bilinear_fit(points, value) -> np.ndarray | None:
    """Least squares t = a n L + b n + c L + d over one family's rows (n micro-batches, L layers): per layer and
    micro-batch, per micro-batch outside the layers, per layer and step, per step. None when under-determined."""
    if len({p.num_layers for p in points}) < 2 or len({(p.num_layers, p.num_microbatches) for p in points}) < 4:
        return None
    a = np.array([[p.num_microbatches * p.num_layers, p.num_microbatches, p.num_layers, 1.0] for p in points])
    return np.linalg.lstsq(a, np.array([value(p) for p in points]), rcond=None)[0]


COMPONENTS = {"per layer and micro-batch": (0,), "per micro-batch outside the layers": (1,),
              "per step": (2, 3), "per layer and micro-batch + per micro-batch": (0, 1), "all four": (0, 1, 2, 3)}
"""Parts of the step time the --misses oracle takes from the measurements (indices into bilinear_fit)."""


def component_oracle(points, parts: tuple[int, ...]) -> dict:
    """RowPoint -> predicted time with the `parts` of its family's bilinear fit replaced by the measured ones."""
    families: dict = defaultdict(list)
    for p in points:
        families[p.family].append(p)
    out = {}
    for rows in families.values():
        measured, predicted = bilinear_fit(rows, lambda p: p.measured_s), bilinear_fit(rows, lambda p: p.predicted_s)
        delta = np.zeros(4)
        if measured is not None and predicted is not None:
            delta[list(parts)] = (measured - predicted)[list(parts)]
        for p in rows:
            out[p] = p.predicted_s + float(np.array([p.num_microbatches * p.num_layers, p.num_microbatches,
                                                     p.num_layers, 1.0]) @ delta)
    return out


def report_misses(results: list, noise: float) -> None:
    """Which rows decide each miss, which part of the step time and which (hidden, TP, micro-batch) cell flips
    them (oracles: that part or that cell taken from the measurements), and the figure with a noise band.
    `results`: bench_tune_ranking's GroupResult per group (its `key` label and its RowPoint `points`)."""
    groups = [r.points for r in results if r.points]
    pairs: dict = defaultdict(int)
    print("\nmisses: measured best vs the tuner's choice (signed error of the prediction), runner-up gap:")
    for r in results:
        pts = r.points
        i = choice_index(pts, [p.predicted_s for p in pts])
        if not pts or is_hit(pts, [p.predicted_s for p in pts]) or i is None:
            continue
        order = sorted(pts, key=lambda p: p.measured_s)
        best, chosen = order[0], pts[i]
        gap = order[1].measured_s / best.measured_s - 1
        pairs[(best.cell, chosen.cell)] += 1
        print(f"  {r.key:<52} best {_describe(best)}  chose {_describe(chosen)}  runner-up +{100 * gap:.1f} %")
    print("(hidden, TP, micro-batch) of the best -> of the choice: " + ", ".join(
        f"{b} -> {c} x{n}" for (b, c), n in sorted(pairs.items(), key=lambda kv: -kv[1])))
    base = count_hits(groups, lambda p: p.predicted_s)
    print(f"\noracles (re-ranked by direct prediction; base {base}/{len(groups)}):")
    everything = [p for pts in groups for p in pts]
    for label, parts in COMPONENTS.items():
        print(f"  {label} from the measurements: "
              f"{count_hits(groups, component_oracle(everything, parts).__getitem__)}/{len(groups)}")
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


"""The S24 misses of benchmarks/bench_tune_ranking.py (its --miss-parts report), with the flagged cells' rows left out
as the bench's second figure leaves them out: per miss, the measured best and the tuner's choice side by side, the
knobs that differ (TP, micro-batch, PP, DP), the measured and predicted gap, each row's signed error and its
predicted step-time parts (compute, recompute, exposed host issue, TP all-reduces, pipeline bubble, optimizer,
data-parallel gradient all-reduce: StepEstimate.breakdown); then a count of the misses by the knobs that differ and by
the direction of each side's error, and, per equal-work TP step of two unflagged cells ((TP, mbs) -> (2 TP, 2 mbs),
the same per-rank GEMMs: ranking_consistency.consistency_pairs), what the measured step adds per in-layer TP call
beyond what the model adds (the excess a cost per TP call would have to carry). What to read before pricing a
term for the misses: a term shared by them shows as one knob, one error direction and one per-call excess."""

from __future__ import annotations

from collections import Counter

from ranking_consistency import TP_CALLS_PER_LAYER, consistency_pairs, flagged_cells
from ranking_diagnostics import cell_costs, cell_key, choice_index, is_hit

PARTS = ("compute", "recompute", "host_overhead", "comm_tp", "pipeline_bubble", "optimizer", "comm_dp_grad")
"""StepEstimate.breakdown keys printed per row, in this order (the rest is summed as 'other')."""

SHORT = {"compute": "comp", "recompute": "recomp", "host_overhead": "host", "comm_tp": "tp",
         "pipeline_bubble": "bubble", "optimizer": "opt", "comm_dp_grad": "dp"}


def knobs_differ(best, choice) -> str:
    """The layout knobs (family: source, hidden, tp, pp, micro-batch, dp) in which two rows of a group differ."""
    names = (("TP", 2), ("PP", 3), ("mbs", 4), ("DP", 5))
    return " ".join(f"{n} {best.family[i]}->{choice.family[i]}" for n, i in names if best.family[i] != choice.family[i])


def parts_text(breakdown: dict) -> str:
    """One row's predicted parts in ms (PARTS, then the rest as 'other')."""
    other = sum(v for k, v in breakdown.items() if k not in PARTS)
    shown = [f"{SHORT[k]} {1e3 * breakdown[k]:.1f}" for k in PARTS if breakdown.get(k, 0.0) >= 5e-5]
    return " ".join(shown + [f"other {1e3 * other:.1f}"])


def s24_misses(results: list, flags: dict) -> list[tuple]:
    """(group result, best index, choice index or None) of the S24 groups missed without the flagged cells' rows,
    a miss as report_flagged counts it (ranking_diagnostics.is_hit). Indices are into the group's whole points, to
    which the bench's GroupResult.breakdowns is aligned."""
    out = []
    for r in results:
        kept = [i for i, p in enumerate(r.points) if cell_key(p) not in flags]
        pts = [r.points[i] for i in kept]
        if not pts or pts[0].family[0] != "S24" or len({p.layout for p in pts}) < 2:
            continue
        predicted = [p.predicted_s for p in pts]
        if is_hit(pts, predicted):
            continue
        c = choice_index(pts, predicted)
        b = min(range(len(pts)), key=lambda k: pts[k].measured_s)
        out.append((r, kept[b], None if c is None else kept[c]))
    return out


def report_miss_parts(results: list) -> None:
    """The S24 misses without the flagged cells (see the module docstring)."""
    everything = [p for r in results for p in r.points]
    flags = flagged_cells(everything)
    misses = s24_misses(results, flags)
    print(f"\nS24 misses without the rows of flagged cells ({len(misses)}): measured best vs choice, predicted parts (ms)")
    knobs: Counter = Counter()
    signs: Counter = Counter()
    for n, (r, b, c) in enumerate(misses, 1):
        best = r.points[b]
        if c is None:
            print(f"  #{n} {r.key}: no fitting row")
            continue
        choice = r.points[c]
        print(f"  #{n} {r.key}: {knobs_differ(best, choice)}; measured gap {choice.measured_s / best.measured_s - 1:+.1%},"
              f" predicted {choice.predicted_s / best.predicted_s - 1:+.1%}")
        for tag, i in (("best  ", b), ("choice", c)):
            p = r.points[i]
            err = p.predicted_s / p.measured_s - 1
            print(f"      {tag} {p.layout:26s} dp{p.family[5]}  {1e3 * p.measured_s:7.1f} ms measured "
                  f"{1e3 * p.predicted_s:7.1f} predicted ({err:+.1%}) | {parts_text(r.breakdowns[i])}")
        knobs[knobs_differ(best, choice).split(" ")[0]] += 1
        signs[("best slow" if best.predicted_s > best.measured_s else "best fast")
              + (", choice fast" if choice.predicted_s < choice.measured_s else ", choice slow")] += 1
    print("  first knob that differs: " + ", ".join(f"{k} {v}" for k, v in knobs.most_common()))
    print("  error directions: " + ", ".join(f"{k} {v}" for k, v in signs.most_common()))
    report_tp_call_excess(everything, flags)


def report_tp_call_excess(points, flags: dict) -> None:
    """Per equal-work TP step of unflagged cells: (measured step - predicted step) / TP_CALLS_PER_LAYER, the
    excess each in-layer TP call of the dearer cell would have to carry for the model to add what was measured."""
    measured, predicted = cell_costs(points), cell_costs(points, lambda p: p.predicted_s)
    print("  equal-work TP steps of unflagged cells, ms per layer and micro-batch (measured / predicted step) and "
          "the excess per TP call, us:")
    for c, d, equal_work in consistency_pairs(sorted(measured)):
        if not equal_work or c in flags or d in flags or c not in predicted or d not in predicted:
            continue
        step_m, step_p = measured[d] - measured[c], predicted[d] - predicted[c]
        print(f"    {c[0]} h{c[1]} TP {c[2]} mbs {c[3]} -> TP {d[2]} mbs {d[3]}: {1e3 * step_m:+.2f} / {1e3 * step_p:+.2f}"
              f"  excess {1e6 * (step_m - step_p) / TP_CALLS_PER_LAYER:+5.0f} us per call")

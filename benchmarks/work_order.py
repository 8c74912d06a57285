"""The one rule by which bench_validation.py (rows of one job at pipeline 1) and bench_tune_ranking.py (per-layer
cells, ranking_consistency.flagged_cells) flag measurements that contradict the work order, and the fewest members
that account for every flagged pair. Both print their headline over all rows; the flags only add a second figure.

Of two measurements where one does more work on every op (the same kernels on tensors at least as large, or at
least as many launches of them over the same tokens), the one with more work measuring more than CONTRADICTION
cheaper is a contradiction: no cost model in which more work never costs less can price both within the ranking's
own 5 % top-1 rule, and the data do not say which of the two is off. A pair the prediction orders the same way
(more work predicted more than CONTRADICTION cheaper too) is not one: the predictor prices the kernels the framework
picks per shape (Megatron's FusedScaleMaskSoftmax falls back to PyTorch ops when micro-batch x heads per TP rank is
not a multiple of 4, graph/attention_core_ops.fused_softmax_available: S24's TP 8 cells at micro-batch 1, predicted
-19 to -21 % per layer against -19 to -26 % measured), so there the two run different ops and the work is not a superset.
"""

from __future__ import annotations

from collections import defaultdict

from ranking_diagnostics import WITHIN

CONTRADICTION = WITHIN
"""The ranking's top-1 tolerance: a contradiction that large can decide a group's choice whatever the model says."""


def contradicts_work_order(more_work_s: float, less_work_s: float, more_work_predicted_s: float,
                           less_work_predicted_s: float, tolerance: float = CONTRADICTION) -> bool:
    """The measurement with more work on every op is more than `tolerance` cheaper, and the prediction (which knows
    the framework's per-shape kernel choice) is not: a prediction a hair lower than its neighbour's reproduces
    nothing, so it excuses no contradiction."""
    return (_cheaper_beyond(more_work_s, less_work_s, tolerance)
            and not _cheaper_beyond(more_work_predicted_s, less_work_predicted_s, tolerance))


def _cheaper_beyond(more_work_s: float, less_work_s: float, tolerance: float) -> bool:
    return more_work_s < (1 - tolerance) * less_work_s


def fewest_accounting(pairs: list[tuple], order=repr) -> set:
    """Members that account for every pair: repeatedly the member in most of the pairs left (one row or cell at odds
    with all its neighbours is the odd one; ties go to the first by `order`); a pair that shares no member with another
    is taken whole, since nothing says which of its two is off."""
    left = list(pairs)
    flagged: set = set()
    while left:
        counts: dict = defaultdict(int)
        for pair in left:
            for member in pair:
                counts[member] += 1
        top = max(counts.values())
        if top == 1:
            flagged |= set(counts)
        else:
            flagged.add(min((m for m, n in counts.items() if n == top), key=order))
        left = [pair for pair in left if not flagged & set(pair)]
    return flagged

"""Stage [6] search: candidates -> layout rules -> memory bound -> estimated order -> full predictions -> top-K.

Pure: data in, data out. The full predictor and the framework's validation are passed in (the command
passes `api.predict_config` and `frameworks.validation.validate_config`), so every number `tune` prints is
what `llmperf predict` says for that command. The closed-form surrogate (tune/surrogate.py) only orders the
candidates and skips hopeless ones:
- a candidate is skipped as out of memory without a full prediction only when its estimated peak is above
  OOM_CERTAIN_FACTOR x the usable memory;
- candidates are predicted in full in order of estimated step time; the search stops once the next
  estimate, scaled by the smallest full/estimate ratio seen so far (x STOP_SAFETY), cannot beat the K-th
  best full prediction. The rest are reported as "slower than the top-K by estimate".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.hardware.spec import ClusterSpec
from llmperf_hook.tune import surrogate
from llmperf_hook.tune.candidate import Candidate, apply_candidate, candidate_of, changed_fields
from llmperf_hook.tune.candidates import CandidateTable, rule_masks

OOM_CERTAIN_FACTOR = 1.5
"""Estimated peak / usable memory above which a candidate is pruned without a full prediction."""
STOP_SAFETY = 0.85
"""Extra slack on the smallest full/estimate ratio in the stopping rule (lower = more full predictions)."""
MIN_FULL_PREDICTIONS = 48
MAX_FULL_PREDICTIONS = 3000

PredictFn = Callable[[TrainingConfig, ClusterSpec], Any]
ValidateFn = Callable[[TrainingConfig], None]


@dataclass(frozen=True)
class Evaluated:
    """One candidate predicted in full."""

    candidate: Candidate
    config: TrainingConfig
    estimate: Any
    """The full model's StepEstimate (step_time_s, tokens_per_s, mfu, memory.peak_bytes_per_gpu, ...)."""
    step_time_s: float
    peak_bytes: float
    capacity_bytes: float
    fits: bool
    """peak_bytes <= (1 - memory_margin) * capacity_bytes."""
    changes: Mapping[str, tuple[object, object]] = field(default_factory=dict)
    """Candidate fields that differ from the user's configuration: name -> (user's, candidate's)."""


@dataclass(frozen=True)
class TuneResult:
    top: tuple[Evaluated, ...]
    """Best fitting candidates, fastest first (full predictions)."""
    baseline: Evaluated | None
    """The user's own configuration predicted in full (None if the framework rejects it)."""
    num_generated: int
    """Size of the cross product of the search space."""
    num_considered: int
    """Distinct candidates after merging duplicates (what every count below adds up to)."""
    invalid_by_rule: Mapping[str, int]
    """Candidates rejected by a layout rule, by the first rule they break."""
    num_oom_estimated: int
    """Pruned as out of memory by the closed-form bound (> OOM_CERTAIN_FACTOR x usable)."""
    num_oom_predicted: int
    """Predicted in full and found over the usable memory."""
    num_slower: int
    """Never predicted in full: estimated step time cannot beat the K-th best found."""
    num_full_predictions: int
    memory_margin: float
    nearest: Evaluated | None = None
    """When nothing fits: the candidate with the least predicted memory."""
    layers_that_fit: int | None = None
    """When nothing fits: the most layers of this model that would fit with `nearest`'s layout."""

    @property
    def num_invalid(self) -> int:
        return sum(self.invalid_by_rule.values())


def _first_violations(masks: Mapping[str, np.ndarray], n: int) -> tuple[np.ndarray, dict[str, int]]:
    bad = np.zeros(n, dtype=bool)
    counts: dict[str, int] = {}
    for rule, mask in masks.items():
        new = mask & ~bad
        if new.any():
            counts[rule] = int(new.sum())
        bad |= mask
    return bad, counts


def evaluate(cfg: TrainingConfig, cand: Candidate, cluster: ClusterSpec, predict: PredictFn,
             margin: float, base: Candidate) -> Evaluated:
    new_cfg = apply_candidate(cfg, cand)
    est = predict(new_cfg, cluster)
    peak, cap = float(est.memory.peak_bytes_per_gpu), float(est.memory.capacity_bytes)
    return Evaluated(cand, new_cfg, est, float(est.step_time_s), peak, cap,
                     fits=peak <= (1.0 - margin) * cap, changes=changed_fields(base, cand))


@dataclass
class _Progress:
    """Mutable bookkeeping of one search (local to search_candidates)."""

    fitting: list[Evaluated] = field(default_factory=list)
    unfit: list[Evaluated] = field(default_factory=list)
    invalid: dict[str, int] = field(default_factory=dict)
    min_ratio: float = float("inf")
    num_full: int = 0


def search_candidates(cfg: TrainingConfig, cluster: ClusterSpec, table: CandidateTable, *, top_k: int,
                      margin: float, predict: PredictFn, validate: ValidateFn) -> TuneResult:
    """Rank the table's candidates for this job; see the module docstring for the pruning rules."""
    base = candidate_of(cfg)
    bad, invalid = _first_violations(rule_masks(cfg, table.columns), len(table))
    valid = table.select(~bad)
    est = surrogate.estimate(cfg, cluster, valid.columns)
    usable = (1.0 - margin) * cluster.gpu.memory_capacity_bytes
    certain_oom = est.peak_bytes > OOM_CERTAIN_FACTOR * usable
    order = np.flatnonzero(~certain_oom)
    order = order[np.argsort(est.step_time_s[order], kind="stable")]
    prog = _Progress(invalid=dict(invalid))
    stopped_at = _predict_in_order(cfg, cluster, valid, order, est.step_time_s, top_k, margin, predict, validate, prog)
    baseline = _baseline(cfg, cluster, predict, validate, margin, base)
    top = tuple(sorted(prog.fitting, key=lambda e: e.step_time_s)[:top_k])
    nearest = layers = None
    if not top:
        nearest, layers = _nearest_fit(cfg, cluster, valid, est.peak_bytes, predict, validate, margin, prog)
    return TuneResult(
        top=top, baseline=baseline, num_generated=table.num_generated, num_considered=len(table),
        invalid_by_rule=prog.invalid, num_oom_estimated=int(certain_oom.sum()), num_oom_predicted=len(prog.unfit),
        num_slower=len(order) - stopped_at, num_full_predictions=prog.num_full, memory_margin=margin,
        nearest=nearest, layers_that_fit=layers,
    )


def _predict_in_order(cfg: TrainingConfig, cluster: ClusterSpec, valid: CandidateTable, order: np.ndarray,
                      est_s: np.ndarray, top_k: int, margin: float, predict: PredictFn,
                      validate: ValidateFn, prog: _Progress) -> int:
    """Full predictions in estimated order until the stopping rule holds; returns how many were visited."""
    base = candidate_of(cfg)
    for pos, i in enumerate(order):
        if pos >= MAX_FULL_PREDICTIONS or (pos >= MIN_FULL_PREDICTIONS and _can_stop(prog, est_s[i], top_k)):
            return pos
        cand = valid.candidate(int(i))
        ev = _checked_evaluate(cfg, cand, cluster, predict, validate, margin, base, prog)
        if ev is None:
            continue
        prog.min_ratio = min(prog.min_ratio, ev.step_time_s / max(float(est_s[i]), 1e-12))
        (prog.fitting if ev.fits else prog.unfit).append(ev)
    return len(order)


def _can_stop(prog: _Progress, next_estimate_s: float, top_k: int) -> bool:
    if len(prog.fitting) < top_k:
        return False
    kth = sorted(e.step_time_s for e in prog.fitting)[top_k - 1]
    return next_estimate_s * prog.min_ratio * STOP_SAFETY > kth


def _checked_evaluate(cfg: TrainingConfig, cand: Candidate, cluster: ClusterSpec, predict: PredictFn,
                      validate: ValidateFn, margin: float, base: Candidate, prog: _Progress) -> Evaluated | None:
    try:
        validate(apply_candidate(cfg, cand))
    except ConfigError as err:
        key = f"framework validation: {_first_sentence(str(err))}"
        prog.invalid[key] = prog.invalid.get(key, 0) + 1
        return None
    prog.num_full += 1
    return evaluate(cfg, cand, cluster, predict, margin, base)


def _first_sentence(msg: str) -> str:
    head = msg.split(". ")[0].split("\n")[0]
    return head[:90]


def _baseline(cfg: TrainingConfig, cluster: ClusterSpec, predict: PredictFn, validate: ValidateFn,
              margin: float, base: Candidate) -> Evaluated | None:
    try:
        validate(cfg)
    except ConfigError:
        return None
    return evaluate(cfg, base, cluster, predict, margin, base)


def _nearest_fit(cfg: TrainingConfig, cluster: ClusterSpec, valid: CandidateTable, est_peak: np.ndarray,
                 predict: PredictFn, validate: ValidateFn, margin: float,
                 prog: _Progress) -> tuple[Evaluated | None, int | None]:
    """Least-memory candidate (full model, among the 16 smallest estimates and all predicted) + layers that fit."""
    base = candidate_of(cfg)
    pool = list(prog.unfit)
    for i in np.argsort(est_peak, kind="stable")[:16]:
        ev = _checked_evaluate(cfg, valid.candidate(int(i)), cluster, predict, validate, margin, base, prog)
        if ev is not None:
            pool.append(ev)
    if not pool:
        return None, None
    nearest = min(pool, key=lambda e: e.peak_bytes)
    return nearest, _layers_that_fit(nearest, cluster, predict, margin)


def _layers_that_fit(ev: Evaluated, cluster: ClusterSpec, predict: PredictFn, margin: float) -> int | None:
    """Bisection on num_layers (multiples of pp*vpp) with the full memory model; None if not even one chunk fits."""
    import dataclasses

    cfg, step = ev.config, ev.config.parallel.pp * ev.config.parallel.vpp
    lo, hi = 0, cfg.model.num_layers // step

    def fits(units: int) -> bool:
        shape = dataclasses.replace(cfg.model, num_layers=units * step)
        est = predict(dataclasses.replace(cfg, model=shape), cluster)
        return float(est.memory.peak_bytes_per_gpu) <= (1.0 - margin) * float(est.memory.capacity_bytes)

    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo * step if lo else None

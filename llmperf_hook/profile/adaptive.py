"""The adaptive step of the sampling plan: which shapes to measure next, where the fitted regressor is least sure.

Step (3) of plan.py's order (the job's shapes, a space-filling design, then adaptively): a few regressors, each
fitted on a bootstrap resample of the samples measured so far, predict log(time / roofline) for every candidate
shape; the candidates where they disagree most (standard deviation of the predictions: query by bagging, Abe &
Mamitsuka 1998, the committee of query by committee, Seung et al. 1992) are measured next. One rule, called by
the sampler (sampler._adaptive_specs: candidates drawn from the design ranges) and by the operator benchmark's
`--design adaptive` (pool_adaptive_subset: candidates are the public samples not yet chosen), so the benchmark
measures the choice the profiler makes.
"""

from __future__ import annotations

import numpy as np

from llmperf_hook.profile.fit import fit_regressor

NUM_BOOTSTRAP = 3
"""Regressors in the committee. Each is one LightGBM booster (fit.fit_regressor, not bagged), the quick proxy
the inner cross-validation also uses."""


def bootstrap_disagreement(x: np.ndarray, y: np.ndarray, candidates: np.ndarray, rng: np.random.Generator,
                           num_models: int = NUM_BOOTSTRAP) -> np.ndarray:
    """Per candidate row: the standard deviation of `num_models` regressors' predictions of y, each regressor
    fitted on a bootstrap resample (len(y) rows drawn with replacement from `rng`) of (x, y)."""
    preds = []
    for _ in range(num_models):
        idx = rng.integers(0, len(y), len(y))
        preds.append(fit_regressor(x[idx], y[idx]).ensemble().predict(candidates))
    return np.std(preds, axis=0)


def most_uncertain(x: np.ndarray, y: np.ndarray, candidates: np.ndarray, num: int,
                   rng: np.random.Generator) -> np.ndarray:
    """Indices of the `num` candidates where the committee disagrees most (bootstrap_disagreement), most
    uncertain first. Candidates with identical features count once: a second copy of the same shape (the
    public samples repeat shapes; rounded design points can coincide) waits until every distinct candidate has
    been ranked, as measuring it twice in one round would only repeat its answer."""
    spread = bootstrap_disagreement(x, y, candidates, rng)
    _, first = np.unique(candidates, axis=0, return_index=True)
    repeat = np.ones(len(candidates), dtype=bool)
    repeat[first] = False
    return np.lexsort((-spread, repeat))[:num]


def pool_adaptive_subset(x: np.ndarray, y: np.ndarray, pool: np.ndarray, seed_rows: np.ndarray, num: int,
                         rounds: int, rng: np.random.Generator) -> np.ndarray:
    """`num` rows of `pool` (indices into x, y): `seed_rows` first, then `rounds` rounds, each adding an equal
    share of the rest where a committee fitted on the rows chosen so far disagrees most (most_uncertain).
    Only the labels y of rows already chosen are read: the others are candidates whose times are unknown, as
    the shapes a sampler has not measured yet."""
    chosen = np.asarray(seed_rows, dtype=np.int64)[:num]
    left = np.setdiff1d(pool, chosen)
    for r in range(rounds):
        take = min((num - len(chosen)) // (rounds - r), len(left))
        if take <= 0:
            continue
        pick = most_uncertain(x[chosen], y[chosen], x[left], take, rng)
        chosen, left = np.concatenate([chosen, left[pick]]), np.delete(left, pick)
    return chosen

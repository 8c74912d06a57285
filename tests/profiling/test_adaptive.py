"""The adaptive rule shared by the sampler and the operator benchmark: where bootstrap regressors disagree."""

import numpy as np

from llmperf_hook.profile.adaptive import bootstrap_disagreement, most_uncertain, pool_adaptive_subset


def _wiggly(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x in [0, 1]: flat below 0.5, a fast sine above it (the part a regressor is unsure of)."""
    x = np.random.default_rng(seed).random((n, 1))
    return x, np.where(x[:, 0] < 0.5, 0.0, np.sin(60.0 * x[:, 0]))


def test_committee_disagrees_where_the_function_is_hard() -> None:
    x, y = _wiggly(200)
    grid = np.linspace(0.0, 1.0, 101)[:, None]
    spread = bootstrap_disagreement(x, y, grid, np.random.default_rng(1))
    assert spread.shape == (101,) and np.all(spread >= 0)
    assert spread[grid[:, 0] > 0.55].mean() > 5 * spread[grid[:, 0] < 0.45].mean()


def test_most_uncertain_ranks_distinct_shapes_before_repeats() -> None:
    x, y = _wiggly(200)
    cands = np.repeat(np.linspace(0.0, 1.0, 21)[:, None], 3, axis=0)  # every candidate three times
    pick = most_uncertain(x, y, cands, 10, np.random.default_rng(2))
    assert len(pick) == 10 and len(np.unique(cands[pick], axis=0)) == 10
    assert np.mean(cands[pick, 0] > 0.5) >= 0.8


def test_pool_subset_keeps_the_seed_stays_in_the_pool_and_spends_the_budget() -> None:
    x, y = _wiggly(600)
    pool = np.arange(100, 600)
    seed = pool[:60]
    chosen = pool_adaptive_subset(x, y, pool, seed, 150, 3, np.random.default_rng(3))
    assert len(chosen) == 150 == len(np.unique(chosen)) and np.isin(chosen, pool).all()
    assert np.array_equal(chosen[:60], seed)
    added = chosen[60:]
    assert np.mean(x[added, 0] > 0.5) > 0.75  # the seed is half and half; the rounds go where the sine is


def test_pool_subset_reads_only_the_labels_of_rows_it_chose() -> None:
    """The rows never chosen are shapes not measured: changing their times changes nothing."""
    x, y = _wiggly(400, seed=4)
    pool = np.arange(400)
    first = pool_adaptive_subset(x, y, pool, pool[:40], 100, 2, np.random.default_rng(5))
    other = y.copy()
    other[np.setdiff1d(pool, first)] = 1e3
    again = pool_adaptive_subset(x, other, pool, pool[:40], 100, 2, np.random.default_rng(5))
    assert np.array_equal(first, again)

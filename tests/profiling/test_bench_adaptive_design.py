"""The operator benchmark's `--design adaptive`: the sampler's rule over the pool, paired with the random design."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_operator_accuracy import ADAPTIVE_SEED_SHARE, split  # noqa: E402


def _data(n: int = 400) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.random((n, 2))
    test = np.zeros(n, dtype=bool)
    test[rng.permutation(n)[: n // 5]] = True
    return x, np.sin(8.0 * x[:, 0]) * x[:, 1], test


def test_adaptive_rows_are_the_budget_outside_the_test_rows() -> None:
    x, y, test = _data()
    train = split(len(y), test, 0.25, np.random.default_rng(1), xy=(x, y))
    assert len(train) == 100 == len(np.unique(train)) and not test[train].any()


def test_paired_with_the_random_design() -> None:
    """Same rng use as the random design (so later draws get the same test rows), and its seed rows are the
    random design's first training rows; with a maximin seed too."""
    x, y, test = _data()
    plain, adaptive, maximin = (np.random.default_rng(2) for _ in range(3))
    random_rows = split(len(y), test, 0.25, plain)
    adaptive_rows = split(len(y), test, 0.25, adaptive, xy=(x, y))
    split(len(y), test, 0.25, maximin, points=np.log2(1.0 + x), xy=(x, y))
    num_seed = int(ADAPTIVE_SEED_SHARE * 100)
    assert np.array_equal(adaptive_rows[:num_seed], random_rows[:num_seed])
    assert not np.array_equal(np.sort(adaptive_rows), np.sort(random_rows))
    assert plain.random() == adaptive.random() == maximin.random()

"""The operator benchmark's configuration-stratified design (`--design config`): training rows dealt
round-robin over the sweep's configurations, so every configuration is represented before any twice."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_operator_accuracy import config_keys, split  # noqa: E402

from llmperf_hook.profile.plan import config_stratified_subset  # noqa: E402
from llmperf_hook.profile.public_samples import SampleSet  # noqa: E402


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=60), st.integers(0, 1000), st.data())
def test_every_configuration_is_dealt_before_any_gets_another(configs: list[int], seed: int, data) -> None:
    keys = np.array(configs, dtype=float).reshape(-1, 1)
    num = data.draw(st.integers(0, len(configs)))
    picked = config_stratified_subset(keys, num, np.random.default_rng(seed))
    assert len(picked) == num == len(set(picked.tolist()))
    counts = np.bincount(keys[picked, 0].astype(int), minlength=10)
    available = np.bincount(np.array(configs), minlength=10)
    # Round-robin: a configuration short of another by more than one row has no rows left.
    low = counts < counts.max() - 1
    assert np.all(counts[low] == available[low])


def test_unique_configurations_give_a_random_subset() -> None:
    keys = np.arange(100.0).reshape(-1, 1)
    a = config_stratified_subset(keys, 25, np.random.default_rng(0))
    b = config_stratified_subset(keys, 25, np.random.default_rng(1))
    assert len(set(a.tolist())) == 25 and set(a.tolist()) != set(b.tolist())


def _file(name: str, rows: int) -> SampleSet:
    mp = np.repeat([1.0, 2.0], rows // 2)
    raw = {"mp": mp, "b": np.ones(rows), "l": np.tile(np.arange(rows // 2, dtype=float), 2), "dim": np.ones(rows)}
    dims = {"m": raw["l"] + 1, "n": 64.0 * mp, "k": np.full(rows, 64.0)}
    return SampleSet(name, "gemm", "fwd", dims, np.ones(rows), raw)


def test_split_spreads_the_training_rows_over_the_files_configurations() -> None:
    sets = [_file("linear1", 40), _file("linear3", 40)]
    keys = config_keys(sets)
    assert keys.shape == (80, 4)  # mp, b, l, dim: the columns both files have
    test = np.zeros(80, dtype=bool)
    test[:40:5] = True  # one row of 8 configurations: their other file's row remains
    train = split(80, test, 0.5, np.random.default_rng(3), configs=keys)
    assert len(train) == 40 and not test[train].any()
    _, per_config = np.unique(keys[train], axis=0, return_counts=True)
    assert len(per_config) == 40  # each of the 40 configurations once (each has a non-test row)

"""bench_operator_noise: the part of the repeat noise that the node's occupancy (TP group filling it) explains."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_operator_noise import full_node_mask, node_occupancy_effect  # noqa: E402

from llmperf_hook.profile.public_samples import SampleSet  # noqa: E402
from llmperf_hook.profile.shipped import SHIPPED  # noqa: E402


def _repeats(slowdown: float, num_shapes: int = 300, seed: int = 0):
    """Each shape measured once on a partly busy node and once on a full one (slower by `slowdown`), 1 % noise."""
    rng = np.random.default_rng(seed)
    mean_s = np.exp(rng.uniform(np.log(1e-4), np.log(1e-2), num_shapes))
    partial = mean_s * np.exp(rng.normal(0.0, 0.01, num_shapes))
    full = mean_s * (1.0 + slowdown) * np.exp(rng.normal(0.0, 0.01, num_shapes))
    shapes = np.tile(np.arange(num_shapes), 2)[:, None].astype(float)
    return np.concatenate([partial, full]), shapes, np.repeat([False, True], num_shapes)


def test_a_full_node_slowdown_is_measured_on_pairs_of_the_same_shape() -> None:
    time_s, shapes, full = _repeats(0.04)
    ratio, num_pairs = node_occupancy_effect(time_s, shapes, full)
    assert num_pairs == 300
    assert ratio == pytest.approx(0.04, abs=0.003)


def test_no_effect_and_no_pairs() -> None:
    time_s, shapes, full = _repeats(0.0, seed=1)
    assert abs(node_occupancy_effect(time_s, shapes, full)[0]) < 0.003
    # every shape measured on full nodes only: no pair to compare, no figure
    ratio, num_pairs = node_occupancy_effect(time_s, shapes, np.ones(len(time_s), dtype=bool))
    assert num_pairs == 0 and np.isnan(ratio)


def _set(mp: list[float]) -> SampleSet:
    n = len(mp)
    dims = {"m": np.full(n, 4096.0), "n": np.full(n, 4096.0), "k": np.full(n, 4096.0)}
    return SampleSet("linear2", "gemm", "fwd", dims, np.full(n, 1e-3), {"mp": np.asarray(mp)})


def test_full_node_follows_the_clusters_gpus_per_node() -> None:
    # perlmutter: 4 A100 per node, so TP 4 and more fill a node and TP 1-2 leave GPUs idle
    mask = full_node_mask(SHIPPED["a100-sxm4-80gb"], [_set([1.0, 2.0, 4.0, 8.0, 16.0])])
    assert mask.tolist() == [False, False, True, True, True]
    # vista: one GH200 per node, the occupancy never varies
    assert full_node_mask(SHIPPED["gh200-96gb"], [_set([1.0, 2.0])]) is None

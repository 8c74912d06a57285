"""bench_operator_noise: the repeat noise floor and our error per duration quintile."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_operator_noise import duration_edges, mape_by_bin, repeat_floor_by_bin  # noqa: E402


def _pairs(noise_short: float, noise_long: float, num_shapes: int = 400, seed: int = 0):
    """Each shape measured twice; shapes below 1 ms scatter by noise_short, the others by noise_long (log sd)."""
    rng = np.random.default_rng(seed)
    mean_s = np.exp(rng.uniform(np.log(1e-4), np.log(1e-1), num_shapes))
    sd = np.where(mean_s < 1e-3, noise_short, noise_long)
    time_s = np.concatenate([mean_s * np.exp(rng.normal(0.0, sd)) for _ in range(2)])
    shapes = np.tile(np.arange(num_shapes), 2)[:, None].astype(float)
    return time_s, shapes


def test_floor_follows_the_noise_of_each_duration() -> None:
    time_s, shapes = _pairs(0.005, 0.04)
    edges = duration_edges(time_s, 4)  # first bin ends near 0.56 ms, the last starts near 5.6 ms
    floor = repeat_floor_by_bin(time_s, shapes, edges)
    # Gaussian log noise sd: E|e| = sd * sqrt(2 / pi); the floor of pairs is that mean absolute error.
    assert abs(floor[0] - 0.005 * np.sqrt(2 / np.pi)) < 0.0015
    assert abs(floor[-1] - 0.04 * np.sqrt(2 / np.pi)) < 0.008
    # one floor over all durations (bench_operator_accuracy's) sits between the two
    one = repeat_floor_by_bin(time_s, shapes, duration_edges(time_s, 1))[0]
    assert floor[0] < one < floor[-1]


def test_floor_of_one_file_and_bins_without_repeats() -> None:
    time_s, shapes = _pairs(0.01, 0.01)
    single = np.concatenate([time_s, [5.0]])  # a slowest sample measured once: its bin has no repeat
    shapes = np.vstack([shapes, [[-1.0]]])
    edges = np.array([0.0, 1.0, 10.0])
    floor = repeat_floor_by_bin(single, shapes, edges)
    assert np.isfinite(floor[0]) and np.isnan(floor[1])
    among = np.zeros(len(single), dtype=bool)
    among[:400] = True  # the first measurement of each shape only: same floor (the median is over both)
    assert abs(repeat_floor_by_bin(single, shapes, edges, among)[0] - floor[0]) < 0.003


def test_mape_by_bin_and_edges() -> None:
    time_s = np.array([1.0, 2.0, 3.0, 4.0])
    edges = duration_edges(time_s, 2)
    assert edges[0] == 1.0 and edges[-1] > 4.0  # the slowest sample falls in the last bin
    out = mape_by_bin(np.array([0.1, 0.3, 0.2, 0.4]), time_s, edges)
    assert np.allclose(out, [0.2, 0.3])

"""bench_operator_accuracy's noise-floor verdicts: the model part of an error beyond the repeat floor
(model_part) and what a missed target or reference needs of it (floor_note)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_operator_accuracy import floor_note, model_part  # noqa: E402


def test_model_part_adds_in_quadrature_with_simulated_noise() -> None:
    rng = np.random.default_rng(0)
    model, noise = rng.normal(0.0, 0.04, 200_000), rng.normal(0.0, 0.05, 200_000)
    total, floor = np.mean(np.abs(np.exp(model + noise) - 1.0)), np.mean(np.abs(np.exp(noise) - 1.0))
    assert model_part(total, floor) == pytest.approx(np.mean(np.abs(np.exp(model) - 1.0)), rel=0.03)


def test_model_part_is_zero_at_or_below_the_floor() -> None:
    assert model_part(0.05, 0.06) == 0.0
    assert model_part(0.05, 0.05) == 0.0


def test_a_goal_below_the_floor_is_called_unreachable() -> None:
    note = floor_note(0.07, 0.065, 0.06, "target")
    assert "no predictor of the shape reaches it" in note and "6.50%" in note


def test_a_reachable_goal_states_the_model_part_it_allows() -> None:
    note = floor_note(0.0699, 0.0574, 0.06, "target")
    assert "model part of our error 3.99%" in note and "target allows 1.75%" in note


def test_unknown_floor_is_said() -> None:
    assert "unknown" in floor_note(0.03, None, 0.02, "reference")


def test_distinct_design_skips_repeats_of_a_timed_shape_in_the_random_order() -> None:
    from bench_operator_accuracy import distinct_subset

    shapes = np.array([[1, 2], [3, 4], [1, 2], [5, 6], [3, 4], [7, 8]])
    assert distinct_subset(shapes, 3).tolist() == [0, 1, 3]
    assert distinct_subset(shapes, 6).tolist() == [0, 1, 3, 5, 2, 4]  # repeats only once every shape is in


def test_distinct_design_is_paired_with_the_random_one() -> None:
    from bench_operator_accuracy import split

    test = np.zeros(40, dtype=bool)
    test[:8] = True
    shapes = np.column_stack([np.arange(40) % 10, np.zeros(40)])
    rand = split(40, test, 0.25, np.random.default_rng(3))
    dist = split(40, test, 0.25, np.random.default_rng(3), shapes=shapes)
    assert len(dist) == len(rand) == 10 and not test[dist].any()
    assert dist[0] == rand[0]  # the same random order, repeats skipped
    assert len(np.unique(shapes[dist], axis=0)) == 10

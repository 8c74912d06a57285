"""Optional dims (optimizer layers / embedding_params): used when an op carries them, a params-only answer
when it does not; the fitted floor; the streaming-slope corruption rule."""

import numpy as np
import pytest

from llmperf_hook.profile.build_profile import (Samples, fit_with_floor, intercept_floor_s, predict_with_floor,
                                                training_xy, unknown_columns, with_unknown_rows)
from llmperf_hook.profile.features import OPTIONAL_DIMS, UNKNOWN, RooflineConstants, build_features, schema_hash
from llmperf_hook.profile.shipped import corrupt_reason, first_step_reason, streaming_slope

RC = RooflineConstants(312e12, 2.0e12, 108, 2)


def _stages(n: int = 400, seed: int = 0) -> Samples:
    """Adam steps whose per-parameter cost grows when tensors are small (many layers of small shards)."""
    rng = np.random.default_rng(seed)
    layers = rng.integers(4, 13, n).astype(float)
    per_layer = 2.0 ** rng.uniform(20, 28, n)
    emb = np.where(rng.random(n) < 0.5, 2.0 ** rng.uniform(22, 28, n), 0.0)
    params = layers * per_layer + emb
    # 28 B/param at 1.4 TB/s, +60 % for layers below 2^23 parameters, plus a 2 ms fixed cost.
    time_s = 2e-3 + 28 * params / 1.4e12 * np.where(per_layer < 2 ** 23, 1.6, 1.0)
    return Samples("optimizer", "fwd", {"params": params, "layers": layers, "embedding_params": emb},
                   time_s * np.exp(rng.normal(0, 0.01, n)))


def test_absent_optional_dims_become_unknown_and_keep_the_schema() -> None:
    full = build_features("optimizer", False, {"params": np.array([1e9]), "layers": np.array([8.0]),
                                                "embedding_params": np.array([2e8])}, RC)
    bare = build_features("optimizer", False, {"params": np.array([1e9])}, RC)
    assert full.names == bare.names and set(OPTIONAL_DIMS["optimizer"]) == {"layers", "embedding_params"}
    cols = unknown_columns(bare.names)
    assert cols and np.all(bare.matrix[0, list(cols)] == UNKNOWN) and np.all(full.matrix[0, list(cols)] >= 0)
    assert np.array_equal(full.roofline_s, bare.roofline_s)  # the roofline needs the required dims only
    assert schema_hash("optimizer", False) == schema_hash("optimizer", False)


def test_unknown_rows_are_added_only_for_rows_that_know_the_dims() -> None:
    x = np.array([[1.0, 2.0, 3.0], [1.0, UNKNOWN, UNKNOWN]])
    xa, ya = with_unknown_rows(x, np.array([0.1, 0.2]), (1, 2))
    assert xa.shape == (3, 3) and np.array_equal(xa[2], [1.0, UNKNOWN, UNKNOWN]) and ya[2] == 0.1
    assert with_unknown_rows(x[1:], np.array([0.2]), (1, 2))[0].shape == (1, 3)


def test_optional_dims_improve_the_fit_and_their_absence_stays_sane() -> None:
    pytest.importorskip("lightgbm")
    s = _stages()
    x, y, names, roof = training_xy(s, RC)
    t, cols = roof * np.exp(y), unknown_columns(names)
    reg, floor = fit_with_floor(x[:300], t[:300], roof[:300], unknown_cols=cols)
    with_dims = np.mean(np.abs(predict_with_floor(reg, floor, x[300:], roof[300:]) / t[300:] - 1))
    bare = x[300:].copy()
    bare[:, list(cols)] = UNKNOWN
    without = np.mean(np.abs(predict_with_floor(reg, floor, bare, roof[300:]) / t[300:] - 1))
    assert with_dims < 0.04 and with_dims < 0.7 * without and without < 0.25


def test_intercept_floor_recovers_a_fixed_cost() -> None:
    roof = np.geomspace(1e-4, 1e-1, 50)
    assert intercept_floor_s(2.0 * roof + 3e-3, roof) == pytest.approx(1.5e-3, rel=1e-6)
    assert intercept_floor_s(2.0 * roof, roof) == pytest.approx(0.0, abs=1e-12)


def test_a_streaming_step_that_does_not_grow_with_its_bytes_is_corrupt() -> None:
    s = _stages()
    assert streaming_slope(s, RC) > 0.8 and corrupt_reason(s, RC) is None
    flat = Samples(s.op_class, s.phase, s.dims, 2e-3 * (s.dims["params"] / 1e8) ** 0.1)
    assert streaming_slope(flat, RC) < 0.5 and "params^" in corrupt_reason(flat, RC)


def test_first_step_samples_are_not_the_step_training_repeats() -> None:
    """Samples paying tens of microseconds per parameter tensor time a first step (optimizer-state allocation);
    the shipped A100 profile therefore has no optimizer model and the roofline prices Adam."""
    from llmperf_hook.profile.predictor import FittedProfile
    from llmperf_hook.resources import configs_dir

    s = _stages()
    assert first_step_reason(s) is None  # a fixed cost per step is not a cost per tensor
    tensors = 12 * s.dims["layers"]
    first = Samples(s.op_class, s.phase, s.dims, s.time_s + 30e-6 * tensors)
    assert "us per parameter tensor" in first_step_reason(first)
    assert not FittedProfile(configs_dir() / "profiles" / "a100-sxm4-80gb").supports("optimizer", "step", "fp32")
"""Huber loss on the log time ratio: fitted, recorded and loadable like L1 / L2, robust to throttled repeats."""

from __future__ import annotations

import numpy as np
import pytest

from llmperf_hook.profile.features import RooflineConstants, build_features
from llmperf_hook.profile.fit import HUBER_DELTA, _lgb_params, fit_regressor

lgb = pytest.importorskip("lightgbm")


def _gemm(n: int = 400, throttled: float = 0.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(features, log time ratio) of GEMMs with 1.5 % Gaussian scatter and a share of 28 %-slow repeats."""
    rng = np.random.default_rng(seed)
    dims = {k: 2.0 ** rng.integers(7, 13, size=n) for k in ("m", "n", "k")}
    block = build_features("gemm", False, dims, RooflineConstants(312e12, 2e12, 108, 2))
    eff = 0.5 + 0.3 * np.tanh(np.log2(dims["m"] * dims["n"] * dims["k"]) / 8 - 3)
    scatter = np.where(rng.random(n) < throttled, 0.25, rng.normal(scale=0.015, size=n))
    return block.matrix, np.log(1.0 / eff) + scatter


def test_huber_objective_takes_the_delta_only_where_used() -> None:
    assert _lgb_params(500, "huber")["objective"] == "huber" and _lgb_params(500, "huber")["alpha"] == HUBER_DELTA
    assert "alpha" not in _lgb_params(500, "l1") and "alpha" not in _lgb_params(500, "l2")
    assert _lgb_params(500, "huber", linear=True)["objective"] == "regression"  # linear leaves stay least squares


def test_huber_fit_is_recorded_loads_in_lightgbm_and_fits() -> None:
    x, y = _gemm()
    reg = fit_regressor(x, y, loss="huber", bagged=True)
    assert reg.loss == "huber"
    assert np.allclose(lgb.Booster(model_str=reg.text).predict(x), reg.ensemble().predict(x), atol=1e-4)
    assert np.mean(np.abs(np.exp(reg.predict(x) - y) - 1.0)) < 0.03


def test_huber_is_not_dragged_by_throttled_repeats_as_least_squares_is() -> None:
    x, y = _gemm(throttled=0.1)
    clean_x, clean_y = _gemm(n=200, seed=1)
    bias = {loss: float(np.median(fit_regressor(x, y, loss=loss).predict(clean_x) - clean_y))
            for loss in ("l2", "huber")}
    assert bias["l2"] > 0.015  # 10 % of repeats 28 % slow move the mean by ~2.5 %
    assert abs(bias["huber"]) < 0.6 * bias["l2"]

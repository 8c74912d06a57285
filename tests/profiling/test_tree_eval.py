"""The numpy evaluator gives exactly what LightGBM / scikit-learn give, on random inputs and missing values."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.errors import ProfileError
from llmperf_hook.profile.fit import compact_lightgbm_text, export_sklearn_gbr, fit_regressor
from llmperf_hook.profile.tree_eval import parse_lightgbm_text, parse_sklearn_json

lgb = pytest.importorskip("lightgbm")


def _data(seed: int, n: int = 400, d: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    x[rng.random(size=x.shape) < 0.05] = 0.0
    return x, np.sin(3 * x[:, 0]) + x[:, 1] * x[:, 2] + 0.1 * rng.normal(size=n)


@pytest.mark.parametrize("params", [
    {"objective": "regression"},
    {"objective": "regression_l1", "num_leaves": 7},
    {"objective": "huber", "use_missing": True, "zero_as_missing": True},
    {"boosting": "rf", "bagging_fraction": 0.7, "bagging_freq": 1},
])
def test_lightgbm_text_equals_booster(params: dict) -> None:
    x, y = _data(1)
    x_nan = x.copy()
    x_nan[::7, 1] = np.nan  # trains NaN-aware splits (missing_type NaN, default_left learned)
    booster = lgb.train({**params, "verbose": -1, "num_threads": 1, "seed": 3}, lgb.Dataset(x_nan, y),
                        num_boost_round=40)
    ens = parse_lightgbm_text(booster.model_to_string())
    test = np.random.default_rng(2).normal(size=(500, x.shape[1]))
    test[::5, 1] = np.nan
    test[::9, 2] = 0.0
    test[::11, 0] = np.nan
    np.testing.assert_allclose(ens.predict(test), booster.predict(test), rtol=1e-12, atol=1e-12)


def test_compacted_text_still_loads_in_lightgbm_and_matches() -> None:
    reg = fit_regressor(*_data(4))
    assert reg.model_format == "lightgbm-text"
    booster = lgb.Booster(model_str=reg.text)
    test = np.random.default_rng(5).normal(size=(300, 5))
    np.testing.assert_allclose(reg.ensemble().predict(test), booster.predict(test), rtol=1e-12, atol=1e-12)
    full = lgb.train({"verbose": -1, "num_threads": 1}, lgb.Dataset(*_data(4)), num_boost_round=5)
    assert len(compact_lightgbm_text(full.model_to_string())) < len(full.model_to_string())


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-50, 50, allow_nan=False), min_size=5, max_size=5))
def test_evaluator_matches_booster_on_any_point(point: list[float]) -> None:
    reg = _cached_regressor()
    x = np.asarray([point])
    assert reg[0].predict(x)[0] == pytest.approx(reg[1].predict(x)[0], abs=1e-12)


_CACHE: list = []


def _cached_regressor():
    if not _CACHE:
        reg = fit_regressor(*_data(6))
        _CACHE.extend([reg.ensemble(), lgb.Booster(model_str=reg.text)])
    return _CACHE


def test_sklearn_fallback_json_equals_sklearn() -> None:
    from sklearn.ensemble import GradientBoostingRegressor

    x, y = _data(7)
    model = GradientBoostingRegressor(n_estimators=30, max_leaf_nodes=9, random_state=0).fit(x, y)
    ens = parse_sklearn_json(json.loads(json.dumps(export_sklearn_gbr(model, x.shape[1]))))
    test = np.random.default_rng(8).normal(size=(400, 5))
    np.testing.assert_allclose(ens.predict(test), model.predict(test), rtol=1e-9, atol=1e-9)
    reg = fit_regressor(x, y, prefer="sklearn")
    assert reg.model_format == "sklearn-gbr-json" and "pickle" not in reg.text


def test_corrupted_model_text_is_a_profile_error() -> None:
    text = fit_regressor(*_data(9)).text
    with pytest.raises(ProfileError):
        parse_lightgbm_text(text.replace("leaf_value=", "leaf_value=abc ", 1))
    with pytest.raises(ProfileError):
        parse_lightgbm_text("tree\nversion=v4\n")
    ens = parse_lightgbm_text(text)
    with pytest.raises(ProfileError):
        ens.predict(np.zeros((3, 2)))


def test_bagged_small_fit_is_one_lightgbm_model_averaging_its_members() -> None:
    """A small training set averages NUM_BAGGED boosters, stored as one text model LightGBM itself loads."""
    from llmperf_hook.profile.fit import NUM_BAGGED, merge_lightgbm_texts

    x, y = _data(12)[:2]
    one, bagged = fit_regressor(x, y), fit_regressor(x, y, bagged=True)
    assert bagged.num_trees == NUM_BAGGED * one.num_trees
    booster = lgb.Booster(model_str=bagged.text)
    assert np.allclose(booster.predict(x), bagged.ensemble().predict(x), atol=1e-9)
    twice = merge_lightgbm_texts([one.text, one.text])
    assert np.allclose(parse_lightgbm_text(twice).predict(x), one.ensemble().predict(x), atol=1e-4)  # leaves keep 5 digits


def test_linear_trees_equal_lightgbm_inside_the_training_range_and_stay_at_its_edge_outside() -> None:
    x, y = _data(21)
    y = y + 2.0 * np.maximum(x[:, 3], 0.0)  # a hinge: one split, two slopes
    x_nan = x.copy()
    x_nan[::9, 2] = np.nan
    params = {"objective": "regression", "linear_tree": True, "linear_lambda": 0.1, "verbose": -1,
              "num_threads": 1, "seed": 3}
    booster = lgb.train(params, lgb.Dataset(x_nan, y, params={"linear_tree": True}), num_boost_round=30)
    ens = parse_lightgbm_text(booster.model_to_string())
    assert ens.leaf_const is not None and (ens.coef_feature >= 0).any()
    low, high = np.nanmin(x_nan, axis=0), np.nanmax(x_nan, axis=0)
    inside = np.clip(np.random.default_rng(22).normal(size=(400, 5)), low, high)
    inside[::6, 2] = np.nan  # a NaN input of a leaf's linear model gives that leaf's constant value
    np.testing.assert_allclose(ens.predict(inside), booster.predict(inside), rtol=1e-12, atol=1e-12)
    far = np.zeros((2, 5))
    top = np.nanmax(x_nan[:, 3])
    far[:, 3] = [top + 10.0, top + 1000.0]
    edge = far.copy()
    edge[:, 3] = top
    np.testing.assert_allclose(ens.predict(far), booster.predict(edge), rtol=1e-12, atol=1e-12)
    assert booster.predict(far)[1] > booster.predict(edge)[1] + 100  # LightGBM itself extends the slope


def test_bagged_linear_fit_is_one_model_lightgbm_loads() -> None:
    x, y = _data(23)
    reg = fit_regressor(x, y + np.maximum(x[:, 0], 0.0), loss="l1", bagged=True, linear=True)
    assert reg.linear_leaves and reg.loss == "l2"  # linear leaves are fitted by least squares
    booster = lgb.Booster(model_str=reg.text)
    np.testing.assert_allclose(reg.ensemble().predict(x), booster.predict(x), rtol=1e-9, atol=1e-9)

"""The loss and floor of a regressor are chosen on an inner split of the training rows, and recorded."""

import numpy as np
import pytest

from llmperf_hook.profile.build_profile import fit_with_floor, predict_with_floor
from llmperf_hook.profile.features import RooflineConstants, build_features
from llmperf_hook.profile.fit import fit_regressor

pytest.importorskip("lightgbm")


def _gemm_samples(noise: str, n: int = 300) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    dims = {k: 2.0 ** rng.integers(7, 13, size=n) for k in ("m", "n", "k")}
    block = build_features("gemm", False, dims, RooflineConstants(312e12, 2e12, 108, 2))
    eff = 0.5 + 0.3 * np.tanh(np.log2(dims["m"] * dims["n"] * dims["k"]) / 8 - 3)
    scatter = rng.laplace(scale=0.02, size=n) if noise == "laplace" else rng.normal(scale=0.02, size=n)
    if noise == "throttled":
        scatter = np.where(rng.random(n) < 0.1, 0.25, scatter)  # 10 % of runs ~28 % slow
    return block.matrix, block.roofline_s / eff * np.exp(scatter), block.roofline_s


@pytest.mark.parametrize("loss", ["l1", "l2"])
def test_both_losses_fit_and_are_recorded(loss: str) -> None:
    x, t, roof = _gemm_samples("normal")
    reg = fit_regressor(x, np.log(t / roof), loss=loss)
    assert reg.loss == loss
    assert np.mean(np.abs(np.exp(reg.ensemble().predict(x)) * roof / t - 1)) < 0.05


def test_selection_is_robust_to_throttled_outliers() -> None:
    x, t, roof = _gemm_samples("throttled")
    reg, floor = fit_with_floor(x[:240], t[:240], roof[:240])
    assert reg.loss in ("l1", "l2", "huber") and floor >= 0.0
    clean = predict_with_floor(reg, floor, x[240:], roof[240:]) / t[240:] - 1
    # The median sample is predicted within a few percent: the 10 % throttled runs do not drag the fit.
    assert abs(np.median(clean)) < 0.01  # an L2 fit here is biased by about +1.8 %


def test_linear_baseline_is_stored_and_predicted_as_fitted(tmp_path) -> None:
    """A power law the trees would staircase is a baseline slope; profile.json round-trips it exactly."""
    from llmperf_hook.graph.op import Op
    from llmperf_hook.profile.build_profile import Samples, fit_samples
    from llmperf_hook.profile.predictor import FittedProfile
    from llmperf_hook.profile.profile_io import ProfileMeta, write_profile

    rng = np.random.default_rng(1)
    rows, cols = 2.0 ** rng.uniform(10, 20, 300), 2.0 ** rng.uniform(7, 13, 300)
    rc = RooflineConstants(1e14, 1e12, 108, 2)
    roof = build_features("softmax", False, {"rows": rows, "cols": cols}, rc).roofline_s
    t = roof * (1.0 + 4.0 * (cols / 128.0) ** -0.5) * np.exp(rng.normal(0, 0.01, 300))  # efficiency rises with length
    entry, text = fit_samples(Samples("softmax", "fwd", {"rows": rows, "cols": cols}, t), rc, "fp16")
    assert entry.baseline is not None and entry.holdout_mape < 0.03
    meta = ProfileMeta("lin", {"fp16": rc}, {}, {"device": "test"}, {}, {"samples": "synthetic"}, (entry,))
    prof = FittedProfile(write_profile(tmp_path / "lin", meta, {entry.file: text}))
    assert prof._entries[("softmax", "fwd", "fp16")].baseline == entry.baseline
    ops = [Op("s", "softmax", "fwd", {"rows": int(r), "cols": int(c)}, dtype="fp16") for r, c in zip(rows[:20], cols[:20])]
    assert np.allclose(prof.predict_s(ops, None), t[:20], rtol=0.05)
    # Far outside the sampled range the baseline is clipped to its training span, like a leaf: the predicted
    # time / roofline stays within the sampled ratios instead of following the slope below the roofline.
    far = {"rows": np.array([2.0 ** 20]), "cols": np.array([2.0 ** 24])}
    ratio = prof.predict_class_s("softmax", "fwd", "fp16", far)[0] / build_features("softmax", False, far, rc).roofline_s[0]
    assert 0.9 * (t / roof).min() < ratio < 1.1 * (t / roof).max()


def _embedding_hinge(n: int = 400, seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GH200-like embedding forward: linear in the tokens until the time of the table's size takes over."""
    rng = np.random.default_rng(seed)
    dims = {"tokens": 2.0 ** rng.uniform(11, 15.3, n), "vocab": 50304 / 2.0 ** rng.integers(0, 5, n),
            "hidden": 256.0 * rng.integers(8, 33, n)}
    block = build_features("embedding", False, dims, RooflineConstants(989e12, 4e12, 132, 2))
    t = np.maximum(dims["tokens"] * dims["hidden"] * 2 / 0.6e12, dims["vocab"] * dims["hidden"] * 2 / 1.8e12)
    return block.matrix, (t + 20e-6) * np.exp(rng.normal(0, 0.01, n)), block.roofline_s


def test_linear_leaves_are_kept_for_a_hinge_and_not_for_what_trees_already_fit() -> None:
    x, t, roof = _embedding_hinge()
    reg, _ = fit_with_floor(x, t, roof)
    assert reg.linear_leaves and reg.loss == "l2"
    x, t, roof = _gemm_samples("normal")  # a smooth efficiency surface: no 10 % inner gain to pay for the size
    reg, _ = fit_with_floor(x, t, roof)
    assert not reg.linear_leaves and reg.num_leaves == 15

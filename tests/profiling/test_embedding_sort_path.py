"""Embedding backward: PyTorch's CUDA kernel sorts the indices only above EMBEDDING_BWD_SORT_ABOVE; the feature
that says which path a shape takes is the backward's only, and it is what the two paths' costs split on."""

import numpy as np
import pytest

from llmperf_hook.profile.build_profile import fit_with_floor, predict_with_floor
from llmperf_hook.profile.features import EMBEDDING_BWD_SORT_ABOVE, RooflineConstants, build_features

RC = RooflineConstants(989e12, 4e12, 132, 2)


def _dims(tokens: np.ndarray) -> dict[str, np.ndarray]:
    return {"tokens": tokens, "vocab": np.full(tokens.shape, 50304.0), "hidden": np.full(tokens.shape, 4096.0)}


def test_sort_path_is_a_backward_feature_at_pytorchs_threshold() -> None:
    tokens = np.array([1.0, 3072.0, 3073.0, 4096.0])
    bwd = build_features("embedding", True, _dims(tokens), RC)
    assert list(bwd.matrix[:, bwd.names.index("sort_path")]) == [0.0, 0.0, 1.0, 1.0]
    assert EMBEDDING_BWD_SORT_ABOVE == 3072  # aten/src/ATen/native/cuda/Embedding.cu: num_indices <= 3072
    assert "sort_path" not in build_features("embedding", False, _dims(tokens), RC).names


def test_a_step_at_the_threshold_is_learnt_on_both_sides() -> None:
    pytest.importorskip("lightgbm")
    rng = np.random.default_rng(4)
    tokens = rng.choice([1024.0, 2048.0, 3072.0, 4096.0, 5120.0, 6144.0, 8192.0], size=240)
    block = build_features("embedding", True, _dims(tokens), RC)
    # The unsorted feature kernel walks every index in each of its blocks: 30 % slower than the sort path here.
    t = (block.roofline_s + 100e-6) * np.where(tokens <= 3072, 1.3, 1.0) * np.exp(rng.normal(0, 0.01, 240))
    reg, floor = fit_with_floor(block.matrix, t, block.roofline_s)
    probe = build_features("embedding", True, _dims(np.array([3072.0, 4096.0])), RC)
    pred = predict_with_floor(reg, floor, probe.matrix, probe.roofline_s)
    truth = (probe.roofline_s + 100e-6) * np.array([1.3, 1.0])
    assert np.all(np.abs(pred / truth - 1.0) < 0.05)

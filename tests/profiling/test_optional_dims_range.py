"""Optional dims (features.OPTIONAL_DIMS) refine an answer only inside their sampled range."""

from __future__ import annotations

import numpy as np

from llmperf_hook.profile.predictor import _optional_within_range
from llmperf_hook.profile.profile_io import ModelEntry


def _entry() -> ModelEntry:
    return ModelEntry(op_class="optimizer", phase="fwd", dtype="fp16", file="optimizer.fwd.fp16.txt",
                      model_format="lightgbm-text", sha256="", schema_hash="", feature_names=(),
                      train_ranges={"params": (1e7, 1e10), "layers": (4.0, 12.0), "embedding_params": (0.0, 4e8)},
                      num_samples=10, holdout_mape=None)


def test_a_shape_outside_any_optional_range_gets_the_params_only_answer() -> None:
    dims = {"params": np.array([1e9, 2e9, 3e9]), "layers": np.array([8.0, 32.0, np.nan]),
            "embedding_params": np.array([1e8, 1e8, np.nan])}
    out = _optional_within_range(_entry(), dims)
    assert out["layers"][0] == 8.0 and out["embedding_params"][0] == 1e8  # inside: kept
    assert np.isnan(out["layers"][1]) and np.isnan(out["embedding_params"][1])  # 32 layers: both dropped
    assert np.isnan(out["layers"][2])  # absent stays absent
    assert np.array_equal(out["params"], dims["params"])  # required dims untouched


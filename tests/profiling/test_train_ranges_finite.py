"""A model's train_ranges are finite [low, high] pairs: a NaN dim in the store is skipped before fitting, a NaN range
written into profile.json (with its digest recomputed) is refused when the profile is loaded. NaN compares False both
ways, so a NaN range read every shape as inside it and the extrapolation warning was never given."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.errors import ProfileError
from llmperf_hook.profile.build_profile import Samples, fit_samples
from llmperf_hook.profile.features import RooflineConstants
from llmperf_hook.profile.profile_io import meta_sha256, read_profile_meta
from llmperf_hook.profile.sampler import _samples_by_class
from llmperf_hook.resources import configs_dir
from llmperf_hook.store import OpSampleRecord, open_store

RC = RooflineConstants(1e11, 2e10, 2, 4)


def _layernorm(n: int = 12) -> Samples:
    rows = np.arange(1, n + 1, dtype=float) * 64
    return Samples("layernorm", "fwd", {"tokens": rows, "hidden": np.full(n, 256.0)}, rows * 256 * 8 / 2e10 * 3)


def test_a_nan_dim_is_left_out_of_the_fit_and_its_range() -> None:
    s = _layernorm()
    s.dims["hidden"][3] = np.nan
    entry, _ = fit_samples(s, RC, "fp32", prefer="sklearn", with_holdout=False)
    assert entry.num_samples == 11
    assert entry.train_ranges == {"tokens": (64.0, 768.0), "hidden": (256.0, 256.0)}


def test_the_store_rows_with_a_nan_or_text_dim_are_not_fitted(tmp_path: Path) -> None:
    """The store reads its dims as JSON, which takes NaN and strings: such a row is skipped, not a NaN range or an
    internal error (float('x'))."""
    fp = '{"device": "cpu"}'
    with open_store(tmp_path / "s.sqlite") as store:
        store.record_op_samples([OpSampleRecord("box", "fp32", "layernorm", "fwd", {"tokens": t, "hidden": h}, 1e-4,
                                                "sampler", fp) for t, h in ((64, 256), (128, math.nan), (512, math.inf))])
        with store.conn:  # what dims_key would not write, as another tool or a hand edit leaves it
            store.conn.execute("INSERT INTO op_samples VALUES ('box','fp32','layernorm','fwd','k','{\"tokens\":256,"
                               "\"hidden\":\"x\"}',1e-4,'sampler',?,'{}','')", (fp,))
        groups = _samples_by_class(store, "box", "fp32", fp)
    s = groups[("layernorm", "fwd", "fp32")]
    assert list(s.dims["tokens"]) == [64.0] and list(s.dims["hidden"]) == [256.0]


def test_a_nan_train_range_in_profile_json_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "a100-sxm4-80gb"
    shutil.copytree(configs_dir() / "profiles" / "a100-sxm4-80gb", directory)
    doc = json.loads((directory / "profile.json").read_text())
    gemm = next(m for m in doc["models"] if m["op_class"] == "gemm")
    gemm["train_ranges"]["k"] = [float("nan"), float("nan")]
    doc["meta_sha256"] = meta_sha256(doc)  # as a forger, or a writer that let the NaN through, would leave it
    (directory / "profile.json").write_text(json.dumps(doc))
    with pytest.raises(ProfileError, match=r"training range\(s\) that are not finite \[low, high\] pairs \(k \[nan, "
                                           r"nan\]\)"):
        read_profile_meta(directory)
    gemm["train_ranges"]["k"] = [4096.0, 64.0]
    doc["meta_sha256"] = meta_sha256(doc)
    (directory / "profile.json").write_text(json.dumps(doc))
    with pytest.raises(ProfileError, match=r"k \[4096.0, 64.0\]"):
        read_profile_meta(directory)

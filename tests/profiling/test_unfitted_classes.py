"""A class `llmperf profile` was asked to sample but could not fit (0 samples in a tiny --budget, or fewer than
MIN_SAMPLES_TO_FIT) is recorded in profile.json ("unfitted", covered by meta_sha256), said in the profile's notes,
and named in predict's per-class cost model line instead of a bare "roofline"."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.errors import ProfileError
from llmperf_hook.graph.op import Op
from llmperf_hook.predict.dispatch import predict_ops
from llmperf_hook.profile.build_profile import Samples
from llmperf_hook.profile.predictor import FittedProfile
from llmperf_hook.profile.profile_fit import unfitted_groups, unfitted_note
from llmperf_hook.profile.profile_io import ProfileMeta, meta_sha256, read_profile_meta, write_profile
from tests.profiling.test_packed_trees import RC, _tiny_fit


def _profile(tmp_path: Path, unfitted: dict[str, int]) -> Path:
    entry, text = _tiny_fit()  # gemm fwd fp32
    meta = ProfileMeta("tiny", {"fp32": RC}, {}, {"device": "test"}, {}, {"samples": "synthetic"}, (entry,),
                       unfitted=unfitted)
    return write_profile(tmp_path / "tiny", meta, {entry.file: text})


def test_groups_asked_for_without_a_model_are_listed_with_their_counts() -> None:
    few = Samples("layernorm", "fwd", {"tokens": np.ones(3), "hidden": np.ones(3)}, np.ones(3))
    enough = Samples("gemm", "fwd", {k: np.ones(8) for k in "mnk"}, np.ones(8))
    groups = {("layernorm", "fwd", "fp32"): few, ("gemm", "fwd", "fp32"): enough}
    asked = {("gemm", "fwd"), ("gemm", "bwd"), ("layernorm", "fwd"), ("attention", "fwd")}
    got = unfitted_groups(groups, asked, "fp32")
    assert got == {"attention/fwd/fp32": 0, "gemm/bwd/fp32": 0, "layernorm/fwd/fp32": 3}
    note = unfitted_note(got, "cpu", "box")
    assert "attention/fwd/fp32 (0 samples)" in note and "roofline" in note, note


def test_the_note_names_the_options_that_add_them_not_the_same_command() -> None:
    """A group left from an earlier run under the same name (another --ops, another dtype) stays listed while it has
    fewer than 8 samples, and 'the same command with a larger --budget' never adds it (design and first fits are of
    the classes asked for, in --dtype); naming them with --ops gives each the 8 shapes of a first fit."""
    few = Samples("rmsnorm", "fwd", {"tokens": np.ones(3), "hidden": np.ones(3)}, np.ones(3))
    groups = {("rmsnorm", "fwd", "bf16"): few}
    note = unfitted_note(unfitted_groups(groups, {("gemm", "fwd"), ("swiglu", "bwd")}, "fp32"), "cpu", "box")
    assert "rmsnorm/fwd/bf16 (3 samples)" in note and "same command" not in note, note
    assert "`llmperf profile --device cpu --dtype bf16 --ops rmsnorm --name box`" in note, note
    assert "`llmperf profile --device cpu --dtype fp32 --ops gemm,swiglu --name box`" in note, note


def test_predict_names_why_the_roofline_prices_a_class(tmp_path: Path) -> None:
    profile = FittedProfile(_profile(tmp_path, {"gemm/bwd/fp32": 0, "layernorm/fwd/fp32": 1, "gemm/fwd/fp32": 0}))
    assert profile.meta.unfitted == {"gemm/bwd/fp32": 0, "layernorm/fwd/fp32": 1}  # a fitted one is not written
    ops = [Op("g", "gemm", "fwd", {"m": 64, "n": 64, "k": 64}, dtype="fp32"),
           Op("gb", "gemm", "bwd", {"m": 64, "n": 64, "k": 64}, dtype="fp32"),
           Op("ln", "layernorm", "fwd", {"tokens": 64, "hidden": 64}, dtype="fp32"),
           Op("d", "dropout", "fwd", {"elements": 4096}, dtype="fp32")]
    from llmperf_hook.hardware.load import load_cluster

    _, used = predict_ops(ops, load_cluster("dgx-h100"), profile, None)
    assert used["gemm"] == "lightgbm:tiny (fwd) / roofline (not fitted in tiny: 0 samples) (bwd)"
    assert used["layernorm"] == "roofline (not fitted in tiny: 1 sample)"
    assert used["dropout"] == "roofline"  # never asked for: nothing to say


def test_a_malformed_unfitted_record_is_refused(tmp_path: Path) -> None:
    directory = _profile(tmp_path, {"layernorm/fwd/fp32": 0})
    doc = json.loads((directory / "profile.json").read_text())
    doc["unfitted"] = {"layernorm/fwd/fp32": -2}
    doc["meta_sha256"] = meta_sha256(doc)
    (directory / "profile.json").write_text(json.dumps(doc))
    with pytest.raises(ProfileError, match="unfitted"):
        read_profile_meta(directory)

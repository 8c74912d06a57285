"""A class served by the profile in one phase and the roofline in the other is labelled with both (a tiny --budget
fits gemm fwd but not bwd): it was labelled by whichever op came last, "roofline", hiding the fitted half."""

from pathlib import Path

import numpy as np

from llmperf_hook.graph.op import Op
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict.dispatch import predict_ops, predictor_label
from llmperf_hook.profile.build_profile import Samples, fit_samples
from llmperf_hook.profile.features import RooflineConstants
from llmperf_hook.profile.predictor import FittedProfile
from llmperf_hook.profile.profile_io import ProfileMeta, write_profile


def test_label_names_each_predictor_with_its_phases() -> None:
    assert predictor_label({"lightgbm:x": ["fwd", "bwd"]}) == "lightgbm:x"
    assert predictor_label({"lightgbm:x": ["fwd"], "roofline": ["bwd"]}) == "lightgbm:x (fwd) / roofline (bwd)"


def test_a_profile_with_only_the_forward_gemm_is_named_for_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    rc = RooflineConstants(1e11, 1e10, 1, 4)
    m, n, k = (rng.integers(16, 512, 40).astype(float) for _ in range(3))
    entry, text = fit_samples(Samples("gemm", "fwd", {"m": m, "n": n, "k": k}, 2 * m * n * k / 5e10 + 2e-6), rc,
                              "fp32", with_holdout=False)
    meta = ProfileMeta("cpu-x", {"fp32": rc}, {}, {"device": "test"}, {}, {"samples": "synthetic"}, (entry,))
    profile = FittedProfile(write_profile(tmp_path / "cpu-x", meta, {entry.file: text}))
    dims = {"m": 256, "n": 256, "k": 256}
    ops = [Op("g", "gemm", "fwd", dims, dtype="fp32"), Op("g", "gemm", "bwd", dims, dtype="fp32")]
    _, used = predict_ops(ops, load_cluster("dgx-h100"), profile, None)
    assert used["gemm"] == "lightgbm:cpu-x (fwd) / roofline (bwd)"

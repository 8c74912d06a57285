"""A fitted profile's optimizer step in the bytes of the job's own Adam (predict/optimizer_bytes.py): the shipped H100 /
H200 regressors were sampled on `llmperf profile`'s fp32 torch.optim.Adam (72 B per parameter), so a plain-torch bf16
AdamW (40 B) is 40/72 of it and DeepSpeed's fp32 client AdamW (80 B) 80/72. Measured on an H200 for run h06 of
measurements/h200-sxm-141gb-2026-11-28 (1.75 B parameters, bf16 foreach AdamW): its Adam kernels took 22.8 ms per
step, which the unscaled regressor priced at 35.9 ms."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llmperf_hook.errors import ProfileError
from llmperf_hook.graph.op import Op
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict.dispatch import predict_ops
from llmperf_hook.predict.optimizer_bytes import optimizer_bytes_scale
from llmperf_hook.profile.predictor import FittedProfile
from llmperf_hook.profile.profile_io import (OPTIMIZER_SAMPLE_KEY, SAMPLER_ADAM_BYTES_PER_PARAM, meta_sha256,
                                             optimizer_sample_bytes_per_param, read_profile_meta)
from llmperf_hook.resources import configs_dir

PARAMS = 1_750_000_000


def _step(per_param: float, dtype: str = "fp32") -> Op:
    return Op("optimizer.step", "optimizer", "step", {"params": PARAMS}, flops=0.0,
              bytes_moved=float(PARAMS * per_param), dtype=dtype)


def _copy(tmp_path: Path, name: str, value: object) -> Path:
    """A copy of a shipped profile whose provenance says `value` (None: the key removed, an older profile)."""
    folder = tmp_path / name
    shutil.copytree(configs_dir() / "profiles" / name, folder)
    doc = json.loads((folder / "profile.json").read_text())
    doc["provenance"].pop(OPTIMIZER_SAMPLE_KEY, None)
    if value is not None:
        doc["provenance"][OPTIMIZER_SAMPLE_KEY] = value
    doc["meta_sha256"] = meta_sha256(doc)
    (folder / "profile.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return folder


@pytest.mark.parametrize("name", ["h100-sxm5-80gb", "h200-sxm-141gb"])
def test_shipped_gpu_profiles_say_their_samples_ran_the_samplers_fp32_adam(name: str) -> None:
    meta = read_profile_meta(configs_dir() / "profiles" / name)
    assert optimizer_sample_bytes_per_param(meta) == SAMPLER_ADAM_BYTES_PER_PARAM == 72.0


def test_a_profile_without_the_field_is_taken_for_the_samplers(tmp_path: Path) -> None:
    meta = read_profile_meta(_copy(tmp_path, "h200-sxm-141gb", None))
    assert optimizer_sample_bytes_per_param(meta) == SAMPLER_ADAM_BYTES_PER_PARAM


@pytest.mark.parametrize("value", ["abc", "0", "-30", "nan", True, [72]])
def test_a_bad_field_is_refused_with_its_name(tmp_path: Path, value: object) -> None:
    """True is no byte count (float(True) would read it as 1 B and price the step 72x)."""
    with pytest.raises(ProfileError, match=OPTIMIZER_SAMPLE_KEY):
        read_profile_meta(_copy(tmp_path, "h200-sxm-141gb", value))


def test_the_step_is_priced_in_its_own_bytes() -> None:
    cluster = load_cluster("dgx-h200")
    profile = FittedProfile(configs_dir() / "profiles" / "h200-sxm-141gb")
    ops = [_step(72.0), _step(40.0, "bf16"), _step(80.0), _step(30.0)]
    seconds, used = predict_ops(ops, cluster, profile, None)
    sampled, bf16, fp32_adamw, fused = (seconds[op.cost_key] for op in ops)
    assert used["optimizer"] == profile.name
    assert bf16 == pytest.approx(sampled * 40 / 72)  # before: the same 72-B time for every op of 1.75 B parameters
    assert fp32_adamw == pytest.approx(sampled * 80 / 72)
    assert fused == pytest.approx(sampled * 30 / 72)
    assert 0.015 < bf16 < 0.030  # h06's 22.8 ms of Adam kernels; 35.9 ms unscaled


def test_a_profile_sampled_on_another_adam_scales_from_its_bytes(tmp_path: Path) -> None:
    cluster = load_cluster("dgx-h200")
    shipped = FittedProfile(configs_dir() / "profiles" / "h200-sxm-141gb")
    fused_samples = FittedProfile(_copy(tmp_path, "h200-sxm-141gb", "30"))
    op = _step(30.0)
    assert optimizer_bytes_scale(op, fused_samples.meta) == pytest.approx(1.0)
    ours = predict_ops([op], cluster, fused_samples, None)[0][op.cost_key]
    theirs = predict_ops([op], cluster, shipped, None)[0][op.cost_key]
    assert ours == pytest.approx(theirs * 72 / 30)


def test_other_classes_and_the_roofline_are_left_alone() -> None:
    meta = read_profile_meta(configs_dir() / "profiles" / "h200-sxm-141gb")
    gemm = Op("gemm", "gemm", "fwd", {"m": 128, "n": 128, "k": 128}, flops=1.0, bytes_moved=1.0, dtype="bf16")
    assert optimizer_bytes_scale(gemm, meta) == 1.0
    assert optimizer_bytes_scale(_step(40.0), None) == 1.0

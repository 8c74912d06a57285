"""find_profile / find_comm_model: user profiles first, then shipped; None when absent; errors when damaged."""

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.errors import ProfileError
from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.predict.fitted import find_comm_model, find_profile
from llmperf_hook.profile.profile_io import meta_sha256
from llmperf_hook.resources import configs_dir


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_shipped_profiles_and_comm_models_are_found() -> None:
    assert find_profile("A100-SXM4-80GB", "bf16").name == "lightgbm:a100-sxm4-80gb"
    assert find_profile("gh200-96gb", "fp16").name == "lightgbm:gh200-96gb"
    assert find_profile("a100-sxm4-80gb", "fp32") is None  # sampled in fp16 only
    assert find_profile("h100-sxm5-80gb", "bf16").name == "lightgbm:h100-sxm5-80gb"  # measured (measurements/)
    assert find_profile("no-such-gpu", "bf16") is None
    assert find_comm_model("perlmutter").name == "alpha-beta+residual:perlmutter"
    assert find_comm_model("vista") is not None and find_comm_model("dgx-h100") is None


def test_user_profile_takes_precedence_and_damage_is_reported(_home: Path) -> None:
    user = _home / "profiles" / "a100-sxm4-80gb"
    shutil.copytree(configs_dir() / "profiles" / "a100-sxm4-80gb", user)
    doc = json.loads((user / "profile.json").read_text())
    doc["provenance"]["samples"] = "user copy"
    doc["meta_sha256"] = meta_sha256(doc)
    (user / "profile.json").write_text(json.dumps(doc))
    assert find_profile("a100-sxm4-80gb", "bf16").meta.provenance["samples"] == "user copy"
    (user / "profile.json").write_text("{not json")
    with pytest.raises(ProfileError):
        find_profile("a100-sxm4-80gb", "bf16")
    (user / "profile.json").unlink()  # model files without their metadata: never a silent roofline fallback
    with pytest.raises(ProfileError, match="no profile.json"):
        find_profile("a100-sxm4-80gb", "bf16")
    shutil.rmtree(user)
    user.mkdir()  # an empty folder is no profile at all: the shipped one serves
    assert find_profile("a100-sxm4-80gb", "bf16").name == "lightgbm:a100-sxm4-80gb"


def test_whole_large_job_predicts_in_well_under_a_second() -> None:
    """A 1,024-GPU job has a few thousand distinct ops per rank layout; one vectorised call per class."""
    prof = find_profile("a100-sxm4-80gb", "bf16")
    rng = np.random.default_rng(0)
    ops = []
    for i in range(3000):
        m = int(rng.choice([2048, 4096, 8192, 16384]))
        h = int(rng.choice([4096, 5120, 8192, 12288]))
        ops.append(Op(f"l{i}.qkv", "gemm", rng.choice(["fwd", "bwd"]), {"m": m, "n": 3 * h // 8, "k": h}))
        ops.append(Op(f"l{i}.attn", "attention", "fwd", {"b": 1, "s": m, "heads": h // 128 // 8, "kv_heads": 8 // 8 or 1,
                                                          "head_dim": 128, "causal": 1}))
        ops.append(Op(f"l{i}.ln", "layernorm", "fwd", {"tokens": m, "hidden": h}))
    t0 = time.perf_counter()
    by_class: dict[str, list[Op]] = {}
    for op in ops:
        by_class.setdefault(op.op_class, []).append(op)
    times = [prof.predict_s(group, None) for group in by_class.values()]
    elapsed = time.perf_counter() - t0
    assert all(np.all(np.asarray(t) > 0) for t in times)
    assert elapsed < 1.0, elapsed


def test_comm_model_predicts_every_collective_and_scales_with_bytes() -> None:
    comm = find_comm_model("perlmutter")
    for kind in ("allreduce", "allgather", "reducescatter", "alltoall", "p2p"):
        assert comm.supports(kind, "fwd", "bf16")
    assert not comm.supports("broadcast", "fwd", "bf16")
    intra, inter = Collective("tp", 4, 4), Collective("dp", 16, 4)
    ops = [Op(f"ar{b}", "allreduce", "step", {"bytes": b}, collective=c) for c in (intra, inter) for b in (1e8, 1e9)]
    t = comm.predict_s(ops, None)
    assert 0 < t[0] < t[1] and 0 < t[2] < t[3]
    assert t[2] > t[0]  # their inter-node NCCL ran at 0.7-2.5 GB/s: far slower than NVLink


def test_a_shipped_preset_name_is_known_without_local_hardware() -> None:
    """fitted._fingerprint_fits_preset finds the presets by configs/hardware/NAME.yaml (H193: local_hardware's
    shipped_hardware_names cost predict its sampler imports): the same names, each refusing a CPU fingerprint and
    taking its own GPU's; a user's own name is never held to a preset's chip."""
    from llmperf_hook.predict.fitted import _fingerprint_fits_preset
    from llmperf_hook.profile.local_hardware import shipped_hardware_names

    cpu = {"device": "AMD EPYC 7B13", "clock": "cpu"}
    for name in shipped_hardware_names():
        gpu = {"device": f"NVIDIA {name.split('-')[0].upper()} 80GB HBM3", "clock": "cuda"}
        assert not _fingerprint_fits_preset(name, cpu) and _fingerprint_fits_preset(name, gpu), name
    for name in ("my-cpu", "h100-sxm5-80gb-copy", "h100-sxm5", ".."):
        assert _fingerprint_fits_preset(name, cpu), name

"""Profiles on disk: shipped ones load and predict sanely; damaged or stale ones raise ProfileError, never a number."""

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.errors import ProfileError
from llmperf_hook.graph.op import Op
from llmperf_hook.profile.build_profile import Samples, fit_samples
from llmperf_hook.profile.features import RooflineConstants, schema_hash
from llmperf_hook.profile.predictor import FittedProfile
from llmperf_hook.profile.profile_io import ProfileMeta, write_profile
from llmperf_hook.resources import configs_dir
from tests.profiling.test_packed_trees import _tiny_fit

SHIPPED = configs_dir() / "profiles"
RC = RooflineConstants(1e11, 1e10, 1, 4)


def _tiny_profile(directory: Path) -> Path:
    entry, text = _tiny_fit()  # the same seeded gemm fwd fit as test_packed_trees', fitted once per process
    meta = ProfileMeta("tiny", {"fp32": RC}, {}, {"device": "test"}, {"numpy": np.__version__}, {"samples": "synthetic"},
                       (entry,))
    return write_profile(directory / "tiny", meta, {entry.file: text})


def test_shipped_profiles_load_and_scale_with_flops() -> None:
    for name in ("a100-sxm4-80gb", "gh200-96gb"):
        prof = FittedProfile(SHIPPED / name)
        assert prof.supports("gemm", "fwd", "bf16") and prof.supports("gemm", "recompute", "fp16")
        assert not prof.supports("gemm", "fwd", "fp32") and not prof.supports("router", "fwd", "bf16")
        assert "MIT" in prof.meta.provenance["license"] and "2509.22832" in prof.meta.provenance["attribution"]
        ops = [Op(f"g{s}", "gemm", "fwd", {"m": 4096 * s, "n": 8192, "k": 8192}) for s in (1, 2, 4, 8)]
        t = np.asarray(prof.predict_s(ops, None))
        assert np.all(t > 0) and np.all(np.diff(t) > 0)
        # A100 dense fp16 is 312 TFLOP/s: a large GEMM lands between 50 % and 100 % of it.
        if name.startswith("a100"):
            eff = 2 * 4096 * 8192 * 8192 / t[0] / 312e12
            assert 0.5 < eff < 1.0, eff


def test_shipped_gh200_has_no_attention_backward_from_corrupt_samples() -> None:
    prof = FittedProfile(SHIPPED / "gh200-96gb")
    assert prof.supports("attention", "fwd", "bf16") and not prof.supports("attention", "bwd", "bf16")
    assert any("attention/bwd: not fitted" in n for n in prof.meta.notes)


def test_extrapolation_is_reported() -> None:
    prof = FittedProfile(SHIPPED / "a100-sxm4-80gb")
    ops = [Op("big", "gemm", "fwd", {"m": 1 << 20, "n": 8192, "k": 8192})]
    assert any("beyond the profiled range" in w for w in prof.extrapolation_warnings(ops))
    assert prof.predict_s(ops, None)[0] > prof.predict_s([Op("s", "gemm", "fwd", {"m": 8192, "n": 8192, "k": 8192})],
                                                         None)[0] * 50


def test_round_trip_and_no_pickle(tmp_path: Path) -> None:
    d = _tiny_profile(tmp_path)
    files = sorted(p.name for p in d.iterdir())
    assert files == ["gemm.fwd.fp32.trees.gz", "gemm.fwd.fp32.txt.gz", "profile.json"]
    for p in d.iterdir():
        data = gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes()
        assert b"pickle" not in data and not data.startswith(b"\x80")
    assert gzip.decompress((d / files[1]).read_bytes()).startswith(b"tree\nversion=")  # a LightGBM text dump
    t = FittedProfile(d).predict_s([Op("x", "gemm", "fwd", {"m": 256, "n": 256, "k": 256}, dtype="fp32")], None)[0]
    assert t == pytest.approx(2 * 256**3 / 5e10 + 2e-6, rel=0.5)


@pytest.mark.parametrize("damage", ["model_bytes", "json", "schema", "missing_file", "roofline", "traversal",
                                    "baseline"])
def test_damaged_profile_raises(tmp_path: Path, damage: str) -> None:
    d = _tiny_profile(tmp_path)
    meta_path, model = d / "profile.json", d / "gemm.fwd.fp32.txt.gz"
    doc = json.loads(meta_path.read_text())
    if damage == "model_bytes":
        model.write_bytes(gzip.compress(gzip.decompress(model.read_bytes()).replace(b"leaf_value=", b"leaf_value=9", 1)))
    elif damage == "json":
        meta_path.write_text(meta_path.read_text()[:-20])
    elif damage == "schema":
        doc["models"][0]["schema_hash"] = "0000"
        meta_path.write_text(json.dumps(doc))
    elif damage == "missing_file":
        model.unlink()
    elif damage == "baseline":  # a linear baseline with fewer weights than features
        doc["models"][0]["baseline"] = {"weights": [1.0], "intercept": 0.0, "low": 0.0, "high": 0.0}
        meta_path.write_text(json.dumps(doc))
    elif damage == "roofline":
        doc["roofline"]["fp32"]["peak_flop_per_s"] = -1
        meta_path.write_text(json.dumps(doc))
    else:
        doc["models"][0]["file"] = "../../etc/passwd"
        meta_path.write_text(json.dumps(doc))
    with pytest.raises(ProfileError, match="unusable"):
        prof = FittedProfile(d)
        prof.predict_s([Op("x", "gemm", "fwd", {"m": 256, "n": 256, "k": 256}, dtype="fp32")], None)


def test_uncompressed_model_files_still_load(tmp_path: Path) -> None:
    """Profiles written before models were compressed (NAME.txt) load unchanged."""
    d = _tiny_profile(tmp_path)
    doc = json.loads((d / "profile.json").read_text())
    text = gzip.decompress((d / "gemm.fwd.fp32.txt.gz").read_bytes())
    (d / "gemm.fwd.fp32.txt").write_bytes(text)
    doc["models"][0].update(file="gemm.fwd.fp32.txt", sha256=hashlib.sha256(text).hexdigest())
    del doc["models"][0]["packed_file"], doc["models"][0]["packed_sha256"]  # written before packed files existed
    (d / "profile.json").write_text(json.dumps(doc))
    op = Op("x", "gemm", "fwd", {"m": 256, "n": 256, "k": 256}, dtype="fp32")
    assert FittedProfile(d).predict_s([op], None)[0] > 0


def test_missing_dims_is_a_clear_error(tmp_path: Path) -> None:
    prof = FittedProfile(_tiny_profile(tmp_path))
    with pytest.raises(ProfileError, match="lacks dims"):
        prof.predict_s([Op("x", "gemm", "fwd", {"m": 256, "n": 256}, dtype="fp32")], None)


def test_schema_hash_differs_per_class_and_direction() -> None:
    hashes = {schema_hash(c, b) for c in ("gemm", "attention", "layernorm") for b in (False, True)}
    assert len(hashes) == 6


def test_shipped_copy_is_self_contained(tmp_path: Path) -> None:
    shutil.copytree(SHIPPED / "a100-sxm4-80gb", tmp_path / "copy")
    assert FittedProfile(tmp_path / "copy").meta.name == "a100-sxm4-80gb"


def test_optimizer_step_is_answered_whatever_its_dtype() -> None:
    prof = FittedProfile(SHIPPED / "h100-sxm5-80gb")
    assert prof.supports("optimizer", "step", "fp32") and prof.supports("optimizer", "step", "bf16")
    t = prof.predict_s([Op("opt", "optimizer", "step", {"params": 1e9}, dtype="fp32")], None)[0]
    # >= 16 bytes per parameter at the H100's 3,350 GB/s, and not absurdly slow
    assert 16e9 / 3350e9 < t < 0.2


def test_sklearn_fallback_profile_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    t, h = (rng.integers(64, 4096, 60).astype(float) for _ in range(2))
    times = t * h * 8 / 1e10 + 5e-6
    entry, text = fit_samples(Samples("layernorm", "bwd", {"tokens": t, "hidden": h}, times), RC, "fp32",
                              prefer="sklearn")
    assert entry.model_format == "sklearn-gbr-json" and entry.file.endswith(".json")
    meta = ProfileMeta("skl", {"fp32": RC}, {}, {"device": "test"}, {}, {"samples": "synthetic"}, (entry,))
    prof = FittedProfile(write_profile(tmp_path / "skl", meta, {entry.file: text}))
    assert prof.name == "sklearn:skl"
    got = prof.predict_s([Op("ln", "layernorm", "bwd", {"tokens": 1024, "hidden": 1024}, dtype="fp32")], None)[0]
    assert got == pytest.approx(1024 * 1024 * 8 / 1e10 + 5e-6, rel=0.3)

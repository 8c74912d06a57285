"""profile.json's roofline constants and the whole file are covered by digests (shipped profiles must carry them);
the loaded-profile cache sees every rewrite."""

import json
import os
import shutil
from pathlib import Path

import pytest

from llmperf_hook.errors import ProfileError
from llmperf_hook.graph.op import Op
from llmperf_hook.predict.fitted import find_profile
from llmperf_hook.profile.features import RooflineConstants
from llmperf_hook.profile.profile_io import is_shipped, meta_sha256, read_profile_meta, roofline_sha256
from llmperf_hook.resources import configs_dir

SHIPPED = configs_dir() / "profiles"
NAME = "a100-sxm4-80gb"
GEMM = Op("g", "gemm", "fwd", {"m": 8192, "n": 8192, "k": 8192}, dtype="fp16")


@pytest.fixture()
def home_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    copy = tmp_path / "profiles" / NAME
    shutil.copytree(SHIPPED / NAME, copy)
    return copy


def _rewrite_in_place(path: Path, old: str, new: str) -> None:
    """Replace `old` by `new` (same length) and give the file back its modification time: a rewrite the file
    system's timestamps cannot tell apart (an edit within the same tick, or a copy that keeps times)."""
    assert len(old) == len(new)
    stat, text = path.stat(), path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns


def test_every_shipped_profile_carries_a_matching_roofline_digest() -> None:
    for directory in sorted(p for p in SHIPPED.iterdir() if (p / "profile.json").is_file()):
        doc = json.loads((directory / "profile.json").read_text())
        assert doc["roofline_sha256"] == roofline_sha256(read_profile_meta(directory).roofline), directory.name


def test_digest_is_canonical() -> None:
    """Ints and floats of the same value, and the order of dtypes, give one digest; another value another."""
    a = {"fp16": RooflineConstants(312e12, 2039e9, 108, 2), "bf16": RooflineConstants(312e12, 2039e9, 108, 2)}
    b = {"bf16": RooflineConstants(312000000000000, 2039000000000, 108.0, 2.0), "fp16": a["fp16"]}
    assert roofline_sha256(a) == roofline_sha256(b)
    assert roofline_sha256(a) != roofline_sha256({**a, "fp16": RooflineConstants(313e12, 2039e9, 108, 2)})


def test_hand_edited_peak_is_refused_even_when_the_cache_holds_the_profile(home_copy: Path) -> None:
    before = find_profile(NAME, "fp16").predict_s([GEMM], None)[0]
    _rewrite_in_place(home_copy / "profile.json", '"peak_flop_per_s": 312000000000000.0',
                      '"peak_flop_per_s": 624000000000000.0')
    with pytest.raises(ProfileError, match=r"unusable: its roofline constants \(fp16: peak 6.24e\+14 FLOP/s.*"
                                           r"do not match their roofline_sha256"):
        find_profile(NAME, "fp16")
    _rewrite_in_place(home_copy / "profile.json", '"peak_flop_per_s": 624000000000000.0',
                      '"peak_flop_per_s": 312000000000000.0')
    assert find_profile(NAME, "fp16").predict_s([GEMM], None)[0] == before


def test_edited_bandwidth_and_dropped_digest(home_copy: Path) -> None:
    """Any constant is covered; an edit whose digests were deleted with it is refused too (a user profile without
    meta_sha256 is never read unchecked), naming the command that re-fits it."""
    meta = home_copy / "profile.json"
    doc = json.loads(meta.read_text())
    doc["roofline"]["fp16"]["memory_bandwidth_bytes_per_s"] *= 2
    meta.write_text(json.dumps(doc))
    with pytest.raises(ProfileError, match="roofline_sha256"):
        find_profile(NAME, "fp16")
    del doc["roofline_sha256"], doc["meta_sha256"]
    meta.write_text(json.dumps(doc))
    with pytest.raises(ProfileError, match=r"has no meta_sha256.*Re-create it \(`llmperf profile \.\.\.`, or `python "
                                           r"benchmarks/fit_shipped_profiles.py`"):  # published samples: no refit
        find_profile(NAME, "fp16")


def test_a_sampled_profile_without_its_digest_names_one_command_that_only_refits(home_copy: Path) -> None:
    """A user profile from llmperf before 811813e2 (26 Nov 2026) has no meta_sha256: the error must not call it an
    edit, and must name one command that refits it. Every fit refits every dtype the store holds for the name
    (profile_fit.fit_and_write), so one command in one dtype with that dtype's classes suffices; a command per dtype
    with the union of the classes sampled first fits of classes that dtype never had (not a refit)."""
    meta = home_copy / "profile.json"
    doc = json.loads(meta.read_text())
    doc["provenance"]["samples"] = "llmperf profile --device cuda (store source 'sampler')"
    del doc["meta_sha256"]
    for m in [m for m in doc["models"] if m["op_class"] in ("gemm", "layernorm")]:  # a second dtype, fewer classes
        bf16 = {k: (v.replace(".fp16.", ".bf16.") if isinstance(v, str) else v) for k, v in m.items()}
        doc["models"].append({**bf16, "dtype": "bf16"})
    meta.write_text(json.dumps(doc))
    per_dtype: dict[str, set[str]] = {}
    for m in doc["models"]:
        per_dtype.setdefault(m["dtype"], set()).add(m["op_class"])
    most = max(sorted(per_dtype), key=lambda dt: len(per_dtype[dt]))
    command = (f"`llmperf profile --device cuda --dtype {most} --ops {','.join(sorted(per_dtype[most]))} --budget 0.2 "
               f"--name {NAME}`")
    with pytest.raises(ProfileError) as err:
        find_profile(NAME, "fp16")
    said = str(err.value)
    assert "an older llmperf wrote none" in said and command in said and said.count("`llmperf profile") == 1, said


def test_cache_sees_a_same_size_rewrite_with_the_same_mtime(home_copy: Path) -> None:
    """The edit is caught by meta_sha256 only if the cache reads the rewritten file again."""
    assert find_profile(NAME, "fp16").meta.provenance["fitted_by"].startswith("benchmarks/")
    doc = (home_copy / "profile.json").read_text()
    old = json.loads(doc)["provenance"]["fitted_by"]
    _rewrite_in_place(home_copy / "profile.json", f'"fitted_by": "{old}"', f'"fitted_by": "{"x" * len(old)}"')
    with pytest.raises(ProfileError, match="does not match its meta_sha256"):
        find_profile(NAME, "fp16")


def test_every_shipped_profile_carries_a_matching_meta_digest() -> None:
    for directory in sorted(p for p in SHIPPED.iterdir() if (p / "profile.json").is_file()):
        doc = json.loads((directory / "profile.json").read_text())
        assert doc["meta_sha256"] == meta_sha256(doc), directory.name
        assert is_shipped(directory)


@pytest.fixture()
def shipped_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the shipped configs/ that llmperf reads as its own shipped profiles (no user profiles)."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("llmperf_hook.profile.profile_io.configs_dir", lambda: tmp_path / "configs")
    monkeypatch.setattr("llmperf_hook.predict.fitted.configs_dir", lambda: tmp_path / "configs")
    shutil.copytree(SHIPPED / NAME, tmp_path / "configs" / "profiles" / NAME)
    return tmp_path / "configs" / "profiles" / NAME


def test_corrupted_shipped_profile_is_refused(shipped_copy: Path) -> None:
    """A changed floor_s of a shipped model (every prediction of that class scales with it) is a ProfileError naming
    the digest, not a wrong number; so is a shipped profile.json whose digest line was removed, and a user copy of
    it."""
    meta = shipped_copy / "profile.json"
    good = meta.read_text()
    assert find_profile(NAME, "fp16").predict_s([GEMM], None)[0] > 0
    doc = json.loads(good)
    gemm = next(m for m in doc["models"] if m["op_class"] == "gemm" and m["phase"] == "fwd")
    gemm["floor_s"] = gemm["floor_s"] * 2 + 1e-5
    meta.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    with pytest.raises(ProfileError, match=r"a100-sxm4-80gb is unusable: profile.json does not match its meta_sha256"):
        find_profile(NAME, "fp16")
    doc = json.loads(good)
    del doc["meta_sha256"]
    meta.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    with pytest.raises(ProfileError, match="has no meta_sha256, the digest every profile written by llmperf carries"):
        find_profile(NAME, "fp16")
    del doc["roofline_sha256"]
    meta.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    with pytest.raises(ProfileError, match="has no roofline_sha256, which every shipped profile carries"):
        find_profile(NAME, "fp16")
    user = Path(os.environ["LLMPERF_HOME"]) / "profiles" / NAME
    shutil.copytree(shipped_copy, user)
    assert not is_shipped(user)
    with pytest.raises(ProfileError, match="has no meta_sha256"):  # a user profile without it is refused as well
        find_profile(NAME, "fp16")


@pytest.mark.parametrize(("a", "b"), [(("layernorm", "fwd"), ("layernorm", "bwd")), (("gelu", "fwd"), ("gemm", "fwd"))])
def test_a_model_pointed_at_another_models_file_is_refused(home_copy: Path, a: tuple, b: tuple) -> None:
    """profile.json's file keys (name and sha256) sit outside meta_sha256: two models whose file entries were
    swapped (layernorm fwd and bwd have the same features) read each other's trees, and predict printed another
    step time (16.7 -> 16.8 ms on a CPU profile) instead of an error."""
    meta = home_copy / "profile.json"
    doc = json.loads(meta.read_text())
    models = {(m["op_class"], m["phase"]): m for m in doc["models"]}
    for key in ("file", "sha256", "packed_file", "packed_sha256"):
        models[a][key], models[b][key] = models[b][key], models[a][key]
    meta.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    one, other = (f"{x[0]}.{x[1]}.fp16.txt.gz" for x in (a, b))  # whichever of the two is read first
    with pytest.raises(ProfileError, match=rf"names file '({one}|{other})', not '({other}|{one})' \(corrupted"):
        find_profile(NAME, "fp16")

"""profile.json's roofline constants are covered by a digest; the loaded-profile cache sees every rewrite."""

import json
import os
import shutil
from pathlib import Path

import pytest

from llmperf_hook.errors import ProfileError
from llmperf_hook.graph.op import Op
from llmperf_hook.predict.fitted import find_profile
from llmperf_hook.profile.features import RooflineConstants
from llmperf_hook.profile.profile_io import read_profile_meta, roofline_sha256
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
    """Any constant is covered; a profile without the digest (written before it existed) still loads."""
    meta = home_copy / "profile.json"
    doc = json.loads(meta.read_text())
    doc["roofline"]["fp16"]["memory_bandwidth_bytes_per_s"] *= 2
    meta.write_text(json.dumps(doc))
    with pytest.raises(ProfileError, match="roofline_sha256"):
        find_profile(NAME, "fp16")
    del doc["roofline_sha256"]
    meta.write_text(json.dumps(doc))
    assert find_profile(NAME, "fp16").meta.roofline["fp16"].memory_bandwidth_bytes_per_s == 2 * 2039e9


def test_cache_sees_a_same_size_rewrite_with_the_same_mtime(home_copy: Path) -> None:
    assert find_profile(NAME, "fp16").meta.provenance["fitted_by"].startswith("benchmarks/")
    doc = (home_copy / "profile.json").read_text()
    old = json.loads(doc)["provenance"]["fitted_by"]
    _rewrite_in_place(home_copy / "profile.json", f'"fitted_by": "{old}"', f'"fitted_by": "{"x" * len(old)}"')
    assert find_profile(NAME, "fp16").meta.provenance["fitted_by"] == "x" * len(old)

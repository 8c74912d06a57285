"""Packed trees (profile/packed_trees.py): predict reads parsed arrays instead of LightGBM text, with the same
numbers, and a damaged, stale or malformed packed file is refused like any other damaged model."""

import functools
import gzip
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.errors import ProfileError
from llmperf_hook.graph.op import Op
from llmperf_hook.profile import profile_io
from llmperf_hook.profile.build_profile import Samples, fit_samples
from llmperf_hook.profile.features import RooflineConstants
from llmperf_hook.profile.packed_trees import pack_trees, unpack_trees
from llmperf_hook.profile.predictor import FittedProfile
from llmperf_hook.profile.profile_io import (ProfileMeta, read_ensemble, read_model_text, read_profile_meta,
                                             write_profile)
from llmperf_hook.resources import configs_dir

SHIPPED = configs_dir() / "profiles"
RC = RooflineConstants(1e11, 1e10, 1, 4)
OP = Op("x", "gemm", "fwd", {"m": 256, "n": 256, "k": 256}, dtype="fp32")


@functools.lru_cache(maxsize=1)
def _tiny_fit() -> tuple:
    """The tiny profile's gemm fwd fit, once per process: the same seeded samples fit the same model, and these tests
    are about the files written from it."""
    rng = np.random.default_rng(0)
    m, n, k = (rng.integers(16, 512, 80).astype(float) for _ in range(3))
    return fit_samples(Samples("gemm", "fwd", {"m": m, "n": n, "k": k}, 2 * m * n * k / 5e10 + 2e-6), RC, "fp32")


def _tiny(tmp_path: Path) -> Path:
    entry, text = _tiny_fit()
    meta = ProfileMeta("tiny", {"fp32": RC}, {}, {"device": "test"}, {}, {"samples": "synthetic"}, (entry,))
    return write_profile(tmp_path / "tiny", meta, {entry.file: text})


@pytest.mark.parametrize("name", sorted(p.name for p in SHIPPED.iterdir() if (p / "profile.json").exists()))
def test_every_shipped_model_has_packed_trees_that_predict_as_its_text(name: str) -> None:
    directory = SHIPPED / name
    rng = np.random.default_rng(1)
    for entry in read_profile_meta(directory).models:
        assert entry.packed_file is not None, f"{name}/{entry.file} has no packed trees (profile_io.repack_profile)"
        packed, text = read_ensemble(directory, entry), profile_io.parse_model_text(entry, read_model_text(directory,
                                                                                                            entry))
        x = rng.normal(0.0, 3.0, (257, packed.num_features))
        x[::7, 0] = np.nan  # missing values take the default child in both
        assert np.array_equal(packed.predict(x), text.predict(x)), entry.file


def test_predict_reads_packed_trees_without_parsing_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = _tiny(tmp_path)
    before = FittedProfile(d).predict_s([OP], None)[0]

    def refuse(*_args: object) -> None:
        raise AssertionError("parsed the model text")

    monkeypatch.setattr(profile_io, "parse_lightgbm_text", refuse)
    assert FittedProfile(d).predict_s([OP], None)[0] == before


def _edit(d: Path, packed: bytes) -> None:
    """Replace the packed file and re-point its digest at it (the damage a digest alone cannot see)."""
    (d / "gemm.fwd.fp32.trees.gz").write_bytes(packed)
    doc = json.loads((d / "profile.json").read_text())
    doc["models"][0]["packed_sha256"] = hashlib.sha256(packed).hexdigest()
    (d / "profile.json").write_text(json.dumps(doc))


def _header_and_payload(d: Path) -> tuple[dict, bytes]:
    line, _, payload = gzip.decompress((d / "gemm.fwd.fp32.trees.gz").read_bytes()).partition(b"\n")
    return json.loads(line), payload


def _repacked(header: dict, payload: bytes) -> bytes:
    return gzip.compress(json.dumps(header).encode() + b"\n" + payload)


@pytest.mark.parametrize("damage, message", [
    ("bytes", "does not match its packed_sha256"),
    ("child_index", "inconsistent"),
    ("object_dtype", "unexpected array"),
    ("short_payload", "header lists"),
    ("not_gzip", "not readable"),
])
def test_damaged_packed_trees_are_refused(tmp_path: Path, damage: str, message: str) -> None:
    d = _tiny(tmp_path)
    packed = d / "gemm.fwd.fp32.trees.gz"
    header, payload = _header_and_payload(d)
    if damage == "bytes":
        packed.write_bytes(packed.read_bytes()[:-9] + b"123456789")
    elif damage == "child_index":  # the first node's left child points past the last node
        ens = unpack_trees(packed.read_bytes(), header["source_sha256"])
        ens.left[0] = ens.feature.size + 5
        _edit(d, pack_trees(ens, header["source_sha256"]))
    elif damage == "object_dtype":
        header["arrays"][0]["dtype"] = "|O"
        _edit(d, _repacked(header, payload))
    elif damage == "short_payload":
        _edit(d, _repacked(header, payload[:-8]))
    else:
        _edit(d, b"not gzip at all")
    with pytest.raises(ProfileError, match=message) as err:
        FittedProfile(d).predict_s([OP], None)
    assert str(d) in str(err.value) and "gemm.fwd.fp32.trees.gz" in str(err.value) and "deleting it" in str(err.value)


def test_profile_whose_packed_file_was_deleted_is_parsed_from_text(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The packed file is a cache of the text: a profile copied without it (or with it deleted) still predicts, the
    same numbers, from its text, whose sha256 is checked as before."""
    d = _tiny(tmp_path)
    expected = FittedProfile(d).predict_s([OP], None)[0]
    (d / "gemm.fwd.fp32.trees.gz").unlink()
    parsed, parse = [], profile_io.parse_lightgbm_text
    monkeypatch.setattr(profile_io, "parse_lightgbm_text", lambda text: parsed.append(1) or parse(text))
    assert FittedProfile(d).predict_s([OP], None)[0] == expected and parsed == [1]
    text = d / "gemm.fwd.fp32.txt.gz"
    text.write_bytes(text.read_bytes()[:-4] + b"1234")
    with pytest.raises(ProfileError, match="does not match its sha256"):
        FittedProfile(d).predict_s([OP], None)


def test_profile_without_packed_trees_is_parsed_from_text(tmp_path: Path) -> None:
    d = _tiny(tmp_path)
    expected = FittedProfile(d).predict_s([OP], None)[0]
    doc = json.loads((d / "profile.json").read_text())
    del doc["models"][0]["packed_file"], doc["models"][0]["packed_sha256"]  # a profile written before them
    (d / "profile.json").write_text(json.dumps(doc))
    (d / "gemm.fwd.fp32.trees.gz").unlink()
    assert read_profile_meta(d).models[0].packed_file is None  # and meta_sha256 still matches
    assert FittedProfile(d).predict_s([OP], None)[0] == expected
    profile_io.repack_profile(d)
    assert read_profile_meta(d).models[0].packed_file == "gemm.fwd.fp32.trees.gz"
    assert FittedProfile(d).predict_s([OP], None)[0] == expected


def test_packed_trees_of_another_text_are_passed_over_for_the_text(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A model text re-pointed in profile.json (its sha256 updated) without repacking: the text is the model."""
    d = _tiny(tmp_path)
    expected = FittedProfile(d).predict_s([OP], None)[0]
    header, payload = _header_and_payload(d)
    header["source_sha256"] = "0" * 64
    _edit(d, _repacked(header, payload))
    parsed, parse = [], profile_io.parse_lightgbm_text
    monkeypatch.setattr(profile_io, "parse_lightgbm_text", lambda text: parsed.append(1) or parse(text))
    assert FittedProfile(d).predict_s([OP], None)[0] == expected and parsed == [1]


@pytest.mark.parametrize("name", ["gemm.fwd.fp32.treef.gz", "other.trees.gz"])
def test_a_changed_packed_file_name_is_refused(name: str, tmp_path: Path) -> None:
    """packed_file is outside meta_sha256 like the other file keys, but a name that points at no file is not caught by
    the file (an absent packed file has the text parsed): the name must be the one write_profile derives from the
    model file's (one flipped bit of profile.json predicted from it, CI 2026-11-27)."""
    d = _tiny(tmp_path)
    doc = json.loads((d / "profile.json").read_text())
    doc["models"][0]["packed_file"] = name
    (d / "profile.json").write_text(json.dumps(doc))
    with pytest.raises(ProfileError, match="names packed file"):
        read_profile_meta(d)

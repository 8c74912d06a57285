"""The hinge normaliser min(a + b u, c + d w) of the embedding: fitted, chosen on the inner split, stored, predicted."""

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.errors import ProfileError
from llmperf_hook.graph.op import Op
from llmperf_hook.profile.build_profile import Samples, fit_samples, fit_with_floor, predict_with_floor, \
    training_terms, training_xy
from llmperf_hook.profile.features import RooflineConstants
from llmperf_hook.profile.hinge import Hinge, fit_hinge, hinge_terms
from llmperf_hook.profile.predictor import FittedProfile
from llmperf_hook.profile.profile_io import ProfileMeta, meta_sha256, write_profile

pytest.importorskip("lightgbm")
RC = RooflineConstants(989e12, 4.0e12, 132, 2)
# The GH200 embedding forward's scales (hinge.py docstring): 6.5 ps per gathered element, a plateau of 108 us plus
# a table pass at 3.45 TB/s of fp16.
TRUE = Hinge(5e-6, 6.5e-12, 108e-6, 2.0 / 3.45e12)


def _samples(n: int = 400, seed: int = 0, hinge: bool = True) -> Samples:
    rng = np.random.default_rng(seed)
    dims = {"tokens": 1024.0 * rng.integers(2, 41, n), "vocab": 50304.0 / 2.0 ** rng.integers(0, 5, n),
            "hidden": 512.0 * rng.integers(4, 17, n)}
    base = TRUE.time_s(hinge_terms("embedding", dims)) if hinge else \
        3.0 * (2.0 * dims["tokens"] * dims["hidden"] * 2.0 / RC.memory_bandwidth_bytes_per_s) + 20e-6
    return Samples("embedding", "fwd", dims, base * np.exp(rng.normal(0.0, 0.01, n)))


def test_fit_recovers_both_regimes() -> None:
    s = _samples()
    got = fit_hinge(training_terms(s), s.time_s)
    terms = hinge_terms("embedding", s.dims)
    assert np.median(np.abs(got.time_s(terms) / TRUE.time_s(terms) - 1.0)) < 0.01
    assert got.b_s == pytest.approx(TRUE.b_s, rel=0.05) and got.d_s == pytest.approx(TRUE.d_s, rel=0.05)


def test_chosen_where_the_samples_are_a_hinge_and_not_where_they_follow_the_roofline() -> None:
    for hinge in (True, False):
        s = _samples(hinge=hinge)
        x, y, _, roof = training_xy(s, RC)
        t, terms = roof * np.exp(y), training_terms(s)
        reg, floor = fit_with_floor(x[:320], t[:320], roof[:320], terms=terms[:320])
        assert (reg.hinge is not None) == hinge and (floor == 0.0 or not hinge)
        err = np.abs(predict_with_floor(reg, floor, x[320:], roof[320:], terms[320:]) / t[320:] - 1.0)
        assert np.mean(err) < 0.02


def test_classes_without_terms_never_get_one() -> None:
    assert hinge_terms("gemm", {"m": np.ones(2), "n": np.ones(2), "k": np.ones(2)}) is None


def _written(tmp_path, phase: str = "fwd"):
    s = dataclasses.replace(_samples(), phase=phase)
    entry, text = fit_samples(s, RC, "fp16")
    assert entry.hinge is not None and entry.floor_s == 0.0
    meta = ProfileMeta("hinge", {"fp16": RC}, {"bf16": "fp16"}, {"device": "test"}, {}, {"samples": "synthetic"},
                       (entry,))
    return write_profile(tmp_path / "hinge", meta, {entry.file: text}), s


@pytest.fixture(scope="module")
def fwd_profile(tmp_path_factory) -> Path:
    """The forward hinge profile, fitted once for the tests that read it (each fit is seconds of LightGBM); the
    tests that edit it take their own copy (`_copy`)."""
    return _written(tmp_path_factory.mktemp("hinge-fwd"))[0]


def _copy(directory: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(directory, tmp_path / directory.name))


def test_stored_and_predicted_flat_in_tokens_on_the_plateau(fwd_profile: Path) -> None:
    prof = FittedProfile(fwd_profile)
    ops = [Op("e", "embedding", "fwd", {"tokens": t, "vocab": 50304, "hidden": 4096}, dtype="bf16")
           for t in (2048, 4096, 16384, 32768)]
    got = np.asarray(prof.predict_s(ops, None))
    want = TRUE.time_s(np.array([[t * 4096.0, 50304 * 4096.0] for t in (2048, 4096, 16384, 32768)]))
    assert np.allclose(got, want, rtol=0.04)
    assert got[3] / got[2] < 1.05  # plateau: 2x the tokens, the same time (the roofline would double it)


@pytest.mark.parametrize("bad", [[1e-6, 1e-12, 1e-4], [1e-6, -1e-12, 1e-4, 1e-12], [1e-6, 1e-12, 50.0, 1e-12]])
def test_malformed_hinge_is_refused(tmp_path, fwd_profile: Path, bad) -> None:
    directory = _copy(fwd_profile, tmp_path)
    doc = json.loads((directory / "profile.json").read_text())
    doc["models"][0]["hinge"] = bad
    doc["meta_sha256"] = meta_sha256(doc)
    (directory / "profile.json").write_text(json.dumps(doc))
    with pytest.raises(ProfileError, match="malformed hinge"):
        FittedProfile(directory)


def test_never_below_writing_its_own_output(fwd_profile: Path) -> None:
    """Beyond the sampled tokens the plateau stays flat; the forward's output (tokens x hidden) still has to be
    written, so the prediction grows with it at the datasheet bandwidth."""
    prof = FittedProfile(fwd_profile)
    op = Op("e", "embedding", "fwd", {"tokens": 1 << 20, "vocab": 3200, "hidden": 8192}, dtype="bf16")
    written_s = (1 << 20) * 8192 * 2 / RC.memory_bandwidth_bytes_per_s
    plateau_s = TRUE.c_s + TRUE.d_s * 3200 * 8192
    assert plateau_s < 0.1 * written_s
    assert prof.predict_s([op], None)[0] == pytest.approx(written_s, rel=1e-9)


def test_backward_never_below_reading_its_output_gradient(tmp_path) -> None:
    """The backward's plateau is flat in tokens too, but torch's embedding_backward reads every row of the output
    gradient (tokens x hidden) before it writes the table's gradient: at 2^20 tokens that read, not the plateau,
    bounds it. Where the table is the larger, writing its gradient does."""
    directory, _ = _written(tmp_path, "bwd")
    prof = FittedProfile(directory)
    ops = [Op("e", "embedding", "bwd", {"tokens": 1 << 20, "vocab": 3200, "hidden": 8192}, dtype="bf16"),
           Op("e", "embedding", "bwd", {"tokens": 8, "vocab": 1 << 22, "hidden": 8192}, dtype="bf16")]
    read_s = (1 << 20) * 8192 * 2 / RC.memory_bandwidth_bytes_per_s
    table_s = (1 << 22) * 8192 * 2 / RC.memory_bandwidth_bytes_per_s
    assert TRUE.c_s + TRUE.d_s * 3200 * 8192 < 0.1 * read_s
    got = prof.predict_s(ops, None)
    assert got[0] == pytest.approx(read_s, rel=1e-9) and got[1] >= table_s * (1 - 1e-9)


def test_an_edited_hinge_constant_is_refused_by_the_digest(tmp_path, fwd_profile: Path) -> None:
    """meta_sha256 covers the hinge: a changed digit of its plateau is a ProfileError, not a different time."""
    directory = _copy(fwd_profile, tmp_path)
    doc = json.loads((directory / "profile.json").read_text())
    doc["models"][0]["hinge"][2] *= 1.01
    (directory / "profile.json").write_text(json.dumps(doc))
    with pytest.raises(ProfileError, match="does not match its meta_sha256"):
        FittedProfile(directory)


def test_operator_benchmark_scores_what_predict_answers() -> None:
    """bench_operator_accuracy prices a hinge model as the predictor does (hinge.priced_s, floor included): test
    rows beyond the plateau measured at the time of reading their output gradient score ~0 % (the hinge alone
    priced them ~10x too fast, the benchmark then scored a model `predict` never answers with)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_operator_accuracy import evaluate

    near = dataclasses.replace(_samples(), phase="bwd")
    far = {"tokens": np.full(20, float(1 << 20)), "vocab": np.full(20, 3200.0), "hidden": np.full(20, 8192.0)}
    read_s = (1 << 20) * 8192 * 2 / RC.memory_bandwidth_bytes_per_s
    s = Samples("embedding", "bwd", {k: np.concatenate([near.dims[k], far[k]]) for k in far},
                np.concatenate([near.time_s, np.full(20, read_s)]))
    ape, _ = evaluate(s, np.arange(400), np.arange(400, 420), RC)
    assert np.max(ape) < 1e-9

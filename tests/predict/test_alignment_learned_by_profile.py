"""A profile fitted on unaligned widths (`llmperf profile --for -- <job>` samples the job's own shapes, GPT-2's
n = 50257 head) already holds part of their cost: the measured Hopper factor (predict/gemm_alignment.py) is not
multiplied on top of its answer. Profiles fitted on aligned widths only, the shipped ones among them, keep it."""

import csv
import functools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.graph.op import Op
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict.dispatch import clear_prediction_cache, predict_ops
from llmperf_hook.predict.gemm_alignment import (ALIGNED_DIMS, alignment_warnings, learned_by_profile,
                                                 measured_slowdown, unaligned_sample_count)
from llmperf_hook.profile.build_profile import Samples, fit_samples
from llmperf_hook.profile.features import RooflineConstants
from llmperf_hook.profile.predictor import FittedProfile
from llmperf_hook.profile.profile_io import META_FILE, ModelEntry, ProfileMeta, read_profile_meta, write_profile
from llmperf_hook.resources import configs_dir

ROOT = Path(__file__).resolve().parents[2]
H100 = load_cluster("dgx-h100")
RC = RooflineConstants(9.89e14, 3.35e12, 132, 2)
HEAD = {"m": 4096, "n": 50257, "k": 768}


def _gemm_samples(phase: str, with_head: bool) -> Samples:
    """Aligned GEMMs at ~60 % of peak, plus (with_head) the job's head at n = 50257 six times slower per FLOP, as
    measured (measurements/h200-sxm-141gb-2026-11-27-c: 6.9-7.5x forward)."""
    rng = np.random.default_rng(1 if phase == "bwd" else 0)
    m, n, k = (8.0 * rng.integers(64, 1024, 48) for _ in range(3))
    slow = np.ones(len(m))
    if with_head:
        m, n, k = (np.append(v, [HEAD[d] // f for f in (1, 2)] if d == "m" else [HEAD[d]] * 2)
                   for v, d in ((m, "m"), (n, "n"), (k, "k")))
        slow = np.append(slow, [6.0, 6.0])
    flops = 2 * m * n * k * (2 if phase == "bwd" else 1)
    return Samples("gemm", phase, {"m": m, "n": n, "k": k}, flops / (0.6 * RC.peak_flop_per_s) * slow + 5e-6)


@functools.lru_cache(maxsize=None)
def _fitted(with_head: bool) -> tuple[tuple[ModelEntry, str], ...]:
    """The two GEMM models of the synthetic samples: a pure function of with_head (fixed seeds, ~1 s of LightGBM
    each), fitted once per file run; every test writes its own profile folder from them."""
    return tuple(fit_samples(_gemm_samples(phase, with_head), RC, "bf16", with_holdout=False)
                 for phase in ("fwd", "bwd"))


def _profile(folder: Path, with_head: bool) -> FittedProfile:
    fitted = _fitted(with_head)
    meta = ProfileMeta(folder.name, {"bf16": RC}, {"fp16": "bf16"}, {"device": "test"}, {}, {"samples": "synthetic"},
                       tuple(e for e, _ in fitted))
    return FittedProfile(write_profile(folder, meta, {e.file: text for e, text in fitted}))


def _head(phase: str = "fwd", dtype: str = "bf16") -> Op:
    return Op("head.lm_head", "gemm", phase, dict(HEAD), flops=2.0 * 4096 * 50257 * 768, dtype=dtype)


def test_the_fit_counts_the_samples_with_an_unaligned_leading_dimension(tmp_path: Path) -> None:
    assert unaligned_sample_count("gemm", {"m": [4097, 8], "n": [8, 8], "k": [8, 8]}) == 0  # m leads no operand
    assert unaligned_sample_count("gemm", {"m": [8, 8, 8], "n": [50257, 8, 6282], "k": [8, 1802, 8]}) == 3
    assert unaligned_sample_count("attention", {"head_dim": [128, 150, 192]}) == 1
    assert unaligned_sample_count("layernorm", {"tokens": [3], "hidden": [5]}) is None
    profile = _profile(tmp_path / "job", with_head=True)
    assert {m.phase: m.unaligned_samples for m in profile.meta.models} == {"fwd": 2, "bwd": 2}
    assert read_profile_meta(tmp_path / "job").models == profile.meta.models  # written and read back
    aligned = _profile(tmp_path / "grid", with_head=False)
    assert {m.unaligned_samples for m in aligned.meta.models} == {0}


@pytest.mark.parametrize("phase", ["fwd", "bwd", "recompute"])
def test_a_profile_fitted_on_the_unaligned_head_is_not_priced_twice(tmp_path: Path, phase: str) -> None:
    for with_head in (True, False):
        profile = _profile(tmp_path / f"p{with_head}", with_head)
        op = _head(phase)
        clear_prediction_cache()
        priced = predict_ops([op], H100, profile, None)[0][op.cost_key]
        own = profile.predict_s([op], H100)[0]
        factor = measured_slowdown("gemm", "bf16", "bwd" if phase == "bwd" else "fwd", 1)[0]
        assert learned_by_profile(op, profile) is with_head
        assert priced == pytest.approx(own if with_head else own * factor, rel=1e-12)
    clear_prediction_cache()


def test_the_dtype_stand_in_model_decides_and_the_warning_says_the_profile_answers_alone(tmp_path: Path) -> None:
    profile = _profile(tmp_path / "job", with_head=True)
    fp16_head = _head(dtype="fp16")  # answered by the bf16 models (dtype_aliases)
    assert learned_by_profile(fp16_head, profile)
    [learned] = alignment_warnings([fp16_head], H100.gpu, lambda op: learned_by_profile(op, profile))
    assert "n = 50257" in learned and "fitted on unaligned widths" in learned and "priced on" not in learned
    [priced] = alignment_warnings([fp16_head], H100.gpu)
    assert "priced on h100-sxm5-80gb (Hopper)" in priced


def test_an_unaligned_count_that_is_no_count_of_the_samples_is_refused(tmp_path: Path) -> None:
    from llmperf_hook.errors import ProfileError
    from llmperf_hook.profile.profile_io import meta_sha256

    _profile(tmp_path / "job", with_head=True)
    path = tmp_path / "job" / META_FILE
    doc = json.loads(path.read_text())
    doc["models"][0]["unaligned_samples"] = doc["models"][0]["num_samples"] + 1
    doc["meta_sha256"] = meta_sha256(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ProfileError, match="unaligned_samples 51, not a count of its 50 samples"):
        read_profile_meta(tmp_path / "job")


def _measured_sample_files(profile: str) -> list[Path]:
    """The op_samples.csv files a shipped profile measured by llmperf was fitted from (its provenance)."""
    text = read_profile_meta(configs_dir() / "profiles" / profile).provenance["samples"]
    return [ROOT / path for path in re.findall(r"measurements/[^ ]+/op_samples\.csv", text)]


@pytest.mark.parametrize("profile", ["h100-sxm5-80gb", "h200-sxm-141gb"])
def test_the_shipped_hopper_profiles_sampled_aligned_widths_only_and_keep_the_factor(profile: str) -> None:
    """They were fitted before the record existed: read as aligned-only, which their samples confirm."""
    files = _measured_sample_files(profile)
    assert files and all(f.is_file() for f in files)
    for path in files:
        with path.open(newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r["op_class"] in ALIGNED_DIMS]
        assert rows
        dims = [json.loads(r["dims_json"]) for r in rows]
        for op_class in ALIGNED_DIMS:
            mine = [d for d, r in zip(dims, rows) if r["op_class"] == op_class]
            assert mine and unaligned_sample_count(op_class, {k: [d[k] for d in mine]
                                                              for k in ALIGNED_DIMS[op_class]}) == 0
    shipped = FittedProfile(configs_dir() / "profiles" / profile)
    assert all(m.unaligned_samples is None for m in shipped.meta.models)
    assert not learned_by_profile(_head(), shipped) and not learned_by_profile(_head("bwd"), shipped)


def _legacy_profile(home: Path) -> FittedProfile:
    """A user profile in `home` fitted on the unaligned head, as an llmperf of before the record wrote it."""
    from llmperf_hook.profile.profile_io import meta_sha256

    folder = home / "profiles" / "job"
    _profile(folder, with_head=True)
    doc = json.loads((folder / META_FILE).read_text())
    for model in doc["models"]:
        del model["unaligned_samples"]
    doc["meta_sha256"] = meta_sha256(doc)
    (folder / META_FILE).write_text(json.dumps(doc))
    legacy = FittedProfile(folder)
    assert {m.unaligned_samples for m in legacy.meta.models} == {None}
    return legacy


def test_a_user_profile_fitted_before_the_record_is_read_as_its_stored_samples_say(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    from llmperf_hook.predict.gemm_alignment import stored_samples_unaligned
    from llmperf_hook.store import OpSampleRecord, open_store

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    legacy = _legacy_profile(tmp_path / "home")
    stored_samples_unaligned.cache_clear()
    assert not learned_by_profile(_head(), legacy)  # no store: aligned-only, as before
    with open_store(tmp_path / "home" / "store.sqlite") as store:
        fingerprint = json.dumps({"device": "test"}, sort_keys=True)
        store.record_op_samples([OpSampleRecord("job", "bf16", "gemm", "fwd", {"m": 4096, "n": n, "k": 768}, 1e-3,
                                                fingerprint=fingerprint) for n in (50304, 50257)])
        store.record_op_samples([OpSampleRecord("job", "bf16", "gemm", "bwd", {"m": 4096, "n": 50304, "k": 768},
                                                1e-3, fingerprint=fingerprint)])
    stored_samples_unaligned.cache_clear()
    assert learned_by_profile(_head(), legacy) and not learned_by_profile(_head("bwd"), legacy)
    stored_samples_unaligned.cache_clear()


def test_a_damaged_store_reads_as_aligned_only_not_as_an_error(tmp_path: Path, monkeypatch) -> None:
    """predict names an unreadable store in its warnings (refine/calibration.calibration_store_problem) and goes on;
    reading the legacy profile's samples from it must not turn that prediction into exit 2."""
    from llmperf_hook.predict.gemm_alignment import stored_samples_unaligned

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    legacy = _legacy_profile(tmp_path / "home")
    (tmp_path / "home" / "store.sqlite").write_text("not a database\n" * 500)
    stored_samples_unaligned.cache_clear()
    assert not learned_by_profile(_head(), legacy)
    stored_samples_unaligned.cache_clear()


def test_off_hopper_the_profile_is_not_asked(tmp_path: Path, monkeypatch) -> None:
    """The factor and its warning's 'stands alone' apply on Hopper only, so elsewhere the answer (which may open the
    store for a legacy profile) is never needed: an A100 prediction with the unaligned head does not ask."""
    from llmperf_hook.predict import dispatch

    def must_not_ask(*_: object) -> bool:
        raise AssertionError("learned_by_profile asked off Hopper")

    profile = _profile(tmp_path / "job", with_head=True)
    a100 = load_cluster("dgx-a100")
    monkeypatch.setattr(dispatch, "learned_by_profile", must_not_ask)
    clear_prediction_cache()
    assert predict_ops([_head()], a100, profile, None)[0][_head().cost_key] == profile.predict_s([_head()], a100)[0]
    clear_prediction_cache()
    [warning] = alignment_warnings([_head()], a100.gpu, must_not_ask)
    assert "n = 50257" in warning

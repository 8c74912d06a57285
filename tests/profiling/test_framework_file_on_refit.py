"""A CPU refit too short to measure the framework cost (--budget < 3 min) keeps framework_overhead.json when every
dtype it covers is refitted from the samples its regressors were fitted from (the refit a profile without its digest
names: 0 shapes measured, all reused), and says so; it removes the file, naming what changed, only when those
regressors' samples changed. profile_fit.fit_and_write with stored samples, no sampling (peaks patched)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.predict.cpu_framework import digest_problem
from llmperf_hook.profile import local_hardware
from llmperf_hook.profile.budget import plan_budget
from llmperf_hook.profile.build_profile import Samples
from llmperf_hook.profile.profile_fit import fit_and_write
from llmperf_hook.profile.sampler import ProfileRequest
from tests.profiling.test_packed_trees import RC

NAME = "refit-box"
FP = json.dumps({"device": "test cpu"})


def _gemm(num: int, dtype: str = "fp32") -> dict:
    rng = np.random.default_rng(num)
    m, n, k = (rng.integers(16, 256, num).astype(float) for _ in range(3))
    return {("gemm", "fwd", dtype): Samples("gemm", "fwd", {"m": m, "n": n, "k": k}, 2 * m * n * k / 5e10 + 2e-6)}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    monkeypatch.setattr(local_hardware, "measure_peak_flop_per_s", lambda dtype, device: 1e11)
    monkeypatch.setattr(local_hardware, "measure_roofline", lambda dtype, device, threads: RC)
    return tmp_path


def _fit(groups: dict, measured: int = 0):
    req = ProfileRequest(device="cpu", budget_min=0.2, dtype="fp32", name=NAME)
    budget = plan_budget(req.budget_min, time.perf_counter(), 0.0, True)
    return fit_and_write(req, NAME, RC, FP, {}, groups, measured, 0, "plan: test", budget)


def _framework_file(home: Path, dtypes: tuple[str, ...] = ("fp32",)) -> Path:
    path = home / "profiles" / NAME / "framework_overhead.json"
    path.write_text(json.dumps({"format": "llmperf-cpu-framework-overhead", "dtypes": {dt: {} for dt in dtypes}}))
    return path


def _note(result, start: str) -> str:
    return next(n for n in result.notes if n.startswith(start))


def test_a_refit_of_the_same_samples_keeps_the_framework_cost_and_says_so(home: Path) -> None:
    _fit(_gemm(12))
    path = _framework_file(home)
    profile = home / "profiles" / NAME / "profile.json"
    doc = json.loads(profile.read_text())
    del doc["meta_sha256"]  # the case whose error names this refit: the earlier profile.json is still compared
    profile.write_text(json.dumps(doc))
    result = _fit(_gemm(12))
    assert path.is_file()
    note = _note(result, "framework cost kept")
    assert f"({path}, fp32): this refit measured no new shape for that dtype" in note, note
    assert "meta_sha256" in json.loads(profile.read_text())


def test_new_samples_of_a_covered_dtype_remove_it_and_say_what_changed(home: Path) -> None:
    _fit(_gemm(12))
    path = _framework_file(home)
    result = _fit(_gemm(20), measured=8)
    assert not path.exists()
    note = _note(result, "framework cost removed")
    assert "this refit changed fp32 (gemm/fwd 12 -> 20 samples)" in note, note
    assert "`llmperf profile --device cpu --dtype fp32 --budget 3 --name refit-box` measures it" in note, note


def test_a_new_class_in_a_covered_dtype_removes_it(home: Path) -> None:
    """A class the cost was measured without (priced by the roofline then, by a regressor now) moves its scale."""
    _fit(_gemm(12))
    path = _framework_file(home)
    rng = np.random.default_rng(1)
    tokens, hidden = rng.integers(16, 256, 10).astype(float), rng.integers(16, 256, 10).astype(float)
    norm = {("layernorm", "fwd", "fp32"): Samples("layernorm", "fwd", {"tokens": tokens, "hidden": hidden},
                                                  tokens * hidden * 1e-9 + 1e-6)}
    result = _fit({**_gemm(12), **norm}, measured=10)
    assert not path.exists()
    assert "fp32 (layernorm/fwd no model -> 10 samples)" in _note(result, "framework cost removed")


def test_new_samples_of_a_dtype_it_does_not_cover_keep_it(home: Path) -> None:
    _fit(_gemm(12))
    path = _framework_file(home)
    result = _fit({**_gemm(12), **_gemm(9, "bf16")}, measured=9)
    assert path.is_file()
    assert "framework cost kept" in _note(result, "framework cost kept")


def test_an_unreadable_framework_file_is_removed(home: Path) -> None:
    _fit(_gemm(12))
    path = _framework_file(home)
    path.write_text("{not json")
    result = _fit(_gemm(12))
    assert not path.exists()
    assert "the file cannot be read" in _note(result, "framework cost removed")


def test_without_a_framework_file_the_note_says_how_to_measure_it(home: Path) -> None:
    result = _fit(_gemm(12))
    note = _note(result, "framework cost on the CPU")
    assert "not measured: `llmperf profile --device cpu --dtype fp32 --budget 3 --name refit-box` measures it" in \
        note, note


def test_only_the_changed_dtype_is_removed(home: Path) -> None:
    """fp32 and bf16 measured; a bf16 refit with new shapes: fp32's cost was measured against fp32 regressors that did
    not change, so it stays."""
    _fit({**_gemm(12), **_gemm(9, "bf16")})
    path = _framework_file(home, ("bf16", "fp32"))
    result = _fit({**_gemm(12), **_gemm(16, "bf16")}, measured=7)
    doc = json.loads(path.read_text())
    assert list(doc["dtypes"]) == ["fp32"]
    assert "sha256" in doc and digest_problem(doc) is None  # signed anew: predict reads what is left
    note = _note(result, "framework cost of bf16 removed")
    assert f"removed from {path}, kept for fp32" in note and "bf16 (gemm/fwd 9 -> 16 samples)" in note, note


def test_a_fit_another_run_replaced_is_said(home: Path) -> None:
    from llmperf_hook.profile.profile_fit import replaced_note

    first = _fit(_gemm(12))
    assert replaced_note(first) is None
    _fit(_gemm(20), measured=8)  # another profile of the same name, at the same time
    note = replaced_note(first)
    assert note and "now holds another run's fit, written after this one" in note, note


TERMS = {"per_unit_s": 2e-5, "compute_scale": 1.2, "optimizer_per_tensor_s": 1e-5, "optimizer_per_param_s": 1e-9}
"""The terms predict reads of a dtype's entry (a real file takes a 3-minute --budget)."""


def _reference_file(home: Path, scale: float) -> Path:
    """A framework file whose fp32 cost was measured against a prediction of a reference step `scale` x what the
    profile's regressors predict of it now (1: the same regressors)."""
    from llmperf_hook.predict.cpu_framework import with_digest
    from llmperf_hook.profile.cpu_framework import REFERENCE_SHAPES, predicted_parts

    shape = REFERENCE_SHAPES[0]
    row = {"shape": list(shape), "predicted_compute_s": scale * predicted_parts(shape, "fp32", NAME)["compute_s"]}
    path = home / "profiles" / NAME / "framework_overhead.json"
    path.write_text(json.dumps(with_digest({"format": "llmperf-cpu-framework-overhead",
                                            "dtypes": {"fp32": {**TERMS, "samples": [row]}}})))
    return path


def test_regressors_that_predict_its_reference_steps_otherwise_remove_it(home: Path) -> None:
    """Equal sample sets do not make equal regressors (another LightGBM, other fitting code): the cost is kept only
    while the refitted regressors predict the reference steps it was measured on as before."""
    _fit(_gemm(12))
    path = _reference_file(home, 1.0)
    assert "and predict its reference steps as before" in _note(_fit(_gemm(12)), "framework cost kept")
    assert path.is_file()
    _reference_file(home, 1.1)  # measured against regressors that predicted this step 10 % higher
    note = _note(_fit(_gemm(12)), "framework cost removed")
    assert not path.exists()
    assert "fp32 (the refitted regressors predict its reference step 1x128x128x2 -9.1 % off" in note, note


def test_an_edited_framework_file_is_removed_not_kept(home: Path) -> None:
    """predict refuses a file whose digest does not match; a refit neither keeps it nor re-signs it."""
    _fit(_gemm(12))
    path = _reference_file(home, 1.0)
    doc = json.loads(path.read_text())
    doc["dtypes"]["fp32"]["compute_scale"] = 1.9
    path.write_text(json.dumps(doc))
    note = _note(_fit(_gemm(12)), "framework cost removed")
    assert not path.exists()
    assert "its content does not match its sha256" in note, note

"""refine's per-op refit: instrument samples added to a user profile's fit (and shipped profiles untouched)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.refine.op_refit import refit_op_models
from llmperf_hook.refine.refine_run import refine_run
from refine_helpers import PREDICTION, write_run


FINGERPRINT = '{"device": "test"}'
"""json.dumps(profile.json's "hardware", sort_keys=True): how `llmperf profile` tags its samples."""


def _gelu_time_s(elements: float) -> float:
    return 2e-6 + elements * 4e-9


def _user_profile(home: Path, torch: str | None = None) -> Path:
    """A one-model profile (gelu fwd fp32) fitted by the profile package from sampler samples in the store (their
    library versions and the profile's naming `torch` when given)."""
    from llmperf_hook.profile.build_profile import Samples, fit_samples
    from llmperf_hook.profile.features import RooflineConstants
    from llmperf_hook.profile.profile_io import ProfileMeta, write_profile
    from llmperf_hook.store import OpSampleRecord, open_store

    elements = np.geomspace(4096, 4 << 20, 24).round()
    versions = {} if torch is None else {"torch": torch}
    with open_store(home / "store.sqlite") as store:
        store.record_op_samples(OpSampleRecord("cpu-test", "fp32", "gelu", "fwd", {"elements": float(e)},
                                               _gelu_time_s(e), fingerprint=FINGERPRINT, library_versions=versions)
                                for e in elements)
    rc = RooflineConstants(peak_flop_per_s=1e11, memory_bandwidth_bytes_per_s=1e10, num_sms=1, dtype_bytes=4)
    entry, text = fit_samples(Samples("gelu", "fwd", {"elements": elements}, _gelu_time_s(elements)), rc, "fp32",
                              with_holdout=False)
    meta = ProfileMeta(name="cpu-test", roofline={"fp32": rc}, dtype_aliases={}, hardware={"device": "test"},
                       library_versions=versions, provenance={"samples": "test"}, models=(entry,))
    return write_profile(home / "profiles" / "cpu-test", meta, {entry.file: text})


def _refine_one_gelu_op(tmp_path: Path) -> str:
    """refine's op-refit line for a one-rank run that recorded one gelu op (10,000 elements, the profile's own time)."""
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.02, 0.02]})
    with open(run / "rank0.jsonl", "a") as f:
        f.write('{"kind": "op", "job_id": "j1", "rank": 0, "op_class": "gelu", "phase": "fwd", "dtype": "fp32", '
                f'"dims": {{"elements": 10000}}, "seconds": {_gelu_time_s(10000)}, "count": 4}}\n')
    (job,) = refine_run(run).jobs
    return job.op_refit


def test_instrument_samples_refit_the_user_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.profile.profile_io import read_profile_meta

    home = tmp_path / "home"
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    profile = _user_profile(home)
    before = read_profile_meta(profile).models[0].num_samples
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.02, 0.02]})
    ops = "".join(
        f'{{"kind": "op", "job_id": "j1", "rank": 0, "op_class": "gelu", "phase": "fwd", "dtype": "fp32", '
        f'"dims": {{"elements": {e}}}, "seconds": {_gelu_time_s(e) * 1.3}, "count": 4}}\n' for e in (10000, 200000, 3000000))
    with open(run / "rank0.jsonl", "a") as f:
        f.write(ops)
    (job,) = refine_run(run).jobs
    assert job.num_op_samples == 3 and "gelu/fwd/fp32 (24 sampled + 3 instrumented)" in job.op_refit
    meta = read_profile_meta(profile)
    assert meta.models[0].num_samples == before + 3 and "refined" in meta.provenance


def test_a_profile_fingerprinted_before_the_measuring_torch_was_part_of_it_refits_its_samples(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Samples and profile written before the fingerprint named the measuring torch: the store reads the rows'
    torch from their library versions (store.measured_fingerprint), so the profile's fingerprint is read alike."""
    home = tmp_path / "home"
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    _user_profile(home, torch="2.13.0+cpu")
    op_refit = _refine_one_gelu_op(tmp_path)
    assert "gelu/fwd/fp32 (24 sampled + 1 instrumented)" in op_refit, op_refit


def test_no_user_profile_means_samples_kept_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    note = refit_op_models("a100-sxm4-80gb", [{"op_class": "gemm"}])
    assert "no user profile" in note and not (tmp_path / "profiles").exists()
    assert PREDICTION["cluster"]["gpu"] == "cpu-test"


def test_refit_ignores_samples_of_the_same_name_from_another_machine(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A store shared by two machines (an NFS home) holds the same NAME sampled on another CPU: `llmperf profile`
    fits only its own machine's samples, and refine's refit mixed them in."""
    from llmperf_hook.store import OpSampleRecord, open_store

    home = tmp_path / "home"
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    _user_profile(home)
    with open_store(home / "store.sqlite") as store:
        store.record_op_samples(OpSampleRecord("cpu-test", "fp32", "gelu", "fwd", {"elements": float(e)}, 1.0,
                                               fingerprint='{"device": "other"}') for e in (5000, 7000, 9000))
    op_refit = _refine_one_gelu_op(tmp_path)
    assert "gelu/fwd/fp32 (24 sampled + 1 instrumented)" in op_refit, op_refit


def test_collective_samples_are_stored_not_refitted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten all-reduce sizes of a 2-rank --profile-ops run (phase "step": the gradient sync): no profile has a
    per-op model for a collective, and refitting one raised KeyError in the feature builders, so the refine of
    such a run failed as a whole (no calibration either). They are stored; the gelu beside them is refitted."""
    from llmperf_hook.store import open_store

    home = tmp_path / "home"
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    _user_profile(home)
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.02, 0.02], 1: [0.5, 0.02, 0.02]})
    for rank in (0, 1):
        lines = [f'{{"kind": "op", "job_id": "j1", "rank": {rank}, "op_class": "allreduce", "phase": "step", '
                 f'"dtype": "fp32", "dims": {{"bytes": {4096 << (i + 5 * rank)}}}, "seconds": {1e-5 * (i + 1)}, '
                 f'"count": 2}}\n' for i in range(5)]
        lines.append(f'{{"kind": "op", "job_id": "j1", "rank": {rank}, "op_class": "gelu", "phase": "fwd", '
                     f'"dtype": "fp32", "dims": {{"elements": 10000}}, "seconds": {_gelu_time_s(10000)}, "count": 4}}\n')
        with open(run / f"rank{rank}.jsonl", "a") as f:
            f.write("".join(lines))
    (job,) = refine_run(run).jobs
    assert "gelu/fwd/fp32" in job.op_refit and "allreduce" not in job.op_refit, job.op_refit
    with open_store(home / "store.sqlite") as store:
        assert sum(r.op_class == "allreduce" for r in store.query_op_samples("cpu-test")) == 10


def test_a_run_moved_to_other_hardware_leaves_the_earlier_profile_refitted_without_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`llmperf refine --hardware B` of a run first refined under A moves its op samples to B; A's user profile,
    refitted with them at the first refine, is refitted without them (it kept the instrumented models before)."""
    from llmperf_hook.profile.predictor import FittedProfile
    from llmperf_hook.profile.profile_io import read_profile_meta

    home = tmp_path / "home"
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    profile = _user_profile(home)
    sampled = read_profile_meta(profile).models[0]
    dims = {"elements": np.array([200000.0, 3000000.0])}

    def gelu_s() -> np.ndarray:
        return FittedProfile(profile).predict_class_s("gelu", "fwd", "fp32", dims)
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.02, 0.02]})
    with open(run / "rank0.jsonl", "a") as f:
        f.write("".join(f'{{"kind": "op", "job_id": "j1", "rank": 0, "op_class": "gelu", "phase": "fwd", '
                        f'"dtype": "fp32", "dims": {{"elements": {e}}}, "seconds": {_gelu_time_s(e) * 3}, '
                        f'"count": 4}}\n' for e in (10000, 200000, 3000000)))
    refine_run(run)
    assert read_profile_meta(profile).models[0].num_samples == 27
    instrumented = gelu_s()  # pulled towards the 3x slower instrumented times
    (job,) = refine_run(run, hardware="cpu-other").jobs
    meta = read_profile_meta(profile)
    assert meta.models[0].num_samples == sampled.num_samples and "refined" not in meta.provenance
    reverted = gelu_s()
    assert np.all(np.abs(reverted / _gelu_time_s(dims["elements"]) - 1) < 0.1), reverted  # the sampler's times again
    assert np.all(instrumented > reverted * 1.2), (instrumented, reverted)
    assert any("stored this run's op samples for cpu-test" in n and "refitted without them: gelu/fwd/fp32 (24 "
               "sampled + 0 instrumented)" in n for n in job.notes), job.notes


def test_a_model_fitted_from_the_moved_run_alone_leaves_the_earlier_profile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first refine under A fitted a class the sampler never measured (residual_add) from the run's 8 op
    samples alone; `refine --hardware B` leaves no sample to refit it without them: the model goes (the class is
    unfitted in A again, as the sampler left it) and the note says so. It stayed, built from B's run, and the note
    said A had 'no model left to refit'."""
    from llmperf_hook.profile.profile_io import read_profile_meta

    home = tmp_path / "home"
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    profile = _user_profile(home)
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.02, 0.02]})
    with open(run / "rank0.jsonl", "a") as f:
        f.write("".join(f'{{"kind": "op", "job_id": "j1", "rank": 0, "op_class": "residual_add", "phase": "fwd", '
                        f'"dtype": "fp32", "dims": {{"elements": {e}}}, "seconds": {_gelu_time_s(e)}, "count": 4}}\n'
                        for e in np.geomspace(10000, 3000000, 8).round()))
    refine_run(run)
    meta = read_profile_meta(profile)
    assert {m.op_class for m in meta.models} == {"gelu", "residual_add"} and "refined" in meta.provenance
    (job,) = refine_run(run, hardware="cpu-other").jobs
    meta = read_profile_meta(profile)
    assert {m.op_class for m in meta.models} == {"gelu"} and "refined" not in meta.provenance
    assert any("stored this run's op samples for cpu-test" in n and "residual_add/fwd/fp32 removed" in n
               for n in job.notes), job.notes

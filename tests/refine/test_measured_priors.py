"""The shrinkage's variances from what the profile measured (refine/shrinkage.variance_priors): a CPU profile's
own held-out steps (profile/cpu_framework.step_holdout_log_errors) and the step-time drift; a profile
without measured steps keeps the cross-cluster prior. Never from the validated rows."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from llmperf_hook.instrument.reference_speed import WORKLOAD
from llmperf_hook.profile.cpu_framework import FORMAT_VERSION, carried_history, step_holdout_log_errors
from llmperf_hook.refine import observation_store as store
from llmperf_hook.refine.calibration import find_calibration
from llmperf_hook.refine.recalibrate import recalibrate
from llmperf_hook.refine.shrinkage import (DRIFT_PRIOR_DOF, SD_RUN_PRIOR, SD_SHARED_PRIOR, STEP_DRIFT_SD_PRIOR,
                                          measured_step_priors, step_drift_sd, variance_priors)

PER_UNIT, SCALE, PER_BYTE, PER_PARAM = 2e-6, 1.0, 1e-11, 1e-9
ENGINE_STEP, ENGINE_PARAM = 1e-3, 5e-9


def _ref_row(units: int, compute_s: float, nbytes: float, params: int) -> dict:
    fwd_bwd = PER_UNIT * units + SCALE * compute_s + PER_BYTE * nbytes + PER_PARAM * params
    return {"units": units, "predicted_compute_s": compute_s, "bytes": nbytes, "params": params, "fwd_bwd_s": fwd_bwd}


def _engine_row(params: int, off: float = 1.0) -> list[float]:
    model_fb, model_opt = 0.004 + 1e-9 * params, 3e-9 * params
    extra = ENGINE_STEP + ENGINE_PARAM * params
    return [params, (model_fb + 0.5 * extra) * off, (model_opt + 0.5 * extra) * off, model_fb, model_opt]


def framework_doc(off: float = 1.0) -> dict:
    """A framework file whose steps the cost reproduces exactly, the last engine step measured `off` x."""
    rows = [_ref_row(45, 0.006, 4e7, 350_000), _ref_row(75, 0.009, 6e7, 540_000), _ref_row(45, 0.007, 3.9e7, 1_090_000),
            _ref_row(105, 0.02, 1.2e8, 450_000), _ref_row(135, 0.045, 1.8e8, 3_400_000)]
    engine = [_engine_row(p) for p in (360_000, 540_000, 1_860_000)] + [_engine_row(3_700_000, off)]
    return {"dtypes": {"fp32": {"per_unit_s": PER_UNIT, "compute_scale": SCALE, "samples": rows,
                                "deepspeed_step": {"1": {"samples": engine}}}}}


def test_held_out_steps_of_an_exact_cost_are_exact_and_a_bad_step_shows() -> None:
    exact = step_holdout_log_errors(framework_doc())
    assert len(exact) == 9 and max(abs(e) for e in exact) < 1e-6
    off = step_holdout_log_errors(framework_doc(off=1.3))
    # the 30 % slower step, predicted from the other three, reads low; the others, predicted with it, move; the
    # forward+backward rows do not depend on the engine's samples
    assert off[-1] < -0.1 and any(abs(e) > 1e-3 for e in off[5:8]) and off[:5] == pytest.approx(exact[:5], abs=1e-6)
    assert step_holdout_log_errors({"dtypes": {"fp32": {"per_unit_s": 0, "compute_scale": 1, "samples": []}}}) == []


def _profile(home: Path, name: str, doc: dict | None, readings_cpu_s: tuple[float, ...] = ()) -> Path:
    prof = home / "profiles" / name
    prof.mkdir(parents=True)
    (prof / "profile.json").write_text(json.dumps({"models": [{"holdout_mape": 0.2}]}))
    if doc is not None:
        (prof / "framework_overhead.json").write_text(json.dumps(doc))
    readings = [{"cpu_s": c, "workload": WORKLOAD, "concurrent": 1} for c in readings_cpu_s]
    readings.append({"cpu_s": 1.0, "workload": WORKLOAD, "concurrent": 2})  # two copies at once: not the drift
    (prof / "reference_speed.json").write_text(json.dumps({"workload": WORKLOAD, "readings": readings,
                                                           "reference_cpu_s": {"1": 0.006, "2": 0.0066}}))
    return prof


def test_priors_come_from_the_held_out_steps_and_the_step_drift(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """sd_shared: the held-out steps' mean and its standard error and the machine's step-time drift (the
    documented prior alone for a file measured once), in quadrature; the reference readings play no part."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    doc = framework_doc(off=1.3)
    prof = _profile(tmp_path, "my-cpu", doc, (0.0058, 0.0061, 0.0056))
    errors = step_holdout_log_errors(doc)
    priors = variance_priors("my-cpu")
    assert priors == measured_step_priors(prof) == variance_priors("my-cpu", [(0.0066, 1)] * 4)
    assert priors.sd_config == pytest.approx(math.sqrt(statistics.fmean(e * e for e in errors)))
    se = statistics.stdev(errors) / math.sqrt(len(errors))
    # the drift moves two levels: the profile's (shared by every prediction) and the run's moment's (not)
    level = STEP_DRIFT_SD_PRIOR / math.sqrt(2)
    assert priors.sd_shared == pytest.approx(math.sqrt(statistics.fmean(errors) ** 2 + se ** 2 + level ** 2))
    assert priors.sd_moment == pytest.approx(level)
    assert "9 held-out steps" in priors.source and "step-time drift" in priors.source


def test_the_profiles_earlier_measurements_of_its_steps_join_the_drift() -> None:
    """A re-measured framework file keeps the steps it replaced (cpu_framework.carried_history): the shared
    shift d between the two measurements of the same steps is one move of the machine's level, so d^2 joins the
    drift's variance, pooled with the prior worth DRIFT_PRIOR_DOF; a steady machine narrows it, a file of another
    method or with too few common steps is no shift."""
    first = {**framework_doc(), "format_version": FORMAT_VERSION, "measured_utc": "t0"}
    assert step_drift_sd(first) == (pytest.approx(STEP_DRIFT_SD_PRIOR), 0)
    slower = framework_doc()
    for row in slower["dtypes"]["fp32"]["samples"]:
        row["fwd_bwd_s"] *= 1.2
    for sample in slower["dtypes"]["fp32"]["deepspeed_step"]["1"]["samples"]:
        sample[1], sample[2] = sample[1] * 1.2, sample[2] * 1.2
    remeasured = {**slower, "history": carried_history(first)}
    assert len(remeasured["history"]) == 1 and len(remeasured["history"][0]["steps"]) == 9
    sd, n = step_drift_sd(remeasured)
    assert n == 1 and sd == pytest.approx(math.sqrt((DRIFT_PRIOR_DOF * STEP_DRIFT_SD_PRIOR ** 2 + math.log(1.2) ** 2)
                                                    / (DRIFT_PRIOR_DOF + 1)))
    steady = {**framework_doc(), "history": carried_history(first) * 3}
    assert step_drift_sd(steady)[0] < STEP_DRIFT_SD_PRIOR
    assert carried_history({**first, "format_version": 1}) == [] and carried_history(None) == []
    assert len(carried_history({**first, "format_version": 2})) == 1  # one reading per term: the same steps
    assert step_drift_sd({**first, "history": [{"steps": {"fp32/fwd_bwd/0": 1.0}}, "junk"]})[1] == 0


def test_a_profile_without_measured_steps_keeps_the_cross_cluster_prior(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    _profile(tmp_path, "gpu-like", None)
    _profile(tmp_path, "few-steps", {"dtypes": {"fp32": {"per_unit_s": 0, "compute_scale": 1,
                                                        "samples": framework_doc()["dtypes"]["fp32"]["samples"][:3]}}})
    for name in ("gpu-like", "few-steps", "no-profile-at-all"):
        priors = variance_priors(name)
        assert priors.sd_shared == SD_SHARED_PRIOR and "across clusters" in priors.source
    assert variance_priors("gpu-like").sd_config == pytest.approx(0.2 * math.sqrt(math.pi / 2))


def test_one_run_transfers_by_the_measured_priors_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    _profile(tmp_path, "my-cpu", framework_doc(off=1.3), (0.0058, 0.0061, 0.0056))
    conn = store.connect()
    store.record_run(conn, {"job_id": "j1", "hardware": "my-cpu", "cluster": "c", "framework": "deepspeed",
                            # x0.96: inside the priors, so they are not doubted (refine/prior_scale.py)
                            "measured_step_time_s": 0.024, "uncalibrated_step_time_s": 0.025,
                            "config_fingerprint": "f" * 16, "ingested_unix_s": 1.0})
    cal, source = recalibrate(conn, "my-cpu", "c", "deepspeed")
    conn.close()
    p = variance_priors("my-cpu")
    k = p.sd_shared ** 2 / (p.sd_shared ** 2 + p.sd_config ** 2 + SD_RUN_PRIOR ** 2 + p.sd_moment ** 2)
    assert cal.shared_weight == pytest.approx(k) and cal.sd_shared == pytest.approx(p.sd_shared)
    assert "held-out steps" in source
    stored = find_calibration("my-cpu", "c", "deepspeed")
    assert stored.sd_shared == pytest.approx(p.sd_shared) and stored.shared_weight == pytest.approx(k)
    assert f"shared-bias prior {p.sd_shared:.1%}" in stored.describe()


def test_a_calibration_stored_before_sd_shared_reads_the_old_prior(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The read-only predict path on a store whose refine_calibrations lacks sd_shared: the shrinkage still
    applies (it was fitted with SD_SHARED_PRIOR)."""
    import sqlite3

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    with sqlite3.connect(tmp_path / "store.sqlite") as conn:
        conn.executescript(
            "CREATE TABLE refine_calibrations (hardware TEXT, cluster TEXT, framework TEXT, step_time_scale REAL, "
            "step_overhead_s REAL, num_runs INTEGER, fitted_unix_s REAL, shared_weight REAL, num_configs INTEGER, "
            "sd_config REAL, sd_run REAL, PRIMARY KEY (hardware, cluster, framework));"
            "INSERT INTO refine_calibrations VALUES ('hw', 'c', 'deepspeed', 0.9, 0.0, 1, 1.0, 0.5, 1, 0.087, 0.05);"
            "CREATE TABLE refine_config_scales (hardware TEXT, cluster TEXT, framework TEXT, fingerprint TEXT, "
            "step_time_scale REAL, measured_scale REAL, num_runs INTEGER, label TEXT, "
            "PRIMARY KEY (hardware, cluster, framework, fingerprint));")
    conn.close()
    cal = find_calibration("hw", "c", "deepspeed")
    assert cal.shared_weight == 0.5 and cal.sd_shared == SD_SHARED_PRIOR


def test_the_drift_is_the_move_between_two_measurements_not_one_levels_spread() -> None:
    """The shared bias b of a run is the machine's level at the run minus its level when the profile was taken:
    step_drift_sd estimates the root mean square of such moves. A file measured at the machine's mean level whose
    400 earlier measurements' levels were off by N(0, 0.05^2) moved by 0.05 rms each time: step_drift_sd comes
    out near 0.05 (the prior's 6 degrees of freedom barely count against 400); session 9's d^2 / 2 halved each
    move's variance (0.036)."""
    import random

    rng = random.Random(3)
    history = []
    for i in range(400):
        level = math.exp(rng.gauss(0.0, 0.05))
        then = framework_doc()
        for row in then["dtypes"]["fp32"]["samples"]:
            row["fwd_bwd_s"] *= level
        for sample in then["dtypes"]["fp32"]["deepspeed_step"]["1"]["samples"]:
            sample[1], sample[2] = sample[1] * level, sample[2] * level
        history += carried_history({**then, "format_version": FORMAT_VERSION, "measured_utc": str(i)})
    sd, n = step_drift_sd({**framework_doc(), "history": history})
    assert n == 400 and 0.046 < sd < 0.058

"""A calibration that knows what it saw: own ratio for the instrumented configuration, the shared part shrunk
for the others (refine/shrinkage.py), fingerprints that agree between predict and refine, old stores migrated,
nothing leaking across (hardware, cluster, framework)."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook import api
from llmperf_hook.frameworks import explain_json
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.refine import observation_store as store
from llmperf_hook.refine.calibration import find_calibration
from llmperf_hook.refine.config_fingerprint import config_fingerprint, fingerprint_from_config_json
from llmperf_hook.refine.recalibrate import recalibrate
from llmperf_hook.refine.refine_run import refine_run
from llmperf_hook.refine.shrinkage import (SD_CONFIG_NO_PROFILE, SD_RUN_PRIOR, SD_SHARED_PRIOR, ConfigRuns,
                                           Variances, estimate_variances, group_runs, posterior, sd_config_prior)
from refine_helpers import CONFIG, PREDICTION, write_run

PRIORS = Variances(SD_SHARED_PRIOR, SD_CONFIG_NO_PROFILE, SD_RUN_PRIOR, "test")


def test_one_run_shrinks_by_the_variance_ratio() -> None:
    (c,) = group_runs([("j", "f1", 0.010, 0.020)])
    post = posterior([c], PRIORS)
    total = SD_SHARED_PRIOR ** 2 + SD_CONFIG_NO_PROFILE ** 2 + SD_RUN_PRIOR ** 2
    assert post.shared_weight == pytest.approx(SD_SHARED_PRIOR ** 2 / total)
    assert post.shared_log_scale == pytest.approx(math.log(2.0))
    own = (SD_SHARED_PRIOR ** 2 + SD_CONFIG_NO_PROFILE ** 2) / total
    assert post.config_log_scale["f1"] == pytest.approx(own * math.log(2.0))


def test_more_configurations_shrink_less() -> None:
    weights = []
    for n in (1, 2, 4, 8, 16):
        configs = group_runs([(f"j{i}", f"f{i}", 0.01, 0.015) for i in range(n)])
        weights.append(posterior(configs, PRIORS).shared_weight)
    assert all(a < b < 1 for a, b in zip(weights, weights[1:]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.floats(0.5, 2.0)), min_size=1, max_size=12))
def test_posterior_is_between_prior_and_data(rows: list[tuple[str, float]]) -> None:
    """k in (0, 1); a configuration's own log-scale lies between the others' shared estimate and its own mean."""
    configs = group_runs([(f"j{i}", f, 0.01, 0.01 * r) for i, (f, r) in enumerate(rows)])
    v = estimate_variances(configs, SD_CONFIG_NO_PROFILE, "test")
    post = posterior(configs, v)
    assert 0 < post.shared_weight < 1 and v.sd_config > 0 and v.sd_run > 0
    for c in configs:
        mean = sum(c.log_ratios) / len(c.log_ratios)
        own = post.config_log_scale[c.fingerprint]
        assert min(mean, 0.0, post.shared_log_scale) - 1e-9 <= own <= max(mean, 0.0, post.shared_log_scale) + 1e-9


def test_variances_pool_the_stores_spread() -> None:
    same = [ConfigRuns("f1", (0.1, 0.1), 0.01, 0.011), ConfigRuns("f2", (0.1,), 0.01, 0.011)]
    far = [ConfigRuns("f1", (0.5, 0.5), 0.01, 0.016), ConfigRuns("f2", (-0.5,), 0.01, 0.006)]
    assert estimate_variances(same, 0.1, "p").sd_config < 0.1 < estimate_variances(far, 0.1, "p").sd_config
    noisy = [ConfigRuns("f1", (0.3, -0.3), 0.01, 0.01)]
    assert estimate_variances(noisy, 0.1, "p").sd_run > SD_RUN_PRIOR
    assert "repeat" in estimate_variances(noisy, 0.1, "p").source


def test_sd_config_prior_reads_the_profiles_held_out_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    assert sd_config_prior("no-such-hw") == (SD_CONFIG_NO_PROFILE, pytest.approx(sd_config_prior("no-such-hw")[1]))
    prof = tmp_path / "profiles" / "my-cpu"
    prof.mkdir(parents=True)
    models = [{"holdout_mape": v} for v in (0.02, 0.06, 0.30)] + [{"holdout_mape": None}]
    (prof / "profile.json").write_text(json.dumps({"models": models}))
    sd, source = sd_config_prior("my-cpu")
    assert sd == pytest.approx(0.06 * math.sqrt(math.pi / 2)) and "3 op models" in source


def _megatron_cfg(mbs: int = 1):
    return make_config(num_layers=2, hidden_size=512, num_attention_heads=8, dp=2, micro_batch_size=mbs)


def test_fingerprint_is_the_same_from_the_config_and_from_prediction_json(tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "train_batch_size": 4,
                              "zero_optimization": {"stage": 1}}))
    argv = ["deepspeed", "--num_gpus", "2", "train.py", "--deepspeed_config", str(ds), "--num-layers", "2",
            "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "128",
            "--max-position-embeddings", "128", "--micro-batch-size", "2", "--global-batch-size", "4",
            "--vocab-size", "1024", "--no-pipeline-parallel"]
    pred = api.predict_command(argv, {}, cluster="dgx-h100")
    saved = json.loads(json.dumps(api.prediction_json(pred), default=str))  # as prediction.json holds it
    assert config_fingerprint(pred.config) == fingerprint_from_config_json(saved["config"]) is not None
    assert config_fingerprint(_megatron_cfg(1)) != config_fingerprint(_megatron_cfg(2))
    assert fingerprint_from_config_json({"framework": "deepspeed"}) is None


def _store_run(conn: sqlite3.Connection, job_id: str, cfg, key: tuple[str, str, str], predicted: float,
               measured: float) -> None:
    config = json.loads(json.dumps(explain_json(cfg, None), default=str))
    store.record_run(conn, {"job_id": job_id, "hardware": key[0], "cluster": key[1], "framework": key[2],
                            "uncalibrated_step_time_s": predicted, "measured_step_time_s": measured,
                            "config_json": json.dumps(config), "usable_for_calibration": 1,
                            "config_fingerprint": fingerprint_from_config_json(config)})


def test_predict_says_which_calibration_applies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    h100 = api.load_cluster("dgx-h100")
    seen, other = _megatron_cfg(1), _megatron_cfg(2)
    plain_seen, plain_other = api.predict_config(seen, h100), api.predict_config(other, h100)
    conn = store.connect()
    key = (h100.gpu.name, h100.name, seen.framework)
    _store_run(conn, "j1", seen, key, plain_seen.step_time_s, 2 * plain_seen.step_time_s)
    cal, source = recalibrate(conn, *key)
    conn.close()
    assert cal.num_configs == 1 and "held-out error" in source
    own = cal.config_scales[0].step_time_scale
    got_seen, got_other = api.predict_config(seen, h100), api.predict_config(other, h100)
    assert got_seen.step_time_s == pytest.approx(own * plain_seen.step_time_s) and 1.8 < own < 2.0
    assert "this exact configuration, 1 run(s)" in got_seen.predictor["calibration"]
    assert any("calibrated on this exact configuration" in w for w in got_seen.warnings)
    shared = 2.0 ** cal.shared_weight
    assert got_other.step_time_s == pytest.approx(shared * plain_other.step_time_s) and 1.0 < shared < own
    assert "cluster calibration from 1 run(s) of 1 configuration(s), shrunk" in got_other.predictor["calibration"]
    assert any("shrunk" in w for w in got_other.warnings)
    # nothing leaks: another cluster, hardware or framework is predicted as before
    a100 = api.load_cluster("dgx-a100")
    assert "calibration" not in api.predict_config(seen, a100).predictor
    assert "calibration" not in api.predict_config(_megatron_cfg(1).__class__(**{
        **_megatron_cfg(1).__dict__, "framework": "megatron-deepspeed"}), h100).predictor
    assert find_calibration("a100-sxm4-80gb", h100.name, seen.framework) is None


def test_refine_of_a_run_reports_own_and_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    refine_run(write_run(tmp_path / "a", "ja", {0: [1.0, 0.02, 0.02]}))
    other = {**PREDICTION, "config": {**CONFIG, "micro_batch_size": 4}}
    (job,) = refine_run(write_run(tmp_path / "b", "jb", {0: [1.0, 0.021, 0.021]}, prediction=other)).jobs
    cal = job.calibration
    assert cal.num_configs == 2 and len(cal.config_scales) == 2 and cal.num_runs == 2
    first = fingerprint_from_config_json(CONFIG)
    assert cal.own_scale(first) is not None and cal.own_scale(first).measured_scale == pytest.approx(2.0)
    # two configurations agreeing better than the prior spread: less shrinkage than one run alone
    assert cal.shared_weight > SD_SHARED_PRIOR ** 2 / (SD_SHARED_PRIOR ** 2 + SD_CONFIG_NO_PROFILE ** 2 + SD_RUN_PRIOR ** 2)


def test_an_old_store_is_migrated_and_refitted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store of the previous schema (no fingerprint column, no shrinkage columns, a one-run scale applied in
    full) gets the columns, its runs' fingerprints from their saved config, and a shrunk calibration."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    db = tmp_path / "store.sqlite"
    with sqlite3.connect(db) as conn:
        conn.executescript(
            "CREATE TABLE refine_runs (job_id TEXT PRIMARY KEY, run_dir TEXT, hardware TEXT, cluster TEXT, framework "
            "TEXT, device TEXT, world_size INTEGER, num_timed_steps INTEGER, measured_step_time_s REAL, "
            "predicted_step_time_s REAL, uncalibrated_step_time_s REAL, peak_memory_bytes INTEGER, load_avg_1m REAL, "
            "config_json TEXT, ingested_unix_s REAL, wall_per_cpu REAL, usable_for_calibration INTEGER DEFAULT 1, "
            "reference_cpu_s REAL);"
            "CREATE TABLE refine_calibrations (hardware TEXT, cluster TEXT, framework TEXT, step_time_scale REAL, "
            "step_overhead_s REAL, num_runs INTEGER, fitted_unix_s REAL, PRIMARY KEY (hardware, cluster, framework));")
        conn.execute("INSERT INTO refine_runs (job_id, hardware, cluster, framework, measured_step_time_s, "
                     "uncalibrated_step_time_s, config_json, ingested_unix_s) VALUES ('old', 'cpu-test', 'local-cpu', "
                     "'deepspeed', 0.02, 0.01, ?, 1.0)", (json.dumps(CONFIG),))
        conn.execute("INSERT INTO refine_calibrations VALUES ('cpu-test', 'local-cpu', 'deepspeed', 2.0, 0.0, 1, 1.0)")
    conn.close()
    assert find_calibration("cpu-test", "local-cpu", "deepspeed").shared_weight == 1.0  # read as it was
    store.connect().close()
    (fingerprint,) = sqlite3.connect(db).execute("SELECT config_fingerprint FROM refine_runs").fetchone()
    assert fingerprint == fingerprint_from_config_json(CONFIG)
    cal = find_calibration("cpu-test", "local-cpu", "deepspeed")
    assert cal.step_time_scale == pytest.approx(2.0) and 0 < cal.shared_weight < 1
    assert cal.own_scale(fingerprint) is not None

"""refine/peer_wait.py: a multi-rank CPU run's wait for its peers (wall beyond CPU time) is calibrated apart from
the rest of its ratio for the configurations without runs (multi-rank ones only); its own configuration's whole
step is shrunk as one reading (refine/own_scales.py, tests/refine/test_own_scales.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from llmperf_hook.refine import observation_store as store
from llmperf_hook.refine.calibration import Calibration, calibrate_step, find_calibration
from llmperf_hook.refine.contention import contended_step
from llmperf_hook.refine.peer_wait import WAIT_CONFIG_SD_PRIOR, fit_peer_wait, wait_log
from llmperf_hook.refine.recalibrate import fit_key_calibration, recalibrate
from llmperf_hook.refine.shrinkage import Priors

TESTBED = Priors(0.097, 0.136, "the testbed profile's (session 14)", sd_moment=0.095)
"""The priors the 11:20 testbed run's profile gave: the machine's moment in every run's reading."""
WAIT = math.log(1.10)


def _row(job: str, fingerprint: str, predicted: float, measured: float, wait: float = 0.0,
         observation_sd: float = 0.0) -> tuple:
    """A run as observation_store.runs_for_key gives it; a contended one (observation sd > 0) assumed its wait."""
    return (job, fingerprint, predicted, measured, None, observation_sd, 0.0, (), wait,
            wait != 0.0 and not observation_sd)


def test_the_wait_is_wall_over_cpu_of_a_multi_rank_cpu_run_only() -> None:
    assert wait_log(0.055, 0.055, 1.10, 2) == (pytest.approx(WAIT), True)
    # a contended run's reading is its CPU time less the contention's share times an assumed quiet ratio
    cpu_s, quiet = 0.050, 1.12
    step = contended_step(1.6, cpu_s, 2, 1.25, [quiet])
    w, measured = wait_log(step.step_time_s, 1.6 * cpu_s, 1.6, 2, contended=True)
    assert w == pytest.approx(math.log(quiet)) and not measured
    assert wait_log(0.055, 0.055, 1.10, 1) == (0.0, False)  # one rank has nobody to wait for
    assert wait_log(0.055, 0.055, 1.10, 2, "cuda") == (0.0, False)  # a GPU step's wall over CPU: no peer's wait
    assert wait_log(0.055, 0.055, None, 2) == (0.0, False)
    # ranks on two threads each: CPU time twice the wall time is their parallelism, not a negative wait
    assert wait_log(0.055, 0.055, 0.5, 2) == (0.0, False)


def test_an_instrumented_two_rank_configuration_keeps_its_whole_step_shrunk_as_one() -> None:
    """Its CPU part predicted exactly, its steps 10 % over their CPU time: its own scale is its whole step's ratio
    shrunk as one reading (refine/own_scales.py), the wait's prior added to the step's, so it keeps more than a
    one-rank configuration reading the same ratio, and its measured ratio and wait are on record."""
    two_rank = fit_key_calibration("h", "c", "fw", [_row("j", "a", 0.050, 0.055, WAIT)], TESTBED)[0]
    one_rank = fit_key_calibration("h", "c", "fw", [_row("j", "a", 0.050, 0.055)], TESTBED)[0]
    kept_two, kept_one = (math.log(c.apply(0.050, "a") / 0.050) for c in (two_rank, one_rank))
    assert 0 < kept_one < kept_two < WAIT
    assert two_rank.config_scales[0].measured_scale == pytest.approx(1.10)
    assert two_rank.config_scales[0].wait_log_scale == pytest.approx(WAIT)


def test_the_wait_goes_to_multi_rank_configurations_only() -> None:
    cal = fit_key_calibration("h", "c", "fw", [_row("j", "a", 0.050, 0.055, WAIT)], TESTBED)[0]
    assert cal.apply(0.030, "b", (), world_size=1) == pytest.approx(0.030)  # its CPU part had no bias
    two = cal.apply(0.030, "b", (), world_size=2)
    # the wait differs little between configurations (2.9 %) against a shared prior of 9.7 %: most of it carries
    assert 0.8 * WAIT < math.log(two / 0.030) < WAIT
    assert cal.wait_weight == pytest.approx(0.097 ** 2 / (0.097 ** 2 + WAIT_CONFIG_SD_PRIOR ** 2 + 0.028 ** 2),
                                            rel=1e-6)
    assert "wait for their peers x1.0" in cal.describe()


def test_a_one_rank_run_fits_no_wait_and_leaves_the_calibration_as_before() -> None:
    assert fit_peer_wait([], 0.1) is None
    cal = fit_key_calibration("h", "c", "fw", [_row("j", "a", 0.050, 0.055)], TESTBED)[0]
    assert cal.wait_weight == 0.0 and cal.apply(0.030, "b", (), 2) == cal.apply(0.030, "b", (), 1)
    assert "peers" not in cal.describe()


def test_the_store_gives_the_wait_and_keeps_the_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    conn = store.connect()
    common = {"hardware": "my-cpu", "cluster": "c", "framework": "deepspeed", "device": "cpu",
              "uncalibrated_step_time_s": 0.050, "measured_step_time_s": 0.055}
    store.record_run(conn, {**common, "job_id": "j2", "world_size": 2, "wall_per_cpu": 1.10, "config_fingerprint": "a"})
    store.record_run(conn, {**common, "job_id": "j1", "world_size": 1, "wall_per_cpu": 1.01, "config_fingerprint": "b"})
    store.record_run(conn, {**common, "job_id": "j3", "world_size": 2, "wall_per_cpu": 1.6, "config_fingerprint": "c",
                            "calibration_step_time_s": 0.052, "observation_sd": 0.07})  # contended
    rows = {r[0]: r for r in store.runs_for_key(conn, "my-cpu", "c", "deepspeed")}
    assert rows["j2"][8:] == (pytest.approx(WAIT), True) and rows["j1"][8:] == (0.0, False)
    assert rows["j3"][8] > 0 and rows["j3"][9] is False  # the contended run's assumed ratio
    cal, _ = recalibrate(conn, "my-cpu", "c", "deepspeed")
    conn.close()
    stored = find_calibration("my-cpu", "c", "deepspeed")
    assert stored.wait_log_scale == pytest.approx(cal.wait_log_scale) == pytest.approx(WAIT)
    assert stored.wait_weight == pytest.approx(cal.wait_weight) and 0 < stored.wait_weight < 1
    assert stored.apply(0.030, "z", (), 2) == pytest.approx(cal.apply(0.030, "z", (), 2))
    own = stored.own_scale("a")
    assert own.wait_log_scale == pytest.approx(cal.own_scale("a").wait_log_scale) == pytest.approx(WAIT)
    assert "its ranks' wait for each other x1.100" in stored.describe("a")
    assert stored.own_scale("b").wait_log_scale == 0.0 and "wait" not in stored.describe("b")


def test_predict_gives_the_wait_to_a_multi_rank_configuration_by_its_world_size() -> None:
    from llmperf_hook.graph.sample_configs import make_config

    cal = Calibration("cpu", "c", "fw", 1.0, 1, num_configs=1, shared_weight=0.5, wait_log_scale=WAIT,
                      wait_weight=0.8)
    two, one = (make_config(num_layers=2, hidden_size=256, num_attention_heads=4, dp=d) for d in (2, 1))
    assert calibrate_step(cal, two, 0.030).scale == pytest.approx(math.exp(0.8 * WAIT))
    assert calibrate_step(cal, one, 0.030).scale == pytest.approx(1.0)


def test_a_contended_runs_assumed_wait_is_neither_a_measurement_nor_counted_twice() -> None:
    """A contended run's reading holds an assumed quiet ratio: its CPU part is the reading without it and it does
    not move the fitted wait; a configuration with only such runs shrinks its reading as one (refine/own_scales.py)
    and fits no wait for the others."""
    quiet, contended = _row("q", "a", 0.050, 0.055, WAIT), _row("c", "a", 0.050, 0.055, WAIT, observation_sd=0.07)
    both = fit_key_calibration("h", "c", "fw", [quiet, contended], TESTBED)[0]
    alone = fit_key_calibration("h", "c", "fw", [quiet], TESTBED)[0]
    assert both.wait_log_scale == pytest.approx(alone.wait_log_scale)
    assert both.apply(0.050, "a") == pytest.approx(alone.apply(0.050, "a"), rel=0.01)  # its CPU parts agree: 0
    only = fit_key_calibration("h", "c", "fw", [contended], TESTBED)[0]
    assert only.wait_weight == 0.0 and 0.050 < only.apply(0.050, "a") < 0.055


def test_a_store_from_before_the_wait_columns_still_gives_its_transfer_fields(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The predict path opens the store read-only: a store no refine has opened since the wait columns came lacks
    them, and its configurations keep their alpha and shares (no wait)."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    conn = store.connect()
    store.record_run(conn, {"job_id": "j", "hardware": "my-cpu", "cluster": "c", "framework": "deepspeed",
                            "device": "cpu", "world_size": 2, "wall_per_cpu": 1.1, "config_fingerprint": "a",
                            "uncalibrated_step_time_s": 0.050, "measured_step_time_s": 0.060,
                            "cost_shares_json": '[["compute/fp32/2 ranks", 1.0]]'})
    recalibrate(conn, "my-cpu", "c", "deepspeed")
    with conn:
        conn.execute("ALTER TABLE refine_config_scales DROP COLUMN wait_log_scale")
        conn.execute("ALTER TABLE refine_calibrations DROP COLUMN wait_log_scale")
    conn.close()
    (own,) = find_calibration("my-cpu", "c", "deepspeed").config_scales
    assert own.shares == (("compute/fp32/2 ranks", 1.0),) and own.alpha > 0 and own.wait_log_scale == 0.0


def test_a_gpu_multi_rank_run_fits_no_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU step's wall over its host CPU time is no peer's wait (the host thread sleeps while kernels run): even
    with a wall / CPU ratio on record, its whole ratio stays in the calibration and 2-rank configurations get none."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    conn = store.connect()
    store.record_run(conn, {"job_id": "g", "hardware": "NVIDIA H100", "cluster": "c", "framework": "megatron",
                            "device": "cuda", "world_size": 8, "wall_per_cpu": 3.0, "config_fingerprint": "a",
                            "uncalibrated_step_time_s": 0.50, "measured_step_time_s": 0.55})
    ((*_, w, measured),) = store.runs_for_key(conn, "NVIDIA H100", "c", "megatron")
    cal, _ = recalibrate(conn, "NVIDIA H100", "c", "megatron")
    conn.close()
    assert (w, measured) == (0.0, False) and cal.wait_log_scale == 0.0 and cal.wait_weight == 0.0
    assert cal.own_scale("a").measured_scale == pytest.approx(1.10)
    assert cal.apply(0.40, "b", (), 8) == cal.apply(0.40, "b", (), 1)


def test_the_wait_is_what_the_run_measured_beyond_what_its_prediction_priced() -> None:
    """A prediction that priced its collectives (C of P) already holds log(P / (P - C)) of the ranks' wait: carrying
    the whole log(wall / CPU) to other configurations would count it twice (module docstring)."""
    from llmperf_hook.refine.peer_wait import priced_wait_log

    shares = (("comm_dp_grad/2 ranks", 0.07), ("comm_param_gather/2 ranks", 0.05), ("compute/fp32/2 ranks", 0.6),
              ("optimizer/fp32/zero 1", 0.28))
    priced = priced_wait_log(shares)
    assert priced == pytest.approx(-math.log(1 - 0.12))
    assert priced_wait_log(()) == 0.0 and priced_wait_log((("compute/fp32/1 ranks", 1.0),)) == 0.0
    assert wait_log(0.055, 0.055, 1.10, 2, priced_log=priced) == (pytest.approx(WAIT - priced), True)
    # a run whose wall / CPU is just what was priced measured no wait beyond it
    assert wait_log(0.055, 0.055, 1 / (1 - 0.12), 2, priced_log=priced)[0] == pytest.approx(0.0, abs=1e-12)
    assert wait_log(0.055, 0.055, 1.10, 1, priced_log=priced) == (0.0, False)  # one rank: nothing to take out


def test_the_store_reads_each_runs_wait_beyond_its_priced_collectives(tmp_path: Path) -> None:
    """observation_store.runs_for_key takes the priced wait from the run's own cost shares."""
    import json

    conn = store.connect(tmp_path / "s.sqlite")
    shares = [["comm_dp_grad/2 ranks", 0.12], ["compute/fp32/2 ranks", 0.88]]
    conn.execute("INSERT INTO refine_runs (job_id, hardware, cluster, framework, config_fingerprint, "
                 "uncalibrated_step_time_s, measured_step_time_s, cost_shares_json, wall_per_cpu, world_size, device) "
                 "VALUES ('j', 'h', 'c', 'f', 'fp', 0.05, 0.055, ?, 1.2, 2, 'cpu')", (json.dumps(shares),))
    (row,) = store.runs_for_key(conn, "h", "c", "f")
    assert row[8] == pytest.approx(math.log(1.2) + math.log(1 - 0.12)) and row[9] is True

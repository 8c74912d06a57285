"""refine/op_rebase.py: after an op refit, the run is calibrated against its command predicted with the refitted
ops, so an op error the refit corrected is not also in the end-to-end factor."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from llmperf_hook.refine import op_rebase
from llmperf_hook.refine import observation_store as store
from llmperf_hook.refine.refine_run import refine_run
from refine_helpers import PREDICTION, write_run
from test_op_refit import _gelu_time_s, _user_profile


def _run_with_op_samples(tmp_path: Path, prediction: dict) -> Path:
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.02, 0.02, 0.02]}, prediction=prediction)
    ops = "".join(
        f'{{"kind": "op", "job_id": "j1", "rank": 0, "op_class": "gelu", "phase": "fwd", "dtype": "fp32", '
        f'"dims": {{"elements": {e}}}, "seconds": {_gelu_time_s(e) * 1.3}, "count": 4}}\n' for e in (10000, 200000, 3000000))
    with open(run / "rank0.jsonl", "a") as f:
        f.write(ops)
    return run


def test_the_refitted_prediction_replaces_the_launch_one_in_the_calibration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    _user_profile(home)
    seen = []

    def predict_again(command, env, cluster):  # the refitted ops explain a 1.6x slower step than launch said
        seen.append((command, cluster))
        return SimpleNamespace(estimate=SimpleNamespace(step_time_s=0.016 * 1.25, calibration_scale=1.25))

    monkeypatch.setattr("llmperf_hook.api.predict_command", predict_again)
    run = _run_with_op_samples(tmp_path, {**PREDICTION, "command": ["deepspeed", "train.py", "--x"]})
    (job,) = refine_run(run).jobs
    assert seen == [(["deepspeed", "train.py", "--x"], "local-cpu")]
    assert any("op refit explains x0.625" in n for n in job.notes)
    conn = store.connect()
    (row,) = store.runs_for_key(conn, "cpu-test", "local-cpu", "deepspeed")
    conn.close()
    assert row[2] == pytest.approx(0.016)  # the calibration's ratio is 0.020 / 0.016, not 0.020 / 0.010
    own = job.calibration.config_scales[0]
    assert own.measured_scale == pytest.approx(0.020 / 0.016)
    assert job.predicted_after_s == pytest.approx(0.016 * own.step_time_scale)


def test_a_command_that_does_not_predict_again_keeps_the_launch_prediction_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    _user_profile(home)
    run = _run_with_op_samples(tmp_path, PREDICTION)  # no command saved
    (job,) = refine_run(run).jobs
    assert any("before this op refit (prediction.json saved no command" in n for n in job.notes)
    assert job.calibration.config_scales[0].measured_scale == pytest.approx(0.020 / 0.010)
    broken = op_rebase.repredict_uncalibrated({"command": ["nonexistent-launcher-xyz", "a.py"]}, "local-cpu")
    assert broken.uncalibrated_s is None and "did not predict again" in broken.reason

"""refine_run on hand-written run directories: summaries, ingestion, calibration, CLI output."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmperf_hook.commands.refine import command as refine_command
from llmperf_hook.errors import UsageError
from llmperf_hook.refine.calibration import find_calibration
from llmperf_hook.refine.refine_run import refine_run, render_refine_report, uncalibrated_prediction_s
from llmperf_hook.refine.run_records import read_run_dir, summarize_job
from llmperf_hook.refine.shrinkage import SD_CONFIG_NO_PROFILE, SD_RUN_PRIOR, SD_SHARED_PRIOR
from refine_helpers import PREDICTION, write_run


def test_step_time_is_median_of_slowest_rank_without_warmup(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.010, 0.012, 0.011], 1: [0.6, 0.013, 0.011, 0.011]},
                    extra='{"kind": "step", "job_id": "j1", "ra')  # a rank killed mid-write
    data = read_run_dir(run)
    job = summarize_job(data.records, "j1")
    assert data.num_bad_lines == 2
    assert job.step_times_s == (0.013, 0.012, 0.011) and job.step_time_s == 0.012
    assert job.ranks_seen == (0, 1) and job.world_size == 2 and job.peak_memory_bytes == 1003


def test_refine_fits_calibration_and_reports_before_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.020, 0.020, 0.020], 1: [0.5, 0.021, 0.019, 0.020]})
    report = refine_run(run)
    (job,) = report.jobs
    assert job.predicted_before_s == 0.010 and job.job.step_times_s == (0.021, 0.020, 0.020)
    # its own ratio x2, weighted against run-to-run noise (refine/shrinkage.py; no profile of cpu-test): x2 is 3.7
    # sd of prior and reading together, so the profile's priors are doubted (refine/prior_scale.py) and it keeps more
    # than their lambda, never more than the run
    prior = SD_SHARED_PRIOR ** 2 + SD_CONFIG_NO_PROFILE ** 2
    own = job.predicted_after_s
    assert job.job.step_time_s == 0.020 and 0.010 * 2.0 ** (prior / (prior + SD_RUN_PRIOR ** 2)) < own < 0.020
    cal = find_calibration("cpu-test", "local-cpu", "deepspeed")
    assert cal is not None and cal.step_time_scale == pytest.approx(2.0) and cal.num_runs == 1
    text = render_refine_report(report)
    assert "predicted before: 10.00 ms (-50.0% vs measured)" in text
    assert f"{(own - 0.02) / 0.02 * 100:+.1f}% vs measured" in text and "this exact configuration" in text
    assert "other configurations get the cluster calibration from 1 run(s) of 1 configuration(s), shrunk" in text
    refine_run(run)  # refining the same run again does not count it twice
    assert find_calibration("cpu-test", "local-cpu", "deepspeed").num_runs == 1


def test_second_run_refits_over_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    refine_run(write_run(tmp_path / "a", "ja", {0: [1.0, 0.02, 0.02]}))
    refine_run(write_run(tmp_path / "b", "jb", {0: [1.0, 0.08, 0.08]}, prediction={**PREDICTION, "step_time_s": 0.02}))
    cal = find_calibration("cpu-test", "local-cpu", "deepspeed")
    assert cal.num_runs == 2 and cal.step_time_scale == pytest.approx((2.0 * 4.0) ** 0.5)


def test_calibrated_prediction_is_undone_before_fitting() -> None:
    pred = {"step_time_s": 0.03, "calibration": {"step_time_scale": 2.0, "step_overhead_s": 0.01}}
    assert uncalibrated_prediction_s(pred) == (0.03, pytest.approx(0.01))
    assert uncalibrated_prediction_s({"step_time_s": 0.03, "uncalibrated_step_time_s": 0.02}) == (0.03, 0.02)
    assert uncalibrated_prediction_s(None) == (None, None)
    assert uncalibrated_prediction_s({"step_time_s": 0.03, "breakdown": {"compute": 0.01, "calibration": 0.02}}) == (
        0.03, pytest.approx(0.01))


def test_missing_prediction_and_missing_ranks_are_noted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    run = write_run(tmp_path / "r", "j1", {0: [0.1, 0.01, 0.01]}, prediction=None)
    lines = (run / "rank0.jsonl").read_text().replace('"world_size": 1', '"world_size": 2')
    (run / "rank0.jsonl").write_text(lines)
    (job,) = refine_run(run).jobs
    assert job.calibration is None
    assert any("ranks [1] recorded no step" in n for n in job.notes)
    # not 'prediction.json does not name the hardware and cluster (pass --hardware and --cluster)': there is none,
    # and with both options there is still nothing to calibrate against
    assert any("no prediction was saved when the job was launched" in n for n in job.notes), job.notes
    assert not any("does not name the hardware" in n for n in job.notes)
    rows = sqlite3.connect(tmp_path / "home" / "store.sqlite").execute(
        "SELECT job_id, measured_step_time_s FROM refine_runs").fetchall()
    assert rows == [("j1", 0.01)]


def test_cli_json_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.02, 0.02]})
    out = CliRunner().invoke(refine_command, [str(run), "--format", "json"])
    assert out.exit_code == 0, out.output
    (job,) = json.loads(out.output)["jobs"]
    assert job["calibration"]["step_time_scale"] == pytest.approx(2.0) and job["steps_by_rank"] == {"0": [0, 1, 2]}
    with pytest.raises(UsageError, match="holds no rank"):
        refine_run(tmp_path)
    with pytest.raises(UsageError, match="does not exist"):
        refine_run(tmp_path / "nope")


def test_cli_defaults_to_the_newest_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import time

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert CliRunner().invoke(refine_command, []).exit_code != 0  # nothing to refine: a usage error
    write_run(tmp_path / "llmperf-runs" / "old", "j-old", {0: [0.5, 0.02, 0.02]})
    new = write_run(tmp_path / "llmperf-runs" / "new", "j-new", {0: [0.5, 0.04, 0.04]})
    later = time.time() + 5
    os.utime(new, (later, later))
    out = CliRunner().invoke(refine_command, ["--format", "json"])
    assert out.exit_code == 0, out.output
    assert [j["job_id"] for j in json.loads(out.output)["jobs"]] == ["j-new"]


def _with_cpu_time(run: Path, cpu_s: float) -> Path:
    for f in run.glob("rank*.jsonl"):
        f.write_text(f.read_text().replace('"device": "cpu"', f'"device": "cpu", "cpu_time_s": {cpu_s}'))
    return run


def test_contended_cpu_run_calibrates_from_its_cpu_time_as_a_noisier_reading(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose ranks waited for a core (wall 2x CPU) is calibrated, from its CPU time, not refused (was: no
    calibration at all on a busy machine) and not from its wall time (that learns the load); it weighs less than
    a quiet run of the same configuration, and the output says the run was contended and how it was treated."""
    from llmperf_hook.refine.contention import CPU_INFLATION_LOG

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    run = _with_cpu_time(write_run(tmp_path / "r", "j1", {0: [0.5, 0.04, 0.04, 0.04]}), 0.02)
    (job,) = refine_run(run).jobs
    assert job.job.cpu_time_s == 0.02 and job.calibration is not None
    quiet_s = 0.02 * math.exp(-CPU_INFLATION_LOG)  # one rank: no peer wait; the contention's CPU share taken off
    assert job.contended is not None and job.contended.step_time_s == pytest.approx(quiet_s)
    assert job.calibration.own_scale(job.fingerprint).measured_scale == pytest.approx(quiet_s / 0.01)  # not 4
    text = render_refine_report(refine_run(run))
    assert "contended run: step wall time 2.00x the ranks' CPU time (> 1.5" in text and "CPU time per step" in text
    assert f"vs the contended run's quiet-equivalent {quiet_s * 1e3:.2f} ms" in text and "predicted after" in text
    cal = find_calibration("cpu-test", "local-cpu", "deepspeed")
    assert cal.num_runs == 1 and cal.config_scales[0].num_runs == 1
    # a quiet run of the same configuration (ratio 3) outweighs the contended one (ratio 2)
    refine_run(_with_cpu_time(write_run(tmp_path / "calm", "j2", {0: [0.5, 0.03, 0.03]}), 0.029))
    cal = find_calibration("cpu-test", "local-cpu", "deepspeed")
    own = cal.config_scales[0]
    plain = math.sqrt(3.0 * quiet_s / 0.01)  # the unweighted geometric mean of the two ratios
    assert cal.num_runs == 2 and own.num_runs == 2 and own.measured_scale == pytest.approx(plain)
    assert cal.step_time_scale > plain + 0.1 and own.step_time_scale > plain  # weighted toward the quiet 3

    monkeypatch.setenv("LLMPERF_REFINE_MAX_WALL_PER_CPU", "inf")  # the user's override: calibrate from the wall time
    (job,) = refine_run(run).jobs
    assert job.contended is None and job.calibration.num_runs == 2
    monkeypatch.setenv("LLMPERF_REFINE_MAX_WALL_PER_CPU", "fast")
    with pytest.raises(UsageError, match="not a number"):
        refine_run(run)


def _with_cpu_times(run: Path, cpu_s: list[float]) -> Path:
    """Each step record of rank 0 given its own CPU time (steps in order)."""
    lines = (run / "rank0.jsonl").read_text().splitlines()
    steps = iter(cpu_s)
    (run / "rank0.jsonl").write_text("".join(
        (ln.replace('"device": "cpu"', f'"device": "cpu", "cpu_time_s": {next(steps)}') if '"step"' in ln else ln)
        + "\n" for ln in lines))
    return run


def _stored_sampling_sd(home: Path, job_id: str) -> float:
    with sqlite3.connect(home / "store.sqlite") as conn:
        return conn.execute("SELECT sampling_sd FROM refine_runs WHERE job_id = ?", (job_id,)).fetchone()[0]


def test_a_contended_runs_median_error_is_counted_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A contended run is calibrated from its median CPU time, whose sampling error CPU_INFLATION_SD (a spread of
    runs' medians) already holds. Before: the sampling sd of its WALL times (scattered 2-6x by the load) was added
    on top. Now: its CPU times' sampling sd, only where it exceeds the contention spread; a quiet run keeps its
    wall times' sampling sd."""
    from llmperf_hook.refine.contention import CPU_INFLATION_SD
    from llmperf_hook.refine.shrinkage import median_sampling_sd

    home = tmp_path / "home"
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    walls = [0.5, 0.04, 0.09, 0.05, 0.12, 0.06, 0.04, 0.10, 0.07, 0.05]  # wall / CPU 2-6: contended
    tight = _with_cpu_times(write_run(tmp_path / "tight", "j1", {0: walls}), [0.02] * 10)
    (job,) = refine_run(tight).jobs
    assert job.contended is not None and median_sampling_sd(job.job.step_times_s) > 0.1
    assert _stored_sampling_sd(home, "j1") == 0.0
    scattered_cpu = [0.02, 0.012, 0.03, 0.014, 0.028, 0.011, 0.033, 0.013, 0.029, 0.012]
    loose = _with_cpu_times(write_run(tmp_path / "loose", "j2", {0: [w * 2 for w in walls]}), scattered_cpu)
    (job,) = refine_run(loose).jobs
    cpu_sd = median_sampling_sd(job.job.cpu_step_times_s)
    assert cpu_sd > CPU_INFLATION_SD  # steps scattered beyond what the contention spread covers
    assert _stored_sampling_sd(home, "j2") == pytest.approx(math.sqrt(cpu_sd ** 2 - CPU_INFLATION_SD ** 2))
    quiet = write_run(tmp_path / "quiet", "j3", {0: [0.5, 0.020, 0.022, 0.021, 0.024, 0.020]})
    (job,) = refine_run(quiet).jobs
    assert job.contended is None and _stored_sampling_sd(home, "j3") == pytest.approx(
        median_sampling_sd(job.job.step_times_s)) and _stored_sampling_sd(home, "j3") > 0


def test_contended_multi_rank_run_takes_the_peer_wait_of_quiet_runs(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ranks also wait for each other in a quiet step: the CPU time is scaled by the quiet wall / CPU of the
    store's uncontended 2-rank runs (else the middle of [1, limit]), and its spread joins the reading's."""
    from llmperf_hook.refine.contention import CPU_INFLATION_LOG, contended_step

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    busy = _with_cpu_time(write_run(tmp_path / "busy", "j1", {0: [0.5, 0.06, 0.06], 1: [0.5, 0.06, 0.06]}), 0.02)
    (job,) = refine_run(busy).jobs
    assert job.contended.quiet_wall_per_cpu == pytest.approx(1.5 ** 0.5) and "no uncontended 2-rank" in job.notes[0]
    quiet = _with_cpu_time(write_run(tmp_path / "q", "j2", {0: [0.5, 0.022, 0.022], 1: [0.5, 0.022, 0.022]}), 0.02)
    refine_run(quiet)
    (job,) = refine_run(busy).jobs
    assert job.contended.quiet_wall_per_cpu == pytest.approx(1.1) and "1 uncontended 2-rank run" in job.notes[0]
    assert job.contended.step_time_s == pytest.approx(0.022 * math.exp(-CPU_INFLATION_LOG))  # wall/CPU 3: in full
    # the contention's share ramps in from wall/CPU 1 to 2; one rank has no peer to wait for
    assert contended_step(1.6, 0.02, 1, 1.5).observation_sd < contended_step(2.0, 0.02, 1, 1.5).observation_sd
    assert contended_step(6.0, 0.02, 1, 1.5).step_time_s == contended_step(2.0, 0.02, 1, 1.5).step_time_s
    assert contended_step(2.0, 0.02, 1, 1.5).quiet_wall_per_cpu == 1.0


def test_unwritable_llmperf_home_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$LLMPERF_HOME naming a file (or a folder this user may not write) exits 2 naming it, for refine and profile
    alike (was an internal error: FileExistsError from the store's mkdir)."""
    from llmperf_hook.cli import main
    from llmperf_hook.errors import UsageError
    from llmperf_hook.refine.observation_store import check_writable_dir

    afile = tmp_path / "afile"
    afile.write_text("x")
    monkeypatch.setenv("LLMPERF_HOME", str(afile / "home"))
    with pytest.raises(UsageError, match="is a file, not a folder.*LLMPERF_HOME="):
        check_writable_dir(afile / "home")
    monkeypatch.setattr("os.access", lambda *a: False)
    with pytest.raises(UsageError, match="not writable"):
        check_writable_dir(tmp_path)
    monkeypatch.undo()
    monkeypatch.setenv("LLMPERF_HOME", str(afile))
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.020, 0.020]})
    for args in (["refine", str(run)], ["profile", "--device", "cpu", "--ops", "gemm", "--budget", "0.1"]):
        with pytest.raises(SystemExit) as exc:
            main(args)
        assert exc.value.code == 2, args
    assert afile.read_text() == "x"


def test_cli_without_run_dir_finds_a_run_given_run_dir_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`llmperf run --instrument --run-dir runs/x` then `llmperf refine`: the run is not under ./llmperf-runs,
    so refine without RUN_DIR said there was nothing to refine; the session records its run directory."""
    from llmperf_hook.instrument.session import remember_latest_run

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    run = write_run(tmp_path / "runs" / "zero1", "j-elsewhere", {0: [0.5, 0.02, 0.02]})
    remember_latest_run(run)
    out = CliRunner().invoke(refine_command, ["--format", "json"])
    assert out.exit_code == 0, out.output
    assert [j["job_id"] for j in json.loads(out.output)["jobs"]] == ["j-elsewhere"]
    import shutil

    shutil.rmtree(run)  # a recorded run that is gone is no candidate
    out = CliRunner().invoke(refine_command, [])
    assert isinstance(out.exception, UsageError) and "no instrumented run recorded" in str(out.exception)


def test_job_that_ended_before_the_requested_steps_is_noted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.02, 0.02]})
    (run / "jobs" / "j1").mkdir(parents=True)
    (run / "jobs" / "j1" / "session.json").write_text(json.dumps({"job_id": "j1", "steps": 50}))
    (job,) = refine_run(run).jobs
    assert any("ran 3 optimizer step(s), fewer than the 50 of --instrument 50" in n for n in job.notes)
    (run / "jobs" / "j1" / "session.json").write_text(json.dumps({"job_id": "j1", "steps": 3}))
    (job,) = refine_run(run).jobs
    assert not any("fewer than" in n for n in job.notes)


def test_cli_hardware_and_cluster_must_name_presets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A misspelt --hardware/--cluster stored a calibration under a name no prediction looks up; a YAML path
    stored the path. Both are resolved as predict resolves them now."""
    from llmperf_hook.resources import configs_dir

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LLMPERF_REFINE_MAX_WALL_PER_CPU", "inf")
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.02, 0.02]},
                    prediction={"schema": 1, "step_time_s": 0.01, "config": {"framework": "deepspeed"}})
    # a GPU run: a CPU one never calibrates a GPU (test_round6_run_tune.test_cpu_run_never_calibrates_a_gpu)
    (run / "rank0.jsonl").write_text((run / "rank0.jsonl").read_text().replace('"device": "cpu"', '"device": "cuda"'))
    out = CliRunner().invoke(refine_command, [str(run), "--hardware", "a100-sxm4-80gbb", "--cluster", "perlmutter"])
    assert isinstance(out.exception, UsageError) and "a100-sxm4-80gbb" in str(out.exception)
    path = str(configs_dir() / "clusters" / "perlmutter.yaml")
    out = CliRunner().invoke(refine_command, [str(run), "--hardware", "a100-sxm4-80gb", "--cluster", path])
    assert out.exit_code == 0, out.output
    assert find_calibration("a100-sxm4-80gb", "perlmutter", "deepspeed") is not None


def test_a_job_without_any_step_is_not_said_to_have_only_warmup_steps(tmp_path: Path) -> None:
    """`llmperf refine DIR` over a job that ended before its first step, beside one that took steps (review R61):
    its note said 'all recorded steps were warm-up or profiled' of steps it never recorded."""
    run = write_run(tmp_path / "run", "stepped", {0: [0.02, 0.011, 0.012]}, prediction=None)
    write_run(run, "stepless", {0: []}, prediction=None)
    for job_id in ("stepped", "stepless"):  # each job's own prediction, as jobs sharing a --run-dir keep them
        (run / "jobs" / job_id).mkdir(parents=True)
        (run / "jobs" / job_id / "prediction.json").write_text(json.dumps(PREDICTION))
    report = refine_run(run, store_file=tmp_path / "store.sqlite")
    notes = {j.job.job_id: j.notes for j in report.jobs}
    assert any("no timed step (the job recorded no step)" in n for n in notes["stepless"]), notes
    assert not any("warm-up" in n for n in notes["stepless"]), notes

"""refine on run directories whose side files are damaged: said for what they are, steps still stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.refine.calibration import find_calibration
from llmperf_hook.refine.refine_run import refine_run, render_refine_report
from refine_helpers import write_run


@pytest.mark.parametrize("content", ['{"schema": 1, "step_time_s": 0.01, "clus', "[1, 2]", "\x00\x01binary"])
def test_a_damaged_job_prediction_is_named_not_blamed_on_its_content(tmp_path: Path, monkeypatch, content) -> None:
    """The calibration notes said the prediction 'does not name the hardware and cluster' (or its step time is
    not a number), which sends the user looking at the content of a file that is no JSON object at all."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.020, 0.020, 0.020]}, prediction=None)
    job_dir = run / "jobs" / "j1"
    job_dir.mkdir(parents=True)
    (job_dir / "prediction.json").write_text(content)
    (job,) = refine_run(run).jobs
    assert job.job.step_time_s == 0.020  # the steps are stored all the same
    damaged = [n for n in job.notes if "prediction.json is not a JSON object" in n]
    assert len(damaged) == 1 and str(job_dir / "prediction.json") in damaged[0]
    assert "not a JSON object" in render_refine_report(refine_run(run))
    assert find_calibration("cpu-test", "local-cpu", "deepspeed") is None


def test_an_intact_prediction_gets_no_such_note(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.020, 0.020, 0.020]})
    (job,) = refine_run(run).jobs
    assert not any("not a JSON object" in n for n in job.notes)


def test_a_jobs_folder_given_as_run_dir_names_the_run_directory(tmp_path: Path) -> None:
    """`llmperf refine RUN/jobs/<id>` (or its hook/, or RUN/jobs): exit 2 naming RUN, where it said the job recorded no step."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "LLMPERF_HOME": str(tmp_path / "home"), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.020, 0.020]})
    hook = run / "jobs" / "j1" / "hook"
    hook.mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    for folder, said in ((hook.parent, "inside the run directory"), (hook, "inside the run directory"),
                         (run / "jobs", "inside the run directory"),
                         (tmp_path / "empty", "it is no run directory")):  # no jobs/, no session.json
        done = subprocess.run([sys.executable, "-m", "llmperf_hook", "refine", str(folder)], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
        if said.startswith("inside"):
            assert f"Pass {str(run.resolve())!r}" in done.stderr

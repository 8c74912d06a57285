"""refine does not replace a stored run of the same job id from another run directory that still exists
(refine_run.stored_elsewhere): refine_runs is keyed on the job id, and launch-derived ids recur (R71's note)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from llmperf_hook.refine.refine_run import refine_run, render_refine_report
from refine_helpers import write_run


def _stored(home: Path) -> list[tuple[str, str, float]]:
    with sqlite3.connect(home / "store.sqlite") as conn:
        return conn.execute("SELECT job_id, run_dir, measured_step_time_s FROM refine_runs").fetchall()


def test_another_run_directory_of_the_same_id_is_not_stored_over_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    first = write_run(tmp_path / "a", "slurm-7", {0: [1.0, 0.02, 0.02]})
    other = write_run(tmp_path / "b", "slurm-7", {0: [1.0, 0.05, 0.05]})
    refine_run(first)
    (job,) = refine_run(other).jobs
    assert _stored(tmp_path / "home") == [("slurm-7", str(first), 0.02)]
    text = render_refine_report(refine_run(other))
    assert f"not stored: the store already holds job slurm-7 from another run directory, {first}" in text
    assert job.predicted_after_s is None and job.calibration is None


def test_the_same_folder_named_otherwise_and_a_moved_one_are_refined_as_before(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    first = write_run(tmp_path / "a", "j1", {0: [1.0, 0.02, 0.02]})
    refine_run(first)
    (job,) = refine_run("a").jobs  # the same folder, relative
    assert not any("not stored" in n for n in job.notes) and _stored(tmp_path / "home") == [("j1", "a", 0.02)]
    refine_run(first)
    shutil.move(first, tmp_path / "moved")
    write_run(tmp_path / "moved", "j1", {0: [0.03]}, warmup=0)
    refine_run(tmp_path / "moved")
    assert _stored(tmp_path / "home")[0][:2] == ("j1", str(tmp_path / "moved"))

"""A job that recorded no step is told apart: the hook never reached its processes, or no step ended."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from instrument_helpers import SMALL_GPT, TRAIN_GPT, read_records, run_session

from llmperf_hook.instrument.hook_reach import job_has_record


def test_a_script_that_replaces_pythonpath_is_named_as_the_cause(tmp_path: Path, child_env: dict[str, str]) -> None:
    """A wrapper script that sets PYTHONPATH without keeping the one it got: the job trains, exits 0, and the
    session says that no process loaded the hook and how to keep it, instead of only 'nothing refined'."""
    wrapper = tmp_path / "train.sh"
    repo = str(TRAIN_GPT.parents[2])
    wrapper.write_text(f"#!/bin/sh\nexport PYTHONPATH={repo}\nexec {sys.executable} {TRAIN_GPT} {' '.join(SMALL_GPT)} "
                       "--train-iters 2\n")
    wrapper.chmod(0o755)
    done = run_session(tmp_path, child_env, [str(wrapper)], steps=2)
    assert done.returncode == 0 and "done: 2 steps" in done.stdout, done.stderr[-2000:]
    assert "recorded no step: no Python process of the job loaded the hook" in done.stderr
    assert "export PYTHONPATH=/your/path:$PYTHONPATH" in done.stderr
    assert not list((tmp_path / "run" / "jobs").glob("*/hook/loaded"))


def test_a_job_that_loaded_the_hook_but_took_no_step(tmp_path: Path, child_env: dict[str, str]) -> None:
    done = run_session(tmp_path, child_env, [sys.executable, "-c", "import sys; print('no training'); sys.exit(3)"],
                       steps=2)
    assert done.returncode == 3 and done.stdout == "no training\n"
    assert "(exit code 3) recorded no step: the hook was loaded by the job's Python processes" in done.stderr
    assert len(list((tmp_path / "run" / "jobs").glob("*/hook/loaded"))) == 1


def test_a_recorded_job_gets_no_such_warning(plain_recorded_run: tuple[Path, subprocess.CompletedProcess]) -> None:
    folder, done = plain_recorded_run
    assert done.returncode == 0 and "recorded no step" not in done.stderr
    (job_id,) = {r["job_id"] for r in read_records(folder / "run")}
    assert job_has_record(folder / "run", job_id, "step") and not job_has_record(folder / "run", job_id, "stop")
    assert not job_has_record(folder / "run", "another-job", "step")

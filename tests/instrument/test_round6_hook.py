"""Robustness round 6: the hook never harms the job, even when --profile-ops meets a torch whose profiler cannot
run (a build without Kineto, a platform the profiler does not support: here it raises when started)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from instrument_helpers import SMALL_GPT, TRAIN_GPT, read_records, run_session


def test_profile_ops_without_torch_profiler_only_disables_the_hook(tmp_path: Path, child_env: dict[str, str]) -> None:
    wrapper = tmp_path / "train_without_profiler.py"
    wrapper.write_text(
        "import runpy, sys, torch, torch.profiler\n"
        "class Unsupported:\n"
        "    def __init__(self, *args, **kwargs):\n"
        "        raise RuntimeError('the profiler is not supported on this platform')\n"
        "torch.profiler.profile = Unsupported\n"
        f"sys.argv = [{str(TRAIN_GPT)!r}, *sys.argv[1:]]\n"
        f"runpy.run_path({str(TRAIN_GPT)!r}, run_name='__main__')\n")
    argv = [sys.executable, str(wrapper), *SMALL_GPT, "--train-iters", "6"]
    env = child_env
    done = run_session(tmp_path, env, argv, steps=2, profile_ops=2)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "done: 6 steps" in done.stdout and done.stdout.count("iter ") == 6  # the job ran to its end
    assert "llmperf hook: disabled" in done.stderr and "not supported" in done.stderr
    records = read_records(tmp_path / "run")
    assert [r["step"] for r in records if r["kind"] == "step"] == [0, 1]  # what it recorded before is kept
    assert any(r["kind"] == "error" and "not supported" in r["error"] for r in records)
    assert json.loads((tmp_path / "run" / "session.json").read_text())["exit_code"] == 0


def test_run_dir_replaced_while_the_job_ran_keeps_the_jobs_exit_code(tmp_path: Path, child_env: dict[str, str]) -> None:
    """The job removed its run directory and left a file there: recording the job's end fails, its code is still ours."""
    code = ("import os, shutil, sys\nd = os.environ['LLMPERF_RUN_DIR']\nshutil.rmtree(d)\nopen(d, 'w').write('x')\n"
            "print('job done')\nsys.exit(5)\n")
    done = run_session(tmp_path, child_env, [sys.executable, "-c", code], steps=1)
    assert done.returncode == 5 and "job done" in done.stdout, done.stderr[-2000:]
    assert "the job ended with exit code 5, but its end could not be recorded" in done.stderr
    assert "Traceback" not in done.stderr


def test_unwritable_hook_files_stop_before_the_launch(tmp_path: Path, monkeypatch) -> None:
    import pytest

    from llmperf_hook.errors import UsageError
    from llmperf_hook.instrument import session

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(session, "write_hook_dir", disk_full)
    marker = tmp_path / "ran"
    with pytest.raises(UsageError, match="No space left on device.*the job was not started"):
        session.run_instrumented([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], env=os.environ, steps=1,
                                 run_dir=str(tmp_path / "run"))
    assert not marker.exists()

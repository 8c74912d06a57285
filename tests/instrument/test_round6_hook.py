"""Robustness round 6: the hook never harms the job, even when --profile-ops meets a torch whose profiler cannot
run (a build without Kineto, a platform the profiler does not support: here it raises when started)."""

from __future__ import annotations

import json
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

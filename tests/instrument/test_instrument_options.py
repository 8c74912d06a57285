"""Bad values of the hook's options are refused before anything runs: exit 2, what is wrong and the fix, no
traceback, no job started and no run directory made."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("options, said", [
    (["--instrument", "0"], "--instrument 0: the number of steps to record must be at least 1"),
    (["--instrument", "-3"], "--instrument -3: the number of steps to record must be at least 1"),
    (["--instrument", "abc"], "'abc' is not a valid integer"),
    (["--instrument", "2.5"], "'2.5' is not a valid integer"),
    (["--instrument", "2", "--profile-ops", "-1"], "--profile-ops -1: the profiler window must be 0 (off) or more"),
    (["--instrument", "2", "--stop-after", "0"], "--stop-after 0: must be at least 1 step"),
    (["--profile-ops", "2"], "only work with --instrument N"),
])
def test_bad_hook_options_exit_2_before_the_launch(tmp_path: Path, child_env: dict[str, str], options: list[str],
                                                    said: str) -> None:
    job = f"open({str(tmp_path / 'ran')!r}, 'w')"
    done = subprocess.run([sys.executable, "-m", "llmperf_hook", "run", *options, "--run-dir", str(tmp_path / "run"),
                           "--", sys.executable, "-c", job], env=child_env, capture_output=True, text=True,
                          timeout=120, cwd=str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "run").exists()

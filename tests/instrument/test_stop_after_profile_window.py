"""`--profile-ops K` profiles the K steps after the N timed steps of `--instrument N` (recorder.py), so a
`--stop-after` below N + K stops the job before (or inside) that window. `--instrument 3 --stop-after 3
--profile-ops 2` ran, stopped after step 3 and recorded no op sample, saying nothing; it is now refused before the
launch (exit 2, no job, no run directory), like the hook's other contradictory options."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.instrument.session import _check_arguments


@pytest.mark.parametrize("stop_after, part", [(3, "none"), (4, "only part")])
def test_stop_after_inside_the_profiler_window_is_refused(stop_after: int, part: str) -> None:
    with pytest.raises(UsageError, match=f"{part} of it would be profiled. Give --stop-after 5 or more"):
        _check_arguments(["python", "train.py"], 3, 2, stop_after)


def test_a_one_step_window_is_named_as_one_step() -> None:  # not "steps 4-4"
    with pytest.raises(UsageError, match=r"--instrument 3 \(step 4\): none of it would be profiled. Give "
                                         r"--stop-after 4 or more"):
        _check_arguments(["python", "train.py"], 3, 1, 3)


@pytest.mark.parametrize("profile_ops, stop_after", [(2, 5), (2, None), (0, 1)])
def test_a_window_that_fits_is_accepted(profile_ops: int, stop_after: int | None) -> None:
    _check_arguments(["python", "train.py"], 3, profile_ops, stop_after)


def test_refused_before_the_launch(tmp_path: Path, child_env: dict[str, str]) -> None:
    job = f"open({str(tmp_path / 'ran')!r}, 'w')"
    done = subprocess.run([sys.executable, "-m", "llmperf_hook", "run", "--instrument", "3", "--stop-after", "3",
                           "--profile-ops", "2", "--run-dir", str(tmp_path / "run"), "--", sys.executable, "-c", job],
                          env=child_env, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "--stop-after 3 stops the job before the end of the --profile-ops 2 window" in done.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "run").exists()

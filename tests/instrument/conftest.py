"""Fixtures of the instrumentation tests (helpers live in instrument_helpers.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from instrument_helpers import SMALL_GPT, TRAIN_GPT, make_child_env, run_session

from llmperf_hook.instrument.recorder import STEPPING_ENV


@pytest.fixture(autouse=True)
def no_stepping_mark() -> Iterator[None]:
    """A StepRecorder a test runs in pytest's own process marks it as a stepping process at its step 0
    (recorder.STEPPING_ENV): a job that a later test starts under the same job id ("j") inherited the mark and
    recorded nothing (test_step_line before test_hook_faults failed the at-exit case). The mark goes with the test."""
    yield
    os.environ.pop(STEPPING_ENV, None)


@pytest.fixture
def child_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a child job: one thread, CPU DeepSpeed, a private LLMPERF_HOME, this checkout importable."""
    return make_child_env(tmp_path)


@pytest.fixture(scope="session")
def plain_recorded_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """(folder, session) of one plain-torch job run through run_instrumented: 6 steps of the testbed GPT, 4 of
    them recorded, a prediction of 0.01 s passed in. Its records are in folder / "run". Shared by the tests that
    only read what such a run leaves (test_session_plain, test_hook_reach): never write into it."""
    folder = tmp_path_factory.mktemp("plain-run")
    argv = [sys.executable, str(TRAIN_GPT), *SMALL_GPT, "--train-iters", "6"]
    return folder, run_session(folder, make_child_env(folder), argv, steps=4, prediction={"step_time_s": 0.01})

"""One real tiny-budget CPU profile for the whole session: `llmperf profile --device cpu --budget 1` from the shell
is the slowest thing the suite runs (~1 minute), and three tests need one (the budget kept, the profile fitted,
resumed and used by predict, stored shapes of another fingerprint measured again). They assert on this one run;
a test that runs the command again or predicts from it works on a copy of its $LLMPERF_HOME.

The command starts as soon as the session's tests are collected (pytest_collection_finish), when any of them needs
it: its minute of wall time, one thread, then runs beside the tests collected before its first user instead of in
front of it (the suite ran 55 s longer waiting on it, with the second core of a 2-core machine idle)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

TINY_NAME = "cpu-tiny"
TINY_BUDGET_MIN = "1"
"""--budget 1, not 0.5: at load 12 start-up, torch's import and the peaks took 18 s of a 30-s budget, leaving too few
samples to fit (refused with exit 2); a minute still fits on a loaded CI machine."""
TINY_OPS = "gemm,layernorm"


@dataclass(frozen=True)
class TinyProfile:
    """What `llmperf profile --device cpu --budget 1 --ops gemm,layernorm --name cpu-tiny` left, read as it ended."""

    home: Path
    """Its $LLMPERF_HOME: store.sqlite, profiles/cpu-tiny/, hardware/cpu-tiny.yaml. Read it; copy it to change it."""
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    """The whole command from the shell: the interpreter's start and the CLI's imports included."""
    seeded_gemm_specs: tuple
    """The whole `--ops gemm` design, stored before the run under another fingerprint of this name."""

    @property
    def output(self) -> str:
        """stdout and stderr together, as the in-process tests read a command's output."""
        return self.stdout + self.stderr

    def copy_home(self, into: Path) -> Path:
        """A private copy of the home, for a test that profiles again or predicts from it."""
        return Path(shutil.copytree(self.home, into / "llmperf_home"))


def _seed_other_fingerprint(home: Path) -> tuple:
    """The whole design of `--ops gemm` for this name, as timed by another fingerprint (this machine's with another
    logical CPU count): test_profile_resume asserts the run does not count it as already stored."""
    from llmperf_hook.profile import plan
    from llmperf_hook.profile.local_hardware import fingerprint
    from llmperf_hook.profile.sampler import DESIGN_PER_CLASS, MIN_SAMPLES_TO_FIT
    from llmperf_hook.store import OpSampleRecord, open_store

    other = json.dumps({**fingerprint("cpu", 1), "logical_cpus": "9999"}, sort_keys=True)
    specs = plan.fit_first(plan.design_specs(("gemm",), plan.CPU_RANGES, DESIGN_PER_CLASS), MIN_SAMPLES_TO_FIT)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLMPERF_HOME", str(home))
        with open_store() as store:
            store.record_op_samples([OpSampleRecord(TINY_NAME, "fp32", s.op_class, s.phase, s.dims, 1e-3, "sampler",
                                                    other) for s in specs])
    return tuple(specs)


TIMEOUT_S = 300.0
"""The command is stopped (and the tests that need it fail) past this, as subprocess.run(timeout=) did."""


class _TinyRun:
    """The tiny profile's command, running in the background from its start until `result()` is asked for."""

    def __init__(self, home: Path, output: Path) -> None:
        self.home, self.specs = home, _seed_other_fingerprint(home)
        env = {**os.environ, "LLMPERF_HOME": str(home), "OMP_NUM_THREADS": "1"}
        self.out, self.err = (output / "stdout.txt").open("w+"), (output / "stderr.txt").open("w+")
        self.argv = [sys.executable, "-m", "llmperf_hook", "profile", "--device", "cpu", "--budget", TINY_BUDGET_MIN,
                     "--ops", TINY_OPS, "--name", TINY_NAME]
        self.start_s, self.end_s = time.perf_counter(), None
        self.proc = subprocess.Popen(self.argv, env=env, stdout=self.out, stderr=self.err, text=True)
        self.waiter = threading.Thread(target=self._stamp_end, daemon=True)  # its wall time ends when it exits,
        self.waiter.start()  # not when a test first asks for it

    def _stamp_end(self) -> None:
        self.proc.wait()
        self.end_s = time.perf_counter()

    def result(self) -> TinyProfile:
        self.waiter.join(timeout=max(0.0, self.start_s + TIMEOUT_S - time.perf_counter()))
        if self.end_s is None:
            self.stop()
            raise subprocess.TimeoutExpired(self.argv, TIMEOUT_S)
        texts = []
        for handle in (self.out, self.err):
            handle.seek(0)
            texts.append(handle.read())
        return TinyProfile(self.home, self.proc.returncode, texts[0], texts[1], self.end_s - self.start_s, self.specs)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.out.close()
        self.err.close()


_RUNS: dict[str, _TinyRun] = {}
"""The session's one tiny-profile run, once started."""


def _start(factory: pytest.TempPathFactory) -> _TinyRun:
    if "tiny" not in _RUNS:
        _RUNS["tiny"] = _TinyRun(factory.mktemp("tiny_profile"), factory.mktemp("tiny_profile_output"))
    return _RUNS["tiny"]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the tiny profile now when a collected test needs it (module docstring); the fixture starts it otherwise."""
    uses = any("tiny_profile" in getattr(item, "fixturenames", ()) for item in session.items)
    if uses and not session.config.option.collectonly and importlib.util.find_spec("torch") is not None:
        _start(session.config._tmp_path_factory)  # what the tmp_path_factory fixture returns


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A session that ends (or is interrupted) before the run was waited for leaves no profile running."""
    run = _RUNS.pop("tiny", None)
    if run is not None:
        run.stop()


@pytest.fixture(scope="session")
def tiny_profile(tmp_path_factory: pytest.TempPathFactory) -> TinyProfile:
    pytest.importorskip("torch")
    return _start(tmp_path_factory).result()


@pytest.fixture
def tiny_home(tiny_profile: TinyProfile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$LLMPERF_HOME set to a private copy of the tiny profile's home (for this test only)."""
    assert tiny_profile.returncode == 0, tiny_profile.stderr[-3000:]
    home = tiny_profile.copy_home(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return home

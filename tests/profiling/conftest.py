"""One real tiny-budget CPU profile for the whole session: `llmperf profile --device cpu --budget 1` from the shell
is the slowest thing the suite runs (~1 minute), and three tests need one (the budget kept, the profile fitted,
resumed and used by predict, stored shapes of another fingerprint measured again). They assert on this one run;
a test that runs the command again or predicts from it works on a copy of its $LLMPERF_HOME."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
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


@pytest.fixture(scope="session")
def tiny_profile(tmp_path_factory: pytest.TempPathFactory) -> TinyProfile:
    pytest.importorskip("torch")
    home = tmp_path_factory.mktemp("tiny_profile")
    specs = _seed_other_fingerprint(home)
    env = {**os.environ, "LLMPERF_HOME": str(home), "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "llmperf_hook", "profile", "--device", "cpu", "--budget",
                           TINY_BUDGET_MIN, "--ops", TINY_OPS, "--name", TINY_NAME], env=env,
                          capture_output=True, text=True, timeout=300)
    wall_s = time.perf_counter() - t0
    return TinyProfile(home, proc.returncode, proc.stdout, proc.stderr, wall_s, specs)


@pytest.fixture
def tiny_home(tiny_profile: TinyProfile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$LLMPERF_HOME set to a private copy of the tiny profile's home (for this test only)."""
    assert tiny_profile.returncode == 0, tiny_profile.stderr[-3000:]
    home = tiny_profile.copy_home(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return home

"""benchmarks/testbed_op_samples.py refuses bad input with exit 2 and a sentence, before importing torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "testbed_op_samples.py"


@pytest.mark.parametrize("argv, says", [
    (["gemm", "99"], "indices of CONFIGS, 0 to 11"),
    (["gemm", "9,x"], "comma-separated integers"),
    (["gemm", "9", "--home", "/nonexistent"], "no profiles/cpu-testbed/profile.json"),
])
def test_bad_input_exits_2(argv: list[str], says: str) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr

"""benchmarks/bench_predict_speed.py refuses bad input with exit 2 and a sentence, before any predict process runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_predict_speed.py"


@pytest.mark.parametrize("argv, says", [
    (["--against", "{tmp}", "--runs", "0"], "--runs must be a whole number of at least 1"),
    (["--against", "{tmp}"], "holds no llmperf_hook package"),
])
def test_bad_input_exits_2(argv: list[str], says: str, tmp_path: Path) -> None:
    argv = [a.format(tmp=tmp_path) for a in argv]
    done = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "CPU" not in done.stdout  # refused before any run


def test_the_batches_are_what_the_bench_says() -> None:
    """Its main batch repeats 24 configurations (the graph memo's case); the distinct one repeats none."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_predict_speed", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert len(bench.batch_lines(400)) == 400 and len(set(bench.batch_lines(400))) == 24
    assert len(set(bench.batch_lines(400, distinct=True))) == 400

"""`llmperf run --instrument` with an unusable $LLMPERF_HOME (the store, the local CPU's description): the job
still runs, with its own output and exit code; what could not be stored is said, never an internal error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRAIN_GPT = REPO / "examples" / "cpu-testbed" / "train_gpt.py"
SMALL = ["--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16",
         "--max-position-embeddings", "16", "--micro-batch-size", "2", "--vocab-size", "128", "--train-iters", "3"]


def test_home_that_is_a_file_runs_the_job_and_says_what_was_not_stored(tmp_path: Path) -> None:
    """It exited 1 ('internal error: NotADirectoryError ...') before the launch: describing this machine's CPU for
    the prediction writes under $LLMPERF_HOME."""
    home = tmp_path / "home"
    home.write_text("a file, not a folder")
    env = {**os.environ, "LLMPERF_HOME": str(home), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
    alone = subprocess.Popen([sys.executable, str(TRAIN_GPT), *SMALL], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # beside the run: the other core's work, not in front of it
    try:
        done = subprocess.run([sys.executable, "-m", "llmperf_hook", "run", "--instrument", "3", "--run-dir",
                               str(tmp_path / "run"), "--", sys.executable, str(TRAIN_GPT), *SMALL], env=env,
                              capture_output=True, text=True, timeout=180, cwd=tmp_path)
        alone.wait(timeout=120)
    finally:  # not left running when the run or the wait fails
        if alone.poll() is None:
            alone.kill()
    assert done.returncode == alone.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("iter ") == 3 and "done: 3 steps" in done.stdout
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert "this machine's CPU could not be described" in done.stderr
    assert "nothing refined: cannot write the llmperf store" in done.stderr and str(home) in done.stderr
    assert home.read_text() == "a file, not a folder"
    assert list((tmp_path / "run").glob("rank*.jsonl"))  # the records are kept for a later `llmperf refine`

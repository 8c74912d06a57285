"""A torch optimizer step DeepSpeed takes while deepspeed.initialize builds the engine is no training step.

A bf16 ZeRO-0 job (FP16_UnfusedOptimizer in bf16 over the script's torch Adam, DeepSpeed 0.19.8) steps torch Adam
once inside DeepSpeedEngine.__init__ (FP16_UnfusedOptimizer.initialize_optimizer_states), before any forward: the plain-torch fallback counted it as step 0 (no wall time), so the
job's slow first iteration became step 1, past the one warm-up step of --instrument 4, and was timed (measured
23 ms, median of 43 / 23 / 15 ms, for a job whose steps take 15 ms; found on the testbed), and --instrument 4
recorded only three iterations. Steps taken inside the engine's construction are not counted now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from instrument_helpers import TESTBED, read_records, steps_by_rank

SHAPE = ["--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "32",
         "--micro-batch-size", "2", "--global-batch-size", "2", "--vocab-size", "256"]


def test_bf16_zero0_steps_are_the_jobs_iterations(tmp_path: Path, child_env: dict[str, str],
                                                  deepspeed_port: int) -> None:
    argv = ["deepspeed", "--num_gpus", "1", "--master_port", str(deepspeed_port), str(TESTBED / "train_gpt.py"),
            "--deepspeed_config", str(TESTBED / "ds_zero0.json"), *SHAPE, "--bf16", "--train-iters", "5"]
    code = ("import os, sys\nfrom llmperf_hook.instrument.session import run_instrumented\n"
            f"sys.exit(run_instrumented({argv!r}, env=os.environ, steps=4, run_dir={str(tmp_path / 'run')!r}))")
    done = subprocess.run([sys.executable, "-c", code], env=child_env, capture_output=True, text=True, timeout=300,
                          cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("iter ") == 5 and "done: 5 steps" in done.stdout
    records = read_records(tmp_path / "run")
    steps = [r for r in records if r["kind"] == "step"]
    assert steps_by_rank(records) == {0: [0, 1, 2, 3]}
    assert {r["framework"] for r in records} == {"deepspeed"}  # the meta record's too: no torch step came first
    assert all(r["wall_time_s"] > 0 for r in steps) and [r["warmup"] for r in steps] == [True, False, False, False]

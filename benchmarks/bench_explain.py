"""Speed of stage [1]+[2]: `llmperf explain` end to end (fresh interpreter) and validate_config per candidate.

Prints medians; run with OMP_NUM_THREADS=1 on an idle machine:  python benchmarks/bench_explain.py
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASE = ROOT / "tests" / "golden" / "explain" / "llama3-70b-megatron-vpp"


def _explain_subprocess_s(repeats: int = 7) -> float:
    import yaml

    argv = shlex.split(yaml.safe_load((CASE / "case.yaml").read_text())["command"])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "llmperf_hook", "explain", "--format", "json", "--", *argv],
                       cwd=CASE, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _resolve_in_process_s(repeats: int = 200) -> float:
    import yaml

    from llmperf_hook.frameworks.resolve import resolve_job

    argv = shlex.split(yaml.safe_load((CASE / "case.yaml").read_text())["command"])
    os.chdir(CASE)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        resolve_job(argv, {})
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _validate_us(repeats: int = 20000) -> float:
    from llmperf_hook.frameworks.resolve import resolve_job
    from llmperf_hook.frameworks.validation import validate_config

    _, cfg = resolve_job(["torchrun", "--nproc-per-node", "8", "--nnodes", "4", "pretrain_gpt.py", "--num-layers", "32",
                          "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "4096",
                          "--max-position-embeddings", "4096", "--vocab-size", "32000", "--tensor-model-parallel-size", "2",
                          "--pipeline-model-parallel-size", "2", "--micro-batch-size", "1", "--global-batch-size", "256"], {})
    candidates = [replace(cfg, batch=replace(cfg.batch, micro_batch_size=m, num_microbatches=256 // (m * 8)))
                  for m in (1, 2, 4, 8)]
    start = time.perf_counter()
    for i in range(repeats):
        validate_config(candidates[i % 4])
    return (time.perf_counter() - start) / repeats * 1e6


def main() -> None:
    figures = {
        "explain_end_to_end_s (fresh interpreter, median of 7)": round(_explain_subprocess_s(), 3),
        "resolve_job_ms (in process, median of 200)": round(_resolve_in_process_s() * 1e3, 3),
        "validate_config_us (per candidate, mean of 20000)": round(_validate_us(), 2),
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

"""Predicted vs measured Megatron-Core training steps and peak memory on one H100 (measured 2026-11-26).

    python benchmarks/bench_megatron_core_steps.py [measurements/h100-sxm5-80gb-2026-11-26-b]

The measurements are twelve single-GPU Megatron-Core GPT configurations (local layer spec, unfused attention with
the PyTorch softmax in fp32, DDP, Float16 optimizer over torch AdamW; full recompute or none; micro-batch 1-8 at a
fixed global batch) by benchmarks/measure_megatron_core.py; the folder's README has the environment. Each row's
Megatron-LM command is predicted with the shipped H100 preset and its measured operator profile, on an empty
$LLMPERF_HOME (no calibration). Prints step time and peak memory (the caching allocator's reserved peak) with their
errors, and the MAPE of each; beside them the allocator's allocated peak and the prediction's error against it plus
the CUDA context the prediction holds (torch's counters leave the context out; reserved minus allocated is the
caching allocator's slack).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEFAULT_DIR = ROOT / "measurements" / "h100-sxm5-80gb-2026-11-26-b"


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DIR
    os.environ["LLMPERF_HOME"] = tempfile.mkdtemp(prefix="llmperf-bench-")
    from llmperf_hook.api import predict_command

    from llmperf_hook.schedule.memory import CUDA_CONTEXT_BYTES

    print(f"{'configuration':20s} {'measured':>9s} {'predicted':>9s} {'error':>7s}   {'memory':>7s} {'predicted':>9s} {'error':>7s}"
          f"   {'allocated':>9s} {'+context':>8s}")
    step_err, mem_err, alloc_err = [], [], []
    for line in (folder / "megatron_core.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "error" in r:
            print(f"{r['name']:20s} not measured: {r['error']}")
            continue
        est = predict_command(tuple(r["command"]), {"PATH": os.environ.get("PATH", "")}, cluster="dgx-h100",
                              hardware="h100-sxm5-80gb").estimate
        e_s = est.step_time_s / r["step_time_s"] - 1
        e_m = est.memory.peak_bytes_per_gpu / r["peak_reserved_bytes"] - 1
        e_a = est.memory.peak_bytes_per_gpu / (r["peak_allocated_bytes"] + CUDA_CONTEXT_BYTES) - 1
        step_err.append(abs(e_s))
        mem_err.append(abs(e_m))
        alloc_err.append(abs(e_a))
        print(f"{r['name']:20s} {r['step_time_s'] * 1e3:7.1f}ms {est.step_time_s * 1e3:7.1f}ms {e_s * 100:+6.1f}%   "
              f"{r['peak_reserved_bytes'] / 2**30:5.1f}GiB {est.memory.peak_bytes_per_gpu / 2**30:7.1f}GiB {e_m * 100:+6.1f}%"
              f"   {r['peak_allocated_bytes'] / 2**30:7.1f}GiB {e_a * 100:+7.1f}%")
    print(f"step time MAPE {100 * sum(step_err) / len(step_err):.1f}% over {len(step_err)} configurations; "
          f"peak memory MAPE {100 * sum(mem_err) / len(mem_err):.1f}% (reserved), "
          f"{100 * sum(alloc_err) / len(alloc_err):.1f}% (allocated + context)")


if __name__ == "__main__":
    main()

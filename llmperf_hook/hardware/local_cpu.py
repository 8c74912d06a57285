"""The hardware an instrumented job that runs on this machine's CPU is predicted for, when the command names none.

`llmperf run --instrument N -- deepspeed ...` with DS_ACCELERATOR=cpu (or on a machine without an NVIDIA driver)
runs on the CPU. Predicted for the default GPU cluster, its steps could never calibrate anything (a CPU run must
not change a GPU's predictions: refine/refine_run.device_mismatch), so the loop of issue 6 would stop at
"not calibrated". Instead the job is predicted for a CPU:
1. the newest CPU profile in $LLMPERF_HOME (`llmperf profile --device cpu --name NAME`): measured operators;
2. else `cpu-local`, this machine described once in $LLMPERF_HOME/hardware/cpu-local.yaml: a roofline of one
   fp32 GEMM and one copy measured here with numpy (never torch: this is the launch path), which refine then
   calibrates from the job's own steps (the calibration carries what a roofline misses).
The command's own --hardware / --cluster always win; a launcher that starts the job elsewhere (srun, sbatch,
mpirun) is left alone.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Mapping, Sequence

LOCAL_CPU = "cpu-local"
REMOTE_LAUNCHERS = frozenset({"srun", "sbatch", "salloc", "mpirun", "mpiexec", "ssh", "pdsh"})


def runs_on_local_cpu(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    """DeepSpeed told to use the CPU, or no NVIDIA driver here; and a launcher that runs the job on this machine."""
    if any(os.path.basename(word) in REMOTE_LAUNCHERS for word in argv[:3]):
        return False
    return env.get("DS_ACCELERATOR", "").lower() == "cpu" or not Path("/proc/driver/nvidia").exists()


def newest_cpu_profile() -> str | None:
    """The most recently fitted profile in $LLMPERF_HOME/profiles that refine counts as a CPU's
    (refine_run.hardware_device: its fingerprint names a CPU clock)."""
    from llmperf_hook.refine.refine_run import hardware_device
    from llmperf_hook.resources import llmperf_home

    found = [(path.stat().st_mtime, path.parent.name) for path in (llmperf_home() / "profiles").glob("*/profile.json")
             if hardware_device(path.parent.name) == "cpu"]
    return max(found)[1] if found else None


def _best_s(fn, reps: int = 5) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def describe_local_cpu() -> Path:
    """$LLMPERF_HOME/hardware/cpu-local.yaml (written once): fp32 peak of a 512^3 GEMM and the bandwidth of a 64 MiB
    copy (read + write), measured with numpy, and the machine's memory; the schema of hardware/load.py."""
    import numpy as np
    import yaml

    from llmperf_hook.profile.local_hardware import memory_capacity_bytes
    from llmperf_hook.resources import llmperf_home

    path = llmperf_home() / "hardware" / f"{LOCAL_CPU}.yaml"
    if path.is_file():
        return path
    a = np.ones((512, 512), dtype=np.float32)
    peak = 2 * 512 ** 3 / _best_s(lambda: a @ a)
    src = np.ones(16 * 2 ** 20, dtype=np.float32)
    bandwidth = 2 * src.nbytes / _best_s(lambda: src.copy())
    memory = memory_capacity_bytes("cpu")
    doc = {"name": LOCAL_CPU, "peak_TFLOPs": {"fp32": round(peak / 1e12, 6), "bf16": round(peak / 2e12, 6)},
           "memory_bandwidth_GBps": round(bandwidth / 1e9, 3), "memory_capacity_GiB": round(memory / 2 ** 30, 2),
           "gemm_efficiency": 1.0, "memory_efficiency": 1.0, "device": "cpu",
           "description": "this machine's CPU, described by `llmperf run --instrument` for a job that runs on it "
                          "(as `llmperf profile --device cpu` would, without its operator samples)",
           "sources": f"measured {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} with numpy: best of 5 fp32 "
                      "512^3 GEMMs and 64 MiB copies; bf16 taken as half the fp32 peak (no bf16 units assumed)"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def local_cpu_hardware(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The hardware name to predict an instrumented local CPU job for, or None to keep the default."""
    if not runs_on_local_cpu(argv, env):
        return None
    profile = newest_cpu_profile()
    if profile is not None:
        return profile
    describe_local_cpu()
    return LOCAL_CPU

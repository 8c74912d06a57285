"""Stage [7]: who this process is in the instrumented job, and what its numbers depend on (the recorder's
meta record). Read from torch.distributed when the job initialised it, else from what the launchers put in the
environment."""

from __future__ import annotations

import os
import sys
from typing import Any

from llmperf_hook.instrument.rank_memory import current_rss_bytes


def rank_and_world() -> tuple[int, int, int]:
    """(rank, world size, local rank): torch.distributed's when the job initialised it, else what torchrun /
    deepspeed / mpirun / srun put in the environment (read at the first step, not at start-up, so processes
    forked or spawned by the script itself, which set RANK or init the process group, are told apart)."""
    env = os.environ
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            local = int(env["LOCAL_RANK"]) if env.get("LOCAL_RANK", "").isdigit() else 0
            return dist.get_rank(), dist.get_world_size(), local
    except Exception:  # noqa: BLE001 - fall back to the environment
        pass
    for rank_key, size_key, local_key in (
        ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
        ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
        ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ):
        if env.get(rank_key, "").isdigit():
            return int(env[rank_key]), int(env.get(size_key, "1") or 1), int(env.get(local_key, "0") or 0)
    return 0, 1, 0


def local_world_size(world_size: int) -> int:
    """Ranks of this job on this machine: torchrun's LOCAL_WORLD_SIZE, DeepSpeed's LOCAL_SIZE, else the world."""
    for key in ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"):
        value = os.environ.get(key, "")
        if value.isdigit() and int(value) >= 1:
            return int(value)
    return max(1, world_size)


def job_facts(device: str) -> dict[str, Any]:
    """Once per rank: what the numbers depend on (threads, machine load, library versions, argv)."""
    facts: dict[str, Any] = {"argv": list(sys.argv), "python": sys.version.split()[0], "device": device,
                             "cpu_count": os.cpu_count(), "load_avg_1m": os.getloadavg()[0],
                             "rss_bytes": current_rss_bytes()}
    for name in ("torch", "deepspeed", "megatron.core"):
        module = sys.modules.get(name)
        if module is not None:
            facts[f"{name}_version"] = getattr(module, "__version__", "?")
    torch = sys.modules.get("torch")
    if torch is not None:
        facts["torch_num_threads"] = torch.get_num_threads()
    facts["omp_num_threads"] = os.environ.get("OMP_NUM_THREADS")
    return facts

"""Peak memory of one rank per step: allocated and reserved by the CUDA caching allocator on GPU; resident set
size (current and peak) of the process on CPU.

Peaks are reset after each sample so every step reports its own peak: torch.cuda.reset_peak_memory_stats on
GPU; on Linux writing "5" to /proc/self/clear_refs resets the peak RSS (VmHWM) (proc(5), since Linux 4.0).
"""

from __future__ import annotations

import resource
import sys
from dataclasses import dataclass
from typing import Protocol


class MemoryProbe(Protocol):
    def sample_and_reset(self) -> dict[str, int | None]: ...


def _proc_status_bytes(*keys: str) -> dict[str, int]:
    values: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in keys:
                values[key] = int(rest.split()[0]) * 1024  # reported in kB
    return values


@dataclass
class CpuMemoryProbe:
    can_reset_peak: bool = True

    def sample_and_reset(self) -> dict[str, int | None]:
        try:
            status = _proc_status_bytes("VmRSS", "VmHWM")
        except OSError:  # not Linux: peak RSS since start (ru_maxrss is kB on Linux, bytes on macOS)
            scale = 1 if sys.platform == "darwin" else 1024
            return {"rss_bytes": None, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale}
        sample = {"rss_bytes": status.get("VmRSS"), "peak_rss_bytes": status.get("VmHWM")}
        if self.can_reset_peak:
            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")
            except OSError:
                self.can_reset_peak = False
        sample["peak_is_per_step"] = int(self.can_reset_peak)
        return sample


@dataclass
class CudaMemoryProbe:
    def sample_and_reset(self) -> dict[str, int | None]:
        import torch

        sample = {"gpu_peak_allocated_bytes": int(torch.cuda.max_memory_allocated()),
                  "gpu_peak_reserved_bytes": int(torch.cuda.max_memory_reserved()),
                  "gpu_allocated_bytes": int(torch.cuda.memory_allocated())}
        torch.cuda.reset_peak_memory_stats()
        sample.update(CpuMemoryProbe(can_reset_peak=False).sample_and_reset())
        return sample


def make_memory_probe(device: str) -> MemoryProbe:
    return CudaMemoryProbe() if device == "cuda" else CpuMemoryProbe()

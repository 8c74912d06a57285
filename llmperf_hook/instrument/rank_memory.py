"""Peak memory of one rank per step: allocated and reserved by the CUDA caching allocator on GPU (reset after
each sample, so each step reports its own peak); on CPU the peak resident set size of the process so far.

The CPU probe reads getrusage(2) rather than /proc/self/status (tens of microseconds on a loaded machine): the
hook's budget is 1 % of a step that can be as short as a few milliseconds on CPU. The recorder makes that one
call per step and passes it in (`process_usage`): the same reading gives the step's CPU time (ru_utime +
ru_stime) and the peak RSS, one system call instead of two. A call costs ~1.5 us in a tight loop on this 2-core
VM, but 9-12 us of CPU time per step inside a training loop, a second one 2-5 us more (27 Nov, load 6-7,
interleaved blocks of a tiny optimizer loop with only the call(s) on the hook path): the kernel entry costs the
step the caches and branch history it ran with. The budget is ~25 us for a 2.5 ms step (1 %).
ru_maxrss is in kilobytes on Linux and in bytes on macOS.
"""

from __future__ import annotations

import resource
import sys
from dataclasses import dataclass
from typing import Any, Protocol

_MAXRSS_UNIT_BYTES = 1 if sys.platform == "darwin" else 1024


class MemoryProbe(Protocol):
    def sample_and_reset(self, usage: Any) -> dict[str, int | None]:
        """This step's peak memory; `usage` is the step end's process_usage() (its ru_maxrss is the peak RSS)."""
        ...


def process_usage() -> Any:
    """getrusage(RUSAGE_SELF): the process's CPU time (all threads) and peak RSS from one system call."""
    return resource.getrusage(resource.RUSAGE_SELF)


def cpu_seconds(usage: Any) -> float:
    """User + system CPU seconds of the process (what time.process_time() reads, to the microsecond)."""
    return usage.ru_utime + usage.ru_stime


def peak_rss_bytes(usage: Any = None) -> int:
    return (usage or process_usage()).ru_maxrss * _MAXRSS_UNIT_BYTES


def current_rss_bytes() -> int | None:
    """Resident set size now (Linux /proc/self/statm: pages), or None elsewhere."""
    try:
        import os

        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class CpuMemoryProbe:
    def sample_and_reset(self, usage: Any) -> dict[str, int | None]:
        return {"peak_rss_bytes": peak_rss_bytes(usage)}


@dataclass
class CudaMemoryProbe:
    """The caching allocator's counters from one call: torch.cuda.max_memory_allocated(), max_memory_reserved()
    and memory_allocated() each flatten and sort all ~200 counters in Python (torch.cuda.memory_stats), which
    made three of them a visible share of a short step."""

    def sample_and_reset(self, usage: Any) -> dict[str, int | None]:
        import torch

        stats = torch.cuda.memory_stats_as_nested_dict()
        allocated, reserved = stats.get("allocated_bytes", {}).get("all", {}), stats.get("reserved_bytes", {}).get("all", {})
        sample = {"gpu_peak_allocated_bytes": int(allocated.get("peak", 0)),
                  "gpu_peak_reserved_bytes": int(reserved.get("peak", 0)),
                  "gpu_allocated_bytes": int(allocated.get("current", 0))}
        torch.cuda.reset_peak_memory_stats()
        sample["peak_rss_bytes"] = peak_rss_bytes(usage)
        return sample


def make_memory_probe(device: str) -> MemoryProbe:
    return CudaMemoryProbe() if device == "cuda" else CpuMemoryProbe()

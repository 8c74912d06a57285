"""Wall-clock marks for step boundaries: CUDA events (+ synchronize) on GPU, perf_counter on CPU.

On a GPU the host returns from optimizer.step() long before the kernels finish, so a host clock would time
the launch queue, not the step: an event is recorded on the current stream at each boundary and synchronised,
and the step time is the elapsed time between consecutive events (torch.cuda.Event.elapsed_time, in ms).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Protocol


class StepTimer(Protocol):
    name: str
    device: str

    def mark(self) -> Any: ...

    def elapsed_s(self, start: Any, end: Any) -> float: ...


@dataclass
class PerfCounterTimer:
    name: str = "perf_counter"
    device: str = "cpu"

    def mark(self) -> float:
        return time.perf_counter()

    def elapsed_s(self, start: float, end: float) -> float:
        return end - start


@dataclass
class CudaEventTimer:
    name: str = "cuda_event"
    device: str = "cuda"

    def mark(self) -> Any:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        event.synchronize()
        return event

    def elapsed_s(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds


def make_step_timer() -> StepTimer:
    """CUDA events when the job has initialised CUDA (it trains on the GPU), else perf_counter."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return CudaEventTimer()
    return PerfCounterTimer()

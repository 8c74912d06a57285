"""Wall-clock marks for step boundaries: CUDA events on GPU, perf_counter on CPU.

On a GPU the host returns from optimizer.step() long before the kernels finish, so a host clock would time
the launch queue, not the step: an event is recorded on the current stream at each boundary, and the step time
is the elapsed time between consecutive events on the GPU's own clock (torch.cuda.Event.elapsed_time, in ms).
The synchronize that elapsed_time needs happens when the step's record is written (the recorder's writer builds
it at flush time: every 64 records or once a second, at the end of the N steps, at exit), never at every
boundary: a synchronize per step drains the launch queue, so the next step's first kernels wait for the host. On an H100
(benchmarks/measure_gpu_hook_overhead.py, 2026-11-26) a synchronize per boundary cost 1.4 ms of a 35 ms step
(3.9 %); with it and three allocator reads per step (rank_memory.py) the hook cost 3.2 ms (9.0 %), and 12-17 % of
2-5 ms steps. As now: 0.14 ms (0.39 %), nothing measurable on the short steps. The once-a-second flush does not
synchronize either: it writes only the steps whose end event has completed (`ready`, cudaEventQuery), and leaves
the newest step, still running, for the next flush.
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

    def ready(self, end: Any) -> bool:
        """Whether elapsed_s(..., end) can be read now without waiting for the device."""
        ...


@dataclass
class PerfCounterTimer:
    name: str = "perf_counter"
    device: str = "cpu"

    def mark(self) -> float:
        return time.perf_counter()

    def elapsed_s(self, start: float, end: float) -> float:
        return end - start

    def ready(self, end: float) -> bool:
        return True


@dataclass
class CudaEventTimer:
    name: str = "cuda_event"
    device: str = "cuda"

    def mark(self) -> Any:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_s(self, start: Any, end: Any) -> float:
        end.synchronize()  # called when the record is written, not on the step path (module docstring)
        return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds

    def ready(self, end: Any) -> bool:
        return bool(end.query())  # cudaEventQuery: completed or not, without blocking


def make_step_timer() -> StepTimer:
    """CUDA events when the job has initialised CUDA (it trains on the GPU), else perf_counter."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return CudaEventTimer()
    return PerfCounterTimer()

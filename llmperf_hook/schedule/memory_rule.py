"""Stage [5]: the one memory rule that `llmperf predict`'s verdict and `llmperf tune`'s candidate list share.

What must fit the GPU is the bytes a rank allocates at its peak (CUDA context included) plus the part of the caching
allocator's reserve that it cannot hand back. The reserve of schedule/allocator_reserve.py has two kinds of bytes:
- whole cached segments (blocks the loss frees that nothing later fits in, the step's flat buffers' own segments):
  when cudaMalloc fails, CUDACachingAllocator::malloc frees the cached blocks that are not split and retries
  (c10/cuda/CUDACachingAllocator.cpp: alloc_block, release_available_cached_blocks, release_cached_blocks, then the
  OutOfMemoryError), so these never run a job out of memory;
- the residue over the transient bytes (FRAGMENTATION_FRACTION: segment rounding, split remainders, the small pool's
  2 MiB segments): the free parts of segments that still hold live blocks, which that retry cannot release.
So must-fit = peak - reserve + FRAGMENTATION_FRACTION x transient (R73's recommendation, session 22).

predict says a job fits when every rank's must-fit bytes are within the GPU's capacity (schedule/memory_fit.py
fit_verdict); tune keeps a candidate when they are within (1 - memory_margin) of it (tune/search.py evaluate). Both
call fits_gpu, so a candidate tune keeps is one predict says fits on a GPU of (1 - margin) x its capacity, and one
tune drops for GPU memory is one predict says does not fit there.
"""

from __future__ import annotations

from typing import Any

from llmperf_hook.schedule.allocator_reserve import FRAGMENTATION_FRACTION

Bytes = Any
"""A byte count: a float, or a numpy array of them (one per candidate and rank in tune's surrogate_memory)."""


def must_fit_bytes(peak_bytes: Bytes, reserve_bytes: Bytes, transient_bytes: Bytes) -> Bytes:
    """Bytes a rank must find on the GPU: its peak (reserve included) less the reserve, plus the reserve's residue
    over the transient bytes, which the allocator cannot free (module docstring). Never above the peak: the reserve
    holds that residue (allocator_reserve_bytes adds it to segments it clips at 0)."""
    return peak_bytes - reserve_bytes + FRAGMENTATION_FRACTION * transient_bytes


def fits_gpu(must_fit: Bytes, capacity_bytes: Bytes, margin: float = 0.0) -> Bytes:
    """THE memory rule: must-fit bytes within (1 - margin) of the GPU's capacity. predict calls it with margin 0,
    tune with its --memory-margin (5 % by default)."""
    return must_fit <= (1.0 - margin) * capacity_bytes


def usable_bytes(capacity_bytes: float, margin: float) -> float:
    """The GPU memory tune lets a candidate's must-fit bytes take: (1 - margin) x capacity."""
    return (1.0 - margin) * capacity_bytes

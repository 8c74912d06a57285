"""Stage [5]: the one memory rule that `llmperf predict`'s verdict and `llmperf tune`'s candidate list share.

What must fit the GPU is the bytes a rank allocates at its peak, CUDA context included: the peak of
schedule/memory.py less the caching allocator's reserve (schedule/allocator_reserve.py). The reserve need not fit:
- when cudaMalloc fails, CUDACachingAllocator::malloc frees the cached blocks that are not split and retries
  (c10/cuda/CUDACachingAllocator.cpp: alloc_block, release_available_cached_blocks, release_cached_blocks, then the
  OutOfMemoryError), so whole cached segments (the loss's freed blocks, the step's flat buffers' own segments) never
  run a job out of memory;
- what that retry cannot free is the free space inside segments that still hold a live block. Its size at the
  capacity is not known: the 10 % residue over the transients (allocator_reserve.FRAGMENTATION_FRACTION) is the
  whole reserved-over-allocated gap of Megatron runs with memory to spare, free segments included, and no
  measured run came near its GPU's capacity (the highest reserved peak in measurements/ is 53.4 GiB of 80, c06), so
  none shows what the retry frees there. What is certain beyond the allocated bytes is small: torch counts a
  block's rounding (512 B) and an unsplit remainder (under 1 MiB) as allocated, and a new segment for a request
  over 10 MiB is rounded up to 2 MiB, so a live block leaves under 2 MiB of its segment free.
So a rank whose allocated bytes fit but whose peak does not may run or may run out: predict says "fits, tight"
(schedule/memory_fit.py) and names PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which unmaps the free pages of
live segments too; only allocated bytes over the GPU are certain to run out.

predict says a job fits when every rank's must-fit bytes are within the GPU's capacity (schedule/memory_fit.py
fit_verdict); tune keeps a candidate when they are within (1 - memory_margin) of it (tune/search.py evaluate). Both
call fits_gpu, so a candidate tune keeps is one predict says fits on a GPU of (1 - margin) x its capacity, and one
tune drops for GPU memory is one predict says does not fit there. tune's margin (5 % by default) is its allowance
for the residue and the model's error.
"""

from __future__ import annotations

from typing import Any

Bytes = Any
"""A byte count: a float, or a numpy array of them (one per candidate and rank in tune's surrogate_memory)."""


def must_fit_bytes(peak_bytes: Bytes, reserve_bytes: Bytes) -> Bytes:
    """Bytes a rank must find on the GPU: its peak less the allocator's reserve, i.e. what it allocates (module
    docstring: the reserve's unfreeable share is not known, and only the allocated bytes are certain to be needed)."""
    return peak_bytes - reserve_bytes


def fits_gpu(must_fit: Bytes, capacity_bytes: Bytes, margin: float = 0.0) -> Bytes:
    """THE memory rule: must-fit bytes within (1 - margin) of the GPU's capacity. predict calls it with margin 0,
    tune with its --memory-margin (5 % by default)."""
    return must_fit <= (1.0 - margin) * capacity_bytes


def usable_bytes(capacity_bytes: float, margin: float) -> float:
    """The GPU memory tune lets a candidate's must-fit bytes take: (1 - margin) x capacity."""
    return (1.0 - margin) * capacity_bytes

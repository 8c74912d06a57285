"""Stage [5]: bytes PyTorch's CUDA caching allocator holds reserved beyond what is allocated at a rank's peak.

The rules of c10/cuda/CUDACachingAllocator.cpp (torch 2.x, default settings; the file's opening comment) this
follows:
- a request above 1 MiB is served from the large pool: "the smallest available free block" that fits, split if
  larger; only when none fits is a new segment cudaMalloc'ed, of the request's size rounded up to 2 MiB (requests of
  1-10 MiB "allocate and split a 20MB block", kLargeBuffer);
- segments are never merged with one another and go back to the driver only on torch.cuda.empty_cache() or when a
  cudaMalloc fails ("free all cached blocks that are not split and retry"), so the reserved peak is the high-water
  mark of the segments.
Three sources of reserve over the allocated peak follow:
1. blocks the loss's forward frees that no later tensor of the step fits in: torch's cross-entropy on a 16-bit model
   frees the 16-bit logits (2 sbv/t) when its forward returns, while every [s b, v] tensor its backward allocates is
   fp32, twice as large (loss_blocks);
2. single flat tensors the step allocates (memory.step_flat_buffers: DeepSpeed's contiguous gradient partition, its
   flattened copy and fp32 cast, FP16_Optimizer's fp32 gradient): a buffer larger than every block the backward
   frees (the largest are the loss's logit tensors) takes a segment of its own, which stays reserved; likewise the
   gradients a backward allocates per weight when they outgrow the activation blocks it frees
   (gradients_outgrow_activations);
3. a residue over the transient bytes (segment rounding, the small pool's 2 MiB segments, split remainders, the
   optimizer's per-tensor temporaries packed into freed blocks): FRAGMENTATION_FRACTION.
Not modelled: PYTORCH_CUDA_ALLOC_CONF (expandable_segments:True grows one segment per stream by mapping pages, which
removes 1 and 2; max_split_size_mb; garbage_collection_threshold), and which freed activation blocks a flat buffer
could share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.attention_core_ops import FP32_BYTES
from llmperf_hook.schedule.activations import TORCH_LOSS_BACKWARD_TENSORS, act_bytes, torch_script_model

Bytes = Any
"""A byte count: a float, or a numpy array of them (one per candidate and rank in tune's surrogate_memory)."""
FRAGMENTATION_FRACTION = 0.10
"""PyTorch caching-allocator slack over activations and temporaries: reserved exceeds allocated by ~5-15 % in
Megatron runs (memory snapshots in Megatron-LM issues); 10 %."""


@dataclass(frozen=True)
class LossBlocks:
    """Blocks the loss frees on the last pipeline stage, per micro-batch."""

    fp32_block_bytes: Bytes = 0.0
    """Size of each fp32 [s b, v] logit tensor its backward frees: the largest blocks a later flat buffer can reuse."""
    num_fp32_blocks: Bytes = 0
    """How many such blocks are cached once the loss's backward has run."""
    unusable_bytes: Bytes = 0.0
    """Blocks the forward frees that nothing later fits in (the 16-bit logits beside fp32 tensors twice their size)."""


def allocator_reserve_bytes(allocated_peak: Bytes, backward_peak: Bytes, transient: Bytes, loss: LossBlocks,
                            step_buffers: tuple[Bytes, ...], gradient_segments: Bytes = 0.0) -> Bytes:
    """Reserved minus allocated at the peak. `backward_peak`: bytes allocated at the backward's peak (the segments it
    leaves cached); `step_buffers`: the flat tensors allocated after it, in order (0: none), each served by one of the
    loss's freed fp32 blocks when it fits one, else by a new segment; `gradient_segments`: gradients that take
    segments of their own. Scalars, or numpy arrays of rows alike (tune's surrogate_memory)."""
    free_blocks, new_segments = loss.num_fp32_blocks, gradient_segments
    for size in step_buffers:
        reused = ((size > 0) & (free_blocks > 0) & (size <= loss.fp32_block_bytes)) * 1.0
        free_blocks = free_blocks - reused
        new_segments = new_segments + size * (1.0 - reused)
    beyond = backward_peak + loss.unusable_bytes + new_segments - allocated_peak  # segments above the allocated peak
    return beyond * (beyond > 0) + FRAGMENTATION_FRACTION * transient


def loss_blocks(cfg: TrainingConfig, last_stage: bool) -> LossBlocks:
    """The loss's blocks of one micro-batch on the last stage: torch's cross-entropy (activations.torch_script_model,
    torch_cross_entropy_bytes) frees TORCH_LOSS_BACKWARD_TENSORS fp32 logit tensors, and on a 16-bit model
    the 16-bit logits no later tensor fits; Megatron's loss one fp32 copy. Other stages: none."""
    if not last_stage:
        return LossBlocks()
    m, p = cfg.model, cfg.parallel
    logits = m.seq_length / p.cp * cfg.batch.micro_batch_size * m.padded_vocab_size / p.tp
    if not torch_script_model(cfg):
        return LossBlocks(FP32_BYTES * logits, 1)
    sixteen_bit = act_bytes(cfg) < FP32_BYTES
    return LossBlocks(FP32_BYTES * logits, TORCH_LOSS_BACKWARD_TENSORS, act_bytes(cfg) * logits if sixteen_bit else 0.0)


def gradients_outgrow_activations(cfg: TrainingConfig) -> bool:
    """Whether a linear layer's weight gradient is larger than every activation block its backward frees: the
    gradient of an [out, in] weight (out x in elements, in = h for QKV and FC1, h for FC2's [h, ffn] too) against the
    layer's activations of one micro-batch on the rank ([s b / cp, out] or [s b / cp, in]) fits one only when
    h <= s b / cp. Measured: c06 (h 6144, s b 4096) and h06 (h 5120, s b 4096) reserve their gradients' bytes beyond
    every other run's pattern; all runs with h <= s b do not."""
    m = cfg.model
    return m.hidden_size > m.seq_length / cfg.parallel.cp * cfg.batch.micro_batch_size

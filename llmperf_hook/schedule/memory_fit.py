"""Stage [5]: the memory verdict of a job: fits, fits tight, or does not fit (exit 3 under `run --require-fit`).

What must fit the GPU is the bytes the job allocates (schedule/memory_rule.py must_fit_bytes). The peak of
schedule/memory.py adds the caching allocator's whole reserve (schedule/allocator_reserve.py: blocks nothing later
fits in, the step's flat buffers' own segments, a residue over the activations and temporaries), but the reserve
alone does not run a job out of memory: when cudaMalloc fails, PyTorch's CUDACachingAllocator frees its cached,
unsplit blocks and tries again (c10/cuda/CUDACachingAllocator.cpp malloc: alloc_block, then
release_available_cached_blocks, then release_cached_blocks, then the OutOfMemoryError). The free parts of segments
that still hold live blocks decide whether that retry finds room, so a job whose peak exceeds the GPU while its
allocated bytes fit is "tight", not refused (memory_rule.py: why none of the reserve is counted as certain).

A job whose peak is below the GPU by less than the memory model's own error is tight too: the model's peak against
the allocated peak (plus CUDA context) that the hook recorded on an H100 is off by MODEL_ERROR_FRACTION on average,
and by up to -3.3 % below it (benchmarks/bench_memory_reference.py, measured table), so such a job may run out.

`tune` lists a candidate by the same rule (schedule/memory_rule.py fits_gpu), within (1 - memory_margin) of the
capacity (5 % by default): a listed candidate fits here, and is tight only where its reserve takes it past the
margin; a configuration over tune's margin that fits here is said to fit and is not counted out of memory
(tune/infeasible.py over_margin_only).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.schedule.memory_rule import fits_gpu
from llmperf_hook.schedule.step_estimate import MemoryEstimate

GiB = 2**30

MODEL_ERROR_FRACTION = 0.038
"""The memory model's error band: MAPE of our peak against the measured allocated peak + CUDA context, 3.8 % over
the 8 single-H100 runs of measurements/h100-sxm5-80gb-2026-11-26 (benchmarks/bench_memory_reference.py, measured
table: -3.3 % to +14.5 %, under-predicted in 4 of 8; 3.6 % in bench_gpu_steps). A job whose headroom is smaller than
this share of its peak may not fit. Kept since the allocated bytes (peak less the allocator's reserve) came within
1 % of all 31 measured single-GPU runs (H186): none of them is multi-GPU, Megatron-LM or pipelined."""

EXPANDABLE_SEGMENTS = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
"""PyTorch's allocator setting that grows one mapped segment instead of caching fixed-size blocks, which removes
most fragmentation (PyTorch docs, CUDA semantics: optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF)."""


@dataclass(frozen=True)
class FitVerdict:
    """Whether a peak fits the GPU, and whether only just."""

    fits: bool
    """The must-fit bytes (what the rank allocates: schedule/memory_rule.py) fit the capacity."""
    tight: bool
    """It fits, but the capacity is below the peak, or above it by less than the model's error band."""


def fit_verdict(peak_bytes: float, must_fit_bytes: float, capacity_bytes: float) -> FitVerdict:
    """The verdict of one rank: DOES NOT FIT when its must-fit bytes (schedule/memory_rule.py) exceed the capacity;
    fits, tight when the capacity is below peak x (1 + MODEL_ERROR_FRACTION); fits otherwise."""
    fits = bool(fits_gpu(must_fit_bytes, capacity_bytes))
    return FitVerdict(fits=fits, tight=fits and capacity_bytes < peak_bytes * (1.0 + MODEL_ERROR_FRACTION))


def verdict_words(fits: bool, tight: bool) -> str:
    """The verdict as the table prints it (JSON: memory.verdict)."""
    return "DOES NOT FIT" if not fits else "fits, tight" if tight else "fits"


MICRO_BATCH_WORDS = {"megatron": "--micro-batch-size", "megatron-deepspeed": "--micro-batch-size",
                     "deepspeed": "train_micro_batch_size_per_gpu", "hf-deepspeed": "--per_device_train_batch_size"}
"""The micro-batch size in each framework's words (Megatron's argparse, the ds_config key, HF TrainingArguments)."""


def _fixes(cfg: TrainingConfig) -> str:
    """The changes that free memory, in the framework's words; only those the job can still make (a micro-batch of
    1 cannot shrink, full recompute is the most there is)."""
    fixes = [f"set {EXPANDABLE_SEGMENTS} in the job's environment (removes most fragmentation)"]
    if cfg.batch.micro_batch_size > 1:
        fixes.append("a smaller " + MICRO_BATCH_WORDS.get(cfg.framework, "micro-batch size"))
    if cfg.recompute.granularity != "full":
        fixes.append(("--recompute-granularity full" if cfg.recompute.granularity == "selective" else
                      "--recompute-granularity selective (or full)") if cfg.framework.startswith("megatron")
                     else "activation checkpointing")
    return fixes[0] + (", or free memory: " + ", or ".join(fixes[1:]) if len(fixes) > 1 else "")


def tight_fit_warning(mem: MemoryEstimate, cfg: TrainingConfig) -> str:
    """The warning of a tight fit: the margin, the fragmentation term and the fix."""
    from llmperf_hook.schedule.memory_cpu import cpu_tight_warning, runs_on_cpu

    if runs_on_cpu(mem):  # a host's RAM, not a GPU's allocator
        return cpu_tight_warning(mem, cfg)
    peak, cap, frag = mem.peak_bytes_per_gpu, mem.capacity_bytes, mem.fragmentation_bytes
    if peak > cap:
        why = (f"the predicted peak {peak / GiB:.2f} GiB per GPU exceeds the {cap / GiB:.2f} GiB of the GPU by "
               f"{(peak - cap) / GiB:.2f} GiB, within its {frag / GiB:.2f} GiB of allocator fragmentation (the "
               f"allocated bytes, {mem.must_fit_bytes / GiB:.2f} GiB, fit: PyTorch frees its cached blocks and "
               f"retries a failed allocation, which may or may not find room)")
    else:
        why = (f"the predicted peak {peak / GiB:.2f} GiB per GPU fits the {cap / GiB:.2f} GiB of the GPU by "
               f"{(cap - peak) / GiB:.2f} GiB, less than the memory model's error band ({MODEL_ERROR_FRACTION:.1%} "
               f"of the peak, {MODEL_ERROR_FRACTION * peak / GiB:.2f} GiB; {frag / GiB:.2f} GiB of the peak is "
               f"allocator fragmentation)")
    return f"memory fits, tight: {why}. To be safe, {_fixes(cfg)}."

"""Stage [5]: when a rank's gradients and DeepSpeed's gradient bucket are allocated, relative to the backward's peak.

The peak of a backward is the loss's backward, with every activation still saved (schedule/memory.py stage_memory).
Whether the gradients count there depends on who owns them: per-parameter tensors freed at every step and allocated
again as the next backward produces them, or flat buffers allocated once for the run. These rules read the
TrainingConfig only; schedule/memory.py and tune/surrogate_memory.py apply them.
"""

from __future__ import annotations

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.step_ops import runs_bf16_optimizer
from llmperf_hook.schedule.activations import torch_script_model


def torch_ddp_buckets(cfg: TrainingConfig) -> bool:
    """A torch script over more than one data-parallel rank without DeepSpeed or FSDP runs torch's
    DistributedDataParallel (frameworks/assemble.py), whose Reducer allocates one flat gradient tensor per bucket when
    it wraps the model and keeps them for the run (torch/csrc/distributed/c10d/reducer.cpp initialize_buckets:
    bucket.gradients = at::empty(...); every gradient is copied into it, or is a view of it with
    gradient_as_bucket_view): the gradients' bytes stay allocated between steps."""
    o, p = cfg.optimizer, cfg.parallel
    return "deepspeed" not in cfg.framework and o.fsdp == "none" and p.dp * p.cp > 1


def gradients_freed_each_step(cfg: TrainingConfig) -> bool:
    """Whether the rank's gradients are freed after every optimizer step and allocated again by the next backward,
    as each layer's gradient is produced: DeepSpeed below ZeRO-3 (engine.py zero_grad: param.grad = None for a client
    optimizer without a wrapper; stage_1_and_2.py step -> zero_grad(set_to_none=True), the contiguous partition
    included; fp16/fused_optimizer.py zero_grad(set_to_none=True); measured: the H100/H200 ZeRO-0/1/2 runs allocate
    only weights and optimizer states between steps) and a torch script stepping torch.optim itself
    (activations.torch_script_model; Optimizer.zero_grad(set_to_none=True), torch's default since 2.0; the
    transformers Trainer's model.zero_grad()). Assumed: the script zeroes its gradients with torch's default; one that
    passes set_to_none=False (or runs torch < 2.0) keeps them, which only an accumulating count would price. Not
    Megatron-LM (its DDP's main_grad views of a gradient buffer allocated once, zeroed in place:
    param_and_grad_buffer.py), torch DDP's buckets (torch_ddp_buckets), ZeRO-3 (stage3.py
    grad_partitions_flat_buffer, kept for the run), Megatron FSDP's buffers, nor BF16_Optimizer's fp32 gradients
    (bf16_optimizer.py fp32_groups_gradients_flat, allocated at init)."""
    o = cfg.optimizer
    if o.zero_stage >= 3 or o.fsdp == "megatron_fsdp" or runs_bf16_optimizer(cfg) or torch_ddp_buckets(cfg):
        return False
    return "deepspeed" in cfg.framework or torch_script_model(cfg)


def backward_starts_without_gradients(cfg: TrainingConfig) -> bool:
    """The peak of the backward (the loss's backward, every activation still saved) holds no gradient: they are
    freed at every step (gradients_freed_each_step) and the step has one micro-batch. With gradient accumulation
    (or a pipeline's micro-batches) every backward after the first adds into the gradients of the ones before."""
    return gradients_freed_each_step(cfg) and cfg.batch.num_microbatches <= 1


def bucket_allocated_after_loss(cfg: TrainingConfig) -> bool:
    """DeepSpeed ZeRO-1/2's gradient bucket (contiguous_gradients) is allocated by the first gradient hook
    (stage_1_and_2.py process_gradients -> setup_buckets), after the loss's backward has freed its logit tensors, and
    released at the end of the backward that reduces it (independent_gradient_partition_epilogue ->
    _release_ipg_buffers). ZeRO-2 reduces every micro-batch (engine.py allreduce_gradients:
    overlapping_partition_gradients_reduce_epilogue whenever gradients are partitioned); ZeRO-1 only at the
    accumulation boundary (reduce_gradients), with or without overlap_comm (process_gradients reduces under
    overlap_comm only `if self.partition_gradients or self.is_gradient_accumulation_boundary()`), so its later
    micro-batches start their backward with the bucket allocated."""
    o = cfg.optimizer
    if "deepspeed" not in cfg.framework or o.zero_stage not in (1, 2) or not o.contiguous_gradients:
        return False
    return o.zero_stage == 2 or cfg.batch.num_microbatches <= 1

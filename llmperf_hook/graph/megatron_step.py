"""Megatron-LM's own work around the Adam update, once per step: the passes its DDP and optimizer wrapper make over
the gradients and parameters (graph/step_ops.py prices the Adam kernel itself, the collectives and DeepSpeed's
bookkeeping).

Read in NVIDIA/Megatron-LM d98e8a6 (2026), for a job on Megatron's DDP (no FSDP) with its optimizer on the GPU:
- training.py train_step: model_chunk.zero_grad_buffer() zeroes each gradient buffer
  (param_and_grad_buffer.py reset: grad_data.zero_()), every parameter of the rank.
- param_and_grad_buffer.py start_grad_sync, per bucket before its reduction: check_grads (ddp_config
  .check_for_nan_in_grad = --check-for-nan-in-loss-and-grad, on by default but off for --fp16 with dynamic loss
  scaling, arguments.py validate_args: bucket.grad_data.norm(p=2)), then `bucket.grad_data *= gradient_scaling_factor`
  where the factor is not 1: 1 / (dp x cp) unless --ddp-average-in-collective or --calculate-per-token-loss
  (distributed_data_parallel.py). Under --calculate-per-token-loss finalize_model_grads.py scales the whole buffer by
  1 / num_tokens after the reduction instead (scale_gradients), at any dp: the same bytes (OptimizerConfig.grad_scale).
- optimizer.py MixedPrecisionOptimizer.step over the rank's optimizer shard (the whole rank without the distributed
  optimizer): prepare_grads (_copy_model_grads_to_main_grads: `main_grad.float()`, a view of fp32 main grads, a cast
  of 16-bit ones; fp16: _unscale_main_grads_and_check_for_nan, torch._amp_foreach_non_finite_check_and_unscale_),
  clip_grad_norm when --clip-grad > 0 (default 1.0: clip_grads.py get_grad_norm_fp32, multi_tensor_l2norm, and
  clip_grad_by_total_norm_fp32, multi_tensor_scale of every gradient), the inner Adam, then
  _copy_main_params_to_model_params (fp32 master -> 16-bit model; distrib_optimizer.py: into the parameter buffer
  the all-gather sends). Under --use-precision-aware-optimizer Transformer Engine's FusedAdam writes the 16-bit
  model weights itself (the copy returns early) and reads the main gradients as they are (decoupled_grad).
The clip scale runs every step where Transformer Engine provides multi_tensor_scale_tensor (clip_coeff stays a
tensor, clamped to 1: Megatron-LM since 3d87bfc1b7, 2026-04-03); before that, and with apex alone, only when the norm
exceeds --clip-grad (2022's megatron/optimizer/clip_grads.py: `if clip_coeff < 1.0`), as it usually does at the start
of training. It is priced every step, as today's Megatron-LM runs it. The DDP NaN check exists since b1116a0c80
(2023-09-05; before the reduction since d66807759c, 2023-12-05): runs of older releases had neither pass.

Two of these passes are issued one parameter tensor at a time from Python (megatron/core/optimizer/optimizer.py,
distrib_optimizer.py at d98e8a6), so a model of many small tensors can wait for the host's loop rather than for the
bytes (per_tensor_launches):
- _copy_model_grads_to_main_grads: `main_param.grad = model_param.main_grad.float()` (Float16OptimizerWithFloat16Params)
  and `shard_main_param.grad = shard_model_grad.float()` (DistributedOptimizer), one cast kernel per tensor of the
  shard where main grads are 16-bit (.float() of an fp32 tensor returns it: no kernel);
- DistributedOptimizer._copy_main_params_to_model_params: `shard_model_param.data.copy_(shard_main_param)` into the
  parameter buffer the all-gather sends, one copy per tensor of the shard. The non-distributed wrapper copies them
  with _multi_tensor_copy_this_to_that: one multi_tensor_applier call under fp16, but under bf16 (config.bf16: fp8
  runs on a bf16 base too) its overflow buffer is None (Float16OptimizerWithFloat16Params.__init__, "For bfloat, we
  don't have multi-tensor apply") and it loops `that_.copy_(this_)`, one copy per tensor.
Under --use-precision-aware-optimizer neither runs (the main grad is a view, decoupled_grad; TE's FusedAdam writes
the model weights). A rank's shard is a contiguous range of the flat gradient buffer, so it touches its share of the
stage's tensors plus the one it starts inside. Each launch costs the host what one small op of DeepSpeed's per-tensor
step loop costs (graph/step_ops.DEEPSPEED_STEP_HOST_S_PER_LAUNCH, 5.5 us: Python, the dispatcher and the launch),
issued behind the backward's queued kernels (schedule/compose.step_bookkeeping_s).

Measured: the single-H100 Megatron-Core steps of measurements/h100-sxm5-80gb-2026-11-26-b/kernels (DP 1, no TE or
apex: megatron-core's local fallbacks, torch.norm per tensor and copy_(src * scale)) show the two norms and the
zeroing: linalg_vector_norm 2.87 ms for l4h4096-m2's 1.02 B parameters and 4.57 ms for l24h2048-m2-norc's 1.32 B
(the NaN check and the clip norm, 4 + 4 B per parameter: 2.74 and 3.53 ms at 2.98 TB/s), fill_ 1.94 and 2.39 ms (the
zeroing, 4 B: 1.37 and 1.77 ms, with the model's own fills). The clip scale and the master copy run inside the
tables' mul / copy_ rows with the model's casts and cannot be told apart there.
"""

from __future__ import annotations

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.op import Op

MEGATRON_STEP_OP = "optimizer.megatron_bookkeeping"
MAIN_PARAM_BYTES = 4
"""The fp32 master weight read by the copy back to the model."""


FUSED_SGD_ACCESSES = {"fused_sgd": 4, "fused_sgd_momentum": 5}
"""Element accesses per parameter of Megatron-LM's --optimizer sgd step (OptimizerConfig.torch_optimizer_impl, set by
frameworks/megatron.py): Transformer Engine's FusedSGD, else apex's (core/optimizer/__init__.py imports, core_v0.16.1
to HEAD), whose multi_tensor_sgd kernel loads the gradient, the fp32 weight and the momentum buffer and stores the
weight, and the buffer only when momentum != 0 (TE / apex multi_tensor_sgd kernels: 'if (momentum != 0.f) mom_in[i] =
...'): 4 at --sgd-momentum 0, else 5; weight decay in-kernel."""


def runs_megatron_step(cfg: TrainingConfig) -> bool:
    """The job steps Megatron's optimizer wrapper on its DDP: a Megatron job whose Adam is the framework's (not a
    plain-torch script stepping torch.optim: torch_optimizer_impl / master_weights), without FSDP. With a CPU
    optimizer (--optimizer-cpu-offload) the DDP's passes still run on the GPU's gradient buffers; the wrapper's
    around HybridDeviceOptimizer are not priced (megatron_step_ops)."""
    o = cfg.optimizer
    return (cfg.framework == "megatron" and o.fsdp == "none" and o.torch_optimizer_impl in ("", *FUSED_SGD_ACCESSES)
            and (o.master_weights or cfg.precision == "fp32"))


def ddp_bytes_per_param(cfg: TrainingConfig, grad_elem_bytes: int, dp_cp: int) -> float:
    """Bytes per parameter of the rank that Megatron's DDP moves each step beyond the reduction: the zeroing (write
    one gradient), the NaN check's norm (read one), the scaling pass (read and write one) where it runs: the
    1 / (dp x cp) pre-scale at dp x cp > 1, the 1 / num_tokens scale at any dp (OptimizerConfig.grad_scale)."""
    o = cfg.optimizer
    per_param = grad_elem_bytes + (grad_elem_bytes if o.grad_nan_check else 0)
    if o.grad_scale == "tokens" or (o.grad_scale == "dp" and dp_cp > 1):
        per_param += 2 * grad_elem_bytes
    return float(per_param)


def optimizer_bytes_per_param(cfg: TrainingConfig, grad_elem_bytes: int, param_elem_bytes: int) -> float:
    """Bytes per parameter of the rank's optimizer shard that the wrapper moves around the Adam kernel: the cast of
    16-bit main grads to fp32 (read 2, write 4), fp16's unscale (read and write 4), the clip's norm (read 4) and scale
    (read and write 4), the master copied to the 16-bit model (read 4, write 2; none in fp32 or precision-aware)."""
    o = cfg.optimizer
    precision_aware = o.precision_aware and cfg.precision != "fp32"
    per_param = 0.0
    if grad_elem_bytes < 4 and not precision_aware:
        per_param += grad_elem_bytes + 4
    if cfg.precision == "fp16":
        per_param += 8
    if o.gradient_clipping > 0:
        per_param += 4 + 8
    if cfg.precision != "fp32" and not precision_aware:
        per_param += MAIN_PARAM_BYTES + param_elem_bytes
    return per_param


def per_tensor_launches(cfg: TrainingConfig, tensors: int, rank_params: int, local: int, grad_elem_bytes: int) -> int:
    """Kernels the wrapper launches one tensor at a time (module docstring) over the `tensors` of the stage: the
    16-bit main grads' cast, and the master -> model copy (the distributed optimizer's, or any under bf16), per
    tensor of the shard."""
    o = cfg.optimizer
    if o.offload_optimizer != "none" or (o.precision_aware and cfg.precision != "fp32"):
        return 0
    sharded = o.distributed_optimizer and local < rank_params
    shard_tensors = min(tensors, -(-tensors * local // max(1, rank_params)) + 1) if sharded else tensors
    cast = 1 if grad_elem_bytes < 4 else 0
    copy = 1 if cfg.precision in ("bf16", "fp8") or (o.distributed_optimizer and cfg.precision == "fp16") else 0
    return shard_tensors * (cast + copy)


def megatron_step_ops(cfg: TrainingConfig, rank_params: int, local: int, dp_cp: int, grad_elem_bytes: int,
                      param_elem_bytes: int, tensors: int = 0) -> list[Op]:
    """One memory-bound op holding the passes above: over the rank's `rank_params` (DDP) and its optimizer shard
    `local`; `dp_cp` is the size of the gradient reduction's group; `tensors`: the stage's parameter tensors, whose
    per-tensor launches the op carries (host_launches, host_s_per_launch: schedule/compose.step_bookkeeping_s)."""
    from llmperf_hook.graph.step_ops import DEEPSPEED_STEP_HOST_S_PER_LAUNCH  # step_ops builds on this module

    if not runs_megatron_step(cfg) or rank_params <= 0:
        return []
    nbytes = rank_params * ddp_bytes_per_param(cfg, grad_elem_bytes, dp_cp)
    if cfg.optimizer.offload_optimizer == "none":
        nbytes += local * optimizer_bytes_per_param(cfg, grad_elem_bytes, param_elem_bytes)
    launches = per_tensor_launches(cfg, tensors, rank_params, local, grad_elem_bytes)
    tags = {"host_launches": str(launches), "host_s_per_launch": f"{DEEPSPEED_STEP_HOST_S_PER_LAUNCH:.6g}"} \
        if launches else {}
    return [Op(MEGATRON_STEP_OP, "step_bookkeeping", "step", {"params": local, "rank_params": rank_params},
               flops=0.0, bytes_moved=float(nbytes), dtype=cfg.precision, tags=tags)]

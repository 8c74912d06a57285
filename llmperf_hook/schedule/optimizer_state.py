"""Stage [5]: bytes per parameter of the optimizer state a rank keeps on its GPU, and of the temporaries its step
allocates, by optimizer and dtype.

Mixed-precision Adam keeps an fp32 master copy and two fp32 moments, 12 B (Rajbhandari et al. 2020, ZeRO, Sec. 3.1);
SGD with momentum 8; in fp32 training no master copy (8 / 4); a plain-torch script stepping its 16-bit model keeps
the moments in the model's dtype (4 / 2). torch.optim's amsgrad keeps a third state, SGD without momentum none
(num_optimizer_states).

Megatron-LM --use-precision-aware-optimizer (Megatron-LM HEAD d98e8a6; Transformer Engine >= 2.1) hands the state to
Transformer Engine's FusedAdam (transformer_engine/pytorch/optimizers/fused_adam.py):
  moments        exp_avg / exp_avg_sq in --exp-avg-dtype / --exp-avg-sq-dtype (core/optimizer/__init__.py passes
                 both to FusedAdam): fp32 4, fp16 and bf16 2, fp8 2 (FusedAdam._initialize_state builds a
                 Float8Quantizer with its default rowwise and columnwise usages, and Float8Quantizer.make_empty
                 allocates the uint8 data and its transpose, one byte each; plus one fp32 scale per tensor)
  master         held by FusedAdam (master_weights=True, master_weight_dtype=--main-params-dtype) when
                 OptimizerConfig.use_precision_aware_optimizer_no_fp8_or_ds_fp8: --main-params-dtype is not fp32,
                 or --fp8-recipe is delayed (arguments.py default, fp8 or not), or --optimizer-cpu-offload. There
                 bf16 parameters with an fp32 master keep only the 16 low bits of each master value
                 (store_param_remainders, OptimizerConfig default True since TE 2.1: an int16 state, 2 B); fp16
                 parameters keep 4 B; --main-params-dtype fp16 2 B. Otherwise (a tensorwise / mxfp8 / blockwise
                 recipe with fp32 main params) Megatron's distributed optimizer keeps its own fp32 shard (4 B,
                 distrib_optimizer.py _build_model_and_main_param_groups; Megatron FSDP's own fp32 main
                 parameters likewise).
  step           FusedAdam.step unscales every state that is not fp32 into an fp32 copy (get_unscaled_state:
                 .float()) for the whole parameter group, runs the kernel on the copies and frees them at the end
                 ('Try to reclaim the temporary fp32 buffers'): 4 B per such state and parameter while the step
                 runs; int16 remainders are read in place.
Under --optimizer-cpu-offload the GPU part of HybridDeviceOptimizer is a plain Adam with fp32 parameters and states
(optimizer_defaults carry no dtype): 12 B, whatever the dtype flags say.
"""

from __future__ import annotations

from llmperf_hook.frameworks.training_config import TrainingConfig

FP32_BYTES = 4
STATE_DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 2}
"""Bytes per element of a FusedAdam state by Megatron's dtype name (arguments.py dtype_map: fp8 = torch.uint8, a
Float8Tensor with data and transpose)."""
REMAINDER_BYTES = 2
"""An fp32 master value kept as the int16 remainder beside its bf16 parameter (FusedAdam store_param_remainders)."""


def precision_aware(cfg: TrainingConfig) -> bool:
    """Megatron's precision-aware optimizer steps this rank's GPU state (not the CPU-offloaded HybridDeviceOptimizer,
    whose GPU part is a plain fp32 Adam)."""
    o = cfg.optimizer
    return o.precision_aware and cfg.framework == "megatron" and o.offload_optimizer == "none" and o.name == "adam"


def te_master_weights(cfg: TrainingConfig) -> bool:
    """OptimizerConfig.use_precision_aware_optimizer_no_fp8_or_ds_fp8 (optimizer_config.py __post_init__): FusedAdam
    holds the master weights. Not under Megatron FSDP, which keeps its own main parameters
    (--megatron-fsdp-main-params-dtype, default fp32; docs/user-guide/features/megatron_fsdp.md 'Precision-Aware
    Optimizer': 'Megatron-FSDP manages the main parameters')."""
    o = cfg.optimizer
    if o.fsdp != "none":
        return False
    return o.main_params_dtype != "fp32" or cfg.fp8_recipe == "delayed" or o.offload_optimizer != "none"


def master_bytes_per_param(cfg: TrainingConfig) -> float:
    """Bytes of the master copy of one parameter under the precision-aware optimizer."""
    if not te_master_weights(cfg):
        return FP32_BYTES  # Megatron's own fp32 main-parameter shard
    if cfg.optimizer.main_params_dtype == "fp32" and cfg.precision in ("bf16", "fp8"):
        return REMAINDER_BYTES  # bf16 parameter + int16 remainder = the fp32 value
    return STATE_DTYPE_BYTES[cfg.optimizer.main_params_dtype]


STATELESS_SGD_IMPLS = frozenset({"sgd", "sgd_fused"})
"""torch.optim.SGD without momentum keeps no state: SGD._init_group asks self.state[p] for a momentum_buffer only
when group["momentum"] != 0 (torch/optim/sgd.py, torch 2.13), so nothing is ever stored."""


def num_optimizer_states(cfg: TrainingConfig) -> int:
    """Tensors the optimizer keeps per parameter besides a master copy. Adam / AdamW: exp_avg and exp_avg_sq, plus
    max_exp_avg_sq under amsgrad=True (torch/optim/adam.py Adam._init_group: state["max_exp_avg_sq"] =
    torch.zeros_like(p) when group["amsgrad"]), foreach or fused. SGD: momentum_buffer with momentum (DeepSpeed's
    one-state types; Megatron's TE / apex FusedSGD at any --sgd-momentum, its get_momentums allocating the buffer
    even at 0: frameworks/megatron._fused_sgd_step), none for torch.optim.SGD without (STATELESS_SGD_IMPLS: a
    ds_config section of type SGD without params.momentum, frameworks/deepspeed_optimizer._torch_sgd)."""
    impl = cfg.optimizer.torch_optimizer_impl
    if cfg.optimizer.name == "adam":
        return 3 if impl.endswith("_amsgrad") else 2
    return 0 if impl in STATELESS_SGD_IMPLS else 1


def optimizer_bytes_per_param(cfg: TrainingConfig) -> float:
    """GPU bytes of optimizer state per parameter of the rank's (sharded or whole) optimizer: the states
    (num_optimizer_states) in the 16-bit parameter's dtype when torch.optim steps the 16-bit model itself, else in
    fp32, plus the fp32 master copy in mixed precision (Adam 4 + 2 x 4 = 12 B, amsgrad 16, SGD with momentum 8)."""
    o = cfg.optimizer
    fp32 = cfg.precision == "fp32"
    if precision_aware(cfg):
        return (STATE_DTYPE_BYTES[o.exp_avg_dtype] + STATE_DTYPE_BYTES[o.exp_avg_sq_dtype]
                + master_bytes_per_param(cfg))
    states = num_optimizer_states(cfg)
    if not o.master_weights and not fp32:
        return 2 * states  # torch.optim states in the 16-bit parameter's dtype, no master copy
    return FP32_BYTES * states + (0 if fp32 else FP32_BYTES)


def step_temporary_bytes_per_param(cfg: TrainingConfig) -> float:
    """Bytes per parameter of the rank's optimizer (its shard under the distributed optimizer) that Megatron-LM's
    step allocates and frees: the fp32 copies FusedAdam makes of the states that are not fp32 under the
    precision-aware optimizer; and, with 16-bit main gradients (--fp16 without --accumulate-allreduce-grads-in-fp32,
    --grad-reduce-in-bf16, --main-grads-dtype bf16), the fp32 gradient of every main parameter (distrib_optimizer.py
    _copy_model_grads_to_main_grads: shard_main_param.grad = shard_model_grad.float(); optimizer.py
    Float16OptimizerWithFloat16Params: main_param.grad = model_param.main_grad.float()), dropped by the next
    zero_grad (set_to_none) before the forward. Where FusedAdam holds the master the gradient is handed over as it is
    (decoupled_grad = shard_model_grad), and Megatron FSDP hands over its own."""
    o = cfg.optimizer
    if cfg.framework != "megatron" or o.offload_optimizer != "none":
        return 0.0
    state_copies = 0.0
    if precision_aware(cfg):
        states = [o.exp_avg_dtype, o.exp_avg_sq_dtype]
        if te_master_weights(cfg):
            states.append(o.main_params_dtype)  # an fp32 master (whole or as remainders) is read in place
        state_copies = float(sum(FP32_BYTES for dtype in states if dtype != "fp32"))
    sixteen_bit_grads = not o.fp32_main_grads and cfg.precision != "fp32" and o.master_weights
    cast = sixteen_bit_grads and o.fsdp == "none" and not (precision_aware(cfg) and te_master_weights(cfg))
    return state_copies + (FP32_BYTES if cast else 0.0)


def foreach_step_temporary_bytes_per_param(cfg: TrainingConfig) -> float:
    """Bytes per stepped parameter of the one full-size tensor list torch.optim's multi-tensor step (foreach, the
    CUDA default) allocates for the length of its step (torch 2.13):
    - Adam / AdamW (torch/optim/adam.py _multi_tensor_adam; the group is split by device and dtype only):
      exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs), a copy of every second moment in the parameters'
      dtype; under amsgrad torch._foreach_maximum_(device_max_exp_avg_sqs, device_exp_avg_sqs) is in place and the
      square root is of the maxima instead: the same one copy. Adam's L2 weight decay first copies the gradients
      (device_grads = torch._foreach_add(device_grads, device_params, alpha=wd)) but deletes them before the square
      root ('del device_grads'): one copy at a time.
    - SGD (sgd.py _multi_tensor_sgd): with weight_decay != 0 the same out-of-place torch._foreach_add of the
      gradients, alive until the parameters are updated (or, with momentum and no nesterov, until device_grads = bufs
      drops it after _foreach_add_(bufs, device_grads)); without weight decay every call is in place
      (_foreach_mul_ / _foreach_add_ on bufs, params; nesterov adds into the gradients themselves): none.
    fused=True updates in place: none. torch.optim over the 16-bit model (master_weights False): 2 bytes; over fp32
    weights (a DeepSpeed client optimizer stepping fp32, a plain fp32 script): 4."""
    o = cfg.optimizer
    sixteen_bit_model = not o.master_weights and cfg.precision != "fp32"
    impl = o.torch_optimizer_impl or ("foreach" if sixteen_bit_model else "")
    adam_foreach = o.name == "adam" and impl in ("foreach", "foreach_amsgrad")
    sgd_decay = o.name == "sgd" and impl in ("sgd", "sgd_momentum", "sgd_nesterov") and o.torch_weight_decay != "none"
    if not (adam_foreach or sgd_decay) or o.offload_optimizer != "none":
        return 0.0
    return 2.0 if sixteen_bit_model else float(FP32_BYTES)

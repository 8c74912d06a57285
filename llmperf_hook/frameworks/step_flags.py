"""Megatron-LM and Megatron-DeepSpeed flags that change a training step's time or memory without changing the model,
layout or batch: kernel fusions, per-step checks, logging and timers, data-parallel bucket and reduction settings.

Each one is either priced (a TrainingConfig field the graph reads) or named in one "not modelled" warning; a flag
accepted in silence while it changes the step is a wrong number with no hint. The decisions, defaults and source
lines are tabled in tests/frameworks/real_scripts/FLAGS.md. Sources: Megatron-LM megatron/training/arguments.py,
megatron/training/config/training_config.py and megatron/training/training.py (HEAD, 2026); Megatron-DeepSpeed
megatron/arguments.py (microsoft and bigscience-workshop forks).

A warning fires when the flag's value differs from the framework's default (`NotModelled.default`), so the "false"
flags (argparse store_false, `--no-X`: default True, False when given) warn like the store_true ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.training_config import OptimizerConfig
from llmperf_hook.launch.sizing import TE_SOFTMAX_FUSION_ENV
from llmperf_hook.provenance import Source, SourceKind

STEP_FALSE: dict[str, str] = {
    "no-bias-gelu-fusion": "bias_gelu_fusion",
    "no-bias-swiglu-fusion": "bias_swiglu_fusion",
    "no-bias-dropout-fusion": "bias_dropout_fusion",
    "no-check-for-nan-in-loss-and-grad": "check_for_nan_in_loss_and_grad",
    "no-barrier-with-level-1-timing": "barrier_with_l1_time",
    "no-align-grad-reduce": "align_grad_reduce",
    "disable-align-grad-reduce": "align_grad_reduce",  # HEAD: a config dataclass field (training/config/common_config.py)
    "no-align-param-gather": "align_param_gather",
    "no-async-tensor-model-parallel-allreduce": "async_tensor_model_parallel_allreduce",
    "disable-async-tensor-model-parallel-allreduce": "async_tensor_model_parallel_allreduce",  # 639c08ab82..82cbd829dd
    "no-contiguous-buffers-in-local-ddp": "use_contiguous_buffers_in_local_ddp",
    "no-scatter-gather-tensors-in-pipeline": "scatter_gather_tensors_in_pipeline",
}
"""store_false flags: `--no-X` given = X off (dest keeps Megatron's name, lower case)."""
STEP_TRUE = (
    "log-params-norm", "log-num-zeros-in-grad", "manual-gc", "cross-entropy-loss-fusion", "no-persist-layer-norm",
    "ddp-average-in-collective", "ddp-pad-buckets-for-high-nccl-busbw", "ddp-reduce-scatter-with-fp32-accumulation",
    "overlap-param-gather-with-optimizer-step", "use-nccl-ub", "check-for-large-grads", "check-for-spiky-loss",
    "log-straggler", "synchronize-each-layer", "contigious-checkpointing", "profile-backward", "deterministic-mode",
    "fp16-lm-cross-entropy", "use-precision-aware-optimizer", "calculate-per-token-loss",
)
STEP_INT = ("timing-log-level", "manual-gc-interval", "ddp-num-buckets", "check-weight-hash-across-dp-replicas-interval",
            "gpu-sniff-test-interval")
STEP_FLOAT = ("attention-dropout",)
STEP_STR = ("DDP-impl",)


@dataclass(frozen=True)
class NotModelled:
    """A flag llmperf accepts without pricing what it changes."""

    default: Any
    """The framework's value when the flag is absent; any other value warns."""
    effect: str
    """What the flag changes in the step, and that llmperf does not time it (one clause)."""


NOT_MODELLED_STEP: dict[str, NotModelled] = {
    "barrier_with_l1_time": NotModelled(True, "level-1 timers without a barrier (only matters with --timing-log-level >= 1)"),
    "align_grad_reduce": NotModelled(True, "each pipeline stage launches its gradient reduce-scatter on its own "
                                     "instead of all stages together: the overlap this changes is not modelled"),
    "align_param_gather": NotModelled(True, "each pipeline stage launches its parameter all-gathers on its own: the "
                                      "overlap this changes is not modelled"),
    "use_contiguous_buffers_in_local_ddp": NotModelled(True, "local DDP without a contiguous gradient buffer (one "
                                                       "all-reduce per tensor): not modelled"),
    "scatter_gather_tensors_in_pipeline": NotModelled(True, "pipeline sends of whole tensors instead of TP-scattered "
                                                      "ones (TP x the bytes): not modelled"),
    "log_params_norm": NotModelled(False, "the L2 norm of every parameter, computed every iteration, and its "
                                   "all-reduce are not timed"),
    "log_num_zeros_in_grad": NotModelled(False, "a count of the zeros of every gradient each step is not timed"),
    "manual_gc_interval": NotModelled(0, "a full gc.collect() every N steps (with --manual-gc) is not timed"),
    "cross_entropy_loss_fusion": NotModelled(False, "fused cross-entropy timed as Megatron's unfused vocab-parallel "
                                             "cross-entropy (its memory is priced)"),
    "no_persist_layer_norm": NotModelled(False, "apex's non-persistent layer-norm kernel (local layers) priced as "
                                         "the default one"),
    "ddp_pad_buckets_for_high_nccl_busbw": NotModelled(False, "gradient buckets padded to 2^16 elements: the "
                                                       "bandwidth change is not modelled"),
    "ddp_reduce_scatter_with_fp32_accumulation": NotModelled(False, "gradient reduce-scatter as an all-to-all with "
                                                             "fp32 local accumulation: timed as the ring reduce-scatter"),
    "overlap_param_gather_with_optimizer_step": NotModelled(False, "first chunk's parameter all-gather overlapped "
                                                            "with the optimizer step: not modelled (its unbucketed "
                                                            "gradient buffers are)"),
    "use_nccl_ub": NotModelled(False, "NCCL user-buffer registration of the DP buffers (fewer SMs for "
                               "communication) not modelled"),
    "check_for_large_grads": NotModelled(False, "large-gradient check (a gradient norm and host sync per step) not "
                                         "timed"),
    "check_for_spiky_loss": NotModelled(False, "spiky-loss check (a host read of the loss per step) not timed"),
    "log_straggler": NotModelled(False, "straggler detector's per-step timing not timed"),
    "deterministic_mode": NotModelled(False, "deterministic kernels (slower attention and reductions) not modelled"),
    "fp16_lm_cross_entropy": NotModelled(False, "16-bit cross-entropy (no fp32 cast of the logits) priced as "
                                         "Megatron's fp32 one"),
    "gpu_sniff_test_interval": NotModelled(None, "a GPU sniff test every N steps is not timed"),
    "check_weight_hash_across_dp_replicas_interval": NotModelled(None, "a hash of every weight and its all-gather "
                                                                 "across DP every N steps are not timed"),
    "DDP_impl": NotModelled("local", "DDP implementation other than Megatron's local one: timed as the local DDP"),
}
"""dest -> (default, effect) of every flag of this module that is not priced."""

PRICED_AS_GIVEN = ("check_for_nan_in_loss_and_grad",)
"""store_false flags that need no warning: the NaN check's per-bucket gradient norm (default on) is priced
(OptimizerConfig.grad_nan_check, graph/megatron_step.py; its host read per bucket is not), and switched off by the
flag. --ddp-average-in-collective and --calculate-per-token-loss are priced too (grad_scale: no scaling pass, or
the 1 / num_tokens pass after the reduction).
--no-async-tensor-model-parallel-allreduce
is not one of them: Megatron-LM ignores it (megatron_rules.ignored_flag_warnings), Megatron-DeepSpeed's --deepspeed
switches the async all-reduce off anyway (step_fusions)."""


FUSION_FIELDS: dict[str, str] = {
    "masked_softmax_fusion": "masked_softmax", "bias_activation_fusion": "bias_activation",
    "bias_dropout_fusion": "bias_dropout_add", "apply_rope_fusion": "rope",
    "gradient_accumulation_fusion": "gradient_accumulation",
}
"""TrainingConfig fusion field -> the kernel's short name in explain's `unfused_kernels`."""
_FUSION_FLAGS = {"masked_softmax_fusion": ("masked_softmax_fusion",),
                 "bias_activation_fusion": ("bias_gelu_fusion", "bias_swiglu_fusion"),
                 "bias_dropout_fusion": ("bias_dropout_fusion",), "apply_rope_fusion": ("apply_rope_fusion",),
                 "gradient_accumulation_fusion": ("gradient_accumulation_fusion",)}
"""TrainingConfig fusion field -> the flags' destinations that switch it off (FUSION_FIELDS' order)."""


def unfused_source(flags: FlagValues, fields: dict[str, object], src: dict[str, Source]) -> None:
    """src["unfused_kernels"]: the `--no-...` flags that switched a priced fusion off (explain shows the key only
    then, so jobs on the defaults keep their output)."""
    given = [flags.seen_flags[d] for field, dests in _FUSION_FLAGS.items() if fields.get(field, True) is False
             for d in dests if flags.get(d, True) is False]
    if given:
        src["unfused_kernels"] = Source(SourceKind.ARGV, " ".join(given))


def te_softmax_fusion(flags: FlagValues, framework: str, env: Mapping[str, str], src: dict[str, Source] | None,
                      warnings: list[str]) -> dict[str, object]:
    """masked_softmax_fusion of a megatron-core job under Transformer Engine (the default --transformer-impl): its
    unfused attention is TE's UnfusedDotProductAttention, whose FusedScaleMaskSoftmax reads TE_SOFTMAX_FUSION_ENV
    (attention/dot_product_attention/softmax.py: `bool(int(os.getenv("NVTE_MASKED_SOFTMAX_FUSION", "1")))`);
    --no-masked-softmax-fusion (TransformerConfig.masked_softmax_fusion) reaches only megatron-core's local
    DotProductAttention and is ignored there, with a warning. Only under --attention-backend unfused, the one backend
    that runs this softmax (the field is read only there)."""
    if (framework != "megatron" or flags.get("transformer_impl", "transformer_engine") != "transformer_engine"
            or flags.get("attention_backend") != "unfused"):  # the other backends never run this softmax
        return {}
    value = env.get(TE_SOFTMAX_FUSION_ENV, "1")
    try:
        fused = bool(int(value))
    except ValueError:
        raise ConfigError(f"{TE_SOFTMAX_FUSION_ENV}={value!r} (environment) is not an integer: Transformer Engine reads "
                          "it with int() when it builds its attention softmax and fails. Set 0 or 1, or unset it.") from None
    if flags.get("masked_softmax_fusion", True) is False:
        warnings.append(f"{flags.seen_flags['masked_softmax_fusion']} ignored by Transformer Engine's unfused attention: "
                        f"its FusedScaleMaskSoftmax reads {TE_SOFTMAX_FUSION_ENV} (here {value}), not Megatron's "
                        "masked_softmax_fusion; priced that way. Set the variable to 0 to run PyTorch's softmax.")
    if src is not None and TE_SOFTMAX_FUSION_ENV in env:
        src["masked_softmax_fusion"] = Source(SourceKind.ENV, TE_SOFTMAX_FUSION_ENV)
    return {"masked_softmax_fusion": fused}


def step_fusions(flags: FlagValues, framework: str, optimizer: OptimizerConfig,
                 src: dict[str, Source] | None = None, env: Mapping[str, str] | None = None,
                 warnings: list[str] | None = None) -> dict[str, object]:
    """The TrainingConfig fusion and dropout fields of a Megatron(-DeepSpeed) job (fusions True by default, as
    Megatron's flags).

    - bias_activation_fusion: argument_utils.core_transformer_config_from_args takes --no-bias-swiglu-fusion with
      --swiglu, else --no-bias-gelu-fusion; validate_args turns the GeLU one off without biases (--disable-bias-linear),
      where no bias add exists to split. Megatron-DeepSpeed never fuses SwiGLU (core_transformer_config_from_args
      there sets bias_gelu_fusion False with --swiglu; its ParallelMLP then adds the bias first), nor --openai-gelu,
      --onnx-safe or --squared-relu (ParallelMLP fuses only its F.gelu branch).
    - gradient_accumulation_fusion: only Megatron's own DDP has main_grad (Megatron-DeepSpeed's LinearWithGradAccumulation
      has the fused path commented out, the DeepSpeed engine accumulates; torch FSDP2 requires the flag off and
      accumulates in param.grad), so the unfused add is Megatron-LM's without FSDP.
    - apply_rope_fusion: the fused kernel only exists for Megatron-LM (graph/layer_ops.FUSED_BY_MEGATRON).
    - async_tp_allreduce: Megatron-LM runs the async grad-input all-reduce whenever TP > 1 without sequence
      parallelism (core/tensor_parallel/layers.py: allreduce_dgrad = world_size > 1 and not sequence_parallel);
      --no-async-tensor-model-parallel-allreduce has been 'DEPRECATED. This flag is ignored.' since 5fffdfc737
      (2024-04-29), so it is ignored here too (with a warning: megatron_rules.ignored_flag_warnings).
      Megatron-DeepSpeed has the flag, but its validate_args switches the all-reduce off under --deepspeed (the
      only way it is detected: resolve.detect_framework), so there it is off whatever the flag says."""
    swiglu = bool(flags.get("swiglu"))
    activation = flags.get("bias_swiglu_fusion" if swiglu else "bias_gelu_fusion", True)
    # Megatron-DeepSpeed's ParallelMLP takes args.bias_gelu_fusion only in its F.gelu branch (megatron/model/
    # transformer.py: openai_gelu, onnx_safe, swiglu, squared_relu branches leave it False)
    if framework == "megatron-deepspeed" and any(flags.get(d) for d in ("swiglu", "openai_gelu", "onnx_safe",
                                                                        "squared_relu")):
        activation = False
    megatron_ddp = framework == "megatron" and optimizer.fsdp == "none"
    fields = {"masked_softmax_fusion": bool(flags.get("masked_softmax_fusion", True)),
              "bias_activation_fusion": bool(activation), "bias_dropout_fusion": bool(flags.get("bias_dropout_fusion", True)),
              "hidden_dropout": float(flags.get("hidden_dropout", 0.1)),
              "attention_dropout": float(flags.get("attention_dropout", 0.1)),
              "apply_rope_fusion": bool(flags.get("apply_rope_fusion", True)),
              "gradient_accumulation_fusion": bool(flags.get("gradient_accumulation_fusion", True)) or not megatron_ddp,
              "async_tp_allreduce": framework == "megatron"}
    if env is not None:  # Transformer Engine's own softmax switch (te_softmax_fusion)
        fields.update(te_softmax_fusion(flags, framework, env, src, [] if warnings is None else warnings))
    if src is not None:
        unfused_source(flags, fields, src)
    return fields


def _timing_warnings(flags: FlagValues) -> list[str]:
    """Megatron's timers synchronize the device at start and stop (megatron/core/timers.py _Timer.start/stop:
    torch.cuda.synchronize()); level 1 times a few regions per step (with a barrier unless
    --no-barrier-with-level-1-timing), level 2 every micro-batch's forward, backward and pipeline send/receive."""
    level = flags.get("timing_log_level", 0)
    if not level:
        return []
    what = ("synchronizes the device around every micro-batch's forward, backward and pipeline transfers"
            if level >= 2 else "synchronizes the device (and barriers, by default) around a few regions per step")
    return [f"{flags.seen_flags['timing_log_level']} {level}: Megatron's timing {what}; not timed"]


def _manual_gc_warnings(flags: FlagValues) -> list[str]:
    """--manual-gc turns Python's automatic collector off; only --manual-gc-interval N > 0 adds a collection (every
    N steps, training.py). Neither collector is timed, so --manual-gc alone needs no warning."""
    if flags.get("manual_gc") and flags.get("manual_gc_interval", 0) > 0:
        return [f"{flags.seen_flags['manual_gc_interval']} {flags.get('manual_gc_interval')}: "
                f"{NOT_MODELLED_STEP['manual_gc_interval'].effect}"]
    return []


def step_flag_warnings(flags: FlagValues) -> list[str]:
    """One line per step flag of this module given with a value that changes the step but is not priced."""
    special = {"manual_gc_interval", "barrier_with_l1_time"}
    out = [f"{flags.seen_flags[d]}: {rule.effect}" for d, rule in NOT_MODELLED_STEP.items()
           if d not in special and flags.has(d) and flags.get(d) != rule.default]
    if flags.get("barrier_with_l1_time", True) is False and flags.get("timing_log_level", 0) >= 1:
        out.append(f"{flags.seen_flags['barrier_with_l1_time']}: {NOT_MODELLED_STEP['barrier_with_l1_time'].effect}")
    return out + _timing_warnings(flags) + _manual_gc_warnings(flags)

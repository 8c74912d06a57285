"""The training-script flags that change step time or memory: Megatron-LM (current and older releases),
Megatron-DeepSpeed, DeepSpeed examples and the Hugging Face Trainer. Source of the names and kinds:
megatron/training/arguments.py (Megatron-LM core_r0.x), Megatron-DeepSpeed megatron/arguments.py,
transformers TrainingArguments.
"""

from __future__ import annotations

from llmperf_hook.frameworks.flags import ONE_OR_MORE, Flag, FlagValues
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.frameworks import step_flags, trainer_flags

_INT = (
    "microbatch-group-size-per-virtual-pipeline-stage", "num-layers", "encoder-num-layers", "hidden-size", "ffn-hidden-size", "num-attention-heads", "num-query-groups",
    "kv-channels", "seq-length", "encoder-seq-length", "max-position-embeddings", "vocab-size",
    "make-vocab-size-divisible-by", "num-experts", "moe-router-topk", "moe-ffn-hidden-size",
    "expert-model-parallel-size", "expert-tensor-parallel-size", "micro-batch-size", "global-batch-size",
    "batch-size", "tensor-model-parallel-size", "pipeline-model-parallel-size",
    "num-layers-per-virtual-pipeline-stage", "num-virtual-stages-per-pipeline-rank",
    "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers", "context-parallel-size",
    "model-parallel-size", "recompute-num-layers", "checkpoint-num-layers", "ddp-bucket-size", "zero-stage",
    "per-device-train-batch-size", "gradient-accumulation-steps", "max-seq-length", "block-size",
    "model-max-length", "pipeline-parallel-size", "moe-shared-expert-intermediate-size", "mtp-num-layers",
    "num-distributed-optimizer-instances", "max-seq-len", "num-key-value-heads", "empty-unused-memory-level",
    "cpu-offloading-num-layers", "q-lora-rank", "kv-lora-rank", "qk-head-dim", "qk-pos-emb-head-dim", "v-head-dim",
    "moe-router-num-groups", "moe-router-group-topk", "pad-vocab-size-to", "ds-sequence-parallel-fpdt-chunk-size",
    "extra-vocab-size", "padded-vocab-size", "max-length", "num-layers-at-start-in-bf16", "num-layers-at-end-in-bf16",
    "wgrad-deferral-limit",
    # OpenRLHF (openrlhf/cli/train_*.py): frameworks/openrlhf.py
    "max-len", "micro-train-batch-size", "train-batch-size", "zpg",
)
_STR = (
    "softmax-type", "tokenizer-type", "tokenizer-model", "vocab-file", "merge-file", "normalization", "position-embedding-type", "moe-layer-freq",
    "fp8-format", "fp8-recipe", "transformer-impl", "recompute-granularity", "recompute-method", "optimizer",
    "attention-backend", "deepspeed-config", "deepscale-config", "model-name-or-path", "config-name",
    "tokenizer-name", "moe-token-dispatcher-type", "pipeline-model-parallel-layout", "cp-comm-type",
    "model-type", "attn-implementation", "cuda-graph-impl", "dtype", "step-batch-size-schedule", "hybrid-override-pattern",
    "pp-partition-method", "moe-router-score-function", "ckpt-format", "window-size", "data-parallel-sharding-strategy",
    "fsdp", "rope-type", "moe-flex-dispatcher-backend", "moe-router-dtype", "fp4-format", "patch-tokenizer-type", "load",
    "attention-head-type", "tokenizer-file", "model-name", "pretrain", "param-dtype", "cross-entropy-fusion-impl",
    "tokenizer-name-or-path", "main-grads-dtype", "main-params-dtype", "exp-avg-dtype", "exp-avg-sq-dtype",
)
_FLOAT = ("hidden-dropout", "clip-grad", "sgd-momentum", "max-grad-norm", "optimizer-offload-fraction", "moe-expert-capacity-factor",
          "max-norm", "loss-scale")
_TRUE = (
    "ds-sequence-parallel-fpdt", "ds-sequence-parallel-fpdt-offloading",
    "embed-layernorm", "group-query-attention", "swiglu", "use-rotary-position-embeddings", "untie-embeddings-and-output-weights",
    "account-for-embedding-in-pipeline-split", "account-for-loss-in-pipeline-split", "sequence-parallel", "fp16",
    "bf16", "recompute-activations", "checkpoint-activations", "distribute-saved-activations",
    "deepspeed-activation-checkpointing", "partition-activations", "use-distributed-optimizer",
    "overlap-grad-reduce", "overlap-param-gather", "tp-comm-overlap", "accumulate-allreduce-grads-in-fp32",
    "use-flash-attn", "use-flash-attn-v2", "use-flash-attn-triton", "no-pipeline-parallel", "cpu-optimizer",
    "gradient-checkpointing", "adam-offload", "moe-grouped-gemm", "use-torch-fsdp2", "use-megatron-fsdp", "cpu-offloading",
    "multi-latent-attention", "defer-embedding-wgrad-compute", "fp8-param-gather", "use-mcore-models",
    "squared-relu", "deepscale", "grad-reduce-in-bf16", "optimizer-cpu-offload", "enable-cuda-graph",
    "openai-gelu", "use-te-activation-func",  # the MLP's GELU (frameworks/script_gelu.megatron_gelu)
    "external-cuda-graph", "moe-pad-expert-input-to-capacity", "overlap-moe-expert-parallel-comm", "offload", "qk-layernorm", "quick-geglu", "fp8-e4m3", "fp8-hybrid",
    "moe-router-pre-softmax", "moe-layer-recompute", "rotary-interleaved", "mla-down-proj-fusion",
    "moe-shared-expert-gate", "moe-shared-expert-overlap", "moe-enable-deepep", "moe-permute-fusion",
    "delay-wgrad-compute", "moe-router-padding-for-quantization", "checkpoint-in-cpu", "attention-softmax-in-fp32",
    "apply-query-key-layer-scaling", "use-checkpoint-args", "activation-checkpointing",
    "disable-parameter-transpose-cache", "add-qkv-bias", "first-last-layers-bf16",
)
_FALSE = {
    "disable-bias-linear": "add_bias_linear",
    "no-position-embedding": "add_position_embedding",
    "no-overlap-p2p-communication": "overlap_p2p_comm",
    "no-gradient-accumulation-fusion": "gradient_accumulation_fusion",
    "no-rope-fusion": "apply_rope_fusion",
    "no-masked-softmax-fusion": "masked_softmax_fusion",
    "no-query-key-layer-scaling": "apply_query_key_layer_scaling",  # Megatron-DeepSpeed (on by default there)
    "no-pin-cpu-grads": "pin_cpu_grads",  # HybridDeviceOptimizer's host copies (schedule/host_memory.py)
    "no-pin-cpu-params": "pin_cpu_params",
}


def _dest(name: str) -> str:
    return name.replace("-", "_")


def _build() -> dict[str, Flag]:
    table: dict[str, Flag] = {}
    for names, kind in ((_INT, "int"), (_STR, "str"), (_FLOAT, "float"), (_TRUE, "true")):
        for name in names:
            table["--" + name] = Flag(_dest(name), kind)  # type: ignore[arg-type]
    for name, dest in _FALSE.items():
        table["--" + name] = Flag(dest, "false")
    # Step flags (frameworks/step_flags.py): fusions, per-step checks, timers, DP bucket settings.
    for names, kind in ((step_flags.STEP_INT, "int"), (step_flags.STEP_STR, "str"), (step_flags.STEP_TRUE, "true"),
                        (step_flags.STEP_FLOAT, "float"), (trainer_flags.TRAINER_INT, "int"),
                        (trainer_flags.TRAINER_STR, "str"), (trainer_flags.TRAINER_TRUE, "true"),
                        (trainer_flags.TRAINER_FLOAT, "float")):
        for name in names:
            table["--" + name] = Flag(_dest(name), kind)  # type: ignore[arg-type]
    for name, dest in step_flags.STEP_FALSE.items():
        table["--" + name] = Flag(dest, "false")
    # Aliases and special shapes.
    table["--deepspeed"] = Flag("deepspeed", "path_or_true")
    table["--virtual-pipeline-model-parallel-size"] = Flag("num_virtual_stages_per_pipeline_rank", "int")
    table["--rampup-batch-size"] = Flag("rampup_batch_size", "str", nargs=3)
    table["--decrease-batch-size-if-needed"] = Flag("decrease_batch_size_if_needed", "true")  # megatron_rampup.py
    # Megatron-LM builds it from TransformerConfig.recompute_modules: List[str] -> nargs='+' (argument_utils.py)
    table["--recompute-modules"] = Flag("recompute_modules", "str", nargs=ONE_OR_MORE)
    table["--train-micro-batch-size-per-gpu"] = Flag("micro_batch_size", "int")
    table["--tensor-parallel-size"] = Flag("tensor_model_parallel_size", "int")
    table["--ffn-dim"] = Flag("ffn_hidden_size", "int")
    # Megatron-DeepSpeed's MoE spellings (megatron/arguments.py there): EP size, top-k (default 1), MoE every k layers (default 2).
    table["--moe-expert-parallel-size"] = Flag("expert_model_parallel_size", "int")
    table["--ep-size"] = Flag("expert_model_parallel_size", "int")
    table["--topk"] = Flag("ds_moe_topk", "int")
    table["--ds-sequence-parallel-size"] = Flag("ds_sequence_parallel_size", "int")  # DeepSpeed-Ulysses
    table["--expert-interval"] = Flag("ds_moe_expert_interval", "int")
    # store_true, default off: DeepSpeed's experts split over TP (frameworks/megatron._deepspeed_expert_tp)
    table["--enable-expert-tensor-parallelism"] = Flag("enable_expert_tensor_parallelism", "true")
    table["--add-bias-linear"] = Flag("add_bias_linear", "true")
    # Megatron-DeepSpeed's legacy ParallelMLP runs erf_gelu under it; argparse type=bool: any non-empty value is True
    # (frameworks/script_gelu.megatron_gelu).
    table["--onnx-safe"] = Flag("onnx_safe", "str")
    table["--overlap-p2p-comm"] = Flag("overlap_p2p_comm", "true")
    table["--overlap-p2p-communication"] = Flag("overlap_p2p_comm", "true")
    # nargs='+' in Megatron: the first value is read, the others are skipped as positional words.
    table["--hierarchical-context-parallel-sizes"] = Flag("hierarchical_context_parallel_sizes", "int")
    # TransformerConfig Union[str, List[str]] fields: nargs='+' (argument_utils.py), a list of several values read whole.
    table["--moe-router-load-balancing-type"] = Flag("moe_router_load_balancing_type", "str", nargs=ONE_OR_MORE)
    table["--moe-aux-loss-coeff"] = Flag("moe_aux_loss_coeff", "float", nargs=ONE_OR_MORE)
    table["--moe-router-padding-for-fp8"] = Flag("moe_router_padding_for_quantization", "true")  # deprecated alias
    return table


SCRIPT_FLAGS: dict[str, Flag] = _build()

# Integer flags that may be zero (everything else must be at least 1): 0 experts = dense; ZeRO stage 0.
ZERO_ALLOWED = frozenset({"num_experts", "zero_stage", "moe_shared_expert_intermediate_size", "mtp_num_layers",
                          "empty_unused_memory_level", "cpu_offloading_num_layers", "timing_log_level",
                          "manual_gc_interval", "extra_vocab_size", "padded_vocab_size", "recompute_num_layers",
                          "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"})

FALSE_DESTS = frozenset(dest for dest, kind in ((f.dest, f.kind) for f in SCRIPT_FLAGS.values()) if kind == "false")
"""Destinations of store_false flags (`--no-X`): True unless given."""

# Accepted, change performance, but not modelled by llmperf: one warning each when present (a store_false flag's
# when given, i.e. False; frameworks/step_flags.py has the step flags' rules).
NOT_MODELLED: dict[str, str] = {
    "rampup_batch_size": "batch-size ramp-up: predicted at the final global batch size",
    "step_batch_size_schedule": "step batch-size schedule: predicted at its final batch (steps at its earlier "
                                "batches are not priced)",
    "embed_layernorm": "embedding layer norm (bigscience Megatron-DeepSpeed) not modelled",
    "empty_unused_memory_level": "torch.cuda.empty_cache() after every step not timed",
    "hybrid_override_pattern": "hybrid Mamba/attention layer pattern: every layer modelled as a transformer layer",
    "use_torch_fsdp2": "torch FSDP2 modelled as ZeRO-3 sharding (its gathers and reduce-scatters as DeepSpeed's)",
    "use_megatron_fsdp": "Megatron FSDP modelled as the ZeRO stage of its --data-parallel-sharding-strategy",
    "cpu_offloading": "activation CPU offloading: GPU and host memory priced, its PCIe copies assumed hidden "
                      "behind the layers' compute (not timed)",
    "defer_embedding_wgrad_compute": "deferred embedding wgrad: the buffers it keeps are priced, its GEMMs' move "
                                     "into the pipeline flush is not timed",
    "num_distributed_optimizer_instances": "multiple distributed-optimizer instances: their state and optimizer step "
                                           "are sharded per instance, their gradient reduction and parameter gather "
                                           "priced as one instance's over all dp x cp ranks",
    "cp_comm_type": "context-parallel communication type: p2p ring assumed",
    "squared_relu": "squared-ReLU activation timed as GeLU",
    "window_size": "sliding-window attention not modelled: attention priced as full causal",
    "position_embedding_type": "relative position bias (T5-style) not modelled: priced as learned absolute embeddings",
    "distribute_saved_activations": "distributed saved activations not modelled",
    "enable_cuda_graph": "CUDA graphs not modelled",
    "external_cuda_graph": "CUDA graphs not modelled",
    "cuda_graph_impl": "CUDA graphs not modelled",
    "mla_down_proj_fusion": "fused MLA down projections priced as the two separate GEMMs",
}


def megatron_memory_fields(flags: FlagValues) -> dict[str, object]:
    """TrainingConfig fields of the Megatron flags that change what Transformer Engine and the loss keep in memory
    (schedule/memory.py, schedule/activations.py): --fp8-recipe (default delayed, arguments.py), --disable-parameter-
    transpose-cache, and --cross-entropy-fusion-impl (default native) when --cross-entropy-loss-fusion is given
    (language_module.py compute_language_model_loss reads the impl only then); --wgrad-deferral-limit (default 0)
    when --defer-embedding-wgrad-compute is given; and the layers --first-last-layers-bf16 keeps out of FP8
    (graph/build.py prices them as bf16 layers)."""
    fused = bool(flags.get("cross_entropy_loss_fusion"))
    return {"fp8_recipe": str(flags.get("fp8_recipe") or "delayed"),
            "parameter_transpose_cache": not flags.get("disable_parameter_transpose_cache"),
            "cross_entropy_fusion_impl": str(flags.get("cross_entropy_fusion_impl") or "native") if fused else "",
            "wgrad_deferral_limit": int(flags.get("wgrad_deferral_limit") or 0)
            if flags.get("defer_embedding_wgrad_compute") else None,
            **bf16_edge_layer_fields(flags)}


def bf16_edge_layer_fields(flags: FlagValues) -> dict[str, int]:
    """--first-last-layers-bf16: the first --num-layers-at-start-in-bf16 and last --num-layers-at-end-in-bf16
    transformer layers (TransformerConfig defaults 1 and 1) run in bf16 in an FP8 run; both 0 without the flag."""
    if not flags.get("first_last_layers_bf16"):
        return {"bf16_layers_at_start": 0, "bf16_layers_at_end": 0}
    start, end = flags.get("num_layers_at_start_in_bf16"), flags.get("num_layers_at_end_in_bf16")
    return {"bf16_layers_at_start": 1 if start is None else int(start),
            "bf16_layers_at_end": 1 if end is None else int(end)}


def apply_memory_flags(cfg: TrainingConfig, flags: FlagValues) -> TrainingConfig:
    """`cfg` with megatron_memory_fields for a Megatron(-DeepSpeed) job, each given flag's origin in its sources;
    other frameworks unchanged."""
    from dataclasses import replace

    if cfg.framework not in ("megatron", "megatron-deepspeed"):
        return cfg
    sources = dict(cfg.sources)
    for field, dest in (("fp8_recipe", "fp8_recipe"), ("parameter_transpose_cache", "disable_parameter_transpose_cache"),
                        ("cross_entropy_fusion_impl", "cross_entropy_fusion_impl"),
                        ("wgrad_deferral_limit", "defer_embedding_wgrad_compute"),
                        ("bf16_layers_at_start", "first_last_layers_bf16"),
                        ("bf16_layers_at_end", "first_last_layers_bf16")):
        if flags.has(dest):
            sources[field] = flags.source(dest)
    return replace(cfg, sources=sources, **megatron_memory_fields(flags))  # type: ignore[arg-type]

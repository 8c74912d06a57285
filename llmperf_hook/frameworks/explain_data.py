"""The resolved job as flat JSON (`llmperf explain --format json`, and the `config` object of predict's JSON)."""

from __future__ import annotations

from typing import Any

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.launch.parsed_job import ParsedJob

EXPLAIN_KEYS = (
    "world_size", "nnodes", "nproc_per_node", "tp", "pp", "vpp", "cp", "dp", "ep", "etp", "micro_batch_size",
    "global_batch_size", "num_microbatches", "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
    "num_query_groups", "kv_channels", "seq_length", "vocab_size", "padded_vocab_size", "sequence_parallel",
    "recompute", "recompute_method", "recompute_num_layers", "zero_stage", "precision", "framework", "launcher",
    "num_experts", "moe_router_topk", "moe_ffn_hidden_size", "swiglu", "normalization", "position_embedding",
    "untie_embeddings", "distributed_optimizer", "offload_optimizer", "offload_param", "overlap_grad_reduce",
    "overlap_param_gather", "attention_backend", "pipeline_schedule",
)


DEEPSEEK_KEYS = (
    "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim",
    "mtp_num_layers", "moe_shared_expert_intermediate_size",
)
"""Shown only when in effect (MLA on; MTP depths > 0; shared experts in an MoE model), so other jobs' output
keeps its keys."""


def deepseek_values(cfg: TrainingConfig) -> dict[str, Any]:
    """The DEEPSEEK_KEYS in effect for `cfg`."""
    m = cfg.model
    out: dict[str, Any] = {}
    if m.multi_latent_attention:
        out.update(multi_latent_attention=True, q_lora_rank=m.q_lora_rank, kv_lora_rank=m.kv_lora_rank,
                   qk_head_dim=m.qk_head_dim, qk_pos_emb_head_dim=m.qk_pos_emb_head_dim, v_head_dim=m.v_head_dim)
    if m.mtp_num_layers:
        out["mtp_num_layers"] = m.mtp_num_layers
    if m.moe_shared_expert_intermediate_size and m.num_experts:
        out["moe_shared_expert_intermediate_size"] = m.moe_shared_expert_intermediate_size
    return out


MOE_DISPATCH_KEYS = ("moe_token_dispatcher", "moe_flex_dispatcher_backend", "moe_grouped_gemm",
                     "moe_expert_capacity_factor", "moe_pad_expert_input_to_capacity",
                     "overlap_moe_expert_parallel_comm", "moe_shared_expert_overlap")
"""Shown for Megatron-Core MoE models only (graph/moe_ops.py prices them)."""


def moe_dispatch_values(cfg: TrainingConfig) -> dict[str, Any]:
    """The MOE_DISPATCH_KEYS of a Megatron MoE job ({} otherwise): the dispatcher always, the rest when set."""
    m, d = cfg.model, cfg.model.moe_dispatch
    if not m.num_experts or cfg.framework != "megatron":
        return {}
    out: dict[str, Any] = {"moe_token_dispatcher": d.token_dispatcher or "allgather", "moe_grouped_gemm": d.grouped_gemm}
    if out["moe_token_dispatcher"] == "flex":
        out["moe_flex_dispatcher_backend"] = d.flex_backend
    if d.capacity_factor is not None:
        out.update(moe_expert_capacity_factor=d.capacity_factor, moe_pad_expert_input_to_capacity=d.pad_to_capacity)
    if d.overlap_ep_comm:
        out["overlap_moe_expert_parallel_comm"] = True
    if d.shared_expert_overlap:
        out["moe_shared_expert_overlap"] = True
    return out


DEEPSPEED_EXTRA_KEYS = ("zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients",
                        "grad_accum_dtype", "grad_comm_dtype", "offload_optimizer_ratio", "partition_activations",
                        "checkpoint_in_cpu", "stage3_max_reuse_distance", "optimizer_name", "zero0_bf16_accum_dtype")
"""ZeRO++, the gradient dtypes, a partial optimizer offload, Megatron-DeepSpeed's checkpoint placement (shown at any
recompute granularity, as configure() gets it; the warnings say what it acts on: full recompute's layer checkpoints,
priced, selective's attention checkpoint, or nothing without recompute), ZeRO-3's reuse distance and a one-state
optimizer (SGD, Adagrad, Lion from the ds_config), the gradient dtype of bf16 without ZeRO (which picks BF16_Optimizer): shown only when set away from DeepSpeed's defaults
(graph/step_ops.py, graph/zero3_trace.py and schedule/memory.py price them)."""


def deepspeed_extra_values(cfg: TrainingConfig) -> dict[str, Any]:
    """The DEEPSPEED_EXTRA_KEYS in effect for `cfg`."""
    o, r = cfg.optimizer, cfg.recompute
    values = {"zero_hpz_partition_size": o.zero_hpz_partition_size if o.zero_hpz_partition_size > 1 else None,
              "zero_quantized_weights": o.zero_quantized_weights or None,
              "zero_quantized_gradients": o.zero_quantized_gradients or None,
              "grad_accum_dtype": o.grad_accum_dtype, "grad_comm_dtype": o.grad_comm_dtype,
              "offload_optimizer_ratio": o.offload_optimizer_ratio if o.offload_optimizer_ratio < 1.0 else None,
              "partition_activations": r.partition_activations or None, "checkpoint_in_cpu": r.checkpoint_in_cpu or None,
              "stage3_max_reuse_distance": o.stage3_max_reuse_distance if o.zero_stage == 3 and
              o.stage3_max_reuse_distance not in (None, 1_000_000_000) else None,
              "optimizer_name": o.name if o.name != "adam" else None,
              "zero0_bf16_accum_dtype": o.zero0_bf16_accum_dtype if o.zero_stage == 0 else None}
    return {k: v for k, v in values.items() if v is not None}


def explain_json(cfg: TrainingConfig, job: ParsedJob | None = None) -> dict[str, Any]:
    """Flat keys (EXPLAIN_KEYS) + "script" + "sources" {key: origin} + "warnings" [...]."""
    m, p, b, o, r = cfg.model, cfg.parallel, cfg.batch, cfg.optimizer, cfg.recompute
    values: dict[str, Any] = {
        "world_size": cfg.world_size, "nnodes": cfg.nnodes, "nproc_per_node": cfg.nproc_per_node,
        "tp": p.tp, "pp": p.pp, "vpp": p.vpp, "cp": p.cp, "dp": p.dp, "ep": p.ep, "etp": p.etp,
        "micro_batch_size": b.micro_batch_size, "global_batch_size": b.global_batch_size,
        "num_microbatches": b.num_microbatches, "num_layers": m.num_layers, "hidden_size": m.hidden_size,
        "ffn_hidden_size": m.ffn_hidden_size, "num_attention_heads": m.num_attention_heads,
        "num_query_groups": m.num_query_groups, "kv_channels": m.kv_channels, "seq_length": m.seq_length,
        "vocab_size": m.vocab_size, "padded_vocab_size": m.padded_vocab_size, "sequence_parallel": p.sequence_parallel,
        "recompute": r.granularity, "recompute_method": r.method, "recompute_num_layers": r.num_layers,
        "zero_stage": o.zero_stage, "precision": cfg.precision, "framework": cfg.framework, "launcher": cfg.launcher,
        "num_experts": m.num_experts, "moe_router_topk": m.moe_router_topk if m.num_experts else None,
        "moe_ffn_hidden_size": m.moe_ffn_hidden_size if m.num_experts else None, "swiglu": m.swiglu,
        "normalization": m.normalization, "position_embedding": m.position_embedding,
        "untie_embeddings": m.untie_embeddings, "distributed_optimizer": o.distributed_optimizer,
        "offload_optimizer": o.offload_optimizer, "offload_param": o.offload_param,
        "overlap_grad_reduce": o.overlap_grad_reduce, "overlap_param_gather": o.overlap_param_gather,
        "attention_backend": cfg.attention_backend, "pipeline_schedule": cfg.pipeline_schedule,
    }
    values.update(deepseek_values(cfg))
    values.update(moe_dispatch_values(cfg))
    values.update(deepspeed_extra_values(cfg))
    if not cfg.tp_comm_ordered:  # shown only when the job sets it away from 1 (frameworks/assemble.device_connections)
        values["cuda_device_max_connections"] = cfg.cuda_device_max_connections
    if "unfused_kernels" in cfg.sources:  # a --no-...-fusion flag priced (frameworks/step_flags.py)
        from llmperf_hook.frameworks.step_flags import FUSION_FIELDS

        values["unfused_kernels"] = ", ".join(name for field, name in FUSION_FIELDS.items() if not getattr(cfg, field))
    if "hidden_dropout" in cfg.sources:  # a user's script under Megatron's flags (frameworks/script_dropout.py)
        values.update(hidden_dropout=cfg.hidden_dropout, attention_dropout=cfg.attention_dropout)
    # the GELU a user's script runs, or an exact one of Megatron's MLP (frameworks/script_gelu.py); absent: tanh.
    # refine files the run's aten::gelu samples by it (instrument/op_profile.by_gelu_variant).
    if ("gelu_approximate" in cfg.sources or cfg.gelu_approximate != "tanh") and not m.swiglu:
        values["gelu_approximate"] = cfg.gelu_approximate
    out: dict[str, Any] = {k: values[k] for k in (*EXPLAIN_KEYS, *DEEPSEEK_KEYS, *MOE_DISPATCH_KEYS,
                                                  *DEEPSPEED_EXTRA_KEYS, "unfused_kernels", "cuda_device_max_connections",
                                                  "hidden_dropout", "attention_dropout", "gelu_approximate")
                           if k in values}
    if job is not None:
        out["script"] = job.script
    out["sources"] = {k: str(v) for k, v in cfg.sources.items() if k in values}
    out["warnings"] = list(cfg.warnings)
    return out

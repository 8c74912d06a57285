"""Megatron-Core's DeepSeek-style model flags -> ModelShape fields: multi-latent attention (MLA), multi-token
prediction (MTP) and MoE shared experts, with Megatron's defaults and the rules it enforces.

Defaults (megatron/training/arguments.py _add_mla_args): --q-lora-rank None (no query compression),
--kv-lora-rank 32, --qk-head-dim 128, --qk-pos-emb-head-dim 64, --v-head-dim 128; --rope-type None (MLA then
takes MLATransformerConfig's "yarn"). Rules, each an exit 2 here as Megatron raises at start-up:
- validate_args: MLA and --group-query-attention are mutually exclusive; --mla-down-proj-fusion needs MLA;
  --mtp-num-layers needs --position-embedding-type rope or none (validate_args's 'MTP validation' assert; its
  later, looser list of learned_absolute/rope/mrope/none never gets to decide).
- argument_utils.py core_transformer_config_from_args: --rope-type other than rope needs MLA.
- MLATransformerConfig.__post_init__: rope fusion (on unless --no-rope-fusion, off by validate_args for a
  position type other than rope) needs rope_type yarn;
  TransformerConfig: --rotary-interleaved does not work with MLA; moe_shared_expert_intermediate_size > 0;
  --moe-shared-expert-overlap needs the alltoall or flex token dispatcher (default allgather).
- moe/shared_experts.py SharedExpertMLP: shared experts refuse linear biases (--disable-bias-linear).
"""

from __future__ import annotations

from typing import Any

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.pipeline_layout import layout_stages
from llmperf_hook.provenance import Source, SourceKind

MLA_DEFAULTS = {"kv_lora_rank": 32, "qk_head_dim": 128, "qk_pos_emb_head_dim": 64, "v_head_dim": 128}
"""megatron/training/arguments.py _add_mla_args defaults (q_lora_rank: None)."""
MLA_KEYS = ("multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim",
            "v_head_dim")
MTP_POSITION_TYPES = ("rope", "none")
"""validate_args: 'Multi-Token Prediction (MTP) is not supported with {type} position embedding type. The supported
position embedding types are rope and none' (megatron/training/arguments.py, MTP validation; re-added 9d71cb1c,
Feb 2026, before the mRoPE list of 70719cdd that would also accept learned_absolute and mrope)."""


def _mla_rules(flags: FlagValues) -> None:
    if flags.get("group_query_attention"):
        raise ConfigError(f"{flags.spelling('multi_latent_attention')} and {flags.spelling('group_query_attention')} are "
                          "both given; Megatron asserts 'Group query attention is mutually exclusive with multi latent "
                          "attention' (validate_args). MLA has no query groups: drop --group-query-attention.")
    if flags.get("rotary_interleaved"):
        raise ConfigError(f"{flags.spelling('rotary_interleaved')} with {flags.spelling('multi_latent_attention')}: Megatron "
                          "raises 'rotary_interleaved does not work with multi_latent_attention' (TransformerConfig). "
                          "Drop --rotary-interleaved.")
    rope_type = flags.get("rope_type") or "yarn"
    fused = flags.get("apply_rope_fusion", True) and _position_type(flags) == "rope"  # validate_args turns it off
    if rope_type != "yarn" and fused:
        raise ConfigError(f"--rope-type {rope_type} ({flags.source('rope_type')}) with MLA and rope fusion on (Megatron's "
                          "default): MLATransformerConfig raises 'apply_rope_fusion for MLA only works with YARN RoPE'. "
                          "Use --rope-type yarn (MLA's default), or add --no-rope-fusion.")


def _position_type(flags: FlagValues) -> str:
    """--position-embedding-type as validate_args leaves it (the legacy --use-rotary-position-embeddings sets rope)."""
    if flags.get("use_rotary_position_embeddings"):
        return "rope"
    return str(flags.get("position_embedding_type", "learned_absolute"))


def _rope_type_rules(flags: FlagValues, mla: bool) -> None:
    rope_type = flags.get("rope_type")
    if rope_type is not None and rope_type not in ("rope", "yarn"):
        raise ConfigError(f"--rope-type {rope_type} ({flags.source('rope_type')}) is not a choice Megatron offers "
                          "(rope, yarn). Pick one of them.")
    if rope_type not in (None, "rope") and not mla:
        raise ConfigError(f"--rope-type {rope_type} ({flags.source('rope_type')}) without --multi-latent-attention: "
                          "Megatron asserts 'Common attention only support rope_type=\"rope\"' "
                          "(argument_utils.py). Use --rope-type rope, or add --multi-latent-attention.")
    if flags.get("mla_down_proj_fusion") and not mla:
        raise ConfigError(f"{flags.spelling('mla_down_proj_fusion')} without --multi-latent-attention: Megatron asserts "
                          "'--mla-down-proj-fusion requires --multi-latent-attention'. Add the one or drop the other.")


def resolve_mla(flags: FlagValues, src: dict[str, Source], warnings: list[str]) -> dict[str, Any]:
    """ModelShape fields of multi-latent attention ({} without --multi-latent-attention)."""
    mla = bool(flags.get("multi_latent_attention"))
    _rope_type_rules(flags, mla)
    if not mla:
        if flags.get("qk_layernorm"):
            warnings.append(f"{flags.spelling('qk_layernorm')}: query/key layer norms not modelled")
        ignored = [flags.spelling(k) for k in ("q_lora_rank", *MLA_DEFAULTS) if flags.has(k)]
        if ignored:
            warnings.append(f"{', '.join(ignored)}: ignored without --multi-latent-attention (Megatron builds standard "
                            "attention and does not read them)")
        return {}
    _mla_rules(flags)
    src["multi_latent_attention"] = flags.source("multi_latent_attention")
    out: dict[str, Any] = {"multi_latent_attention": True, "qk_layernorm": bool(flags.get("qk_layernorm"))}
    if flags.has("q_lora_rank"):
        out["q_lora_rank"], src["q_lora_rank"] = flags.get("q_lora_rank"), flags.source("q_lora_rank")
    else:
        out["q_lora_rank"] = None
        src["q_lora_rank"] = Source(SourceKind.DEFAULT, "Megatron --q-lora-rank default None: one q projection")
    for dest, default in MLA_DEFAULTS.items():
        if flags.has(dest):
            out[dest], src[dest] = flags.get(dest), flags.source(dest)
        else:
            out[dest], src[dest] = default, Source(SourceKind.DEFAULT, f"Megatron --{dest.replace('_', '-')} default {default}")
    return out


def resolve_mtp(flags: FlagValues, src: dict[str, Source], warnings: list[str], ds_flavour: bool) -> dict[str, Any]:
    """ModelShape.mtp_num_layers: MTP depths, all on the last pipeline stage (multi_token_prediction.py
    mtp_on_this_rank without a custom layout)."""
    depths = flags.get("mtp_num_layers") or 0
    if depths == 0:
        return {}
    if ds_flavour:
        warnings.append(f"{flags.spelling('mtp_num_layers')}: multi-token prediction is Megatron-Core's; not modelled for "
                        "Megatron-DeepSpeed")
        return {}
    # Since core_v0.17.0 (9d71cb1, which reapplied the reverted 300d1b6 'Add MTP support for hybrid models';
    # core_v0.16.0 holds 300d1b6 and its revert 6472fb9) validate_args checks MTP before it maps the
    # legacy --use-rotary-position-embeddings to rope ('MTP validation' precedes 'Legacy RoPE arguments'): that flag
    # alone does not satisfy the check. Releases up to core_v0.16 map it first; Pai-Megatron-Patch runs its pinned
    # backends (Megatron-LM-250328 / 250624 / 250908, all before that change), so there it is rope.
    kind = str(flags.get("position_embedding_type", "learned_absolute"))
    if flags.get("use_rotary_position_embeddings") and flags.has("patch_tokenizer_type"):
        kind = "rope"
    if kind not in MTP_POSITION_TYPES:
        where = flags.source("position_embedding_type", "Megatron's default")
        legacy = (" (--use-rotary-position-embeddings, the legacy spelling, is mapped to rope only after this check "
                  "since core_v0.17.0)" if flags.get("use_rotary_position_embeddings") else "")
        raise ConfigError(f"--mtp-num-layers {depths} ({flags.source('mtp_num_layers')}) with --position-embedding-type "
                          f"{kind} ({where}): Megatron asserts 'Multi-Token Prediction (MTP) is not supported with {kind} "
                          f"position embedding type. The supported position embedding types are rope and none' "
                          f"(validate_args){legacy}. Add --position-embedding-type rope.")
    layout, pp = flags.get("pipeline_model_parallel_layout"), flags.get("pipeline_model_parallel_size", 1)
    if layout and "m" in layout and not _mtp_on_last_rank(layout, pp):
        warnings.append("--pipeline-model-parallel-layout places the MTP layers on a pipeline rank before the last one "
                        "(Megatron's standalone MTP stage): priced on the last pipeline stage")
    src["mtp_num_layers"] = flags.source("mtp_num_layers")
    return {"mtp_num_layers": depths}


def _mtp_on_last_rank(layout: str, pp: int) -> bool:
    """Whether the layout's MTP stage runs on the last pipeline rank (stage i runs on rank i % PP)."""
    stages = layout_stages(layout)
    return all(i % pp == pp - 1 for i, stage in enumerate(stages) if "m" in stage)


def resolve_shared_experts(flags: FlagValues, num_experts: int, src: dict[str, Source],
                           warnings: list[str]) -> dict[str, Any]:
    """ModelShape.moe_shared_expert_intermediate_size (and the gate) of the MoE layers."""
    if not flags.has("moe_shared_expert_intermediate_size"):
        return {}
    size, where = flags.get("moe_shared_expert_intermediate_size"), flags.source("moe_shared_expert_intermediate_size")
    if size <= 0:
        raise ConfigError(f"--moe-shared-expert-intermediate-size {size} ({where}): Megatron raises "
                          "'moe_shared_expert_intermediate_size must be num_shared_experts * ffn_size_of_each_shared_expert' "
                          "for a value <= 0 (TransformerConfig). Give the shared experts' total width, or drop the flag.")
    if num_experts == 0:
        warnings.append("--moe-shared-expert-intermediate-size: ignored without --num-experts (no MoE layer builds "
                        "shared experts)")
        return {}
    if flags.get("add_bias_linear", True):
        raise ConfigError(f"--moe-shared-expert-intermediate-size {size} ({where}) with linear biases on (Megatron's "
                          "default --add-bias-linear): SharedExpertMLP asserts 'bias is not supported in the shared "
                          "experts, please set --disable-bias-linear instead'. Add --disable-bias-linear.")
    dispatcher = flags.get("moe_token_dispatcher_type", "allgather")
    if flags.get("moe_shared_expert_overlap") and dispatcher not in ("alltoall", "flex"):
        raise ConfigError(f"{flags.spelling('moe_shared_expert_overlap')} with --moe-token-dispatcher-type {dispatcher} "
                          f"({flags.source('moe_token_dispatcher_type', 'Megatron default allgather')}): Megatron raises "
                          "'moe_shared_expert_overlap only works with alltoall or flex token dispatcher'. Use "
                          "--moe-token-dispatcher-type alltoall.")
    src["moe_shared_expert_intermediate_size"] = where
    return {"moe_shared_expert_intermediate_size": size, "moe_shared_expert_gate": bool(flags.get("moe_shared_expert_gate"))}

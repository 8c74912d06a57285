"""Hugging Face MoE and multi-latent-attention configs -> Megatron's ModelShape fields.

Each family's modeling file (huggingface/transformers src/transformers/models/...) decides which decoder layers
are sparse and what shared experts they hold; these map onto Megatron's --moe-layer-freq list form
(moe_layer_pattern: 1 = MoE layer, 0 = dense MLP of ffn_hidden_size), --moe-shared-expert-intermediate-size (the
summed width of the shared experts, one dense SwiGLU MLP, as Megatron's SharedExpertMLP) and
--moe-shared-expert-gate (a sigmoid gate of h weights scaling the shared experts' output):

- qwen2_moe/modeling_qwen2_moe.py: Qwen2MoeDecoderLayer builds Qwen2MoeSparseMoeBlock where `layer_idx not in
  mlp_only_layers and num_experts > 0 and (layer_idx + 1) % decoder_sparse_step == 0`, else Qwen2MoeMLP of
  intermediate_size; the sparse block holds `shared_expert` (Qwen2MoeMLP of shared_expert_intermediate_size) and
  `shared_expert_gate` (nn.Linear(hidden, 1, bias=False), sigmoid). Qwen3-MoE (qwen3_moe) has the same layer rule
  and no shared expert.
- deepseek_v2 / deepseek_v3 (and the Hub's remote modeling_deepseek.py, Moonlight's too): layer_idx >=
  first_k_dense_replace (and layer_idx % moe_layer_freq == 0 in the remote code) is MoE, the first ones are dense
  MLPs of intermediate_size; `shared_experts` is one MLP of moe_intermediate_size * n_shared_experts, ungated.
- llama4/modeling_llama4.py: Llama4TextMoe in the layers of `moe_layers` (Llama4TextConfig default:
  interleave_moe_layer_step - 1, then every interleave_moe_layer_step-th), experts and the ungated
  `shared_expert` (Llama4TextMLP) of intermediate_size; dense layers' MLP of intermediate_size_mlp.
"""

from __future__ import annotations

from typing import Any

from llmperf_hook.errors import UsageError


def _count(raw: dict[str, Any], key: str, origin: str, default: int = 0, least: int = 0) -> int:
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise UsageError(f"Hugging Face config {origin}: {key} = {value!r} must be an integer >= {least}.")
    return value


def _layer_list(raw: dict[str, Any], key: str, layers: int, origin: str) -> list[int] | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise UsageError(f"Hugging Face config {origin}: {key} = {value!r} must be a list of layer indices.")
    if any(not 0 <= i < layers for i in value):
        raise UsageError(f"Hugging Face config {origin}: {key} = {value} names layers outside 0..{layers - 1} "
                         f"(num_hidden_layers {layers}).")
    return value


def moe_layers(raw: dict[str, Any], model_type: str, layers: int, origin: str) -> tuple[int, ...]:
    """1 for each decoder layer the family's modeling file builds as a sparse MoE block, 0 for a dense MLP."""
    if "first_k_dense_replace" in raw:  # DeepSeek-V2/V3, Moonlight, GLM-4-MoE
        first = _count(raw, "first_k_dense_replace", origin)
        freq = _count(raw, "moe_layer_freq", origin, default=1, least=1)
        return tuple(int(i >= first and i % freq == 0) for i in range(layers))
    if model_type == "llama4_text":
        step = _count(raw, "interleave_moe_layer_step", origin, default=1, least=1)
        listed = _layer_list(raw, "moe_layers", layers, origin)
        chosen = set(listed if listed is not None else range(step - 1, layers, step))
        return tuple(int(i in chosen) for i in range(layers))
    step = _count(raw, "decoder_sparse_step", origin, default=1, least=1)  # Qwen2-MoE / Qwen3-MoE
    dense = set(_layer_list(raw, "mlp_only_layers", layers, origin) or ())
    return tuple(int(i not in dense and (i + 1) % step == 0) for i in range(layers))


def shared_expert(raw: dict[str, Any], model_type: str, origin: str) -> tuple[int, bool]:
    """The summed width of the shared experts of an MoE layer and whether a sigmoid gate scales them."""
    if "n_shared_experts" in raw:  # DeepSeek: one MLP of moe_intermediate_size * n_shared_experts
        return _count(raw, "n_shared_experts", origin) * _count(raw, "moe_intermediate_size", origin), False
    if "shared_expert_intermediate_size" in raw:  # Qwen2-MoE: gated by shared_expert_gate
        width = _count(raw, "shared_expert_intermediate_size", origin)
        return width, width > 0
    if model_type == "llama4_text":
        return _count(raw, "intermediate_size", origin), False
    return 0, False


def hf_moe_fields(raw: dict[str, Any], model_type: str, layers: int, experts: int, origin: str) -> dict[str, Any]:
    """moe_layer_pattern (only where some layer is dense) and the shared-expert fields; {} for a dense model."""
    if experts <= 0:
        return {}
    out: dict[str, Any] = {}
    pattern = moe_layers(raw, model_type, layers, origin)
    if not any(pattern):
        raise UsageError(f"Hugging Face config {origin} has {experts} experts but builds no layer as MoE "
                         f"(first_k_dense_replace / decoder_sparse_step / mlp_only_layers / moe_layers leave every one "
                         f"of the {layers} layers dense); remove the expert count or fix the layer keys.")
    if not all(pattern):
        out["moe_layer_pattern"] = pattern
    width, gated = shared_expert(raw, model_type, origin)
    if width:
        out["moe_shared_expert_intermediate_size"] = width
        out["moe_shared_expert_gate"] = gated
    return out


def hf_mla_fields(raw: dict[str, Any], origin: str) -> dict[str, Any]:
    """DeepSeek-V2/V3 multi-latent attention (kv_lora_rank set) as Megatron's MLA fields: q_lora_rank (None = one
    direct q_proj), kv_lora_rank, qk_nope_head_dim -> qk_head_dim, qk_rope_head_dim -> qk_pos_emb_head_dim,
    v_head_dim. The kv latent always has its RMSNorm (kv_a_layernorm; q_a_layernorm with q_lora_rank), which is
    Megatron's --qk-layernorm under MLA."""
    if raw.get("kv_lora_rank") is None:
        return {}
    q_lora = raw.get("q_lora_rank")
    return {
        "multi_latent_attention": True, "qk_layernorm": True,
        "q_lora_rank": _count(raw, "q_lora_rank", origin, least=1) if q_lora is not None else None,
        "kv_lora_rank": _count(raw, "kv_lora_rank", origin, least=1),
        "qk_head_dim": _count(raw, "qk_nope_head_dim", origin, default=128, least=1),
        "qk_pos_emb_head_dim": _count(raw, "qk_rope_head_dim", origin, default=64, least=1),
        "v_head_dim": _count(raw, "v_head_dim", origin, default=128, least=1),
    }

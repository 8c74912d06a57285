"""Hugging Face `config.json` -> model-shape dict (ModelShape field names).

Key names per transformers' configuration classes: Llama/Mistral/Mixtral/Qwen2 (num_hidden_layers,
intermediate_size, num_key_value_heads, rms_norm_eps, num_local_experts), GPT-2 (n_layer, n_embd, n_head,
n_inner, n_positions), GPT-NeoX (rotary), OPT (ffn_dim; word_embed_proj_dim, the width of its word embedding and
tied LM head when project_in / project_out map it to hidden_size), Falcon/BLOOM (n_head, multi_query; BLOOM's
n_embed, which BloomConfig.__init__ takes as hidden_size).
"""

from __future__ import annotations

import json
import os
from typing import Any

from llmperf_hook.errors import UsageError

_GATED = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "phi3",
          "olmo", "olmo2", "deepseek", "internlm2", "yi", "granite"}


def read_hf_config(path: str) -> dict[str, Any]:
    """Read DIR/config.json or the given config.json."""
    file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        with open(file, encoding="utf-8") as handle:
            raw = json.load(handle)
    except (OSError, ValueError) as err:
        raise UsageError(f"cannot read Hugging Face config {file}: {err}.") from None
    if not isinstance(raw, dict):
        raise UsageError(f"Hugging Face config {file} is not a JSON object.")
    return raw


def _first(raw: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if raw.get(key) is not None:
            return raw[key]
    return None


def shape_from_hf_config(raw: dict[str, Any], origin: str) -> dict[str, Any]:
    """Translate the HF keys; ffn defaults to 4h (GPT-2 `n_inner: null`)."""
    layers = _first(raw, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _first(raw, "hidden_size", "n_embd", "n_embed", "d_model")  # n_embed: BloomConfig pops it into hidden_size
    heads = _first(raw, "num_attention_heads", "n_head")
    if not all(isinstance(v, int) for v in (layers, hidden, heads)):
        raise UsageError(f"Hugging Face config {origin} lacks num_hidden_layers/hidden_size/num_attention_heads.")
    model_type = str(raw.get("model_type", ""))
    kv_heads = _first(raw, "num_key_value_heads", "num_kv_heads") or (1 if raw.get("multi_query") else heads)
    shape: dict[str, Any] = {
        "num_layers": layers, "hidden_size": hidden, "num_attention_heads": heads, "num_query_groups": kv_heads,
        "ffn_hidden_size": _first(raw, "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size") or 4 * hidden,
        "kv_channels": raw.get("head_dim") or hidden // heads,
        "swiglu": model_type in _GATED or raw.get("hidden_act") in ("silu", "swiglu") and model_type != "gpt_neox",
        "normalization": "RMSNorm" if "rms_norm_eps" in raw or model_type in _GATED else "LayerNorm",
        "position_embedding": "learned_absolute" if model_type in ("gpt2", "opt", "gpt_bigcode", "gptj") and "rotary_dim" not in raw else "rope",
        "untie_embeddings": not raw.get("tie_word_embeddings", model_type in ("gpt2", "opt", "bloom", "gpt_bigcode")),
        "add_bias_linear": bool(raw.get("attention_bias", model_type not in _GATED)),
    }
    positions = _first(raw, "max_position_embeddings", "n_positions", "seq_length", "n_ctx")
    if isinstance(positions, int):
        shape["seq_length"] = positions
        if shape["position_embedding"] == "learned_absolute":
            # the learned table's rows: GPT-2 wpe(n_positions); OPT's OPTLearnedPositionalEmbedding keeps
            # max_position_embeddings + 2 (offset 2, modeling_opt.py), whatever sequence length the job trains at
            shape["max_position_embeddings"] = positions + (2 if model_type == "opt" else 0)
    if isinstance(raw.get("vocab_size"), int):
        shape["vocab_size"] = raw["vocab_size"]
    proj = raw.get("word_embed_proj_dim")  # OPTConfig: None -> hidden_size; OPTDecoder projects only when they differ
    if isinstance(proj, int) and not isinstance(proj, bool) and proj != hidden:
        shape["word_embed_proj_dim"] = proj
    experts = _first(raw, "num_local_experts", "num_experts", "n_routed_experts")
    if isinstance(experts, int) and experts > 0:
        shape["num_experts"] = experts
        shape["moe_router_topk"] = _first(raw, "num_experts_per_tok", "moe_topk") or 2
        shape["moe_ffn_hidden_size"] = _first(raw, "moe_intermediate_size") or shape["ffn_hidden_size"]
    window = raw.get("sliding_window")
    if isinstance(window, int) and not isinstance(window, bool) and window > 0 and raw.get("use_sliding_window", True) is not False:
        shape["sliding_window"] = window  # Mistral-7B v0.1: 4096; read only for a warning (script_shape.py)
    from llmperf_hook.frameworks.presets import check_shape_types

    return check_shape_types(shape, origin)

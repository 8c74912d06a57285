"""Hugging Face `config.json` -> model-shape dict (ModelShape field names).

Key names per transformers' configuration classes: Llama/Mistral/Mixtral/Qwen2 (num_hidden_layers,
intermediate_size, num_key_value_heads, rms_norm_eps, num_local_experts), GPT-2 (n_layer, n_embd, n_head,
n_inner, n_positions), GPT-NeoX (rotary), OPT (ffn_dim; word_embed_proj_dim, the width of its word embedding and
tied LM head when project_in / project_out map it to hidden_size), Falcon/BLOOM (n_head, multi_query; BLOOM's
n_embed, which BloomConfig.__init__ takes as hidden_size).

MoE families (hf_moe_fields): routed experts, shared experts and which layers are sparse, as each modeling file builds
them; DeepSeek-V2/V3's multi-latent attention onto Megatron's MLA fields (hf_mla_fields).

A config built from scratch (run_clm.py `--model_type gpt2 --config_overrides "n_embd=1024,n_layer=24"`:
`CONFIG_MAPPING[model_type]()` then `config.update_from_string(overrides)`) is the class's defaults with the overrides
applied as transformers applies them (config_from_overrides).
"""

from __future__ import annotations

import json
import os
from typing import Any

from llmperf_hook.errors import ConfigError, UsageError
from llmperf_hook.frameworks.hf_moe import hf_mla_fields, hf_moe_fields

_GATED = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "phi3",
          "olmo", "olmo2", "deepseek", "deepseek_v2", "deepseek_v3", "internlm2", "yi", "granite", "llama4_text"}
EXTRA_SHAPE_KEYS = ("moe_layer_pattern", "moe_shared_expert_intermediate_size", "moe_shared_expert_gate",
                    "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim",
                    "v_head_dim", "qk_layernorm", "add_qkv_bias", "mlp_bias", "separate_qkv", "attention_sinks")
"""ModelShape fields a Hugging Face config may set beyond the preset keys (presets.SHAPE_KEYS); derived here from
typed config values, so set after check_shape_types, and passed on by script_shape.resolve_script_shape."""


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


def _text_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The language model's config of a multimodal checkpoint (Llama-4's Llama4Config keeps it under text_config,
    model_type llama4_text); the config itself otherwise."""
    text = raw.get("text_config")
    if isinstance(text, dict) and _first(raw, "num_hidden_layers", "n_layer", "num_layers") is None:
        return text
    return raw


def shape_from_hf_config(raw: dict[str, Any], origin: str) -> dict[str, Any]:
    """Translate the HF keys; ffn defaults to 4h (GPT-2 `n_inner: null`). The result also holds the config's
    `model_type` (str, "" when it has none) for what depends on transformers' module classes."""
    raw = _text_config(raw)
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
    if model_type == "llama4_text" and isinstance(raw.get("intermediate_size_mlp"), int):
        shape["ffn_hidden_size"] = raw["intermediate_size_mlp"]  # Llama4TextMLP of the dense layers
    experts = _first(raw, "num_local_experts", "num_experts", "n_routed_experts")
    if isinstance(experts, int) and experts > 0:
        shape["num_experts"] = experts
        shape["moe_router_topk"] = _first(raw, "num_experts_per_tok", "moe_topk") or 2
        # Mixtral's experts are intermediate_size wide; Llama-4's too, beside its dense intermediate_size_mlp
        shape["moe_ffn_hidden_size"] = _first(raw, "moe_intermediate_size", "intermediate_size") or shape["ffn_hidden_size"]
    window = raw.get("sliding_window")
    if isinstance(window, int) and not isinstance(window, bool) and window > 0 and raw.get("use_sliding_window", True) is not False:
        shape["sliding_window"] = window  # Mistral-7B v0.1: 4096; read only for a warning (script_shape.py)
    from llmperf_hook.frameworks.presets import check_shape_types

    extra = {**hf_moe_fields(raw, model_type, layers, shape.get("num_experts", 0), origin), **hf_mla_fields(raw, origin),
             **attention_fields(raw, model_type, origin)}
    act, act_from = hf_activation(raw, model_type)
    return {**check_shape_types(shape, origin), **extra, "model_type": model_type, "hidden_act": act,
            "hidden_act_from": act_from}


_CLASS_ACTIVATION = {"falcon": ("FalconConfig", "gelu"), "gpt2": ("GPT2Config", "gelu_new"),
                     "gptj": ("GPTJConfig", "gelu_new"), "gpt_neo": ("GPTNeoConfig", "gelu_new"),
                     "codegen": ("CodeGenConfig", "gelu_new"), "phi": ("PhiConfig", "gelu_new"),
                     "gpt_neox": ("GPTNeoXConfig", "gelu"), "gpt_bigcode": ("GPTBigCodeConfig", "gelu_pytorch_tanh"),
                     "starcoder2": ("Starcoder2Config", "gelu_pytorch_tanh"), "opt": ("OPTConfig", "relu")}
"""MLP activation of a config.json that names none: the configuration class's default, which the model runs (its
keyword default in each models/<type>/configuration_<type>.py). FalconMLP ran `nn.GELU()` (exact) until FalconConfig
gained `activation="gelu"`, read by `get_activation(config.activation)`: exact either way; falcon-7b's config.json
(RWConfig era) names no activation. The gated families' activation (SiLU) is no GELU op and is not read."""
_FIXED_ACTIVATION = {"bloom": ("BloomMLP", "bloom_gelu")}
"""Families whose MLP runs one activation whatever the config says: BloomMLP's BloomGelu (modeling_bloom.py
bloom_gelu_forward, the tanh formula); BloomConfig has no activation key."""


def hf_activation(raw: dict[str, Any], model_type: str) -> tuple[str, str]:
    """(the MLP activation the model runs, where it comes from: "" for the config's own key, else the class that
    decides); ("", "") for a family not in the tables whose config names none."""
    if model_type in _FIXED_ACTIVATION:
        owner, act = _FIXED_ACTIVATION[model_type]
        return act, f"{owner} runs it whatever the config says"
    act = _first(raw, "hidden_act", "activation_function", "hidden_activation", "activation")
    if isinstance(act, str):
        return act, ""
    owner, default = _CLASS_ACTIVATION.get(model_type, ("", ""))
    return default, f"no activation key: {owner}'s default" if owner else ""


_QKV_BIAS_ONLY = {"qwen2": (None, True), "qwen2_moe": ("qkv_bias", True), "glm": ("attention_bias", True),
                  "glm4": ("attention_bias", True), "glm4_moe": ("attention_bias", False), "qwen2_vl": (None, True),
                  "qwen2_vl_text": (None, True), "qwen2_5_vl": (None, True), "qwen2_5_vl_text": (None, True)}
"""Families that bias q_proj, k_proj and v_proj and no other linear (transformers 5.18 modeling files): (the config key
that switches the q/k/v biases, its class default). Qwen2Attention and the Qwen2-VL / Qwen2.5-VL language models'
attention build them with bias=True (no key; Qwen2-7B's config.json has none), Qwen2MoeAttention with config.qkv_bias,
GlmAttention, Glm4Attention and Glm4MoeAttention with config.attention_bias (GlmConfig and Glm4Config default True,
Glm4MoeConfig False; GLM-4.5's config.json sets it true); o_proj bias=False and no MLP bias in all of them."""
_EVERY_LINEAR_KEY = {"opt": ("enable_bias", True), "falcon": ("bias", False)}
"""Families whose one config key biases every linear: (key, class default). OPTAttention's q/k/v/out_proj and
OPTDecoderLayer's fc1/fc2 take bias=config.enable_bias; FalconAttention's query_key_value and dense and FalconMLP's
dense_h_to_4h / dense_4h_to_h take bias=config.bias (FalconConfig default False; falcon-7b/40b's config.json: false)."""
_SEPARATE_QKV = ("opt", "gptj")
"""GELU families with q_proj, k_proj, v_proj apart (OPTAttention, GPTJAttention); the SwiGLU families always are."""


def linear_biases(raw: dict[str, Any], model_type: str, origin: str) -> tuple[bool, bool, bool | None]:
    """(add_bias_linear, add_qkv_bias, mlp_bias) as the family's modeling file builds its linears; mlp_bias is None
    where the MLP follows add_bias_linear (ModelShape.mlp_bias). Q/K/V-only families: _QKV_BIAS_ONLY. Llama-style
    families (LlamaAttention, Qwen3, Gemma, Olmo): attention_bias biases q, k, v and o_proj, mlp_bias (default
    false) gate, up and down_proj, each on its own. _EVERY_LINEAR_KEY: OPT, Falcon. GPT-NeoX: attention_bias
    (default true) biases query_key_value and dense only, GPTNeoXMLP's nn.Linears always keep theirs. GPT-J:
    GPTJAttention's q/k/v_proj and out_proj are built with bias=False (no switch), GPTJMLP's fc_in / fc_out keep
    nn.Linear's bias (transformers models/gptj/modeling_gptj.py). The other
    families bias every linear unless attention_bias says not (GPT-2's Conv1Ds, BLOOM; gpt-oss, whose experts'
    gate_up_proj_bias / down_proj_bias and router bias, unconditional in GptOssExperts / GptOssTopKRouter, are
    counted with the attention_bias true of its released configs)."""
    def flag(key: str, default: bool) -> bool:
        value = default if raw.get(key) is None else raw[key]
        if not isinstance(value, bool):
            raise UsageError(f"Hugging Face config {origin}: {key} = {value!r} must be true or false.")
        return value

    if model_type in _QKV_BIAS_ONLY:
        key, default = _QKV_BIAS_ONLY[model_type]
        return False, default if key is None else flag(key, default), None
    if model_type in _EVERY_LINEAR_KEY:
        return flag(*_EVERY_LINEAR_KEY[model_type]), False, None
    if model_type == "gptj":
        return False, False, True
    attention = flag("attention_bias", model_type not in _GATED)
    mlp = flag("mlp_bias", False) if model_type in _GATED else True if model_type == "gpt_neox" else attention
    return attention, False, None if mlp == attention else mlp


def attention_fields(raw: dict[str, Any], model_type: str, origin: str) -> dict[str, Any]:
    """add_bias_linear, add_qkv_bias, mlp_bias (linear_biases), separate_qkv, and gpt-oss's per-head attention sinks
    (GptOssAttention.sinks: nn.Parameter of num_attention_heads, in every layer)."""
    all_linears, qkv_only, mlp = linear_biases(raw, model_type, origin)
    out: dict[str, Any] = {"add_bias_linear": all_linears}
    if qkv_only and not all_linears:
        out["add_qkv_bias"] = True
    if mlp is not None:
        out["mlp_bias"] = mlp
    if model_type in _SEPARATE_QKV:
        out["separate_qkv"] = True
    if model_type == "gpt_oss":
        out["attention_sinks"] = True
    return out


NO_SDPA_FAMILIES = {"gpt_oss": "GptOssPreTrainedModel"}
"""Model classes without torch SDPA attention (_supports_sdpa = False in modeling_gpt_oss.py from the 4.5x releases
that added gpt-oss to 5.18: its sinks need a kernel that takes them; the job's transformers release is not known
here, and no release read differs). PreTrainedModel.get_correct_attn_implementation asks for sdpa when no
attn_implementation is given and falls back to eager when _sdpa_can_dispatch fails; an explicit "sdpa" raises."""


def no_sdpa_attention(model_type: str, requested: str | None, where: str) -> str | None:
    """The attention transformers runs for a NO_SDPA_FAMILIES model when the script asks for `requested` ("eager" when
    it asks for nothing), None for every other case; an explicit sdpa is refused as transformers refuses it."""
    owner = NO_SDPA_FAMILIES.get(model_type)
    if owner is None or requested not in (None, "sdpa"):
        return None
    if requested == "sdpa":
        raise ConfigError(f"--attn_implementation sdpa ({where}) with a {model_type} model: {owner} has no SDPA attention "
                          "(_supports_sdpa False in every transformers release through 5.18, which llmperf assumes the "
                          "job runs; its attention sinks need a kernel that takes them) and transformers raises a "
                          "ValueError when loading it. Use --attn_implementation eager, or a flash kernel that takes "
                          "the sinks (--attn_implementation kernels-community/vllm-flash-attn3, transformers' kernels hub).")
    return "eager"


_GPT2_DEFAULTS: dict[str, Any] = {
    "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None,
    "activation_function": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
    "layer_norm_epsilon": 1e-5, "initializer_range": 0.02, "summary_type": "cls_index", "summary_use_proj": True,
    "summary_activation": None, "summary_proj_to_labels": True, "summary_first_dropout": 0.1,
    "scale_attn_weights": True, "use_cache": True, "bos_token_id": 50256, "eos_token_id": 50256,
    "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
}
"""transformers models/gpt2/configuration_gpt2.py GPT2Config.__init__'s defaults (openai-community/gpt2's shape)."""
_GPT2_LEGACY = {"gradient_checkpointing": False}
"""GPT2Config attributes of the transformers releases before 4.11 (`gradient_checkpointing=False` in __init__; 4.11
moved it to model.gradient_checkpointing_enable()), which the scripts of that era override (bigscience
experiments/gpt2-hf-ds: `--config_overrides "...,gradient_checkpointing=true,use_cache=False"`)."""
_GPT2_ALIASES = {"hidden_size": "n_embd", "max_position_embeddings": "n_positions", "num_attention_heads": "n_head",
                 "num_hidden_layers": "n_layer"}
"""GPT2Config.attribute_map: PretrainedConfig's __setattr__ / __getattribute__ map these names to GPT-2's own."""
_BASE_DEFAULTS: dict[str, Any] = {
    "tie_word_embeddings": True, "return_dict": True, "output_hidden_states": False, "output_attentions": False,
    "torchscript": False, "use_bfloat16": False, "is_decoder": False, "is_encoder_decoder": False,
    "add_cross_attention": False, "tie_encoder_decoder": False, "chunk_size_feed_forward": 0, "problem_type": None,
    "pad_token_id": None, "sep_token_id": None, "decoder_start_token_id": None, "prefix": None,
    "finetuning_task": None, "tokenizer_class": None, "architectures": None, "torch_dtype": None,
}
"""The PretrainedConfig.__init__ attributes every config has (configuration_utils.py), with their defaults."""
_SCRATCH_CONFIGS = {"gpt2": ({**_GPT2_DEFAULTS, **_GPT2_LEGACY}, _GPT2_ALIASES)}
"""The model types whose default config llmperf knows, for run_clm.py's `--model_type` without a checkpoint."""


def _typed(key: str, text: str, old: Any) -> Any:
    """PretrainedConfig.update_from_string's conversion: the new value takes the type of the attribute's current one
    (bool from true/1/y/yes or false/0/n/no, int, float, str); any other current value (None) cannot be updated."""
    if isinstance(old, bool):
        if text.lower() in ("true", "1", "y", "yes"):
            return True
        if text.lower() in ("false", "0", "n", "no"):
            return False
        raise ConfigError(f"--config_overrides {key}={text}: transformers cannot derive true or false from {text} "
                          f"(key {key}); write true or false.")
    try:
        if isinstance(old, int):
            return int(text)
        if isinstance(old, float):
            return float(text)
    except ValueError:
        raise ConfigError(f"--config_overrides {key}={text}: {key} is a{'n int' if isinstance(old, int) else ' float'} "
                          f"in the config, and Python's {type(old).__name__}() refuses {text!r} "
                          "(PretrainedConfig.update_from_string converts to the current value's type).") from None
    if isinstance(old, str):
        return text
    raise ConfigError(f"--config_overrides {key}={text}: transformers can only update int, float, bool or string values "
                      f"in the config (update_from_string), and {key} is {old!r} by default. Give the model as a "
                      "config.json (--config_name DIR) or llmperf --model FILE instead.")


def config_from_overrides(model_type: str | None, overrides: str | None) -> dict[str, Any]:
    """The config run_clm.py builds without a checkpoint: `CONFIG_MAPPING[model_type]()`, then
    `update_from_string(overrides)`, which splits the string at `,` and each item at `=` (`dict(x.split("=") for x in
    update_str.split(","))`), refuses a key the config does not have, and converts each value with _typed."""
    if model_type not in _SCRATCH_CONFIGS:
        known = ", ".join(sorted(_SCRATCH_CONFIGS))
        raise ConfigError(f"--model_type {model_type} builds the model from transformers' default config of that type, "
                          f"which llmperf knows for {known} only. Give the shape as llmperf --model PRESET|FILE (a "
                          "Hugging Face config.json with the overrides written in).")
    defaults, aliases = _SCRATCH_CONFIGS[model_type]
    raw: dict[str, Any] = {**_BASE_DEFAULTS, **defaults, "model_type": model_type}
    for item in (overrides.split(",") if overrides is not None else []):  # run_clm.py: `is not None`, so "" too
        if item.count("=") != 1:  # dict() of split("=") pieces: a piece that is not one key and one value
            raise ConfigError(f"--config_overrides {overrides!r}: the item {item!r} is not KEY=VALUE (transformers "
                              "splits the string at `,` and each item at `=`: dictionary update sequence error).")
        key, text = item.split("=")
        name = aliases.get(key, key)
        if name not in raw:
            raise ConfigError(f"--config_overrides {overrides!r}: key {key} isn't in the original config dict "
                              f"(transformers' {model_type} config); the keys are the config's attributes, e.g. "
                              f"{', '.join(list(defaults)[:5])}.")
        raw[name] = _typed(key, text, raw[name])
    return raw

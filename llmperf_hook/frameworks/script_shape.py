"""Model shape for scripts that do not take Megatron-style model flags (DeepSpeed examples, Hugging Face
Trainer scripts): llmperf's `--model PRESET|FILE`, else a local `--model_name_or_path`/`--config_name` directory
with config.json, else a Hub name we ship a preset for. Sequence length from the script's own flag
(--max_seq_length, --block_size, --model_max_length, --seq-length, DeepSpeed-Chat's --max_seq_len, the
`--max_length` of DeepSpeedExamples' finetune scripts, which pad every sample to it, OpenRLHF's --max_len) or, failing
that, the shape's.
"""

from __future__ import annotations

import os
from typing import Any

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.hf_config import read_hf_config, shape_from_hf_config
from llmperf_hook.frameworks.presets import list_model_presets, load_model_preset
from llmperf_hook.frameworks.training_config import ModelShape
from llmperf_hook.provenance import Source, SourceKind

# Hub names whose published shape we ship, suggested in the error (never fetched, never assumed): name -> preset.
HUB_PRESETS = {
    "meta-llama/Llama-2-7b-hf": "llama2-7b", "meta-llama/Llama-2-13b-hf": "llama2-13b", "meta-llama/Llama-2-70b-hf": "llama2-70b",
    "meta-llama/Meta-Llama-3-8B": "llama3-8b", "meta-llama/Meta-Llama-3-70B": "llama3-70b", "meta-llama/Llama-3.1-8B": "llama3-8b",
    "meta-llama/Llama-3.1-70B": "llama3-70b", "meta-llama/Llama-3.1-405B": "llama3-405b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama3-8b", "meta-llama/Llama-3.1-70B-Instruct": "llama3-70b",
    "meta-llama/Llama-3.3-70B-Instruct": "llama3-70b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b", "EleutherAI/gpt-neox-20b": "gpt-neox-20b",
}
_SEQ_FLAGS = ("max_seq_length", "block_size", "model_max_length", "seq_length", "max_seq_len", "max_length", "max_len")
_MODEL_DESTS = ("model_name_or_path", "model_name", "pretrain")
"""The script's flag naming the model: the Hugging Face Trainer's --model_name_or_path, DeepSpeedExamples' --model_name,
OpenRLHF's --pretrain."""


def _shape_source(flags: FlagValues, model: str | None) -> tuple[dict[str, Any], Source]:
    if model:
        return load_model_preset(model), Source(SourceKind.OVERRIDE, f"--model {model}")
    for dest in ("config_name", *_MODEL_DESTS):
        path = flags.get(dest)
        if isinstance(path, str) and os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json")):
            return shape_from_hf_config(read_hf_config(path), path), Source(SourceKind.CONFIG_FILE, f"{path}/config.json")
    dest = next((d for d in _MODEL_DESTS if flags.has(d)), "model_name_or_path")
    flag, named = "--" + dest, flags.get(dest)
    hint = f" (for {named}: llmperf --model {HUB_PRESETS[named]})" if named in HUB_PRESETS else ""
    raise ConfigError(
        "cannot find the model shape: the training script takes no Megatron-style model flags"
        + (f", and {flag} {named} is not a local directory with config.json" if named else "")
        + f". Give llmperf --model PRESET|FILE{hint} (presets: {', '.join(list_model_presets())}; or a YAML shape file or a "
        "Hugging Face config.json), or point --model_name_or_path at a local model directory."
    )


def resolve_script_shape(flags: FlagValues, model: str | None, src: dict[str, Source], warnings: list[str]) -> ModelShape:
    raw, origin = _shape_source(flags, model)
    for key in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "vocab_size",
                "padded_vocab_size", "kv_channels", "swiglu", "normalization", "position_embedding", "untie_embeddings",
                "num_experts", "moe_router_topk", "moe_ffn_hidden_size"):
        src[key] = origin
    seq_flag = next((d for d in _SEQ_FLAGS if flags.has(d)), None)
    if seq_flag:
        seq, src["seq_length"] = flags.get(seq_flag), flags.source(seq_flag)
    elif "seq_length" in raw:
        seq, src["seq_length"] = raw["seq_length"], origin
        warnings.append(f"sequence length not given by the script: assumed {seq} from {origin}; pass --max_seq_length/--block_size to be exact")
    else:
        raise ConfigError(f"cannot tell the sequence length: {origin} has none and the script gives no --max_seq_length/--block_size/--seq-length.")
    if raw.get("sliding_window") and seq > raw["sliding_window"]:
        warnings.append(f"sliding-window attention (window {raw['sliding_window']} in {origin}) is not modelled: attention "
                        f"is priced as full causal attention over seq {seq}, an overestimate of its time")
    if "vocab_size" not in raw:
        raise ConfigError(f"{origin} states no vocab_size; add vocab_size to the shape file.")
    hidden, heads = raw["hidden_size"], raw["num_attention_heads"]
    return ModelShape(
        num_layers=raw["num_layers"], hidden_size=hidden, ffn_hidden_size=raw.get("ffn_hidden_size", 4 * hidden),
        num_attention_heads=heads, num_query_groups=raw.get("num_query_groups", heads),
        kv_channels=raw.get("kv_channels", hidden // heads), seq_length=seq, vocab_size=raw["vocab_size"],
        padded_vocab_size=raw["vocab_size"], swiglu=bool(raw.get("swiglu", False)),
        normalization=raw.get("normalization", "LayerNorm"), position_embedding=raw.get("position_embedding", "learned_absolute"),
        untie_embeddings=bool(raw.get("untie_embeddings", False)), add_bias_linear=bool(raw.get("add_bias_linear", True)),
        num_experts=raw.get("num_experts", 0), moe_router_topk=raw.get("moe_router_topk", 2),
        moe_ffn_hidden_size=raw.get("moe_ffn_hidden_size", 0), moe_layer_freq=raw.get("moe_layer_freq", 1),
        word_embed_proj_dim=raw.get("word_embed_proj_dim"),
    )

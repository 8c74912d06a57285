"""Model-shape presets (configs/models/*.yaml) and `--model PRESET|FILE` for scripts that do not state the shape.

A preset or file is a flat mapping of ModelShape field names (num_layers, hidden_size, ...); a Hugging Face
`config.json` (or a directory holding one) is accepted too and translated by `hf_config`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from llmperf_hook.errors import UsageError
from llmperf_hook.resources import configs_dir

SHAPE_KEYS = (
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
    "seq_length", "vocab_size", "swiglu", "normalization", "position_embedding", "untie_embeddings",
    "add_bias_linear", "num_experts", "moe_router_topk", "moe_ffn_hidden_size", "moe_layer_freq", "add_qkv_bias",
)
REQUIRED_KEYS = ("num_layers", "hidden_size", "num_attention_heads")


def _presets_dir() -> Path:
    return configs_dir() / "models"


def list_model_presets() -> list[str]:
    """Names of the shipped presets (file stems of configs/models/*.yaml)."""
    return sorted(p.stem for p in _presets_dir().glob("*.yaml"))


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise UsageError(f"cannot read model file {path}: {err}.") from None
    if not isinstance(raw, dict):
        raise UsageError(f"model file {path} must be a mapping of shape fields (num_layers, hidden_size, ...).")
    return raw


_BOOL_KEYS = ("swiglu", "untie_embeddings", "add_bias_linear", "add_qkv_bias")
_CHOICES = {"normalization": ("LayerNorm", "RMSNorm"), "position_embedding": ("learned_absolute", "rope", "none")}


def check_shape_types(shape: dict[str, Any], origin: str) -> dict[str, Any]:
    """Counts are positive integers (num_experts may be 0), flags booleans, names from ModelShape's choices."""
    for key, value in shape.items():
        if key in _BOOL_KEYS:
            ok = isinstance(value, bool)
        elif key in _CHOICES:
            ok = value in _CHOICES[key]
        else:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= (0 if key == "num_experts" else 1)
        if not ok:
            expected = f"one of {_CHOICES[key]}" if key in _CHOICES else "true/false" if key in _BOOL_KEYS else "a positive integer"
            raise UsageError(f"model shape {origin}: {key} = {value!r} must be {expected}.")
    return shape


def _check_shape(raw: dict[str, Any], origin: str) -> dict[str, Any]:
    missing = [k for k in REQUIRED_KEYS if not isinstance(raw.get(k), int)]
    if missing:
        raise UsageError(f"model shape {origin} lacks integer {', '.join(missing)}; give at least {', '.join(REQUIRED_KEYS)}.")
    unknown = sorted(set(raw) - set(SHAPE_KEYS) - {"name"})
    if unknown:
        raise UsageError(f"model shape {origin} has unknown keys {unknown}; known keys: {', '.join(SHAPE_KEYS)}.")
    return check_shape_types({k: v for k, v in raw.items() if k in SHAPE_KEYS}, origin)


def load_model_preset(name_or_path: str) -> dict[str, Any]:
    """A preset name (`llama3-8b`), a YAML/JSON shape file, or a Hugging Face config.json / model directory."""
    from llmperf_hook.frameworks.hf_config import read_hf_config, shape_from_hf_config

    candidate = _presets_dir() / f"{name_or_path}.yaml"
    if candidate.is_file():
        return _check_shape(_read_yaml(candidate), f"preset {name_or_path}")
    path = Path(name_or_path)
    if path.is_dir() or path.name == "config.json":
        return shape_from_hf_config(read_hf_config(str(path)), str(path))
    if path.is_file():
        if path.suffix == ".json":
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as err:
                raise UsageError(f"cannot read model file {path}: {err}.") from None
            if not isinstance(raw, dict):
                raise UsageError(f"model file {path} must be a JSON object of shape fields.")
            if "num_hidden_layers" in raw or "n_layer" in raw:
                return shape_from_hf_config(raw, str(path))
            return _check_shape(raw, str(path))
        return _check_shape(_read_yaml(path), str(path))
    raise UsageError(
        f"--model {name_or_path!r} is neither a shipped preset ({', '.join(list_model_presets())}) nor a file "
        f"(looked in {os.getcwd()}). Give a preset name, a YAML shape file, or a Hugging Face config.json."
    )

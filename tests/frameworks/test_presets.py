"""Model presets: the shipped shapes load and match their published numbers; files and HF configs work too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.frameworks.presets import list_model_presets, load_model_preset

REQUIRED = {"gpt3-175b", "gpt-neox-20b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b",
            "llama3-405b", "mixtral-8x7b"}


def _params_b(shape: dict) -> float:
    """Parameters in billions from the shape (attention + MLP + embeddings), to check presets against their names."""
    h, layers, kv = shape["hidden_size"], shape["num_layers"], shape["kv_channels"]
    attn = h * kv * (shape["num_attention_heads"] * 2 + shape["num_query_groups"] * 2)
    mlp = (3 if shape["swiglu"] else 2) * h * shape["ffn_hidden_size"] * max(shape.get("num_experts", 0), 1)
    embed = shape["vocab_size"] * h * (2 if shape["untie_embeddings"] else 1)
    return (layers * (attn + mlp) + embed) / 1e9


def test_required_presets_shipped() -> None:
    assert REQUIRED <= set(list_model_presets())


@pytest.mark.parametrize(("name", "billions"), [("gpt3-175b", 175), ("gpt-neox-20b", 20.6), ("llama2-7b", 6.7),
                                                 ("llama2-13b", 13.0), ("llama2-70b", 69), ("llama3-8b", 8.0),
                                                 ("llama3-70b", 70.6), ("llama3-405b", 405), ("mixtral-8x7b", 46.7)])
def test_preset_sizes_match_names(name: str, billions: float) -> None:
    shape = load_model_preset(name)
    assert shape["hidden_size"] == shape["num_attention_heads"] * shape["kv_channels"]
    assert abs(_params_b(shape) - billions) / billions < 0.03, _params_b(shape)


def test_files_and_hf_configs(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text("num_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\nvocab_size: 100\n")
    assert load_model_preset(str(tmp_path / "m.yaml"))["num_layers"] == 2
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 12, "n_embd": 768,
                                                             "n_head": 12, "n_positions": 1024, "vocab_size": 50257}))
    shape = load_model_preset(str(tmp_path / "hf"))
    assert shape["ffn_hidden_size"] == 3072 and shape["position_embedding"] == "learned_absolute"
    (tmp_path / "bad.yaml").write_text("num_layers: 2\nwidth: 3\n")
    with pytest.raises(UsageError):
        load_model_preset(str(tmp_path / "bad.yaml"))
    (tmp_path / "typed.yaml").write_text("num_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\nvocab_size: '100'\n")
    with pytest.raises(UsageError, match="positive integer"):
        load_model_preset(str(tmp_path / "typed.yaml"))
    (tmp_path / "broken.json").write_text("{oops")
    with pytest.raises(UsageError, match="cannot read"):
        load_model_preset(str(tmp_path / "broken.json"))
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(UsageError, match="JSON object"):
        load_model_preset(str(tmp_path / "list.json"))
    with pytest.raises(UsageError, match="neither a shipped preset"):
        load_model_preset("no-such-model")

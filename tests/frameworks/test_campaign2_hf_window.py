"""Robustness campaign 2: a Hugging Face config with sliding-window attention (Mistral-7B v0.1, window 4096) trained
on longer sequences gets a not-modelled warning (attention is priced as full causal); Qwen2's
use_sliding_window: false and sequences within the window give none."""

from __future__ import annotations

import json

import pytest

from tests.frameworks.helpers import script

MISTRAL = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
           "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
           "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096, "hidden_act": "silu"}


@pytest.mark.parametrize("extra,seq,warned", [({}, 8192, True), ({}, 4096, False),
                                              ({"use_sliding_window": False}, 8192, False),
                                              ({"sliding_window": None}, 8192, False)])
def test_sliding_window_warning(tmp_path, extra, seq, warned):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({**MISTRAL, **extra}))
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}')
    cfg = script(["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed", str(tmp_path / "ds.json"),
                  "--model_name_or_path", str(model), "--max_seq_length", str(seq), "--bf16", "True"])
    assert cfg.model.num_query_groups == 8 and cfg.model.swiglu
    assert any("sliding-window" in w for w in cfg.warnings) == warned

"""Bias parameters and parameter tensors of Hugging Face layers whose attention and MLP biases differ
(ModelShape.mlp_bias, frameworks/hf_config.linear_biases), counted by hand from transformers 5.x's modules:
LlamaAttention builds q/k/v/o_proj with bias=config.attention_bias and LlamaMLP gate/up/down_proj with
bias=config.mlp_bias; GPTNeoXAttention's query_key_value and dense take bias=config.attention_bias while GPTNeoXMLP's
dense_h_to_4h / dense_4h_to_h are plain nn.Linear (bias=True)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.graph import ddp_buckets
from llmperf_hook.graph import params as pc
from llmperf_hook.graph.param_tensors import model_param_tensors
from llmperf_hook.graph.zero3_legacy import persistent_tensor_sizes
from tests.frameworks.helpers import hf_job, total_params

H, FFN, LAYERS, VOCAB = 256, 512, 2, 1000
LLAMA = {"model_type": "llama", "hidden_size": H, "intermediate_size": FFN, "num_hidden_layers": LAYERS,
         "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": VOCAB, "max_position_embeddings": 512,
         "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu"}
NEOX = {"model_type": "gpt_neox", "hidden_size": H, "intermediate_size": 4 * H, "num_hidden_layers": LAYERS,
        "num_attention_heads": 4, "vocab_size": VOCAB, "max_position_embeddings": 512, "layer_norm_eps": 1e-5,
        "tie_word_embeddings": False, "hidden_act": "gelu"}
# weights of one layer + embedding, LM head and final norm (no biases)
LLAMA_WEIGHTS = LAYERS * (4 * H * H + 3 * H * FFN + 2 * H) + 2 * VOCAB * H + H
NEOX_WEIGHTS = LAYERS * (4 * H * H + 2 * H * 4 * H + 2 * 2 * H) + 2 * VOCAB * H + 2 * H


def _cfg(tmp_path: Path, raw: dict):
    return hf_job(tmp_path, raw, block_size=512)  # the configs' max_position_embeddings


@pytest.mark.parametrize("raw, biases, tensors_per_layer", [
    (LLAMA, 0, 9),
    ({**LLAMA, "attention_bias": True}, 3 * H + H, 13),  # q, k, v and o_proj biases
    ({**LLAMA, "mlp_bias": True}, 2 * FFN + H, 12),  # gate, up and down_proj biases
    ({**LLAMA, "attention_bias": True, "mlp_bias": True}, 4 * H + 2 * FFN + H, 16),
])
def test_llama_attention_and_mlp_biases_apart(tmp_path: Path, raw: dict, biases: int, tensors_per_layer: int) -> None:
    cfg = _cfg(tmp_path, raw)
    assert total_params(cfg) == LLAMA_WEIGHTS + LAYERS * biases
    assert model_param_tensors(cfg, 0, LAYERS) == LAYERS * tensors_per_layer + 3  # + embedding, final norm, head


@pytest.mark.parametrize("raw, biases, tensors_per_layer", [
    (NEOX, 3 * H + H + 4 * H + H, 12),  # every linear (attention_bias default true)
    ({**NEOX, "attention_bias": False}, 4 * H + H, 10),  # GPTNeoXMLP keeps its two biases
])
def test_gpt_neox_mlp_keeps_its_biases(tmp_path: Path, raw: dict, biases: int, tensors_per_layer: int) -> None:
    cfg = _cfg(tmp_path, raw)
    assert total_params(cfg) == NEOX_WEIGHTS + LAYERS * biases
    assert model_param_tensors(cfg, 0, LAYERS) == LAYERS * tensors_per_layer + 2 + 2  # + embedding, final LN(2), head


@pytest.mark.parametrize("raw", [LLAMA, {**LLAMA, "attention_bias": True}, {**LLAMA, "mlp_bias": True},
                                 NEOX, {**NEOX, "attention_bias": False}])
def test_ddp_buckets_and_zero3_persistent_biases_agree_with_the_counts(tmp_path: Path, raw: dict) -> None:
    """DDP's per-tensor list and ZeRO-3's persistent (small) tensors hold the same biases as the layer count."""
    cfg = _cfg(tmp_path, raw)
    assert sum(ddp_buckets.attention_tensors(cfg)) == pc.attention_params(cfg)
    assert sum(ddp_buckets.mlp_tensors(cfg)) == pc.mlp_params(cfg)
    weights = LLAMA_WEIGHTS if raw["model_type"] == "llama" else NEOX_WEIGHTS
    per_layer_biases = (total_params(cfg) - weights) // LAYERS
    norms = (2 if raw["model_type"] == "llama" else 4) * H  # every bias and norm is under ZeRO-3's 1e5 threshold
    assert sum(persistent_tensor_sizes(cfg, 1, last_stage=False)) == per_layer_biases + norms

"""Hugging Face MoE configs: shared experts and sparse-layer rules as transformers builds them (frameworks/hf_moe.py).

The configs are the Hub's published config.json values (the keys that shape the model); the parameter totals are
the ones their model cards publish."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.frameworks.hf_config import shape_from_hf_config
from llmperf_hook.graph.build import build_graph
from llmperf_hook.hardware.load import load_cluster
from tests.frameworks.helpers import hf_job, total_params

QWEN15_MOE = {  # Qwen/Qwen1.5-MoE-A2.7B config.json; model card: 14.3B parameters in total
    "model_type": "qwen2_moe", "hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16,
    "num_key_value_heads": 16, "intermediate_size": 5632, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4, "decoder_sparse_step": 1,
    "vocab_size": 151936, "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "tie_word_embeddings": False,
    "hidden_act": "silu"}
DEEPSEEK_V2_LITE = {  # deepseek-ai/DeepSeek-V2-Lite config.json; model card: 15.7B total parameters
    "model_type": "deepseek_v2", "hidden_size": 2048, "num_hidden_layers": 27, "num_attention_heads": 16,
    "num_key_value_heads": 16, "intermediate_size": 10944, "moe_intermediate_size": 1408, "n_routed_experts": 64,
    "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "vocab_size": 102400, "max_position_embeddings": 163840, "rms_norm_eps": 1e-06, "tie_word_embeddings": False,
    "attention_bias": False, "hidden_act": "silu"}
QWEN3_30B_A3B = {  # Qwen/Qwen3-30B-A3B config.json; model card: 30.5B in total; no shared expert
    "model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "tie_word_embeddings": False,
    "hidden_act": "silu"}
LLAMA4_MAVERICK_TEXT = {  # meta-llama/Llama-4-Maverick-17B-128E config.json's text_config (the keys used here)
    "model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 40,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
    "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "vocab_size": 202048,
    "max_position_embeddings": 1048576, "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "hidden_act": "silu"}


def _cfg(tmp_path: Path, raw: dict):
    return hf_job(tmp_path, raw, nproc=8)  # the MoE layouts' expert counts split over 8 ranks


@pytest.mark.parametrize("raw, published", [(QWEN15_MOE, 14.3e9), (DEEPSEEK_V2_LITE, 15.7e9), (QWEN3_30B_A3B, 30.5e9)])
def test_parameters_match_the_published_totals(tmp_path: Path, raw: dict, published: float) -> None:
    """Within the cards' rounding (0.05B); without the shared experts Qwen1.5-MoE counts 13.5B, DeepSeek-V2-Lite
    15.3B."""
    assert abs(total_params(_cfg(tmp_path, raw)) - published) <= 0.05e9


def test_qwen2_moe_shared_expert_is_gated(tmp_path: Path) -> None:
    model = _cfg(tmp_path, QWEN15_MOE).model
    assert (model.moe_shared_expert_intermediate_size, model.moe_shared_expert_gate) == (5632, True)
    assert (model.num_experts, model.moe_router_topk, model.moe_ffn_hidden_size) == (60, 4, 1408)
    assert model.moe_layer_pattern == ()  # every layer sparse: --moe-layer-freq 1


def test_deepseek_shared_experts_and_dense_first_layers(tmp_path: Path) -> None:
    model = _cfg(tmp_path, DEEPSEEK_V2_LITE).model
    assert (model.moe_shared_expert_intermediate_size, model.moe_shared_expert_gate) == (2 * 1408, False)
    assert model.moe_layer_pattern == (0,) + (1,) * 26
    assert model.ffn_hidden_size == 10944  # the dense layer's MLP
    assert model.multi_latent_attention and (model.q_lora_rank, model.kv_lora_rank) == (None, 512)
    assert (model.qk_head_dim, model.qk_pos_emb_head_dim, model.v_head_dim) == (128, 64, 128)


def test_qwen3_moe_has_no_shared_expert(tmp_path: Path) -> None:
    model = _cfg(tmp_path, QWEN3_30B_A3B).model
    assert model.moe_shared_expert_intermediate_size == 0 and not model.moe_shared_expert_gate
    assert model.kv_channels == 128


@pytest.mark.parametrize("keys, pattern", [
    ({"decoder_sparse_step": 2}, (0, 1, 0, 1, 0, 1)),  # (layer_idx + 1) % step == 0
    ({"mlp_only_layers": [0, 5]}, (0, 1, 1, 1, 1, 0)),
    ({"decoder_sparse_step": 3, "mlp_only_layers": [2]}, (0, 0, 0, 0, 0, 1)),
])
def test_qwen_sparse_layer_rule(keys: dict, pattern: tuple) -> None:
    raw = {**QWEN3_30B_A3B, "num_hidden_layers": 6, **keys}
    assert shape_from_hf_config(raw, "cfg")["moe_layer_pattern"] == pattern


def test_llama4_reads_text_config_and_interleaves(tmp_path: Path) -> None:
    """Llama4Config keeps the language model under text_config; moe_layers defaults to every
    interleave_moe_layer_step-th layer from step - 1; the shared expert and the experts are intermediate_size wide,
    the dense layers' MLP intermediate_size_mlp."""
    model = _cfg(tmp_path, {"model_type": "llama4", "text_config": LLAMA4_MAVERICK_TEXT}).model
    assert model.moe_layer_pattern == (0, 1) * 24
    assert (model.ffn_hidden_size, model.moe_ffn_hidden_size) == (16384, 8192)
    assert (model.moe_shared_expert_intermediate_size, model.moe_shared_expert_gate) == (8192, False)
    assert model.swiglu and model.normalization == "RMSNorm" and not model.add_bias_linear


def test_shared_experts_are_priced_in_the_graph(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, QWEN15_MOE)
    graph = build_graph(cfg, load_cluster("dgx-h100"))
    names = {op.name for chunk in graph.stages[0].chunks for block in chunk.blocks for op in block.fwd}
    assert any(name.startswith("moe.shared_") for name in names)


@pytest.mark.parametrize("keys, words", [
    ({"decoder_sparse_step": 0}, "decoder_sparse_step = 0 must be an integer >= 1"),
    ({"mlp_only_layers": [48]}, "mlp_only_layers = [48] names layers outside 0..47"),
    ({"mlp_only_layers": list(range(48))}, "builds no layer as MoE"),
])
def test_bad_layer_keys_are_refused(keys: dict, words: str) -> None:
    with pytest.raises(UsageError, match=words.replace("[", r"\[").replace("]", r"\]")):
        shape_from_hf_config({**QWEN3_30B_A3B, **keys}, "cfg")


@pytest.mark.parametrize("raw, pattern", [
    # DeepSeek's remote modeling_deepseek.py: layer_idx >= first_k_dense_replace and layer_idx % moe_layer_freq == 0
    ({**DEEPSEEK_V2_LITE, "num_hidden_layers": 6, "first_k_dense_replace": 1, "moe_layer_freq": 2}, (0, 0, 1, 0, 1, 0)),
    ({**DEEPSEEK_V2_LITE, "num_hidden_layers": 5, "first_k_dense_replace": 3}, (0, 0, 0, 1, 1)),
    # Llama4TextConfig: an explicit moe_layers list wins over interleave_moe_layer_step; step 1 (Scout) is all MoE
    ({**LLAMA4_MAVERICK_TEXT, "num_hidden_layers": 4, "moe_layers": [0, 3]}, (1, 0, 0, 1)),
    ({**LLAMA4_MAVERICK_TEXT, "num_hidden_layers": 4, "interleave_moe_layer_step": 1}, None),
])
def test_deepseek_and_llama4_layer_rules(raw: dict, pattern: tuple | None) -> None:
    assert shape_from_hf_config(raw, "cfg").get("moe_layer_pattern") == pattern

"""Which linears a Hugging Face family biases (frameworks/hf_config.linear_biases) and gpt-oss's attention sinks,
checked against the parameter totals the model cards publish.

Configs: the Hub's published config.json values (the keys that shape the model). Exact totals: the safetensors
index of each checkpoint (Qwen2-7B 7,615,616,512; Qwen1.5-MoE-A2.7B 14,315,784,192); cards: Qwen2-7B 7.62B,
Qwen2-57B-A14B 57.4B, gpt-oss-20b 20.91B and gpt-oss-120b 116.83B (OpenAI's gpt-oss model card, Table 1)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError, UsageError
from llmperf_hook.frameworks.hf_config import linear_biases, shape_from_hf_config
from llmperf_hook.graph import params as pc
from llmperf_hook.graph.param_tensors import model_param_tensors
from tests.frameworks.helpers import hf_job, total_params

QWEN2_7B = {  # Qwen/Qwen2-7B config.json: q/k/v biased in Qwen2Attention (bias=True), no key for it
    "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
    "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "hidden_act": "silu"}
QWEN2_57B_A14B = {  # Qwen/Qwen2-57B-A14B config.json
    "model_type": "qwen2_moe", "hidden_size": 3584, "intermediate_size": 18944, "moe_intermediate_size": 2560,
    "shared_expert_intermediate_size": 20480, "num_experts": 64, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
    "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 151936,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "hidden_act": "silu"}
QWEN15_MOE = {  # Qwen/Qwen1.5-MoE-A2.7B config.json
    "model_type": "qwen2_moe", "hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16,
    "num_key_value_heads": 16, "intermediate_size": 5632, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4, "decoder_sparse_step": 1,
    "vocab_size": 151936, "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "tie_word_embeddings": False,
    "hidden_act": "silu"}
GPT_OSS_20B = {  # openai/gpt-oss-20b config.json (quantization_config and rope_scaling left out)
    "model_type": "gpt_oss", "attention_bias": True, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2880, "intermediate_size": 2880, "max_position_embeddings": 131072, "num_attention_heads": 64,
    "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
    "rms_norm_eps": 1e-05, "sliding_window": 128, "tie_word_embeddings": False, "vocab_size": 201088,
    "layer_types": ["sliding_attention", "full_attention"] * 12}
GPT_OSS_120B = {**GPT_OSS_20B, "num_hidden_layers": 36, "num_local_experts": 128,
                "layer_types": ["sliding_attention", "full_attention"] * 18}


@pytest.mark.parametrize("raw, exact", [(QWEN2_7B, 7_615_616_512), (QWEN15_MOE, 14_315_784_192)])
def test_qwen_totals_match_the_checkpoints_exactly(tmp_path: Path, raw: dict, exact: int) -> None:
    """Exact only with the q/k/v biases and without o_proj's or the MLP's: Qwen2-7B's 28 layers hold
    28 x (3584 + 2 x 512) = 129,024 bias values, which add_bias_linear (every linear) would make 28 x 48,640 more."""
    assert total_params(hf_job(tmp_path, raw)) == exact


@pytest.mark.parametrize("raw, card", [(QWEN2_57B_A14B, 57.4e9), (GPT_OSS_20B, 20.91e9), (GPT_OSS_120B, 116.83e9)])
def test_totals_match_the_cards(tmp_path: Path, raw: dict, card: float) -> None:
    """Within the cards' rounding; gpt-oss counts its experts' and router's biases and the per-head sinks."""
    digits = 0.05e9 if card == 57.4e9 else 0.005e9
    assert abs(total_params(hf_job(tmp_path, raw)) - card) <= digits


@pytest.mark.parametrize("raw, expected", [
    ({"model_type": "qwen2"}, (False, True, None)),  # hard-coded bias=True
    ({"model_type": "qwen2_5_vl"}, (False, True, None)),  # its language model's attention too
    ({"model_type": "qwen2_moe"}, (False, True, None)),  # Qwen2MoeConfig.qkv_bias default True
    ({"model_type": "qwen2_moe", "qkv_bias": False}, (False, False, None)),
    ({"model_type": "glm4_moe", "attention_bias": True}, (False, True, None)),  # GLM-4.5: o_proj and MLP unbiased
    ({"model_type": "glm4_moe"}, (False, False, None)),  # Glm4MoeConfig default False
    ({"model_type": "glm4"}, (False, True, None)),  # Glm4Config default True
    ({"model_type": "glm"}, (False, True, None)),  # GlmConfig default True, o_proj bias=False
    ({"model_type": "falcon"}, (False, False, None)),  # FalconConfig bias=False
    ({"model_type": "falcon", "bias": True}, (True, False, None)),  # query_key_value, dense, MLP
    ({"model_type": "llama", "attention_bias": True, "mlp_bias": True}, (True, False, None)),
    ({"model_type": "llama", "attention_bias": True}, (True, False, False)),  # o_proj biased, LlamaMLP not
    ({"model_type": "llama", "mlp_bias": True}, (False, False, True)),
    ({"model_type": "llama"}, (False, False, None)),
    ({"model_type": "gpt_neox"}, (True, False, None)),
    ({"model_type": "gpt_neox", "attention_bias": False}, (False, False, True)),  # GPTNeoXMLP: nn.Linear bias
    ({"model_type": "opt", "enable_bias": False}, (False, False, None)),
    ({"model_type": "opt"}, (True, False, None)),
    ({"model_type": "gpt_oss"}, (True, False, None)),
    ({"model_type": "gpt2"}, (True, False, None)),
    ({"model_type": "gptj"}, (False, False, True)),  # attention bias=False, GPTJMLP's fc_in / fc_out biased
])
def test_linear_biases_per_family(raw: dict, expected: tuple[bool, bool, bool | None]) -> None:
    assert linear_biases(raw, raw["model_type"], "config.json") == expected


def test_a_bias_switch_that_is_not_a_boolean_is_refused() -> None:
    with pytest.raises(UsageError, match="qkv_bias = 'yes' must be true or false"):
        linear_biases({"qkv_bias": "yes"}, "qwen2_moe", "config.json")


def test_qkv_bias_reaches_the_shape(tmp_path: Path) -> None:
    m = hf_job(tmp_path, QWEN2_7B).model
    assert (m.add_bias_linear, m.add_qkv_bias, m.qkv_biased) == (False, True, True)


def test_qkv_bias_splits_over_tp_with_the_heads(tmp_path: Path) -> None:
    """Column-parallel: each of 4 TP ranks holds a quarter of the 3584 + 2 x 512 q/k/v bias values."""
    one = hf_job(tmp_path, QWEN2_7B)
    four = replace(one, parallel=replace(one.parallel, tp=4), world_size=4)
    for cfg, share in ((one, 4608), (four, 1152)):
        unbiased = replace(cfg, model=replace(cfg.model, add_qkv_bias=False))
        assert pc.attention_params(cfg) - pc.attention_params(unbiased) == share


def test_opt_keeps_q_k_v_apart(tmp_path: Path) -> None:
    """OPTDecoderLayer: q, k, v, out_proj, fc1, fc2 with biases, two LayerNorms: 16 tensors a layer."""
    raw = {"model_type": "opt", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
           "ffn_dim": 3072, "max_position_embeddings": 2048, "vocab_size": 50272, "word_embed_proj_dim": 768}
    cfg = hf_job(tmp_path, raw)
    assert cfg.model.separate_qkv
    # embed_tokens, embed_positions, 12 x 16, final_layer_norm (2); the LM head is tied
    assert model_param_tensors(cfg, 0, 12) == 2 + 12 * 16 + 2


def test_gpt_oss_tensors_and_sinks(tmp_path: Path) -> None:
    """GptOssDecoderLayer: q, k, v, o (+ biases), sinks, router weight and bias, gate_up_proj (+ bias), down_proj
    (+ bias), two RMSNorms: 17 tensors a layer; 64 sink values a layer."""
    cfg = hf_job(tmp_path, GPT_OSS_20B)
    assert cfg.model.attention_sinks and pc.attention_sink_params(cfg) == 64
    assert model_param_tensors(cfg, 0, 24) == 24 * 17 + 3


def test_shape_dict_carries_the_new_fields() -> None:
    shape = shape_from_hf_config(GPT_OSS_20B, "gpt-oss-20b/config.json")
    assert shape["attention_sinks"] and shape["add_bias_linear"] and "add_qkv_bias" not in shape


def _trainer(tmp_path: Path, raw: dict, *extra: str):
    return hf_job(tmp_path, raw, 8, 2048, "--per_device_train_batch_size", "1", "--bf16", *extra)


def test_gpt_oss_runs_eager_attention_unless_a_flash_kernel_is_asked_for(tmp_path: Path) -> None:
    """GptOssPreTrainedModel._supports_sdpa is False: transformers' default (sdpa) falls back to eager; flash_attention_2
    loads kernels-community/vllm-flash-attn3, which takes the sinks. Other families keep the script default."""
    cfg = _trainer(tmp_path, GPT_OSS_20B)
    assert cfg.attention_backend == "unfused" and "no SDPA attention" in cfg.sources["attention_backend"].detail
    assert _trainer(tmp_path, GPT_OSS_20B, "--attn_implementation", "flash_attention_2").attention_backend == "flash"
    assert _trainer(tmp_path, GPT_OSS_20B, "--attn_implementation", "eager").attention_backend == "unfused"
    assert _trainer(tmp_path, QWEN2_7B).attention_backend == "auto"


def test_gpt_oss_with_sdpa_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sdpa .* gpt_oss model: GptOssPreTrainedModel has no SDPA attention") as err:
        _trainer(tmp_path, GPT_OSS_20B, "--attn_implementation", "sdpa")
    assert err.value.exit_code == 2
    # the assumed release and a fix that loads: eager, or the hub kernel that takes the sinks
    assert "through 5.18, which llmperf assumes" in str(err.value)
    assert "kernels-community/vllm-flash-attn3" in str(err.value)


def test_gpt_oss_eager_attention_pays_for_its_sinks(tmp_path: Path) -> None:
    """eager_attention_forward: cat the sink column, subtract the row max (5 passes over the 64 heads x 2048 x 2048
    scores of a micro-batch), torch softmax."""
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.hardware.load import load_cluster

    cfg = _trainer(tmp_path, GPT_OSS_20B)
    graph = build_graph(cfg, load_cluster("dgx-h100"))
    ops = [op for c in graph.stages[0].chunks for b in c.blocks for op in b.fwd if op.name == "attn.sink_concat"]
    assert ops and ops[0].bytes_moved == 5.0 * 64 * 2048 * 2048 * 2

"""Parameter counts per rank (after TP/EP split) of each block kind, following Megatron-core's modules."""

from __future__ import annotations

from llmperf_hook.frameworks.training_config import TrainingConfig


def norm_params(cfg: TrainingConfig) -> int:
    """LayerNorm has weight and bias (2h), RMSNorm only a weight (h)."""
    return cfg.model.hidden_size * (1 if cfg.model.normalization == "RMSNorm" else 2)


def attention_params(cfg: TrainingConfig) -> int:
    m, t = cfg.model, cfg.parallel.tp
    qkv_out = (m.num_attention_heads + 2 * m.num_query_groups) * m.kv_channels
    weights = m.hidden_size * qkv_out // t + m.num_attention_heads * m.kv_channels * m.hidden_size // t
    biases = (qkv_out // t + m.hidden_size) if m.add_bias_linear else 0
    return weights + biases + norm_params(cfg)


def mlp_params(cfg: TrainingConfig) -> int:
    m, t = cfg.model, cfg.parallel.tp
    up = m.ffn_hidden_size * (2 if m.swiglu else 1)
    weights = m.hidden_size * up // t + m.ffn_hidden_size * m.hidden_size // t
    biases = (up // t + m.hidden_size) if m.add_bias_linear else 0
    return weights + biases + norm_params(cfg)


def expert_params(cfg: TrainingConfig) -> int:
    """Parameters of this rank's local experts (num_experts / ep of them, each split by etp)."""
    m, p = cfg.model, cfg.parallel
    ffn = m.moe_ffn_hidden_size or m.ffn_hidden_size
    per_expert = m.hidden_size * ffn * (3 if m.swiglu else 2) // max(1, p.etp)
    return per_expert * max(1, m.num_experts // p.ep)


def moe_dense_params(cfg: TrainingConfig) -> int:
    """Non-expert parameters of an MoE MLP block: its norm and the router (h x experts)."""
    return norm_params(cfg) + cfg.model.hidden_size * cfg.model.num_experts


def layer_params(cfg: TrainingConfig, moe: bool) -> int:
    """All parameters of one transformer layer on a rank: attention plus the dense MLP, or plus the MoE block's
    norm, router and this rank's local experts."""
    if moe:
        return attention_params(cfg) + moe_dense_params(cfg) + expert_params(cfg)
    return attention_params(cfg) + mlp_params(cfg)


def embedding_params(cfg: TrainingConfig) -> int:
    m = cfg.model
    positions = m.seq_length * m.hidden_size if m.position_embedding == "learned_absolute" else 0
    return m.padded_vocab_size // cfg.parallel.tp * m.hidden_size + positions


def head_params(cfg: TrainingConfig) -> int:
    """Final norm plus the output projection, which exists separately when untied or when pp > 1
    (Megatron keeps a copy of the word embeddings on the last stage and all-reduces its gradient)."""
    m = cfg.model
    separate = m.untie_embeddings or cfg.parallel.pp > 1
    return norm_params(cfg) + (m.padded_vocab_size // cfg.parallel.tp * m.hidden_size if separate else 0)


def is_moe_layer(cfg: TrainingConfig, layer_index: int) -> bool:
    """Megatron --moe-layer-freq: k -> layers 0, k, 2k, ... are MoE; a list pattern -> the layers whose entry is 1
    (gpt_layer_specs.py get_gpt_decoder_block_spec)."""
    m = cfg.model
    if m.num_experts == 0:
        return False
    if m.moe_layer_pattern:
        return m.moe_layer_pattern[layer_index] == 1
    return layer_index % max(1, m.moe_layer_freq) == 0

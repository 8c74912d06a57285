"""Parameter counts per rank (after TP/EP split) of each block kind, following Megatron-core's modules."""

from __future__ import annotations

from llmperf_hook.frameworks.training_config import TrainingConfig


def norm_params(cfg: TrainingConfig) -> int:
    """LayerNorm has weight and bias (2h), RMSNorm only a weight (h)."""
    return cfg.model.hidden_size * (1 if cfg.model.normalization == "RMSNorm" else 2)


def attention_params(cfg: TrainingConfig) -> int:
    m, t = cfg.model, cfg.parallel.tp
    if m.multi_latent_attention:
        return mla_params(cfg) + norm_params(cfg) + attention_sink_params(cfg)
    qkv_out = (m.num_attention_heads + 2 * m.num_query_groups) * m.kv_channels
    weights = m.hidden_size * qkv_out // t + m.num_attention_heads * m.kv_channels * m.hidden_size // t
    # the QKV bias is column-parallel (split over TP), the projection's row-parallel (whole on every rank)
    biases = (qkv_out // t if m.qkv_biased else 0) + (m.hidden_size if m.add_bias_linear else 0)
    return weights + biases + norm_params(cfg) + attention_sink_params(cfg)


def attention_sink_params(cfg: TrainingConfig) -> int:
    """Learned per-head sink logits on a rank (ModelShape.attention_sinks): one value per attention head, split over
    TP with the heads (Megatron DotProductAttention.softmax_offset of num_attention_heads_per_partition under
    --softmax-type learnable; gpt-oss's GptOssAttention.sinks of num_attention_heads). gpt-oss-120b: 64 a layer."""
    m = cfg.model
    return m.num_attention_heads // cfg.parallel.tp if m.attention_sinks else 0


def latent_norm_params(cfg: TrainingConfig, width: int) -> int:
    """An MLA q/kv latent norm (Megatron --qk-layernorm) of `width` channels: weight (+ bias for LayerNorm)."""
    return width * (1 if cfg.model.normalization == "RMSNorm" else 2) if cfg.model.qk_layernorm else 0


def mla_down_split(cfg: TrainingConfig) -> int:
    """How many ranks split the MLA down projections: none under Transformer Engine, whose TELinear runs them
    'duplicated' on every TP rank (multi_latent_attention.py, parallel_mode='duplicated'); the local spec's
    ColumnParallelLinear splits them over TP."""
    return cfg.parallel.tp if cfg.transformer_impl == "local" else 1


def mla_params(cfg: TrainingConfig) -> int:
    """Multi-latent attention on one rank (megatron/core/transformer/multi_latent_attention.py MLASelfAttention):
    q_down h x q_lora and q_up q_lora x n(d_qk + d_rope) with the q latent norm, or one q_proj h x n(d_qk + d_rope);
    kv_down h x (kv_lora + d_rope), kv latent norm, kv_up kv_lora x n(d_qk + d_v); linear_proj n d_v x h (+ bias
    with --add-bias-linear; the other MLA linears have none). Same sum as Megatron's theoretical_memory_usage."""
    m, t, down = cfg.model, cfg.parallel.tp, mla_down_split(cfg)
    n, q_head = m.num_attention_heads, m.qk_head_dim + m.qk_pos_emb_head_dim
    if m.q_lora_rank:
        q = m.hidden_size * m.q_lora_rank // down + m.q_lora_rank * n * q_head // t + latent_norm_params(cfg, m.q_lora_rank)
    else:  # with --qk-layernorm the q projection fuses a norm of its h-wide input (mla_qk_norm_config.py)
        q = m.hidden_size * n * q_head // t + latent_norm_params(cfg, m.hidden_size)
    kv = (m.hidden_size * (m.kv_lora_rank + m.qk_pos_emb_head_dim) // down
          + m.kv_lora_rank * n * (m.qk_head_dim + m.v_head_dim) // t + latent_norm_params(cfg, m.kv_lora_rank))
    proj = n * m.v_head_dim * m.hidden_size // t + (m.hidden_size if m.add_bias_linear else 0)
    return q + kv + proj


def shared_expert_params(cfg: TrainingConfig) -> int:
    """Shared experts of one MoE layer on a rank: a dense MLP of width moe_shared_expert_intermediate_size, split
    over TP like the dense MLP, no biases (moe/shared_experts.py SharedExpertMLP), plus an h-weight gate."""
    m, t = cfg.model, cfg.parallel.tp
    ffn = m.moe_shared_expert_intermediate_size
    if not ffn:
        return 0
    return m.hidden_size * ffn * (3 if m.swiglu else 2) // t + (m.hidden_size if m.moe_shared_expert_gate else 0)


def mlp_params(cfg: TrainingConfig) -> int:
    m, t = cfg.model, cfg.parallel.tp
    up = m.ffn_hidden_size * (2 if m.swiglu else 1)
    weights = m.hidden_size * up // t + m.ffn_hidden_size * m.hidden_size // t
    biases = (up // t + m.hidden_size) if m.mlp_biased else 0  # fc1 (gate and up) and fc2, ModelShape.mlp_bias
    return weights + biases + norm_params(cfg)


def expert_params(cfg: TrainingConfig) -> int:
    """Parameters of this rank's local experts (num_experts / ep of them, each split by etp), with their fc1 bias
    (column-parallel, split by etp) and fc2 bias (row-parallel, whole) where linears are biased: Megatron-Core's
    SequentialMLP / TEGroupedMLP (experts.py: bias=config.add_bias_linear), DeepSpeed-MoE's ParallelMLP experts,
    gpt-oss's gate_up_proj_bias and down_proj_bias. The legacy GroupedMLP refuses biases (experts.py asserts
    add_bias_linear == False), and has none."""
    m, p = cfg.model, cfg.parallel
    ffn = m.moe_ffn_hidden_size or m.ffn_hidden_size
    up = ffn * (2 if m.swiglu else 1)
    per_expert = m.hidden_size * (up + ffn) // max(1, p.etp)
    if experts_biased(cfg):
        per_expert += up // max(1, p.etp) + m.hidden_size
    return per_expert * max(1, m.num_experts // p.ep)


def experts_biased(cfg: TrainingConfig) -> bool:
    """Each expert's fc1 and fc2 carry a bias (expert_params): with biased linears, but never in the legacy
    GroupedMLP."""
    return cfg.model.mlp_biased and not legacy_grouped_mlp(cfg)


def legacy_grouped_mlp(cfg: TrainingConfig) -> bool:
    """Megatron-Core's --moe-grouped-gemm without Transformer Engine builds the legacy GroupedMLP (models/backends.py
    LocalSpecProvider.grouped_mlp_modules in megatron-core 0.16.1), not TE's per-expert GroupedLinear."""
    return (cfg.framework == "megatron" and cfg.model.moe_dispatch.grouped_gemm
            and cfg.transformer_impl == "local")


def router_biased(cfg: TrainingConfig) -> bool:
    """The router has a bias of one value per expert where linears are biased (Megatron-Core's TopKRouter:
    `if config.add_bias_linear`, moe/router.py; gpt-oss's GptOssTopKRouter.bias); DeepSpeed-MoE's gate
    (moe/sharded_moe.py TopKGate.wg) is built with bias=False."""
    return cfg.model.mlp_biased and cfg.framework != "megatron-deepspeed"


def router_params(cfg: TrainingConfig) -> int:
    """The router's h x experts weight and its bias (router_biased)."""
    m = cfg.model
    return m.num_experts * (m.hidden_size + (1 if router_biased(cfg) else 0))


def moe_dense_params(cfg: TrainingConfig) -> int:
    """Non-expert parameters of an MoE MLP block: its norm, the router and the shared experts."""
    return norm_params(cfg) + router_params(cfg) + shared_expert_params(cfg)


def layer_params(cfg: TrainingConfig, moe: bool) -> int:
    """All parameters of one transformer layer on a rank: attention plus the dense MLP, or plus the MoE block's
    norm, router and this rank's local experts."""
    if moe:
        return attention_params(cfg) + moe_dense_params(cfg) + expert_params(cfg)
    return attention_params(cfg) + mlp_params(cfg)


def embedding_params(cfg: TrainingConfig) -> int:
    """The rank's word-embedding shard plus the learned position table (position_table_rows x hidden_size)."""
    m = cfg.model
    positions = position_table_rows(cfg) * m.hidden_size
    return m.padded_vocab_size // cfg.parallel.tp * embedding_width(cfg) + positions + embedding_projection_params(cfg)


def position_table_rows(cfg: TrainingConfig) -> int:
    """Rows of the rank's learned position table (0 without one): --max-position-embeddings, not the sequence
    length (megatron/core/models/common/embeddings/language_model_embedding.py: torch.nn.Embedding(
    max_sequence_length, hidden), GPTModel passing max_sequence_length = config.max_position_embeddings;
    Megatron-DeepSpeed's language_model.py Embedding and Hugging Face GPT-2's wpe(n_positions) the same); the
    sequence length where the job does not state it. Megatron-DeepSpeed under --sequence-parallel splits the table
    over the TP ranks (tensor_parallel.layers.SequenceParallelPositionEmbedding: max_sequence_length // TP rows a
    rank, since the 2023-09 rebase that brought sequence parallelism, cc3a94c6); Megatron-LM keeps the whole table
    on every rank."""
    m = cfg.model
    if m.position_embedding != "learned_absolute":
        return 0
    rows = m.max_position_embeddings or m.seq_length
    if cfg.framework == "megatron-deepspeed" and cfg.parallel.sequence_parallel:
        rows //= cfg.parallel.tp
    return rows


def embedding_width(cfg: TrainingConfig) -> int:
    """Width of the word embedding and the (tied) LM head: OPT's word_embed_proj_dim where it differs from hidden_size
    (facebook/opt-350m: 512), else hidden_size."""
    return cfg.model.word_embed_proj_dim or cfg.model.hidden_size


def embedding_projection_params(cfg: TrainingConfig) -> int:
    """One of OPT's two projections between the embedding width and hidden_size (transformers OPTDecoder: project_in
    after the embedding lookup, project_out before the LM head; nn.Linear(..., bias=False), so E x h weights each);
    0 without word_embed_proj_dim. facebook/opt-350m: 512 x 1024 = 524,288 each."""
    width = cfg.model.word_embed_proj_dim
    return width * cfg.model.hidden_size if width and width != cfg.model.hidden_size else 0


def head_params(cfg: TrainingConfig) -> int:
    """Final norm plus the output projection, which exists separately when untied or when pp > 1
    (Megatron keeps a copy of the word embeddings on the last stage and all-reduces its gradient); plus OPT's
    project_out where the embedding is narrower than hidden_size."""
    m = cfg.model
    separate = m.untie_embeddings or cfg.parallel.pp > 1
    output = m.padded_vocab_size // cfg.parallel.tp * embedding_width(cfg) if separate else 0
    return norm_params(cfg) + output + embedding_projection_params(cfg)


def zero3_gather_modules(cfg: TrainingConfig, layer_params: int) -> tuple[int, ...]:
    """Parameters of the modules ZeRO-3 fetches one by one in a layer (QKV, projection, MLP up, MLP down).

    DeepSpeed fetches a module's parameters in its pre-forward / pre-backward hook
    (deepspeed/runtime/zero/parameter_offload.py, partitioned_param_coordinator.fetch_sub_module); norms and
    small biases stay resident (stage3_param_persistence_threshold, 1e5 elements by default), so a dense layer
    makes four gathers. An MoE layer's MLP part (router + local experts) is split up/down the same way."""
    m, t = cfg.model, cfg.parallel.tp
    qkv = m.hidden_size * (m.num_attention_heads + 2 * m.num_query_groups) * m.kv_channels // t
    proj = m.num_attention_heads * m.kv_channels * m.hidden_size // t
    rest = max(0, layer_params - qkv - proj - 2 * norm_params(cfg))
    up_share = 2.0 / 3.0 if m.swiglu else 0.5  # up = ffn (x2 with SwiGLU) x h, down = ffn x h
    up = int(rest * up_share)
    return tuple(n for n in (qkv, proj, up, rest - up) if n > 0)


def is_moe_layer(cfg: TrainingConfig, layer_index: int) -> bool:
    """Megatron --moe-layer-freq: k -> layers 0, k, 2k, ... are MoE; a list pattern -> the layers whose entry is 1
    (gpt_layer_specs.py get_gpt_decoder_block_spec)."""
    m = cfg.model
    if m.num_experts == 0:
        return False
    if m.moe_layer_pattern:
        return m.moe_layer_pattern[layer_index] == 1
    return layer_index % max(1, m.moe_layer_freq) == 0


def mtp_layer_is_moe(cfg: TrainingConfig) -> bool:
    """An MTP depth repeats the decoder's last layer spec (gpt_layer_specs.py get_gpt_mtp_block_spec), as
    Megatron's FLOP and memory counts assume (last_layer_is_moe)."""
    return is_moe_layer(cfg, cfg.model.num_layers - 1)


def mtp_depth_params(cfg: TrainingConfig) -> int:
    """One MTP depth on a rank (multi_token_prediction.py MultiTokenPredictionLayer): enorm and hnorm, eh_proj
    (column-parallel 2h -> h, no bias), one transformer layer, final_layernorm; the output head is the main one."""
    m = cfg.model
    eh_proj = 2 * m.hidden_size * m.hidden_size // cfg.parallel.tp
    return 3 * norm_params(cfg) + eh_proj + layer_params(cfg, mtp_layer_is_moe(cfg))


def mtp_params(cfg: TrainingConfig) -> int:
    """All MTP parameters of the last pipeline stage: the depths, and with PP > 1 the word embedding the MTP block
    looks up the shifted tokens in (gpt_model.py builds an embedding where pre_process or mtp_process)."""
    m = cfg.model
    if not m.mtp_num_layers:
        return 0
    return m.mtp_num_layers * mtp_depth_params(cfg) + (embedding_params(cfg) if cfg.parallel.pp > 1 else 0)

"""Forward ops of Megatron-Core multi-latent attention (DeepSeek-V2/V3 MLA) on one rank, with real GEMM shapes.

megatron/core/transformer/multi_latent_attention.py MLASelfAttention with the Transformer Engine spec
(gpt_layer_specs.py): the down projections are TELinear in 'duplicated' mode, so every TP rank runs them whole
on its own tokens (T / tp under sequence parallelism, T otherwise); the up projections and the output projection
are column / row parallel over the heads. Under sequence parallelism the up projections all-gather their
latent inputs (q_lora and kv_lora wide, not h) and the rope key (d_rope wide) is gathered apart
(gather_from_sequence_parallel_region); without a q latent, the q projection all-gathers the h-wide input.
Per head the scores use d_qk + d_rope channels and the values d_v (one rope key shared by all heads).
The q / kv latent norms exist with --qk-layernorm (mla_qk_norm_config.py), fused into the up projections.
The local spec (--transformer-impl local, gpt_layer_specs.py get_gpt_layer_local_submodules) builds the down
projections as ColumnParallelLinear instead: their outputs are latent slices that the forward all-gathers over TP
(latent_gather_ops), and each gathers its own input under SP.
"""

from __future__ import annotations

from llmperf_hook.graph import layer_ops as lo
from llmperf_hook.graph.attention_core_ops import unfused_core
from llmperf_hook.graph.op import Op
from llmperf_hook.graph.params import mla_down_split


def _latent_norm(name: str, width: int, ctx: lo.LayerContext) -> list[Op]:
    """A q / kv latent norm of `width` channels, with --qk-layernorm only."""
    return [lo.norm(name, ctx, width)] if ctx.cfg.model.qk_layernorm else []


def _down(op: Op, ctx: lo.LayerContext) -> Op:
    """A down projection: TE's TELinear runs it 'duplicated' (no TP collective, its input gradient whole on every
    rank); the local spec's ColumnParallelLinear splits it, so it all-reduces its T x h input gradient."""
    return lo.own_grad_allreduce(op, ctx) if mla_down_split(ctx.cfg) > 1 else op


def _down_tokens(ctx: lo.LayerContext) -> int:
    """Rows of a down projection: the rank's own tokens under TE (T / tp with SP); the local spec's
    ColumnParallelLinear gathers the sequence first (T rows)."""
    return ctx.tokens if mla_down_split(ctx.cfg) > 1 else ctx.norm_tokens


def query_ops(ctx: lo.LayerContext, heads: int) -> list[Op]:
    """q_down -> q latent norm -> all-gather -> q_up; or one q projection without --q-lora-rank."""
    m = ctx.cfg.model
    q_out = heads * (m.qk_head_dim + m.qk_pos_emb_head_dim)
    if not m.q_lora_rank:
        return [*lo.tp_enter("attn.tp_allgather", ctx), *_latent_norm("attn.q_norm", m.hidden_size, ctx),
                lo.own_grad_allreduce(lo.gemm("attn.q_proj", ctx.tokens, q_out, m.hidden_size, ctx), ctx)]
    split = mla_down_split(ctx.cfg)
    return [_down(lo.gemm("attn.q_down", _down_tokens(ctx), m.q_lora_rank // split, m.hidden_size, ctx), ctx),
            *_latent_norm("attn.q_norm", m.q_lora_rank, ctx), *lo.tp_enter("attn.q_allgather", ctx, m.q_lora_rank),
            lo.own_grad_allreduce(lo.gemm("attn.q_up", ctx.tokens, q_out, m.q_lora_rank, ctx), ctx)]


def key_value_ops(ctx: lo.LayerContext, heads: int) -> list[Op]:
    """kv_down (latent + rope key) -> kv latent norm -> all-gathers -> kv_up (keys and values of every head). The
    local spec's column-parallel kv_down gathers its own input under SP; its gathered output holds the whole rope key
    on every rank, which TE's duplicated kv_down leaves on the sequence shard to gather apart."""
    m = ctx.cfg.model
    split = mla_down_split(ctx.cfg)
    own_input = lo.tp_enter("attn.kv_down_allgather", ctx) if split > 1 else []
    rope_key = lo.tp_enter("attn.k_rope_allgather", ctx, m.qk_pos_emb_head_dim) if split == 1 else []
    return [*own_input, _down(lo.gemm("attn.kv_down", _down_tokens(ctx), (m.kv_lora_rank + m.qk_pos_emb_head_dim)
                                      // split, m.hidden_size, ctx), ctx),
            *_latent_norm("attn.kv_norm", m.kv_lora_rank, ctx), *lo.tp_enter("attn.kv_allgather", ctx, m.kv_lora_rank),
            *rope_key, lo.own_grad_allreduce(lo.gemm("attn.kv_up", ctx.tokens, heads * (m.qk_head_dim + m.v_head_dim),
                                                     m.kv_lora_rank, ctx), ctx)]


def latent_gather_ops(ctx: lo.LayerContext) -> list[Op]:
    """The local spec's gathers of the down projections' latent slices (multi_latent_attention.py
    _qkv_down_projection and get_query_key_value_tensors: a q_lora / tp or (kv_lora + d_rope) / tp wide output is
    gather_from_tensor_model_parallel_region'ed over TP to T x q_lora and T x (kv_lora + d_rope), and under SP
    scatter_to_sequence_parallel_region'ed back to the sequence shard). The gather's backward is a split (no
    collective): backward=identity; the scatter's is an all-gather of the latent (latent_scatter_backward). Listed
    first in the attention, ahead of its norm: they run serially on the compute stream wherever they stand, and
    there they leave the TP region of the attention's grad-input all-reduces whole (graph/backward.py
    column_grad_allreduces) and precede no GEMM (which would read as a sequence-parallel gather of its input,
    backward.sp_gathered_gemm). Nothing under TE, whose duplicated down projections write whole latents."""
    m = ctx.cfg.model
    if mla_down_split(ctx.cfg) == 1:
        return []
    widths = ((("attn.q_latent_gather", m.q_lora_rank),) if m.q_lora_rank else ()) + \
        (("attn.kv_latent_gather", m.kv_lora_rank + m.qk_pos_emb_head_dim),)
    return [lo.comm(name, "allgather", ctx.tokens * width * ctx.act_bytes, ctx.tp, ctx, backward=lo.IDENTITY_BACKWARD)
            for name, width in widths]


def latent_scatter_backward(ctx: lo.LayerContext) -> tuple[Op, ...]:
    """Under SP, the backward of the local spec's scatters of the gathered latents (latent_gather_ops):
    _ScatterToSequenceParallelRegion.backward all-gathers the T x q_lora and T x kv_lora gradients over TP (the rope
    key is not scattered)."""
    m = ctx.cfg.model
    if mla_down_split(ctx.cfg) == 1 or not ctx.cfg.parallel.sequence_parallel:
        return ()
    widths = ((("attn.q_latent_scatter", m.q_lora_rank),) if m.q_lora_rank else ()) + \
        (("attn.kv_latent_scatter", m.kv_lora_rank),)
    return tuple(Op(name, "allgather", "bwd", {"bytes": int(ctx.tokens * width * ctx.act_bytes)}, dtype=ctx.dtype,
                    collective=ctx.tp) for name, width in widths)


HEAD_DIM_TAGS = ("head_dim_qk", "head_dim_v")
"""Tags of an MLA core op holding the kernel's two real head widths (mla_head_dim_tags), where its dims' head_dim is
the FLOP-equivalent mean: tags, not dims, so the profile keys (features.REQUIRED_DIMS) and sampled shapes stay the
square head's."""


def mla_head_dim_tags(m) -> dict[str, str]:
    """The widths the fused kernel reads (`m`: the ModelShape): Q and K rows of d_qk + d_rope channels (QK^T's
    leading dimension) and V and O rows of d_v (PV's); predict/gemm_alignment checks each."""
    return {"head_dim_qk": str(m.qk_head_dim + m.qk_pos_emb_head_dim), "head_dim_v": str(m.v_head_dim)}


def mla_core(ctx: lo.LayerContext, heads: int) -> Op:
    """Causal attention with d_qk + d_rope channels for the scores and d_v for the values: FLOPs
    2 b s_q s_kv n (d_q + d_v) / 2 (QK^T and AV, half under the causal mask; Megatron's
    num_floating_point_operations MLA core term). The predictor's head_dim is the mean (d_q + d_v) / 2, the
    square head that does the same FLOPs; the two real widths are its tags (HEAD_DIM_TAGS)."""
    cfg, m = ctx.cfg, ctx.cfg.model
    b, s_q, s_kv = cfg.batch.micro_batch_size, m.seq_length // cfg.parallel.cp, m.seq_length
    d_q, d_v = m.qk_head_dim + m.qk_pos_emb_head_dim, m.v_head_dim
    flops = 2.0 * b * s_q * s_kv * heads * (d_q + d_v) * 0.5
    dims = {"b": b, "s": s_q, "heads": heads, "kv_heads": heads, "head_dim": (d_q + d_v) // 2, "causal": 1}
    io = b * s_q * heads * (2 * d_q + 2 * d_v) * ctx.act_bytes  # read Q, K, V; write O
    return Op("attn.core", "attention", "fwd", dims, flops=flops, bytes_moved=float(io), dtype=ctx.dtype,
              tags=mla_head_dim_tags(m))


def mla_attention_ops(ctx: lo.LayerContext) -> list[Op]:
    """The attention half of a transformer layer with MLA."""
    m, p = ctx.cfg.model, ctx.cfg.parallel
    heads = m.num_attention_heads // ctx.tp.group_size
    d_rope = m.qk_pos_emb_head_dim
    # The local spec's column-parallel down projections gather the sequence first (the q projection without a
    # latent gathers its own input).
    gather = lo.tp_enter("attn.tp_allgather", ctx) if mla_down_split(ctx.cfg) > 1 and m.q_lora_rank else []
    ops = [*latent_gather_ops(ctx), lo.norm("attn.norm", ctx), *gather, *query_ops(ctx, heads),
           *key_value_ops(ctx, heads),
           lo.elementwise("attn.rope", "rope", {"tokens": ctx.tokens, "heads": heads + 1, "head_dim": d_rope},
                          ctx.tokens * (heads + 1) * d_rope, ctx)]
    if p.cp > 1:  # the CP ring passes every head's full K (d_qk + d_rope) and V (d_v)
        kv_bytes = ctx.tokens * heads * (m.qk_head_dim + d_rope + m.v_head_dim) * ctx.act_bytes * (p.cp - 1)
        ops.append(lo.comm("attn.cp_kv_exchange", "p2p", kv_bytes, ctx.cp, ctx, overlap="attention"))
    # --attention-backend unfused reaches MLA too: its core is the TE spec's TEDotProductAttention
    # (gpt_layer_specs.py backend.core_attention()), which LanguageModule._set_attention_backend's NVTE_FLASH_ATTN=0,
    # NVTE_FUSED_ATTN=0, NVTE_UNFUSED_ATTN=1 turn into TE's UnfusedDotProductAttention (core_v0.16.1)
    core = unfused_core(ctx, heads, m.qk_head_dim + d_rope, m.v_head_dim) \
        if ctx.cfg.attention_backend == "unfused" else lo.context_parallel_steps(mla_core(ctx, heads), p.cp)
    ops += [*core,
            lo.gemm("attn.proj", ctx.tokens, m.hidden_size, heads * m.v_head_dim, ctx),
            *lo.tp_exit("attn.tp_reduce", ctx), lo.residual("attn.residual", ctx)]
    return ops

"""The attention core of one transformer layer on one rank (between the QKV projection and the output projection):
one fused attention kernel (flash / cuDNN / Transformer Engine, split into the steps of context parallelism), or
Megatron's unfused "local" attention with its softmax path: the fused scale-mask-softmax kernel where its shape
rules allow it, else PyTorch's fallback with its mask fill, fp32 casts, query-key layer scaling and the attention
sinks' extra column. The rest of the layer: graph/layer_ops.py, whose attention_ops calls attention_core.

FLOPs: causal attention core 2 * 2 * b * s_q * s_kv * heads * head_dim / 2 (Q.K^T and P.V, half under the mask).
"""

from __future__ import annotations

from dataclasses import replace

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.layer_ops import LayerContext, context_parallel_steps, elementwise
from llmperf_hook.graph.op import Op
from llmperf_hook.graph.param_tensors import megatron_layout


def attention_core(ctx: LayerContext, heads: int, kv_heads: int, d: int) -> list[Op]:
    cfg = ctx.cfg
    b = cfg.batch.micro_batch_size
    s_q = cfg.model.seq_length // cfg.parallel.cp
    s_kv = cfg.model.seq_length
    causal_flops = 2.0 * 2.0 * b * s_q * s_kv * heads * d * 0.5
    if cfg.attention_backend != "unfused":
        tile_d, tags = flash_head_dim(cfg, d)
        dims = {"b": b, "s": s_q, "heads": heads, "kv_heads": kv_heads, "head_dim": tile_d, "causal": 1}
        io = b * s_q * (2 * heads + 2 * kv_heads) * d * ctx.act_bytes
        core = Op("attn.core", "attention", "fwd", dims, flops=causal_flops * tile_d / d, bytes_moved=float(io),
                  dtype=ctx.dtype, tags=tags)
        return context_parallel_steps(core, cfg.parallel.cp)
    return unfused_core(ctx, heads, d, d)


def unfused_core(ctx: LayerContext, heads: int, d_qk: int, d_v: int) -> list[Op]:
    """The unfused attention (Megatron's "local" DotProductAttention, or TE's UnfusedDotProductAttention under
    --attention-backend unfused): QK^T bmm over d_qk channels, masked softmax, attention dropout, AV bmm over d_v
    channels; full s x s scores. d_qk = d_v but for multi-latent attention (graph/mla_ops.mla_attention_ops)."""
    cfg = ctx.cfg
    b, s_q, s_kv = cfg.batch.micro_batch_size, cfg.model.seq_length // cfg.parallel.cp, cfg.model.seq_length
    batch = b * heads
    scores = batch * s_q * s_kv
    qk = Op("attn.qk", "bmm", "fwd", {"batch": batch, "m": s_q, "n": s_kv, "k": d_qk},
            flops=2.0 * batch * s_q * s_kv * d_qk,
            bytes_moved=float(ctx.act_bytes * (2 * batch * s_q * d_qk + scores)), dtype=ctx.dtype)
    softmax = elementwise("attn.softmax", "softmax", {"rows": batch * s_q, "cols": s_kv}, scores, ctx)
    dropout = elementwise("attn.dropout", "dropout", {"elements": scores}, scores, ctx, passes=2.5)
    av = Op("attn.av", "bmm", "fwd", {"batch": batch, "m": s_q, "n": d_v, "k": s_kv},
            flops=2.0 * batch * s_q * s_kv * d_v,
            bytes_moved=float(ctx.act_bytes * (scores + 2 * batch * s_q * d_v)), dtype=ctx.dtype)
    dropouts = [dropout] if cfg.attention_dropout > 0 else []  # torch's dropout at p = 0 returns its input
    if not torch_softmax_path(cfg):
        return [qk, softmax, *dropouts, av]
    before, after = softmax_fallback_ops(scores, ctx)
    before += attention_sink_ops(scores, ctx)
    # torch.nn.Softmax: its CUDA backward is two kernels (graph/backward.py TORCH_SOFTMAX_BWD_BYTES_FACTOR).
    softmax = replace(softmax, tags={**softmax.tags, "kernel": "torch"})
    if softmax_precision(cfg)[1]:  # the softmax itself reads and writes fp32 scores
        softmax = replace(softmax, bytes_moved=float(2 * scores * FP32_BYTES), dtype="fp32")
    return [qk, *before, softmax, *after, *dropouts, av]


TRITON_FLASH_FLAG = "--use-flash-attn-triton"
"""Megatron-DeepSpeed's flag for flash-attention v1.0.4's Triton kernel (megatron/model/transformer.py
FlashSelfAttentionTriton -> flash_attn.flash_attn_triton.flash_attn_func)."""


def flash_head_dim(cfg: TrainingConfig, d: int) -> tuple[int, dict[str, str]]:
    """(head dimension the fused attention kernel computes at, the op's tags). flash-attention's Triton kernel tiles
    the head dimension at BLOCK_HEADDIM = max(triton.next_power_of_2(d), 16) and masks the padding to zeros
    (flash_attn/flash_attn_triton.py _flash_attn_forward / _flash_attn_backward, v1.0.4, the version the
    Megatron-DeepSpeed README installs for --use-flash-attn-triton): its Q.K^T and P.V products run at that width,
    so head dimension 96 does the tensor-core work of 128 (4/3). The op carries the padded dims and FLOPs (what the
    kernel executes) and tags the model's own head dimension, which the step's model FLOPs count (build.py).
    Other flash kernels: the dims are the model's. The kernel is read from where the attention backend came from
    (TrainingConfig has no field for the flash implementation)."""
    source = cfg.sources.get("attention_backend")
    if source is None or source.detail != TRITON_FLASH_FLAG:
        return d, {}
    tile = max(16, 1 << (d - 1).bit_length())
    return tile, {"kernel": "flash_triton", "model_head_dim": str(d)} if tile != d else {"kernel": "flash_triton"}


FUSED_SOFTMAX_MAX_SK = 4096
"""Longest key length the fused causal softmax kernel takes (FusedScaleMaskSoftmax.is_kernel_available: 16 < sk
<= 4096 in megatron-core's fusions/fused_softmax.py and in the Megatron-DeepSpeed forks' megatron/model/
fused_softmax.py; only Megatron-LM's apex-era legacy copy of 2023, cd126362bb, took 16384)."""
FP32_BYTES = 4


def softmax_precision(cfg: TrainingConfig) -> tuple[bool, bool]:
    """(query-key layer scaling, softmax in fp32) of the PyTorch softmax fallback: Megatron-DeepSpeed scales by the
    layer number unless --no-query-key-layer-scaling (megatron/arguments.py there), Megatron-LM only with
    --apply-query-key-layer-scaling; scaling forces the softmax to fp32 (TransformerConfig.__post_init__), as
    --attention-softmax-in-fp32 does."""
    scaling = cfg.query_key_layer_scaling
    if scaling is None:
        scaling = cfg.framework == "megatron-deepspeed"
    if te_unfused_attention(cfg):  # TE scales only fp16 scores and always softmaxes in fp32
        return bool(scaling and cfg.precision == "fp16"), True
    return scaling, bool(scaling or cfg.softmax_in_fp32)


def fused_softmax_available(attn_batches: int, s_q: int, s_kv: int) -> bool:
    """Megatron's FusedScaleMaskSoftmax.is_kernel_available for the causal mask (megatron-core
    fusions/fused_softmax.py, Megatron-DeepSpeed megatron/model/fused_softmax.py): 16 < sk <= 4096, sq and sk
    multiples of 4, and attn_batches = micro_batch x heads per TP rank a multiple of 4 and of the kernel's batches
    per block. Batches per block
    (scaled_masked_softmax.h get_batch_per_block): 128 threads / min(next_pow2(sk), 32) per warp x (2 rows per
    warp when next_pow2(sk) <= 128, else 1) = 4 for every sk > 128. Otherwise the layer falls back to PyTorch ops
    (forward_torch_softmax): e.g. TP 8 of 16 heads at micro-batch 1 gives attn_batches 2."""
    if not (16 < s_kv <= FUSED_SOFTMAX_MAX_SK and s_q % 4 == 0 and s_kv % 4 == 0):
        return False
    return attn_batches % 4 == 0 and attn_batches % _batches_per_block(s_kv) == 0


def _batches_per_block(s_kv: int) -> int:
    """Rows one thread block of the fused softmax takes (get_batch_per_block, the same in megatron-core and TE)."""
    pow2 = 1 << max(0, (s_kv - 1).bit_length())
    warp = min(pow2, 32)
    return (128 // warp) * (2 if pow2 <= 128 else 1)


TE_FUSED_SOFTMAX_END_SK = 16384
"""Transformer Engine's FusedScaleMaskSoftmax.is_kernel_available takes 16 < sk < 16384 (exclusive), sk % 8 == 0
(transformer_engine/pytorch/attention/dot_product_attention/softmax.py), where megatron-core's takes sk <= 4096."""


def te_unfused_attention(cfg: TrainingConfig) -> bool:
    """megatron-core under Transformer Engine (the default --transformer-impl): --attention-backend unfused runs TE's
    UnfusedDotProductAttention inside TEDotProductAttention, whose own FusedScaleMaskSoftmax (TE's rule,
    te_fused_softmax_available) decides the softmax path, not megatron-core's fusions/fused_softmax.py."""
    return cfg.framework == "megatron" and cfg.transformer_impl == "transformer_engine"


def te_fused_softmax_available(attn_batches: int, s_q: int, s_kv: int, sink: bool) -> bool:
    """TE's FusedScaleMaskSoftmax.is_kernel_available for the causal self-attention of training: 16 < sk < 16384,
    sk % 8 == 0, sq > 1, the causal kernel only for sq == sk, sq % 4 == 0, attn_batches = micro-batch x heads per
    TP rank a multiple of 4, and sq (not attn_batches, as in megatron-core) a multiple of the batches per block.
    A sink logit (softmax_type learnable / off-by-one) is concatenated as one more key column before the softmax,
    and the mask type becomes "arbitrary" (backends.py UnfusedDotProductAttention.forward): sk + 1 is checked, and
    no sq == sk rule; in self-attention sq = sk then cannot be a multiple of 4 while sk + 1 is one of 8, so a sink
    always takes the PyTorch path. 16-bit input and NVTE_MASKED_SOFTMAX_FUSION are the caller's (torch_softmax_path)."""
    s_k = s_kv + 1 if sink else s_kv
    if not (16 < s_k < TE_FUSED_SOFTMAX_END_SK and s_k % 8 == 0 and s_q > 1 and (sink or s_q == s_kv)):
        return False
    return s_q % 4 == 0 and attn_batches % 4 == 0 and s_q % _batches_per_block(s_k) == 0


def torch_softmax_path(cfg: TrainingConfig) -> bool:
    """The unfused attention runs PyTorch's softmax (FusedScaleMaskSoftmax.forward_torch_softmax), not the fused
    kernel: --no-masked-softmax-fusion, a softmax offset (ModelShape.softmax_sink), fp32 scores (is_kernel_available
    needs input_in_float16), or a shape the kernel does not take (fused_softmax_available; attention batches =
    micro-batch x heads per TP rank); under Transformer Engine TE's rule (te_fused_softmax_available). The graph
    (attention_core) and the memory model (schedule/activations.py) both ask here."""
    m, p = cfg.model, cfg.parallel
    attn_batches = cfg.batch.micro_batch_size * (m.num_attention_heads // p.tp)
    s_q = m.seq_length // p.cp
    if te_unfused_attention(cfg):  # masked_softmax_fusion: NVTE_MASKED_SOFTMAX_FUSION under TE (frameworks/step_flags)
        shape_ok = te_fused_softmax_available(attn_batches, s_q, m.seq_length, m.softmax_sink)
    else:  # megatron-core's FusedScaleMaskSoftmax.forward: the kernel only `and softmax_offset is None`
        shape_ok = not m.softmax_sink and fused_softmax_available(attn_batches, s_q, m.seq_length)
    # the kernel takes fp16 / bf16 input only
    fused = cfg.masked_softmax_fusion and cfg.precision != "fp32" and shape_ok
    return cfg.attention_backend == "unfused" and not fused


MEGATRON_SINK_PASSES = 2.0
"""Passes over the scores (in the activation dtype) that a sink column adds to Megatron's unfused attention: SoftmaxOne
(fusions/fused_softmax.py; --softmax-type learnable, and off-by-one, whose DotProductAttention.softmax_offset is
torch.zeros(heads per partition), not None) runs torch.cat([scores, sink]), which reads the scores and writes them one
column wider (2); the softmax runs over that and the sink column is sliced off as a view."""
HF_EAGER_SINK_PASSES = 5.0
"""The same for transformers' gpt-oss eager_attention_forward (modeling_gpt_oss.py): the cat (2), then
`combined_logits - combined_logits.max(dim=-1, keepdim=True).values`, a max reduction (1) and a subtraction (2)."""


def attention_sink_ops(scores: int, ctx: LayerContext) -> list[Op]:
    """The unfused attention's extra work for a per-head sink logit, learned or fixed at 0 (ModelShape.softmax_sink):
    the sink logit joins every score row (MEGATRON_SINK_PASSES, HF_EAGER_SINK_PASSES), one op of class cast (a copy),
    4 bytes of traffic per 16-bit score beside the torch fallback's mask fill, softmax and dropout (14): more than
    rounding. A fused kernel (flash-attention's s_aux, Transformer Engine's softmax_type learnable / off-by-one) adds
    one logit per row to its online softmax: O(1) beside each row's O(s x head_dim), left unpriced. megatron-core's
    local DotProductAttention concatenates inside forward_torch_softmax, after `input.float()`: with the softmax in
    fp32 (softmax_precision) the cat reads and writes fp32 scores (torch.cat promotes the 16-bit sink). Transformer
    Engine's UnfusedDotProductAttention concatenates before its softmax casts (backends.py), and transformers'
    gpt-oss eager attention never casts: the activation dtype."""
    cfg = ctx.cfg
    if not cfg.model.softmax_sink:
        return []
    megatron = megatron_layout(cfg)
    passes = MEGATRON_SINK_PASSES if megatron else HF_EAGER_SINK_PASSES
    concat = elementwise("attn.sink_concat", "cast", {"elements": scores}, scores, ctx, passes=passes)
    if megatron and cfg.transformer_impl == "local" and softmax_precision(cfg)[1]:
        concat = replace(concat, bytes_moved=passes * scores * FP32_BYTES, dtype="fp32")
    return [concat]


def softmax_fallback_ops(scores: int, ctx: LayerContext) -> tuple[list[Op], list[Op]]:
    """The extra PyTorch kernels of FusedScaleMaskSoftmax.forward_torch_softmax over the scores, besides the
    softmax itself: masked_fill_ with the causal mask (read scores + 1-byte mask, write scores) and, with the
    softmax in fp32 (softmax_precision), the cast to fp32 before and the cast back after (read 2 + write 4, read 4 +
    write 2 bytes per score), with query-key layer scaling also the scale multiply (read and write 4 bytes), the mask
    fill then on fp32 scores. Megatron-LM and Megatron-Core default to neither since 2023: mask fill only."""
    b = ctx.act_bytes
    scaling, in_fp32 = softmax_precision(ctx.cfg)
    width = FP32_BYTES if in_fp32 else b
    casts = width != b  # fp32 training: input.float() returns the scores as they are, and nothing is cast back
    fill = Op("attn.mask_fill", "mask_fill", "fwd", {"elements": scores}, flops=0.0,
              bytes_moved=float(scores * (2 * width + 1)), dtype=ctx.dtype)
    cast_in = Op("attn.softmax_cast_fp32", "cast", "fwd", {"elements": scores}, flops=0.0,
                 bytes_moved=float(scores * (b + FP32_BYTES)), dtype=ctx.dtype)
    scale = Op("attn.softmax_scale", "scale", "fwd", {"elements": scores}, flops=float(scores),
               bytes_moved=float(scores * 2 * width), dtype=ctx.dtype)
    cast_out = Op("attn.softmax_cast_back", "cast", "fwd", {"elements": scores}, flops=0.0,
                  bytes_moved=float(scores * (FP32_BYTES + b)), dtype=ctx.dtype)
    return [*([cast_in] if casts else []), *([scale] if scaling else []), fill], [cast_out] if casts else []


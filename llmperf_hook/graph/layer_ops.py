"""Forward ops of one transformer layer on one rank, with exact per-rank shapes (the embedding and LM head:
graph/vocab_ops.py).

Shapes follow Megatron-core (megatron/core/transformer/): tokens on a rank T = micro_batch * seq / cp; with
sequence parallelism the norms, dropout and residual adds see T / tp tokens and the TP collectives become
all-gather (before the column-parallel GEMM) and reduce-scatter (after the row-parallel GEMM) of T x h
(Korthikanti et al. 2022, arXiv 2205.05198, Sec. 4.2.2, Fig. 5), otherwise one all-reduce each (Shoeybi et al.
2019, Fig. 3). FLOPs: 2mnk per GEMM; causal attention core 2 * 2 * b * s_q * s_kv * heads * head_dim / 2.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.fp8_tags import (FP8_PAYLOAD, FP8_PAYLOAD_BYTES, fp8_gathered_tag, fp8_grad_payload_tag,
                                         fp8_scaling_tag)
from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.graph.param_tensors import megatron_layout

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 2}
"""Bytes per activation element: fp8 training keeps activations and TP traffic in bf16 (Transformer Engine)."""


@dataclass(frozen=True)
class LayerContext:
    """Per-rank sizes shared by all ops of a layer."""

    cfg: TrainingConfig
    tokens: int
    """T = micro_batch * seq / cp."""
    norm_tokens: int
    """T / tp under sequence parallelism, else T."""
    act_bytes: int
    dtype: str
    tp: Collective
    cp: Collective
    ep: Collective
    gpus_per_node: int = 1
    """GPUs per node of the cluster (placement of the MoE dispatcher's groups, graph/moe_ops.py)."""
    nccl_sm_share: float = 0.0
    """Share of the GPU's SMs an in-node NCCL collective holds (graph/backward.nccl_sm_share), tagged on the
    sequence-parallel gathers whose backward re-gather overlaps a GEMM."""
    nccl_inter_node_sm_share: float = 0.0
    """Share of the GPU's SMs an NCCL ring across nodes holds (graph/step_ops.inter_node_ring_sm_share), tagged on
    the data-parallel gradient reduction that overlaps the last backward."""
    tp_comm_ordered: bool = True
    """The async TP collectives reach the SMs before the GEMM launched after them on this GPU
    (graph/launch_order.tp_launch_ordered: CUDA_DEVICE_MAX_CONNECTIONS=1, or Blackwell and newer)."""


def gemm(name: str, m: int, n: int, k: int, ctx: LayerContext, sp_gathered: str = "") -> Op:
    """`sp_gathered`: which FP8 operand sequence parallelism all-gathers ("input" of a column-parallel GEMM after
    tp_enter, output "grad" of a row-parallel one before tp_exit): see fp8_gathered_tag."""
    b = ctx.act_bytes
    return Op(name, "gemm", "fwd", {"m": m, "n": n, "k": k}, flops=2.0 * m * n * k,
              bytes_moved=float(b * (m * k + k * n + m * n)), dtype=ctx.dtype,
              tags={**fp8_scaling_tag(ctx), **fp8_gathered_tag(ctx, sp_gathered)})


UB_PIPELINE_SPLITS = 4
"""Chunks of Transformer Engine userbuffers' "pipeline" overlap, the default for the projection and FC2 forward
GEMMs and their reduce-scatter (transformer_engine/pytorch/module/base.py initialize_ub: num_splits 4). The
chunk GEMMs run on several compute streams (num_max_streams), so splitting costs no extra GEMM time; what
it leaves exposed is the last chunk's reduce-scatter (tp_exit)."""


def ub_overlap(ctx: LayerContext) -> bool:
    """--tp-comm-overlap is in effect: Transformer Engine userbuffers overlap the TP all-gather / reduce-scatter
    of sequence parallelism with the GEMMs next to them (Megatron requires SP for it)."""
    p = ctx.cfg.parallel
    return ctx.cfg.optimizer.tp_comm_overlap and p.sequence_parallel and ctx.tp.group_size > 1


def elementwise(name: str, op_class: str, dims: dict[str, int], elements: int, ctx: LayerContext,
                passes: float = 2.0) -> Op:
    """A memory-bound op that reads and writes `elements` `passes` times in total."""
    return Op(name, op_class, "fwd", dims, flops=0.0, bytes_moved=passes * elements * ctx.act_bytes, dtype=ctx.dtype,
              tags=fused_tag(op_class, ctx))


def comm(name: str, op_class: str, nbytes: float, coll: Collective, ctx: LayerContext, **tags: str) -> Op:
    return Op(name, op_class, "fwd", {"bytes": int(nbytes)}, dtype=ctx.dtype, collective=coll, tags=tags)


FUSED_BY_MEGATRON = frozenset({"rope", "swiglu"})
"""Ops Megatron-LM runs as one fused kernel by default (megatron/training/arguments.py: --no-rope-fusion and
--no-bias-swiglu-fusion switch them off: TrainingConfig.apply_rope_fusion / bias_activation_fusion), where plain
PyTorch models run a composite of several kernels (rotate-half RoPE: slices, neg, cat, two products and a sum;
silu(gate) * up: two kernels)."""


def fused_tag(op_class: str, ctx: LayerContext) -> dict[str, str]:
    """{"kernel": "fused"} when the framework runs this op class as one fused kernel (predict/dispatch.py)."""
    cfg = ctx.cfg
    on = {"rope": cfg.apply_rope_fusion, "swiglu": cfg.bias_activation_fusion}.get(op_class, False)
    return {"kernel": "fused"} if on and op_class in FUSED_BY_MEGATRON and cfg.framework == "megatron" else {}


def norm(name: str, ctx: LayerContext, width: int | None = None) -> Op:
    """LayerNorm / RMSNorm over the rank's tokens, `width` channels (default the hidden size)."""
    h = width or ctx.cfg.model.hidden_size
    op_class = "rmsnorm" if ctx.cfg.model.normalization == "RMSNorm" else "layernorm"
    return elementwise(name, op_class, {"tokens": ctx.norm_tokens, "hidden": h}, ctx.norm_tokens * h, ctx)


def tp_enter(name: str, ctx: LayerContext, width: int | None = None, fp8_input: bool = False) -> list[Op]:
    """Before a column-parallel GEMM: all-gather of the sequence shards (T x `width`, default the hidden size)
    under SP; identity otherwise. Its backward is a re-gather and a reduce-scatter, each beside half the GEMM's
    backward (graph/backward.sp_column_backward); the NCCL kernel's SM share is tagged for an in-node group. Where
    kernels may reach the GPU out of launch order (LayerContext.tp_comm_ordered False) the gather is tagged
    launch=unordered and its backward is serialized instead. `fp8_input`: the GEMM is an FP8 Transformer Engine
    linear, which gathers its quantized shard (fp8_gathered_tag): 1 byte per element (tagged payload=fp8)."""
    if ctx.tp.group_size == 1 or not ctx.cfg.parallel.sequence_parallel:
        return []
    fp8 = {"payload": FP8_PAYLOAD} if fp8_input and ctx.dtype == "fp8" else {}
    nbytes = ctx.tokens * (width or ctx.cfg.model.hidden_size) * (FP8_PAYLOAD_BYTES if fp8 else ctx.act_bytes)
    if not ctx.tp_comm_ordered:
        return [comm(name, "allgather", nbytes, ctx.tp, ctx, launch=UNORDERED_LAUNCH, **fp8)]
    # Under --tp-comm-overlap Transformer Engine's userbuffers move these bytes with a few SMs of their own, not NCCL.
    nccl = ctx.nccl_sm_share and ctx.tp.intra_node and not ub_overlap(ctx)
    share = {"sm_share": f"{ctx.nccl_sm_share:.4f}"} if nccl else {}
    return [comm(name, "allgather", nbytes, ctx.tp, ctx, **share, **fp8)]


UNORDERED_LAUNCH = "unordered"
"""Tag value (launch=unordered) of a sequence-parallel gather whose backward collectives are not guaranteed to reach
the GPU before the GEMM they were launched beside (CUDA_DEVICE_MAX_CONNECTIONS != 1): graph/backward.py."""


def tp_exit(name: str, ctx: LayerContext, fp8_grad: bool = False) -> list[Op]:
    """After a row-parallel GEMM: reduce-scatter under SP, else all-reduce, of the T x h output.

    Under TE's "pipeline" overlap the reduce-scatter of each of the 4 GEMM chunks runs under the next chunk;
    the last chunk's has nothing left to hide behind: 1/4 of the bytes stay on the critical path in forward
    (tagged ub=pipeline_tail; its backward mirror is the hidden ring-exchange all-gather of the dgrad GEMM).
    `fp8_grad`: the GEMM is an FP8 TE linear, whose backward may gather the output gradient quantized
    (fp8_tags.fp8_grad_payload_tag)."""
    if ctx.tp.group_size == 1:
        return []
    nbytes = ctx.tokens * ctx.cfg.model.hidden_size * ctx.act_bytes
    op_class = "reducescatter" if ctx.cfg.parallel.sequence_parallel else "allreduce"
    if op_class == "allreduce":
        return [comm(name, op_class, nbytes, ctx.tp, ctx, **async_dgrad_tags(ctx))]
    fp8 = fp8_grad_payload_tag(ctx) if fp8_grad else {}
    if not ub_overlap(ctx):
        return [comm(name, op_class, nbytes, ctx.tp, ctx, **fp8)]
    tail = nbytes / UB_PIPELINE_SPLITS
    return [comm(name, op_class, nbytes - tail, ctx.tp, ctx, **fp8),
            comm(name + ".tail", op_class, tail, ctx.tp, ctx, ub="pipeline_tail", **fp8)]


ASYNC_DGRAD = "async"
"""Tag value (dgrad=async) of a non-SP TP all-reduce whose backward twin, the grad-input all-reduce of the
column-parallel linear that opened the TP region, runs beside that linear's weight-grad GEMM (graph/backward.py)."""


def async_dgrad_tags(ctx: LayerContext) -> dict[str, str]:
    """Tags of a non-SP TP all-reduce (tp_exit) when Megatron overlaps its backward twin with a GEMM: the job runs
    the async grad-input all-reduce (TrainingConfig.async_tp_allreduce) with kernels kept in launch order
    (LayerContext.tp_comm_ordered); the in-node NCCL kernel's SM share rides along (tp_enter)."""
    cfg = ctx.cfg
    if not (cfg.async_tp_allreduce and ctx.tp_comm_ordered):
        return {}
    share = {"sm_share": f"{ctx.nccl_sm_share:.4f}"} if ctx.nccl_sm_share and ctx.tp.intra_node else {}
    return {"dgrad": ASYNC_DGRAD, **share}


GRAD_INPUT_ALLREDUCE = "tp_allreduce"
"""Tag value (grad_input=tp_allreduce) of a column-parallel GEMM whose own input gradient Megatron all-reduces over
TP (the f operator inside the linear, allreduce_dgrad), set where a region's column-parallel inputs are not the
T x h output of a row-parallel all-reduce: MLA's up projections read the q / kv latents (graph/mla_ops.py), the LM
head reads the final norm's output (graph/vocab_ops.head_ops). The region's closing all-reduce then has no backward
twin of its own (g's backward is the identity, Shoeybi et al. 2019 Fig. 3): each tagged GEMM brings its own
(graph/backward.column_grad_allreduce)."""


def own_grad_allreduce(op: Op, ctx: LayerContext) -> Op:
    """A column-parallel linear that all-reduces its own m x k input gradient beside its weight-grad GEMM under
    TP > 1 without sequence parallelism (megatron/core/tensor_parallel/layers.py ColumnParallelLinear:
    allreduce_dgrad = world_size > 1 and not sequence_parallel; TE's column-parallel Linear the same). Under SP the
    gathers carry it (tp_enter)."""
    if ctx.tp.group_size == 1 or ctx.cfg.parallel.sequence_parallel:
        return op
    return replace(op, tags={**op.tags, "grad_input": GRAD_INPUT_ALLREDUCE})


IDENTITY_BACKWARD = "identity"
"""Tag value (backward=identity) of a TP all-reduce with no backward collective, that no column-parallel linear
pairs with: the embedding's (VocabParallelEmbedding: reduce_from_tensor_model_parallel_region, whose
_ReduceFromModelParallelRegion.backward returns grad_output; the lookup's input is token ids, no gradient to
all-reduce) and the cross-entropy's (VocabParallelCrossEntropy.backward computes the logits' gradient locally from
the saved softmax). graph/backward.py gives it no backward op."""


def residual(name: str, ctx: LayerContext) -> Op:
    """The bias-dropout-add after a row-parallel GEMM. Fused (megatron/core/fusions/fused_bias_dropout.py): one
    kernel that reads 2 tensors and writes 1. With --no-bias-dropout-fusion megatron-core's _bias_dropout_add_func
    (Megatron-DeepSpeed get_bias_dropout_add) runs `x + bias` when the layers have biases (read, write: 2 passes),
    torch dropout (read 2 + write 2 + a 1-byte mask per 16-bit element: 2.5 passes; none at --hidden-dropout 0,
    where torch returns its input) and the residual add (3 passes): one op of class bias_dropout_add, so the host
    issues one unit for the three eager kernels as for the fused call (predict/host_issue.py); its backward is the
    fused one's (graph/backward.py)."""
    cfg = ctx.cfg
    elements = ctx.norm_tokens * cfg.model.hidden_size
    passes = 3.0
    if not cfg.bias_dropout_fusion:
        passes += (2.0 if cfg.model.add_bias_linear else 0.0) + (2.5 if cfg.hidden_dropout > 0 else 0.0)
    if passes == 3.0:
        return elementwise(name, "residual_add", {"elements": elements}, elements, ctx, passes=3.0)
    return elementwise(name, "bias_dropout_add", {"elements": elements}, elements, ctx, passes=passes)


def activation(name: str, ffn: int, ctx: LayerContext) -> Op:
    """GeLU or SwiGLU over the rank's FFN activations. Without the fused bias-activation kernel
    (TrainingConfig.bias_activation_fusion False: --no-bias-gelu-fusion, --no-bias-swiglu-fusion) and with biases,
    mlp.py first runs `intermediate_parallel + bias_parallel` over the FC1 output (read and write: 2 passes of
    its 1 or 2 x ffn columns), then the activation (GeLU: 2 passes; SwiGLU's PyTorch composite silu(a) * b: 5):
    one op of class bias_activation, one host unit as the fused call."""
    m = ctx.cfg.model
    act = "swiglu" if m.swiglu else "gelu"
    elements = ctx.tokens * ffn
    if m.add_bias_linear and not ctx.cfg.bias_activation_fusion:
        passes = 2.0 * 2 + 5.0 if m.swiglu else 2.0 + 2.0
        return elementwise(name + act, "bias_activation", {"elements": elements, "swiglu": int(m.swiglu)}, elements, ctx,
                           passes=passes)
    return elementwise(name + act, act, {"elements": elements}, elements, ctx, passes=3.0 if m.swiglu else 2.0)


def attention_ops(ctx: LayerContext) -> list[Op]:
    m, p, t = ctx.cfg.model, ctx.cfg.parallel, ctx.tp.group_size
    if m.multi_latent_attention:
        from llmperf_hook.graph.mla_ops import mla_attention_ops  # mla_ops builds on this module

        return mla_attention_ops(ctx)
    from llmperf_hook.graph.local_kernels import context_copy, qkv_bias_add  # local_kernels builds on this module

    heads, kv_heads, d = m.num_attention_heads // t, max(1, m.num_query_groups // t), m.kv_channels
    ops = [norm("attn.norm", ctx), *tp_enter("attn.tp_allgather", ctx, fp8_input=True),
           gemm("attn.qkv", ctx.tokens, (heads + 2 * kv_heads) * d, m.hidden_size, ctx, "input"),
           *qkv_bias_add(ctx, (heads + 2 * kv_heads) * d)]
    if m.position_embedding == "rope":
        ops.append(elementwise("attn.rope", "rope", {"tokens": ctx.tokens, "heads": heads + kv_heads,
                                                    "head_dim": d}, ctx.tokens * (heads + kv_heads) * d, ctx))
    if p.cp > 1:
        # Ring exchange of K and V around the CP group (Megatron cp_comm_type "p2p"), hidden behind attention.
        kv_bytes = 2 * ctx.tokens * kv_heads * d * ctx.act_bytes * (p.cp - 1)
        ops.append(comm("attn.cp_kv_exchange", "p2p", kv_bytes, ctx.cp, ctx, overlap="attention"))
    ops.extend(attention_core(ctx, heads, kv_heads, d) + context_copy(ctx, heads * d))
    ops.append(gemm("attn.proj", ctx.tokens, m.hidden_size, heads * d, ctx, "grad"))
    ops.extend(tp_exit("attn.tp_reduce", ctx, fp8_grad=True))
    ops.append(residual("attn.residual", ctx))
    return ops


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
    # Unfused (Megatron "local" attention): QK^T bmm, masked softmax, attention dropout, AV bmm; full s x s scores.
    batch = b * heads
    scores = batch * s_q * s_kv
    qk = Op("attn.qk", "bmm", "fwd", {"batch": batch, "m": s_q, "n": s_kv, "k": d}, flops=2.0 * batch * s_q * s_kv * d,
            bytes_moved=float(ctx.act_bytes * (2 * batch * s_q * d + scores)), dtype=ctx.dtype)
    softmax = elementwise("attn.softmax", "softmax", {"rows": batch * s_q, "cols": s_kv}, scores, ctx)
    dropout = elementwise("attn.dropout", "dropout", {"elements": scores}, scores, ctx, passes=2.5)
    av = Op("attn.av", "bmm", "fwd", {"batch": batch, "m": s_q, "n": d, "k": s_kv}, flops=2.0 * batch * s_q * s_kv * d,
            bytes_moved=float(ctx.act_bytes * (scores + 2 * batch * s_q * d)), dtype=ctx.dtype)
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


def context_parallel_steps(core: Op, cp: int) -> list[Op]:
    """The fused attention of one rank under context parallelism as the cp kernel calls it runs: the rank's
    s/cp queries meet all s keys, cp/2 x the FLOPs of a causal self-attention over s/cp (core.flops), in cp
    steps of one causal s/cp x s/cp block (the local chunk) and cp - 1 unmasked s/cp x s/(2 cp) blocks (TE's
    load-balanced ring, AttnFuncWithCPAndKVP2P: each step one flash-attention call; DeepSpeed-Ulysses, priced as
    CP, does the same FLOPs as one call over s with heads/cp). Each step does the FLOPs of a causal
    self-attention over s/cp, which is what the op's dims describe to a fitted profile; one op over those dims
    would be priced as 1/cp of the work. Each step reads its queries and a key/value chunk and writes its
    partial output: the op's bytes."""
    if cp == 1:
        return [core]
    return [replace(core, name=f"{core.name}.cp{i}", flops=core.flops / cp) for i in range(cp)]


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
    pow2 = 1 << max(0, (s_kv - 1).bit_length())
    warp = min(pow2, 32)
    batches_per_block = (128 // warp) * (2 if pow2 <= 128 else 1)
    return attn_batches % 4 == 0 and attn_batches % batches_per_block == 0


def torch_softmax_path(cfg: TrainingConfig) -> bool:
    """The unfused attention runs PyTorch's softmax (FusedScaleMaskSoftmax.forward_torch_softmax), not the fused
    kernel: --no-masked-softmax-fusion, a learned softmax offset (attention sinks), fp32 scores (is_kernel_available
    needs input_in_float16), or a shape the kernel does not take (fused_softmax_available; attention batches =
    micro-batch x heads per TP rank). The graph (attention_core) and the memory model (schedule/activations.py) both
    ask here."""
    m, p = cfg.model, cfg.parallel
    attn_batches = cfg.batch.micro_batch_size * (m.num_attention_heads // p.tp)
    fused = (cfg.masked_softmax_fusion and cfg.precision != "fp32"  # the kernel takes fp16 / bf16 input only
             and not m.attention_sinks  # FusedScaleMaskSoftmax.forward: the kernel only `and softmax_offset is None`
             and fused_softmax_available(attn_batches, m.seq_length // p.cp, m.seq_length))
    return cfg.attention_backend == "unfused" and not fused


MEGATRON_SINK_PASSES = 2.0
"""Passes over the scores (in the activation dtype) that learned attention sinks add to Megatron's unfused attention:
SoftmaxOne (fusions/fused_softmax.py, --softmax-type learnable) runs torch.cat([scores, sink]), which reads the scores
and writes them one column wider (2); the softmax runs over that and the sink column is sliced off as a view."""
HF_EAGER_SINK_PASSES = 5.0
"""The same for transformers' gpt-oss eager_attention_forward (modeling_gpt_oss.py): the cat (2), then
`combined_logits - combined_logits.max(dim=-1, keepdim=True).values`, a max reduction (1) and a subtraction (2)."""


def attention_sink_ops(scores: int, ctx: LayerContext) -> list[Op]:
    """The unfused attention's extra work for learned per-head sinks (ModelShape.attention_sinks): the sink logit
    joins every score row (MEGATRON_SINK_PASSES, HF_EAGER_SINK_PASSES), one op of class cast (a copy). A fused kernel
    (flash-attention's s_aux, Transformer Engine's softmax_type learnable) adds one logit per row to its online
    softmax: O(1) beside each row's O(s x head_dim), left unpriced."""
    if not ctx.cfg.model.attention_sinks:
        return []
    passes = MEGATRON_SINK_PASSES if megatron_layout(ctx.cfg) else HF_EAGER_SINK_PASSES
    return [elementwise("attn.sink_concat", "cast", {"elements": scores}, scores, ctx, passes=passes)]


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


def mlp_ops(ctx: LayerContext) -> list[Op]:
    return [norm("mlp.norm", ctx), *tp_split_mlp("mlp.", ctx.cfg.model.ffn_hidden_size, ctx), residual("mlp.residual", ctx)]


def tp_split_mlp(prefix: str, ffn: int, ctx: LayerContext) -> list[Op]:
    """A dense MLP of width `ffn` split over TP (the dense layer's, or the shared experts'): SP all-gather,
    column-parallel FC1, GeLU / SwiGLU, row-parallel FC2, all-reduce / reduce-scatter; op names start `prefix`."""
    m, t = ctx.cfg.model, ctx.tp.group_size
    ffn //= t
    return [*tp_enter(prefix + "tp_allgather", ctx, fp8_input=True),
            gemm(prefix + "fc1", ctx.tokens, ffn * (2 if m.swiglu else 1), m.hidden_size, ctx, "input"),
            activation(prefix, ffn, ctx),
            gemm(prefix + "fc2", ctx.tokens, m.hidden_size, ffn, ctx, "grad"),
            *tp_exit(prefix + "tp_reduce", ctx, fp8_grad=True)]


def moe_ops(ctx: LayerContext) -> tuple[list[Op], int]:
    """MoE MLP: norm, router, the token dispatcher's dispatch, expert GEMMs, combine, shared experts, residual.

    Returns the ops and how many times the expert GEMM group repeats (local experts under SequentialMLP, 1 for a
    grouped GEMM). Megatron-Core's dispatchers are built in graph/moe_ops.py; other frameworks keep
    moe_ops.deepspeed_moe_ops. Tokens are assumed balanced across experts (the aux-loss target).
    """
    from llmperf_hook.graph import moe_ops as mo  # moe_ops builds on this module

    kind = mo.dispatcher_of(ctx)
    if kind == "deepspeed":
        return mo.deepspeed_moe_ops(ctx)
    build = {"allgather": mo.allgather_dispatch, "alltoall": mo.alltoall_dispatch, "flex": mo.flex_dispatch}[kind]
    before, after, routed = build(ctx)
    experts, repeat = mo.expert_ops(ctx, routed)
    ops = [norm("moe.norm", ctx), mo.router(ctx), *before, *experts, *after, *shared_expert_ops(ctx),
           residual("moe.residual", ctx)]
    return ops, repeat


def shared_expert_ops(ctx: LayerContext) -> list[Op]:
    """Shared experts beside the routed ones (megatron/core/transformer/moe/shared_experts.py SharedExpertMLP): a
    dense MLP of width moe_shared_expert_intermediate_size over every token, TP-split as the dense MLP with its
    own sequence-parallel all-gather / reduce-scatter, its output added to the routed experts' (no residual of
    its own)."""
    width = ctx.cfg.model.moe_shared_expert_intermediate_size
    return tp_split_mlp("moe.shared_", width, ctx) if width // ctx.tp.group_size else []

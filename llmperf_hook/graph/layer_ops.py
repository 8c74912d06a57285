"""Forward ops of one transformer layer on one rank, with exact per-rank shapes (the embedding and LM head:
graph/vocab_ops.py; the attention core between the QKV and output projections: graph/attention_core_ops.py).

Shapes follow Megatron-core (megatron/core/transformer/): tokens on a rank T = micro_batch * seq / cp; with
sequence parallelism the norms, dropout and residual adds see T / tp tokens and the TP collectives become
all-gather (before the column-parallel GEMM) and reduce-scatter (after the row-parallel GEMM) of T x h
(Korthikanti et al. 2022, arXiv 2205.05198, Sec. 4.2.2, Fig. 5), otherwise one all-reduce each (Shoeybi et al.
2019, Fig. 3). FLOPs: 2mnk per GEMM.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.fp8_tags import (FP8_PAYLOAD, FP8_PAYLOAD_BYTES, fp8_gathered_tag, fp8_grad_payload_tag,
                                         fp8_scaling_tag)
from llmperf_hook.graph.op import Collective, Op

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
    (TrainingConfig.bias_activation_fusion False: --no-bias-gelu-fusion, --no-bias-swiglu-fusion) and with an FC1
    bias (the MLP's, ModelShape.mlp_biased: mlp.py builds linear_fc1 with bias=add_bias_linear and
    skip_bias_add=True), mlp.py first runs `intermediate_parallel + bias_parallel` over the FC1 output (read and
    write: 2 passes of its 1 or 2 x ffn columns), then the activation (GeLU: 2 passes; SwiGLU's PyTorch composite
    silu(a) * b: 5): one op of class bias_activation, one host unit as the fused call."""
    m = ctx.cfg.model
    act = "swiglu" if m.swiglu else "gelu"
    elements = ctx.tokens * ffn
    if m.mlp_biased and not ctx.cfg.bias_activation_fusion:
        passes = 2.0 * 2 + 5.0 if m.swiglu else 2.0 + 2.0
        return elementwise(name + act, "bias_activation", {"elements": elements, "swiglu": int(m.swiglu)}, elements, ctx,
                           passes=passes)
    op = elementwise(name + act, act, {"elements": elements}, elements, ctx, passes=3.0 if m.swiglu else 2.0)
    return op if m.swiglu else replace(op, tags={**op.tags, GELU_TAG: ctx.cfg.gelu_approximate})


GELU_TAG = "approximate"
"""Tag of a gelu op: which GELU it is, in torch's names ("tanh" | "none" = exact erf; TrainingConfig.gelu_approximate,
frameworks/script_gelu.py); a profile that sampled both prices each with its own (predict/dispatch.gelu_variant)."""


def attention_ops(ctx: LayerContext) -> list[Op]:
    m, p, t = ctx.cfg.model, ctx.cfg.parallel, ctx.tp.group_size
    if m.multi_latent_attention:
        from llmperf_hook.graph.mla_ops import mla_attention_ops  # mla_ops builds on this module

        return mla_attention_ops(ctx)
    from llmperf_hook.graph.attention_core_ops import attention_core  # attention_core_ops builds on this module
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

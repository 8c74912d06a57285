"""Forward ops of a Megatron-Core MoE layer as its token dispatcher runs it (megatron/core/transformer/moe/).

Per rank, n = the tokens the rank routes (its sequence shard under SP, moe_layer.py routes before any gather),
G = ETP x EP ranks of the expert grid's tp_ep group (contiguous ranks, order etp-ep-edp-pp), E experts, k = top-k.
Every rank holds distinct tokens, so with balanced routing (the aux-loss target) each rank computes
c x ETP routed token copies over its E/EP local experts, where c = the copies its own n tokens make (n x k
dropless; capped or padded by the capacity factor). Dispatchers (token_dispatcher.py):
- allgather (the default, MoEAllGatherTokenDispatcher): all-gather of the hidden states, probs and routing map
  over tp_ep (n x G rows), local permute, experts, unpermute, reduce-scatter over tp_ep: every token of the group
  moves, not top-k copies;
- alltoall (MoEAlltoAllTokenDispatcher): permute, all-to-all of the c copies over EP, all-gather over ETP,
  sort by local expert, experts, and the mirror image;
- flex (MoEFlexTokenDispatcher, DeepEP / HybridEP over tp_ep with k' = ETP x k): a token goes once to each
  destination node over RDMA and once to each destination GPU inside it over NVLink ("removes redundant tokens
  during cross-node communication", moe/README.md; DeepSeek-V3 report Sec. 3.2.2); ncclep as an all-to-all of
  every copy.
"""

from __future__ import annotations

import math
from dataclasses import replace

from llmperf_hook.graph.layer_ops import (IDENTITY_BACKWARD, LayerContext, comm, elementwise, gemm, norm,
                                          own_grad_allreduce, residual, shared_expert_ops, tp_enter, tp_exit)
from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.graph.placement import place_group

UNFUSED_UNPERMUTE_PASSES = 4.0
"""moe_utils.unpermute without --moe-permute-fusion: zero-fill of the output, then scatter_add_ of every copy
(read the copy, read and write its output row): ~4 passes of the routed tensor against the fused kernel's 2
(read each copy once, write each token once)."""


def dispatcher_of(ctx: LayerContext) -> str:
    """The dispatcher in effect: the command's, Megatron's default allgather, or 'deepspeed' (DeepSpeed-MoE /
    Hugging Face models: all-to-all of the top-k copies after a TP gather, the pre-dispatcher pricing)."""
    chosen = ctx.cfg.model.moe_dispatch.token_dispatcher
    if ctx.cfg.framework != "megatron":
        return "deepspeed"
    return chosen or "allgather"


def copies_per_rank(ctx: LayerContext) -> int:
    """Token copies the rank's own tokens make: n x k dropless; with a capacity factor f each expert takes
    capacity = ceil(n x k / E x f) of them (moe_utils.get_capacity), exactly that many when padded."""
    m, d = ctx.cfg.model, ctx.cfg.model.moe_dispatch
    full = ctx.norm_tokens * m.moe_router_topk
    if d.capacity_factor is None:
        return full
    capacity = math.ceil(full / m.num_experts * d.capacity_factor)
    return capacity * m.num_experts if d.pad_to_capacity else min(full, capacity * m.num_experts)


def tp_ep_group(ctx: LayerContext) -> Collective:
    """The expert grid's ETP x EP group: contiguous ranks (etp innermost, then ep)."""
    p = ctx.cfg.parallel
    return place_group("tp_ep", max(1, p.etp) * p.ep, p, ctx.gpus_per_node)


def expected_distinct(slots: int, picks: int) -> float:
    """Expected distinct slots hit by `picks` uniform choices: slots x (1 - (1 - 1/slots)^picks)."""
    if slots <= 1:
        return float(min(1, picks))
    return slots * (1.0 - (1.0 - 1.0 / slots) ** picks)


def expert_ops(ctx: LayerContext, routed: int) -> tuple[list[Op], int]:
    """Expert FC1, activation, FC2 over `routed` token copies of the local experts. SequentialMLP runs one GEMM
    per local expert (returned repeat count = local experts); TEGroupedMLP / GroupedMLP (--moe-grouped-gemm) one
    grouped GEMM over all of them (FLOPs of the summed tokens, every local expert's weights read)."""
    m, p = ctx.cfg.model, ctx.cfg.parallel
    h, local = m.hidden_size, max(1, m.num_experts // p.ep)
    ffn = (m.moe_ffn_hidden_size or m.ffn_hidden_size) // max(1, p.etp)
    up = ffn * (2 if m.swiglu else 1)
    act = "swiglu" if m.swiglu else "gelu"
    if not m.moe_dispatch.grouped_gemm or ctx.cfg.framework != "megatron":
        tokens = max(1, routed // local)
        return [gemm("moe.expert_fc1", tokens, up, h, ctx),
                elementwise("moe.expert_act", act, {"elements": tokens * ffn}, tokens * ffn, ctx),
                gemm("moe.expert_fc2", tokens, h, ffn, ctx)], local
    weights = {"moe.expert_fc1": (up, h), "moe.expert_fc2": (h, ffn)}
    ops = []
    for name, (n, k) in weights.items():
        op = gemm(name, routed, n, k, ctx)
        extra = (local - 1) * k * n * ctx.act_bytes  # the other local experts' weights
        ops.append(replace(op, bytes_moved=op.bytes_moved + extra, tags={"grouped": str(local)}))
    ops.insert(1, elementwise("moe.expert_act", act, {"elements": routed * ffn}, routed * ffn, ctx))
    return ops, 1


def _ep_tags(ctx: LayerContext) -> dict[str, str]:
    """Side-stream tags of the dispatch / combine communication: hidden behind the other micro-batch's compute
    with --overlap-moe-expert-parallel-comm (Megatron's 1F1B A2A overlap merges the forward of one micro-batch
    with the backward of another, moe/README.md 'EP A2A Overlap'), behind the shared experts with
    --moe-shared-expert-overlap (token_dispatcher.py runs shared fc1 after the dispatch A2A and fc2 after the
    combine A2A on their own stream)."""
    d = ctx.cfg.model.moe_dispatch
    if d.overlap_ep_comm:
        return {"overlap": "ep_a2a"}
    if d.shared_expert_overlap and ctx.cfg.model.moe_shared_expert_intermediate_size:
        return {"overlap": "shared_experts"}
    return {}


def probs_bytes(ctx: LayerContext) -> int:
    """Bytes per routing prob: --moe-router-dtype fp32 / fp64, else the activations' (router.py gating)."""
    return {"fp32": 4, "fp64": 8}.get(ctx.cfg.model.moe_dispatch.router_dtype or "", ctx.act_bytes)


def router(ctx: LayerContext) -> Op:
    """The router scores the rank's own tokens (moe_layer.py routes before the dispatcher gathers anything)."""
    m, n = ctx.cfg.model, ctx.norm_tokens
    return Op("moe.router", "router", "fwd", {"tokens": n, "hidden": m.hidden_size, "experts": m.num_experts},
              flops=2.0 * n * m.hidden_size * m.num_experts, bytes_moved=float(n * m.hidden_size * ctx.act_bytes),
              dtype=ctx.dtype)


def deepspeed_moe_ops(ctx: LayerContext) -> tuple[list[Op], int]:
    """Hugging Face MoE models: TP gather, router, permute, all-to-all of the top-k copies, per-expert GEMMs
    (expert_ops: sequential), all-to-all, unpermute, TP reduce; Megatron-DeepSpeed's DeepSpeed-MoE has no TP
    gather / reduce around it (megatron_deepspeed_moe_ops). Returns the ops and the local experts (the expert GEMM
    group's repeat count)."""
    if ctx.cfg.framework == "megatron-deepspeed":
        return megatron_deepspeed_moe_ops(ctx)
    m, p = ctx.cfg.model, ctx.cfg.parallel
    h, topk = m.hidden_size, m.moe_router_topk
    routed = max(1, ctx.tokens * topk * max(1, p.etp) // max(1, p.tp))
    routed_bytes = ctx.norm_tokens * topk * h * ctx.act_bytes
    ops = [norm("moe.norm", ctx), *tp_enter("moe.tp_allgather", ctx), router(ctx), _permute("moe.permute", routed, ctx)]
    if p.ep > 1:
        ops.append(comm("moe.dispatch_alltoall", "alltoall", routed_bytes, ctx.ep, ctx))
    experts, experts_local = expert_ops(ctx, routed)
    ops += experts
    if p.ep > 1:
        ops.append(comm("moe.combine_alltoall", "alltoall", routed_bytes, ctx.ep, ctx))
    ops += [_permute("moe.unpermute", routed, ctx), *tp_exit("moe.tp_reduce", ctx), *shared_expert_ops(ctx),
            residual("moe.residual", ctx)]
    return ops, experts_local


def megatron_deepspeed_moe_ops(ctx: LayerContext) -> tuple[list[Op], int]:
    """DeepSpeed's MOELayer.forward as Megatron-DeepSpeed runs it (deepspeed/moe/sharded_moe.py, DeepSpeed 0.19.8;
    the same since v0.15.0, f5d6c6311 #5626). Every TP rank routes the same n tokens into E x C slots (c = n x k
    copies). At TP t > 1 drop_tokens keeps this rank's 1/t of the slots (moe/mappings.py: a narrow, no traffic;
    its backward all-gathers) before the EP all-to-all, and gather_tokens all-gathers the slots over TP after the
    combine all-to-all (its backward is a narrow). Experts whole (no --enable-expert-tensor-parallelism, etp 1:
    Column/RowParallelLinear with world_size 1, no TP collective) compute c / t copies at full width. With the
    flag (etp = t) the slots are re-gathered over TP after the dispatch all-to-all and dropped again before the
    combine one; the experts compute all c copies ffn / t wide, each ParallelMLP all-reducing its fc2 output over
    TP (RowParallelLinear reduce_from_tensor_model_parallel_region) and its fc1 input gradient
    (ColumnParallelLinear copy_to_tensor_model_parallel_region). No TP all-reduce closes the layer: the gathered
    slots are whole on every TP rank. Each all-gather's backward is tagged as an all-gather (bwd_class): the
    drop's, priced at the gather's place."""
    m, p, t = ctx.cfg.model, ctx.cfg.parallel, ctx.tp.group_size
    h, copies, split = m.hidden_size, ctx.norm_tokens * m.moe_router_topk, p.etp > 1 and t > 1
    shard_bytes, slot_bytes = copies // t * h * ctx.act_bytes, copies * h * ctx.act_bytes
    gather = comm("moe.gather_tokens_out", "allgather", slot_bytes, ctx.tp, ctx, bwd_class="allgather")
    gathers_out = [gather] if t > 1 else []
    gathers_in = [replace(gather, name="moe.gather_tokens_in")] if split else []
    a2a = [comm("moe.dispatch_alltoall", "alltoall", shard_bytes, ctx.ep, ctx)] if p.ep > 1 else []
    experts, local = expert_ops(ctx, copies if split else max(1, copies // t))
    if split:
        per_expert = max(1, copies // local)
        experts = [own_grad_allreduce(op, ctx) if op.name == "moe.expert_fc1" else op for op in experts]
        # its backward twin is fc1's own grad-input all-reduce (layer_ops.own_grad_allreduce)
        experts.append(comm("moe.expert_fc2_tp_allreduce", "allreduce", per_expert * h * ctx.act_bytes, ctx.tp, ctx,
                            backward=IDENTITY_BACKWARD))
    ops = [norm("moe.norm", ctx), router(ctx), _permute("moe.permute", copies, ctx), *a2a, *gathers_in, *experts,
           *[replace(op, name="moe.combine_alltoall") for op in a2a], *gathers_out,
           _permute("moe.unpermute", copies, ctx), *shared_expert_ops(ctx), residual("moe.residual", ctx)]
    return ops, local


def _permute(name: str, copies: int, ctx: LayerContext, unpermute: bool = False) -> Op:
    h = ctx.cfg.model.hidden_size
    passes = 2.0 if not unpermute or ctx.cfg.model.moe_dispatch.permute_fusion else UNFUSED_UNPERMUTE_PASSES
    return elementwise(name, "permute", {"elements": copies * h}, copies * h, ctx, passes=passes)


def allgather_dispatch(ctx: LayerContext) -> tuple[list[Op], list[Op], int]:
    """(before experts, after experts, routed copies) of MoEAllGatherTokenDispatcher: gather n x G tokens, their
    probs (n x G x E, activation dtype) and routing map (bool) over tp_ep; reduce-scatter the n x G outputs."""
    m, p, g = ctx.cfg.model, ctx.cfg.parallel, tp_ep_group(ctx)
    h, rows, tags = m.hidden_size, ctx.norm_tokens * g.group_size, _ep_tags(ctx)
    routed = copies_per_rank(ctx) * max(1, p.etp)
    before: list[Op] = []
    after: list[Op] = []
    if g.group_size > 1:
        before += [comm("moe.dispatch_allgather_probs", "allgather", rows * m.num_experts * (probs_bytes(ctx) + 1), g,
                        ctx, **tags),
                   comm("moe.dispatch_allgather", "allgather", rows * h * ctx.act_bytes, g, ctx, **tags)]
    before.append(_permute("moe.permute", routed, ctx))
    after.append(_permute("moe.unpermute", routed, ctx, unpermute=True))
    if g.group_size > 1:
        # token_combine reduce-scatters in the probs' dtype (hidden_states.to(self.local_probs.dtype))
        after.append(comm("moe.combine_reducescatter", "reducescatter", rows * h * probs_bytes(ctx), g, ctx, **tags))
    return before, after, routed


def alltoall_dispatch(ctx: LayerContext) -> tuple[list[Op], list[Op], int]:
    """MoEAlltoAllTokenDispatcher: permute the c copies, A2A over EP, all-gather over ETP (ETP x c rows), sort
    by local expert; combine mirrors it (unsort, reduce-scatter over ETP, A2A, unpermute)."""
    m, p = ctx.cfg.model, ctx.cfg.parallel
    h, c, etp, tags = m.hidden_size, copies_per_rank(ctx), max(1, p.etp), _ep_tags(ctx)
    routed, local = c * etp, max(1, m.num_experts // p.ep)
    etp_group = place_group("etp", etp, p, ctx.gpus_per_node)
    before = [_permute("moe.permute", c, ctx)]
    after: list[Op] = []
    if p.ep > 1:
        before.append(comm("moe.dispatch_alltoall", "alltoall", c * h * ctx.act_bytes, ctx.ep, ctx, **tags))
    if etp > 1:
        before.append(comm("moe.dispatch_etp_allgather", "allgather", routed * h * ctx.act_bytes, etp_group, ctx, **tags))
        after.append(comm("moe.combine_etp_reducescatter", "reducescatter", routed * h * probs_bytes(ctx), etp_group,
                          ctx, **tags))  # in the probs' dtype, as combine_preprocess casts
    if local > 1:
        before.append(_permute("moe.sort_chunks", routed, ctx))
        after.insert(0, _permute("moe.unsort_chunks", routed, ctx))
    if p.ep > 1:
        after.append(comm("moe.combine_alltoall", "alltoall", c * h * ctx.act_bytes, ctx.ep, ctx, **tags))
    after.append(_permute("moe.unpermute", c, ctx, unpermute=True))
    return before, after, routed


def flex_comm(ctx: LayerContext, name: str) -> list[Op]:
    """DeepEP / HybridEP traffic of one dispatch (or combine) over tp_ep with k' = ETP x k copies per token
    (MoEFlexTokenDispatcher: router_topk = tp_size x topk, experts = tp_size x E). Inside one node a token goes
    once to each distinct destination GPU (D_gpu = G(1-(1-1/G)^k') on average); across N nodes once over RDMA to
    each distinct node (D_node = N(1-(1-1/N)^k'), at most --moe-router-group-topk nodes when the router's groups
    are the nodes), to the GPU of its own local index there, which forwards it over NVLink to each destination
    GPU of that node. An A2A of D x n rows moves the (N-1)/N remote share, as uniform placement does."""
    m, p, g = ctx.cfg.model, ctx.cfg.parallel, tp_ep_group(ctx)
    n, h, tags = ctx.norm_tokens, m.hidden_size, _ep_tags(ctx)
    k = min(g.group_size * max(1, m.num_experts // p.ep), max(1, p.etp) * m.moe_router_topk)
    share = copies_per_rank(ctx) / max(1, n * m.moe_router_topk)  # dropped (or padded) share of the copies
    row = h * ctx.act_bytes * share
    if g.group_size <= 1:
        return []
    d_gpu = expected_distinct(g.group_size, k)
    if g.intra_node:
        return [comm(name, "alltoall", n * d_gpu * row, g, ctx, **tags)]
    nodes, per_node = g.num_nodes, g.ranks_per_node
    d_node = expected_distinct(nodes, k)
    d = m.moe_dispatch
    if d.router_group_topk and d.router_num_groups == nodes:
        d_node = min(d_node, expected_distinct(d.router_group_topk, k))
    rdma = Collective(group="tp_ep", group_size=nodes, ranks_per_node=1, groups_sharing_node=per_node)
    nvlink = Collective(group="tp_ep", group_size=per_node, ranks_per_node=per_node)
    return [comm(name + "_rdma", "alltoall", n * d_node * row, rdma, ctx, **tags),
            comm(name + "_nvlink", "alltoall", n * d_gpu * row, nvlink, ctx, **tags)]


def flex_dispatch(ctx: LayerContext) -> tuple[list[Op], list[Op], int]:
    """MoEFlexTokenDispatcher: fused dispatch (deepep / hybridep), then the permute of the received tokens into
    the local experts' copies; combine mirrors it. ncclep: an A2A of every copy over tp_ep."""
    m, p, g = ctx.cfg.model, ctx.cfg.parallel, tp_ep_group(ctx)
    routed = copies_per_rank(ctx) * max(1, p.etp)
    if m.moe_dispatch.flex_backend == "ncclep":
        nbytes, tags = routed * m.hidden_size * ctx.act_bytes, _ep_tags(ctx)
        dispatch = [comm("moe.dispatch_alltoall", "alltoall", nbytes, g, ctx, **tags)] if g.group_size > 1 else []
        combine = [comm("moe.combine_alltoall", "alltoall", nbytes, g, ctx, **tags)] if g.group_size > 1 else []
        return ([_permute("moe.permute", routed, ctx), *dispatch],
                [*combine, _permute("moe.unpermute", routed, ctx, unpermute=True)], routed)
    return ([*flex_comm(ctx, "moe.dispatch"), _permute("moe.permute", routed, ctx)],
            [_permute("moe.unpermute", routed, ctx, unpermute=True), *flex_comm(ctx, "moe.combine")], routed)

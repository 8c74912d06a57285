"""Vectorised time of an MoE layer's token dispatch and combine for a whole candidate table (tune's surrogate).

Follows graph/moe_ops.py, the full model, dispatcher by dispatcher, with the collective costs of
tune/surrogate_comm.py (predict/alpha_beta.py's, groups placed as graph/placement.py places them, expert
ranks in Megatron's etp-ep-edp-pp order). Per rank, n = the tokens it
routes (its sequence shard under SP), G = ETP x EP (the tp_ep group), k = top-k, E experts:
- allgather (Megatron's default): all-gather of n x G tokens (and their probs and routing map) over tp_ep,
  reduce-scatter of the n x G outputs back: every token of the group moves, whatever k;
- alltoall: an all-to-all of the n x k copies over EP, an all-gather / reduce-scatter of ETP x n x k rows
  over ETP;
- flex (DeepEP / HybridEP): a token once per distinct destination GPU inside a node and, across nodes, once
  per distinct destination node over RDMA (k' = ETP x k copies); ncclep an all-to-all of every copy;
- DeepSpeed-MoE / Hugging Face models ('deepspeed'): an all-to-all of the k copies over EP.
The estimate only orders and prunes candidates (tune/search.py re-fits its error on full predictions), so
capacity is applied as a share of the copies (ceil ignored) and the permutes are left to the compute term.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.hardware.spec import ClusterSpec
from llmperf_hook.tune.surrogate_comm import alltoall_s, per_node, ring_s

_ACT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 2}
"""graph/layer_ops.DTYPE_BYTES: fp8 training keeps activations and MoE traffic in bf16."""


def dispatcher(cfg: TrainingConfig) -> str:
    """graph/moe_ops.dispatcher_of: the command's, Megatron's default allgather, or 'deepspeed'."""
    if cfg.framework != "megatron":
        return "deepspeed"
    return cfg.model.moe_dispatch.token_dispatcher or "allgather"


def _expected_distinct(slots: np.ndarray, picks: np.ndarray) -> np.ndarray:
    """graph/moe_ops.expected_distinct: slots x (1 - (1 - 1/slots)^picks), min(1, picks) for one slot."""
    s = np.maximum(slots.astype(np.float64), 1.0)
    return np.where(slots <= 1, np.minimum(1.0, picks), s * (1.0 - (1.0 - 1.0 / s) ** picks))


def _copy_share(cfg: TrainingConfig) -> float:
    """Share of the n x k copies that travel: 1 dropless; a capacity factor f drops to min(1, f), pads to f
    (graph/moe_ops.copies_per_rank without the per-expert ceil)."""
    d = cfg.model.moe_dispatch
    if d.capacity_factor is None:
        return 1.0
    return d.capacity_factor if d.pad_to_capacity else min(1.0, d.capacity_factor)


def ep_comm_fwd_s(cfg: TrainingConfig, cluster: ClusterSpec, cols: Mapping[str, np.ndarray],
                  tokens: np.ndarray) -> np.ndarray:
    """Dispatch + combine seconds of one MoE layer's forward pass, per candidate (the backward mirrors it)."""
    m, gpn = cfg.model, cluster.gpus_per_node
    tp, ep, etp = (cols[k].astype(np.int64) for k in ("tp", "ep", "etp"))
    n = tokens / np.where(cols["sp"] > 0, tp, 1)  # moe_layer.py routes the rank's own sequence shard
    row = m.hidden_size * _ACT_BYTES.get(cfg.precision, 2)
    kind = dispatcher(cfg)
    if kind == "deepspeed":  # DeepSpeed-MoE: A2A of the k copies over EP (EP ranks etp apart), of which Megatron-
        # DeepSpeed's TP ranks each send 1 / TP (drop_tokens, graph/moe_ops.megatron_deepspeed_moe_ops)
        share = 1 / tp if cfg.framework == "megatron-deepspeed" else 1
        return 2 * alltoall_s(cluster, n * m.moe_router_topk * row * share, ep, per_node(ep, etp, gpn))
    copies = n * m.moe_router_topk * _copy_share(cfg)
    probs = {"fp32": 4, "fp64": 8}.get(m.moe_dispatch.router_dtype or "", _ACT_BYTES.get(cfg.precision, 2))
    group = etp * ep
    if kind == "allgather":
        return _allgather_s(cfg, cluster, n, group, probs)
    if kind == "alltoall":
        per_etp = per_node(etp, np.ones_like(etp), gpn)
        etp_s = ring_s(cluster, etp * copies * row, etp, per_etp) + ring_s(
            cluster, etp * copies * m.hidden_size * probs, etp, per_etp)
        return 2 * alltoall_s(cluster, copies * row, ep, per_node(ep, etp, gpn)) + etp_s
    if m.moe_dispatch.flex_backend == "ncclep":
        return 2 * alltoall_s(cluster, etp * copies * row, group, per_node(group, np.ones_like(group), gpn))
    return 2 * _deepep_s(cfg, cluster, n, row * _copy_share(cfg), cols)


def _allgather_s(cfg: TrainingConfig, cluster: ClusterSpec, n: np.ndarray, group: np.ndarray,
                 probs: int) -> np.ndarray:
    """MoEAllGatherTokenDispatcher: gather n x G tokens and their probs + routing map over tp_ep, reduce-scatter
    the n x G outputs in the probs' dtype."""
    m = cfg.model
    per = per_node(group, np.ones_like(group), cluster.gpus_per_node)
    rows = n * group
    gather = ring_s(cluster, rows * m.num_experts * (probs + 1), group, per) + ring_s(
        cluster, rows * m.hidden_size * _ACT_BYTES.get(cfg.precision, 2), group, per)
    return gather + ring_s(cluster, rows * m.hidden_size * probs, group, per)


def _deepep_s(cfg: TrainingConfig, cluster: ClusterSpec, n: np.ndarray, row: float,
              cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """graph/moe_ops.flex_comm, one direction: D_gpu x n rows inside a node; across N nodes D_node x n rows over
    RDMA (one rank per node, NICs shared by the node's groups) then D_gpu x n rows over NVLink."""
    m, d, gpn = cfg.model, cfg.model.moe_dispatch, cluster.gpus_per_node
    ep, etp = cols["ep"].astype(np.int64), cols["etp"].astype(np.int64)
    group = etp * ep
    k = np.minimum(group * np.maximum(m.num_experts // ep, 1), etp * m.moe_router_topk)
    per = per_node(group, np.ones_like(group), gpn)
    d_gpu = _expected_distinct(group, k)
    inside = alltoall_s(cluster, n * d_gpu * row, group, per)
    nodes = -(-group // np.maximum(per, 1))
    d_node = _expected_distinct(nodes, k)
    if d.router_group_topk and d.router_num_groups:
        limited = _expected_distinct(np.full_like(nodes, d.router_group_topk), k)
        d_node = np.where(nodes == d.router_num_groups, np.minimum(d_node, limited), d_node)
    # The RDMA phase: one rank per node, the node's NICs shared by its `per` ranks' groups.
    nic_bw = cluster.inter_node.bandwidth_bytes_per_s * cluster.inter_node.bus_efficiency * gpn / np.maximum(per, 1)
    rdma = alltoall_s(cluster, n * d_node * row, nodes, np.ones_like(nodes), nic_bw=nic_bw)
    nvlink = alltoall_s(cluster, n * d_gpu * row, per, per)
    return np.where(per >= group, inside, rdma + nvlink)


def exposed_ep_s(cfg: TrainingConfig, comm_fwd_s: np.ndarray, layer_fwd_s: np.ndarray, shared_fwd_s: np.ndarray,
                 rc_passes: np.ndarray) -> np.ndarray:
    """Exposed dispatch / combine seconds of one MoE layer per micro-batch (forward, backward, recompute):
    all of it; with --overlap-moe-expert-parallel-comm what the layer's compute does not hide (schedule/
    compose.block_pass: max(0, comm - compute)); with --moe-shared-expert-overlap what the shared experts'
    compute does not hide."""
    d = cfg.model.moe_dispatch
    again = (rc_passes > 0.5).astype(np.float64)  # full recompute re-runs the forward's dispatch and combine
    if d.overlap_ep_comm:
        return np.maximum(0.0, comm_fwd_s - layer_fwd_s) + np.maximum(
            0.0, comm_fwd_s * (1 + again) - layer_fwd_s * (2 + rc_passes))
    if d.shared_expert_overlap and cfg.model.moe_shared_expert_intermediate_size:
        return (np.maximum(0.0, comm_fwd_s - shared_fwd_s) + np.maximum(0.0, comm_fwd_s - 2 * shared_fwd_s)
                + again * np.maximum(0.0, comm_fwd_s - shared_fwd_s))
    return comm_fwd_s * (2 + again)

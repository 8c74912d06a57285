"""Analytic communication cost model: alpha-beta per network tier with the collective's algorithm factor.

t = latency + factor * bytes / bandwidth (Hockney 1994; NCCL's ring and tree algorithms, Thakur et al. 2005):
ring all-reduce moves 2(n-1)/n of the buffer through every rank, all-gather and reduce-scatter (n-1)/n,
all-to-all (n-1)/n (spread over intra- and inter-node links), send/recv 1. Bandwidths are link bandwidth
times the tier's bus efficiency (what nccl-tests reports as busbw).

Across nodes a ring crosses each node boundary once per channel and NCCL spreads channels over all NICs, so
one group's ring gets the node's whole NIC bandwidth divided by the groups of the same kind that cross the
network from that node at the same time (Collective.groups_sharing_node), and never more than the intra-node
link feeding it. The tree algorithm (double binary tree across nodes) moves ~2x the buffer with a latency
growing as log2(nodes); the faster of ring and tree is taken, as NCCL's tuner does.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from llmperf_hook.graph.op import COLLECTIVE_CLASSES, Op
from llmperf_hook.hardware.spec import ClusterSpec

RING_FACTOR = {"allreduce": lambda n: 2.0 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
               "reducescatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
               "broadcast": lambda n: 1.0, "p2p": lambda n: 1.0}
RING_HOPS = {"allreduce": lambda n: 2 * (n - 1), "allgather": lambda n: n - 1, "reducescatter": lambda n: n - 1,
             "alltoall": lambda n: 1, "broadcast": lambda n: n - 1, "p2p": lambda n: 1}


def _intra_bw(cluster: ClusterSpec) -> float:
    return cluster.intra_node.bandwidth_bytes_per_s * cluster.intra_node.bus_efficiency


def _group_network_bw(op: Op, cluster: ClusterSpec) -> float:
    """NIC bandwidth of one node available to one group's traffic (node total / groups crossing together)."""
    node_total = cluster.inter_node.bandwidth_bytes_per_s * cluster.inter_node.bus_efficiency * cluster.gpus_per_node
    assert op.collective is not None
    return node_total / max(1, op.collective.groups_sharing_node)


def intra_node_time_s(op: Op, cluster: ClusterSpec) -> float:
    n, nbytes = op.collective.group_size, op.dims["bytes"]  # type: ignore[union-attr]
    tier = cluster.intra_node
    # NCCL's tuning model: baseLat + nsteps x hwLat (src/graph/tuning.cc); the A100 presets fit both to the LUT.
    latency = tier.latency_s + RING_HOPS[op.op_class](n) * tier.latency_per_step_s
    return latency + RING_FACTOR[op.op_class](n) * nbytes / _intra_bw(cluster)


def inter_node_time_s(op: Op, cluster: ClusterSpec) -> float:
    coll = op.collective
    assert coll is not None
    n, r, nodes, nbytes = coll.group_size, coll.ranks_per_node, coll.num_nodes, op.dims["bytes"]
    net_bw = _group_network_bw(op, cluster)
    base = cluster.intra_node.latency_s
    hop = cluster.inter_node.latency_s
    if op.op_class == "alltoall":
        # Each rank sends (n-r)/n of its buffer off-node over its share (net_bw / r) and (r-1)/n on NVLink.
        off = (n - r) / n * nbytes / (net_bw / r)
        on = (r - 1) / n * nbytes / _intra_bw(cluster) if r > 1 else 0.0
        return base + hop + max(on, off)
    if op.op_class == "p2p":
        return base + hop + nbytes / (net_bw / r)
    ring_bw = min(_intra_bw(cluster), net_bw) if r > 1 else net_bw
    ring = base + RING_HOPS[op.op_class](n) * hop + RING_FACTOR[op.op_class](n) * nbytes / ring_bw
    if op.op_class != "allreduce":
        return ring
    tree = base + 2 * math.ceil(math.log2(nodes)) * hop + 2.0 * nbytes / ring_bw
    return min(ring, tree)


def collective_time_s(op: Op, cluster: ClusterSpec) -> float:
    coll = op.collective
    if coll is None or coll.group_size <= 1 or op.dims.get("bytes", 0) <= 0:
        return 0.0
    if coll.intra_node or cluster.gpus_per_node == 1 and coll.num_nodes == 1:
        return intra_node_time_s(op, cluster)
    return inter_node_time_s(op, cluster)


def line_rate(cluster: ClusterSpec) -> ClusterSpec:
    """`cluster` with both tiers at bus efficiency 1: its links at their line rate, latencies kept."""
    return replace(cluster, intra_node=replace(cluster.intra_node, bus_efficiency=1.0),
                   inter_node=replace(cluster.inter_node, bus_efficiency=1.0))


def line_rate_time_s(op: Op, cluster: ClusterSpec) -> float:
    """The fastest `op` can run on `cluster`: the same algorithms with every link at its line rate (what the tier's
    bandwidth figure says; bus bandwidth can only be lower) plus the tier's latency. A fitted comm model is never
    priced below it (profile/comm_model.py)."""
    return collective_time_s(op, line_rate(cluster))


class AlphaBetaPredictor:
    """Every collective op class: the always-available communication fallback."""

    name = "alpha-beta"

    def supports(self, op_class: str, phase: str, dtype: str) -> bool:
        return op_class in COLLECTIVE_CLASSES

    def predict_s(self, ops: Sequence[Op], cluster: ClusterSpec) -> Sequence[float]:
        return [collective_time_s(op, cluster) for op in ops]

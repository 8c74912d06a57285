"""Vectorised alpha-beta collective costs over a candidate table (tune's surrogate), as predict/alpha_beta.py
prices one collective: t = latency + factor x bytes / bandwidth (Hockney 1994), ring all-gather and
reduce-scatter (n-1)/n of the gathered buffer, all-reduce twice that, all-to-all (n-1)/n of the rank's buffer.
A group with r members on a node: inside one node over NVLink; across nodes a ring gets the node's NICs shared
by the gpus_per_node / r groups crossing at once (never more than NVLink feeds it); an all-to-all sends its
(n-r)/n off-node share over the rank's NIC share beside the (r-1)/n on-node share. Members per node follow
graph/placement.py (a group whose members are `stride` ranks apart).
"""

from __future__ import annotations

import numpy as np

from llmperf_hook.hardware.spec import ClusterSpec


def per_node(size: np.ndarray, stride: np.ndarray, gpus_per_node: int) -> np.ndarray:
    """Members of a group on one node (graph/placement.place_group): min(size, gpus_per_node // stride)."""
    return np.where(stride >= gpus_per_node, 1, np.minimum(size, np.maximum(gpus_per_node // np.maximum(stride, 1), 1)))


def bandwidths(cluster: ClusterSpec, on_node: np.ndarray) -> tuple[float, np.ndarray]:
    """(NVLink bus bandwidth, NIC bandwidth one group gets on a node: the node's NICs shared by the
    gpus_per_node / on_node groups that cross at once), predict/alpha_beta.py."""
    intra = cluster.intra_node.bandwidth_bytes_per_s * cluster.intra_node.bus_efficiency
    node_nics = cluster.inter_node.bandwidth_bytes_per_s * cluster.inter_node.bus_efficiency * cluster.gpus_per_node
    return intra, node_nics / np.maximum(cluster.gpus_per_node // np.maximum(on_node, 1), 1)


def ring_s(cluster: ClusterSpec, nbytes: np.ndarray, size: np.ndarray, on_node: np.ndarray) -> np.ndarray:
    """All-gather or reduce-scatter of `nbytes` (the gathered buffer) over `size` ranks, `on_node` per node."""
    n = size.astype(np.float64)
    intra_bw, net_bw = bandwidths(cluster, on_node)
    inside = on_node >= size
    bw = np.where(inside, intra_bw, np.where(on_node > 1, np.minimum(intra_bw, net_bw), net_bw))
    hop = np.where(inside, cluster.intra_node.latency_per_step_s, cluster.inter_node.latency_s)
    t = cluster.intra_node.latency_s + (n - 1) * hop + (n - 1) / np.maximum(n, 1) * nbytes / bw
    return np.where(size > 1, t, 0.0)


def alltoall_s(cluster: ClusterSpec, nbytes: np.ndarray, size: np.ndarray, on_node: np.ndarray,
               nic_bw: np.ndarray | None = None) -> np.ndarray:
    """All-to-all of `nbytes` per rank: (n-1)/n over NVLink inside a node; across nodes the (n-r)/n off-node
    share over the rank's NIC share (nic_bw / r) beside the (r-1)/n on-node share."""
    n, r = size.astype(np.float64), on_node.astype(np.float64)
    intra_bw, net_bw = bandwidths(cluster, on_node)
    net_bw = net_bw if nic_bw is None else nic_bw
    inside = cluster.intra_node.latency_s + cluster.intra_node.latency_per_step_s + (n - 1) / n * nbytes / intra_bw
    off = (n - r) / n * nbytes / (net_bw / r)
    on = np.where(r > 1, (r - 1) / n * nbytes / intra_bw, 0.0)
    across = cluster.intra_node.latency_s + cluster.inter_node.latency_s + np.maximum(on, off)
    return np.where(size > 1, np.where(on_node >= size, inside, across), 0.0)

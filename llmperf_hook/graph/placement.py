"""Rank placement: which members of a parallel group share a node, following Megatron's rank order.

Megatron-core generates groups with order "tp-cp-ep-dp-pp" (tp innermost): rank = tp_rank + tp * (cp_rank +
cp * (dp_rank + dp * pp_rank)) (megatron/core/parallel_state.py, RankGenerator). Expert layers use
"etp-ep-edp-pp". A group of `size` ranks whose consecutive members are `stride` ranks apart has
min(size, gpus_per_node // stride) members on a node (1 when the stride spans a node or more).
"""

from __future__ import annotations

from llmperf_hook.frameworks.training_config import ParallelLayout
from llmperf_hook.graph.op import Collective


def group_stride(group: str, layout: ParallelLayout) -> int:
    """Rank distance between consecutive members of a `group` (tp innermost, then cp, dp, pp)."""
    strides = {
        "tp": 1,
        "etp": 1,
        "tp_ep": 1,
        "cp": layout.tp,
        "dp_cp": layout.tp,
        "ep": layout.etp,
        "edp": layout.etp * layout.ep,
        "dp": layout.tp * layout.cp,
        "pp": layout.tp * layout.cp * layout.dp,
    }
    return strides[group]


def place_group(group: str, size: int, layout: ParallelLayout, gpus_per_node: int) -> Collective:
    """The Collective descriptor of a `group` of `size` ranks: members per node and groups sharing a node."""
    stride = group_stride(group, layout)
    if size <= 1:
        return Collective(group=group, group_size=1, ranks_per_node=1, groups_sharing_node=1)
    if stride >= gpus_per_node:
        per_node = 1
    else:
        per_node = max(1, min(size, gpus_per_node // stride))
    crosses = per_node < size
    # Every GPU of a node belongs to one group of each kind: gpus_per_node / per_node groups meet on a node
    # and, when they cross the network, run at the same time over its NICs.
    sharing = max(1, gpus_per_node // per_node) if crosses else 1
    return Collective(group=group, group_size=size, ranks_per_node=per_node, groups_sharing_node=sharing)

"""One operator of the per-rank graph (stage [3]) and the dims convention every predictor relies on.

`op_class` is the predictor key; `dims` holds the per-rank shape with these keys (all ints):

| op_class        | dims                                   | meaning                                           |
|-----------------|----------------------------------------|---------------------------------------------------|
| gemm            | m, n, k                                | [m, k] x [k, n]; m = tokens on this rank (b*s/cp/sp) |
| bmm             | batch, m, n, k                         | batched [batch] x [m, k] x [k, n] (unfused attention) |
| attention       | b, s, heads, kv_heads, head_dim, causal | fused/flash attention core (per-rank heads)       |
| softmax         | rows, cols                             | (masked) softmax over [rows, cols]                |
| layernorm, rmsnorm | tokens, hidden                      |                                                   |
| gelu            | elements                               |                                                   |
| swiglu          | elements                               | elements of the output (= tokens * ffn/tp)        |
| rope            | tokens, heads, head_dim                |                                                   |
| residual_add    | elements                               |                                                   |
| dropout         | elements                               |                                                   |
| embedding       | tokens, vocab, hidden                  | vocab = padded_vocab / tp                         |
| cross_entropy   | tokens, vocab                          | vocab-parallel: vocab = padded_vocab / tp         |
| router          | tokens, hidden, experts                | MoE gate GEMM + top-k                             |
| permute         | elements                               | MoE token (un)permutation                         |
| optimizer       | params                                 | Adam step over `params` parameters on this rank   |
| grad_sum        | elements                               | two gradients of one weight added (tied embedding) |
| allreduce, allgather, reducescatter, alltoall, p2p, broadcast | bytes | see `Collective` |

Phases: "fwd", "bwd" (one op stands for the whole backward of that forward op: dgrad + wgrad),
"recompute" (a forward replayed before backward), "step" (optimizer and gradient sync, once per step).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, Mapping

Phase = Literal["fwd", "bwd", "recompute", "step"]

COLLECTIVE_CLASSES = frozenset({"allreduce", "allgather", "reducescatter", "alltoall", "p2p", "broadcast"})


@dataclass(frozen=True)
class Collective:
    """Who takes part in a communication op, so the comm model can pick the tier and the sharing."""

    group: str
    """Parallel dimension: "tp" | "cp" | "ep" | "dp" | "pp" | "etp" | "dp_cp"."""
    group_size: int
    """Ranks in one group."""
    ranks_per_node: int
    """Members of one group that share a node (group_size when the group stays inside a node)."""
    groups_sharing_node: int = 1
    """How many groups of this kind cross the network from one node at once (they share its NICs)."""

    @property
    def num_nodes(self) -> int:
        return max(1, -(-self.group_size // self.ranks_per_node))

    @property
    def intra_node(self) -> bool:
        return self.num_nodes == 1


@dataclass(frozen=True)
class Op:
    name: str
    """Readable position, e.g. "layer.attn.qkv" or "dp.grad_reduce_scatter"."""
    op_class: str
    """Predictor key (table above)."""
    phase: Phase
    dims: Mapping[str, int]
    """Per-rank shape, keys per op_class (table above); collectives use {"bytes": message bytes}."""
    flops: float = 0.0
    """Floating-point operations of this op on this rank (2*m*n*k for a GEMM; backward = 2x forward)."""
    bytes_moved: float = 0.0
    """HBM bytes read + written (for memory-bound roofline)."""
    dtype: str = "bf16"
    collective: Collective | None = None
    """Set exactly for communication ops."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Free annotations (e.g. {"overlap": "grad_reduce"}) used by the schedule."""

    @property
    def is_comm(self) -> bool:
        return self.collective is not None

    @cached_property
    def cost_key(self) -> str:
        """Signature of everything a cost model may look at: equal keys always have equal times (memo key)."""
        dims = ",".join(f"{k}={v}" for k, v in self.dims.items())
        c = self.collective
        where = f"{c.group}/{c.group_size}/{c.ranks_per_node}/{c.groups_sharing_node}" if c else ""
        tags = ",".join(f"{k}={v}" for k, v in sorted(self.tags.items()))
        return (f"{self.op_class}:{self.phase}:{self.dtype}:{dims}:{self.flops:.6g}:{self.bytes_moved:.6g}:"
                f"{where}:{tags}")

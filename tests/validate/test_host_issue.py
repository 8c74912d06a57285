"""predict/host_issue.py: the host (CPU) issue floor of a pass."""

from __future__ import annotations

from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.predict.host_issue import HOST_ISSUE_S_PER_OP, host_bound_pass_s, host_issue_s


def op(phase: str, collective: bool = False) -> Op:
    coll = Collective(group="tp", group_size=2, ranks_per_node=2) if collective else None
    return Op("x", "allreduce" if collective else "gemm", phase, {"bytes": 1} if collective else {"m": 1, "n": 1, "k": 1},
              collective=coll)


def test_backward_counts_twice_and_collectives_not_at_all() -> None:
    ops = [op("fwd"), op("recompute"), op("bwd"), op("fwd", collective=True)]
    assert host_issue_s(ops, per_op_s=1.0) == 1 + 1 + 2


def test_floor_only_binds_when_the_gpu_is_faster_than_the_host() -> None:
    ops = [op("fwd")] * 13
    host = 13 * HOST_ISSUE_S_PER_OP
    assert host_bound_pass_s(10 * host, ops) == 10 * host
    assert host_bound_pass_s(0.5 * host, ops) == host


def test_small_layer_plateau_matches_the_documented_derivation() -> None:
    # 13 forward ops per dense layer: forward + recompute + backward = 52 units at 65 us = 3.4 ms per layer
    layer = [op("fwd")] * 13 + [op("recompute")] * 13 + [op("bwd")] * 13
    assert abs(host_issue_s(layer) - 3.38e-3) < 1e-5

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


def test_queue_is_gpu_bound_for_long_kernels_and_host_bound_for_short_ones() -> None:
    from llmperf_hook.predict.host_issue import queued_pass_s

    ops = [op("fwd")] * 10
    long_kernels = queued_pass_s(ops, lambda o: 1.0, per_op_s=0.1)
    assert long_kernels == 0.1 + 10 * 1.0  # first launch, then the GPU never waits
    short_kernels = queued_pass_s(ops, lambda o: 0.01, per_op_s=0.1)
    assert abs(short_kernels - (10 * 0.1 + 0.01)) < 1e-12  # the GPU waits for every launch


def test_queue_lies_between_max_and_sum() -> None:
    from llmperf_hook.predict.host_issue import queued_pass_s

    ops = [op("fwd"), op("bwd"), op("fwd", collective=True), op("fwd")]
    times = {0: 0.3, 1: 0.05, 2: 0.2, 3: 0.01}
    seconds = dict(zip(map(id, ops), times.values()))
    got = queued_pass_s(ops, lambda o: seconds[id(o)], per_op_s=0.1)
    gpu, host = sum(times.values()), 0.4
    assert max(gpu, host) <= got <= gpu + host


def test_side_stream_collectives_are_skipped() -> None:
    from llmperf_hook.predict.host_issue import queued_pass_s

    ops = [op("fwd"), op("fwd", collective=True)]
    assert queued_pass_s(ops, lambda o: 1.0, per_op_s=0.0, side_stream=lambda o: True) == 1.0

"""predict/cpu_framework.op_cost_parts: a CPU op's seconds by the term that prices it (op_seconds is their sum; its
own values are tested in tests/refine/test_cpu_framework.py)."""

from __future__ import annotations

import pytest

from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.predict.cpu_framework import TRANSPORT_OP, CpuFrameworkCost, op_cost_parts, op_seconds

COST = CpuFrameworkCost(per_unit_s=20e-6, compute_scale=0.8, optimizer_per_tensor_s=50e-6,
                        optimizer_per_param_s=4e-9, per_byte_s=1e-10, concurrency_slowdown={"2": 1.25},
                        deepspeed_step={"1": (5e-3, 6e-9)}, transport_per_byte_s=2e-10)


def _ops() -> list[Op]:
    return [Op("fc1", "gemm", "bwd", {"m": 8, "n": 8, "k": 8}, bytes_moved=1e6),
            Op("opt", "optimizer", "step", {"params": 500},
               tags={"param_tensors": "1", "deepspeed_zero": "1", "engine_params": "1000"}),
            Op(TRANSPORT_OP, "deepspeed_bookkeeping", "step", {"wire_bytes": 10 ** 6}),
            Op("ar", "allreduce", "step", {"bytes": 1 << 20}, collective=Collective("dp_cp", 2, 2))]


def test_each_term_is_named_by_what_prices_it() -> None:
    gemm, opt, transport, allreduce = (op_cost_parts(op, 1e-3, COST, 2) for op in _ops())
    assert gemm == pytest.approx({"operators": 1.25 * 0.8e-3, "issue": 1.25 * 2 * 20e-6, "traffic": 1.25 * 1e-4})
    assert opt == pytest.approx({"adam": 1.25 * (50e-6 + 500 * 4e-9), "engine": 1.25 * (5e-3 + 1000 * 6e-9)})
    assert transport == pytest.approx({"transport": 2e-4})  # CPU of gloo's threads: no concurrency factor
    assert allreduce == {"comm": 1e-3}  # the comm model's time, unchanged


@pytest.mark.parametrize("ranks", [1, 2])
def test_the_parts_add_up_to_the_ops_seconds_each_term_once(ranks: int) -> None:
    """The breakdown (benchmarks/testbed_op_breakdown.py) sums the parts: they are op_seconds, no term twice."""
    for op in _ops():
        parts = op_cost_parts(op, 1e-3, COST, ranks)
        assert op_seconds(op, 1e-3, COST, ranks) == sum(parts.values()) and all(v >= 0 for v in parts.values())

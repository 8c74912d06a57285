"""Exposed time of a collective beside half a GEMM's backward (schedule/compose.py gemm_window_exposed_s)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.predict.dispatch import op_id
from llmperf_hook.schedule.compose import block_pass, gemm_window_exposed_s, overlapped_exposed_s

TP = Collective("tp", 8, 8)


def _ops(share: float) -> tuple[Op, ...]:
    tags = {"window": "mlp.fc1", "sm_share": f"{share:.4f}"}
    return (Op("mlp.tp_allgather.bwd_regather", "allgather", "bwd", {"bytes": 1}, collective=TP,
               tags={**tags, "overlap": "dgrad"}),
            Op("mlp.fc1", "gemm", "bwd", {"m": 1, "n": 2, "k": 3}, flops=12.0),
            Op("mlp.tp_allgather", "reducescatter", "bwd", {"bytes": 1}, collective=TP, tags={**tags, "overlap": "wgrad"}))


def _seconds(ops: tuple[Op, ...], comm_s: float, gemm_s: float) -> dict[str, float]:
    return {op_id(op): (comm_s if op.collective is not None else gemm_s) for op in ops}


def test_short_collectives_cost_their_sm_share_only() -> None:
    ops = _ops(0.25)
    # Each collective (1 ms) fits its GEMM half (2 ms): the GEMM runs at 3/4 speed for 1 ms, +0.25 ms each.
    assert gemm_window_exposed_s(ops, _seconds(ops, 1e-3, 4e-3)) == pytest.approx(2 * 0.25e-3)


def test_long_collectives_leave_what_the_half_does_not_cover() -> None:
    ops = _ops(0.25)
    assert gemm_window_exposed_s(ops, _seconds(ops, 3e-3, 4e-3)) == pytest.approx(2 * 1e-3)


def test_block_pass_puts_the_exposed_part_on_tp() -> None:
    ops = _ops(0.0)
    cost = block_pass(ops, _seconds(ops, 3e-3, 4e-3), tp_overlap=False)
    assert cost.compute_s == pytest.approx(4e-3)
    assert cost.exposed_comm_s["tp"] == pytest.approx(2e-3)
    assert cost.total_s == pytest.approx(6e-3)


@given(comm=st.floats(0, 1), gemm=st.floats(0, 1), share=st.floats(0, 0.5))
def test_exposure_between_the_sm_share_and_the_whole_collective(comm: float, gemm: float, share: float) -> None:
    exposed = overlapped_exposed_s(comm, gemm, share)
    assert share * comm - 1e-12 <= exposed <= comm + 1e-12
    assert exposed >= comm - gemm - 1e-12
    # The pair never ends before either kernel alone would.
    assert gemm + exposed >= max(comm, gemm) - 1e-12

"""Op-level detail of the simulated step for the trace: the ops of micro-batch 0's forward and backward
pass on every stage and chunk, laid out from the pass's start. Ops on the critical path follow each other in
the stage's lane, each starting when the GPU is free and the host has issued it (the launch queue of
predict/host_issue.py, drained at each block as the schedule drains it; `host_per_op_s` 0 lays them back to
back); communication that hides behind compute (tagged `overlap`, or TP under --tp-comm-overlap) goes to the
stage's communication lane, starting with its layer."""

from __future__ import annotations

from llmperf_hook.graph.op import Op
from llmperf_hook.graph.op_graph import OpGraph
from llmperf_hook.predict.dispatch import op_id
from llmperf_hook.predict.host_issue import queued_op_spans
from llmperf_hook.schedule.step_estimate import TimelineEvent

COMM_LANE_OFFSET = 1000
"""Trace lane of stage s's overlapped communication: COMM_LANE_OFFSET + s."""


def hidden_comm(op: Op, tp_overlap: bool) -> bool:
    """Communication on a side stream, hidden behind compute as far as it lasts: ops tagged `overlap`, and TP
    collectives under --tp-comm-overlap except the forward tail of TE's pipelined reduce-scatter."""
    if op.collective is None:
        return False
    if "overlap" in op.tags:
        return True
    return tp_overlap and op.collective.group == "tp" and not (op.tags.get("ub") == "pipeline_tail"
                                                                and op.phase != "bwd")


def _block_events(ops: tuple[Op, ...], t: float, stage: int, chunk: int, seconds: dict[str, float],
                  tp_overlap: bool, host_per_op_s: float) -> tuple[list[TimelineEvent], float]:
    """Events of one pass over a block starting at `t`, and when the block's critical path ends."""
    out: list[TimelineEvent] = []
    side = t
    spans = queued_op_spans(ops, lambda op: seconds[op_id(op)], host_per_op_s, lambda op: hidden_comm(op, tp_overlap))
    for op, (start, end) in zip(ops, spans):
        d = seconds[op_id(op)]
        detail = {"seconds": d, "flops": op.flops, "bytes": float(op.dims.get("bytes", op.bytes_moved))}
        if hidden_comm(op, tp_overlap):
            out.append(TimelineEvent(COMM_LANE_OFFSET + stage, f"{op.name} [{op.op_class}]", side, side + d,
                                     chunk, 0, detail))
            side += d
            continue
        out.append(TimelineEvent(stage, f"{op.name} [{op.op_class}]", t + start, t + end, chunk, 0, detail))
    return out, t + (spans[-1][1] if spans else 0.0)


def pass_op_events(ops_by_block: list[tuple[tuple[Op, ...], int]], start_s: float, stage: int, chunk: int,
                   seconds: dict[str, float], tp_overlap: bool, host_per_op_s: float = 0.0) -> list[TimelineEvent]:
    out: list[TimelineEvent] = []
    t = start_s
    for ops, count in ops_by_block:
        for _ in range(count):
            events, t = _block_events(ops, t, stage, chunk, seconds, tp_overlap, host_per_op_s)
            out.extend(events)
    return out


def op_events(graph: OpGraph, seconds: dict[str, float], pass_events: tuple, tp_overlap: bool,
              host_per_op_s: float = 0.0) -> list[TimelineEvent]:
    """Op events of micro-batch 0 for each (stage, chunk, F/B) pass recorded by the pipeline simulation, with the
    host issue time per op unit that the schedule used (compose_step's `host_per_op_s`)."""
    out: list[TimelineEvent] = []
    for rank, kind, chunk, microbatch, start, _ in pass_events:
        if microbatch != 0:
            continue
        blocks = graph.stages[rank].chunks[chunk].blocks
        ops_by_block = [((b.fwd if kind == "F" else b.bwd), b.count) for b in blocks]
        if kind == "B":
            ops_by_block.reverse()
        out.extend(pass_op_events(ops_by_block, start, rank, chunk, seconds, tp_overlap, host_per_op_s))
    return out

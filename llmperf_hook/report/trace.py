"""Stage [6]: Chrome / Perfetto trace (Trace Event Format, "X" complete events in microseconds) of the
simulated step. Process 0: one lane per pipeline stage with its forward/backward passes, the gradient sync,
optimizer and parameter gather; idle gaps between passes are explicit "bubble" events. Process 1: the ops and
collectives of micro-batch 0 on every stage (one lane for the critical path, one for overlapped communication). Open the file in
ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

from typing import Any

from llmperf_hook.schedule.op_timeline import COMM_LANE_OFFSET
from llmperf_hook.schedule.step_estimate import StepEstimate, TimelineEvent

US = 1e6


def _event(ev: TimelineEvent) -> dict[str, Any]:
    if ev.name not in ("F", "B") and ev.detail:  # one op of micro-batch 0 (schedule/op_timeline.py)
        cat = ev.name[ev.name.rfind("[") + 1:-1] if ev.name.endswith("]") else "op"
        return {"name": ev.name, "cat": cat, "ph": "X", "pid": 1, "tid": ev.stage, "ts": ev.start_s * US,
                "dur": (ev.end_s - ev.start_s) * US, "args": {"chunk": ev.chunk, **dict(ev.detail)}}
    label = {"F": "forward", "B": "backward"}.get(ev.name, ev.name)
    name = f"{label} mb{ev.microbatch} chunk{ev.chunk}" if ev.microbatch >= 0 else label
    return {"name": name, "cat": ev.name, "ph": "X", "pid": 0, "tid": ev.stage, "ts": ev.start_s * US,
            "dur": (ev.end_s - ev.start_s) * US, "args": {"micro_batch": ev.microbatch, "chunk": ev.chunk}}


def _bubbles(events: list[TimelineEvent]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    by_stage: dict[int, list[TimelineEvent]] = {}
    for ev in events:
        if ev.name in ("F", "B"):
            by_stage.setdefault(ev.stage, []).append(ev)
    for stage, evs in by_stage.items():
        evs.sort(key=lambda e: e.start_s)
        cursor = 0.0
        for ev in evs:
            if ev.start_s - cursor > 1e-9:
                out.append({"name": "bubble", "cat": "bubble", "ph": "X", "pid": 0, "tid": stage, "ts": cursor * US,
                            "dur": (ev.start_s - cursor) * US, "args": {}})
            cursor = max(cursor, ev.end_s)
    return out


def render_trace(estimate: StepEstimate, title: str = "llmperf simulated step") -> dict[str, Any]:
    """Trace Event Format JSON object for `estimate` (predicted with detail=True)."""
    events = list(estimate.timeline)
    passes = [ev for ev in events if not (ev.name not in ("F", "B") and ev.detail)]
    ops = [ev for ev in events if ev.name not in ("F", "B") and ev.detail]
    lanes = sorted({ev.stage for ev in passes} | {s.stage for s in estimate.stages})
    meta: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": title}},
                                  {"name": "process_name", "ph": "M", "pid": 1,
                                   "args": {"name": "ops of micro-batch 0 (compute lane, overlapped-comm lane)"}}]
    meta += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": s, "args": {"name": f"pipeline stage {s}"}}
             for s in lanes]
    meta += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": t,
              "args": {"name": f"stage {t} ops" if t < COMM_LANE_OFFSET else f"stage {t - COMM_LANE_OFFSET} "
                                                                              f"overlapped comm"}}
             for t in sorted({ev.stage for ev in ops})]
    body = [_event(ev) for ev in events] + _bubbles(passes)
    return {"traceEvents": meta + body, "displayTimeUnit": "ms",
            "otherData": {"generator": TRACE_GENERATOR, "step_time_s": estimate.step_time_s,
                          "breakdown": dict(estimate.breakdown)}}


TRACE_GENERATOR = "llmperf"
"""otherData.generator of every trace llmperf writes: `predict --trace` replaces only such files (or empty ones)."""


def is_llmperf_trace(text: str) -> bool:
    """True for a trace llmperf wrote (this marker, or an older trace's otherData.step_time_s + traceEvents)."""
    import json

    try:
        doc = json.loads(text)
    except ValueError:
        return False
    other = doc.get("otherData") if isinstance(doc, dict) else None
    return isinstance(other, dict) and "traceEvents" in doc and (
        other.get("generator") == TRACE_GENERATOR or "step_time_s" in other)

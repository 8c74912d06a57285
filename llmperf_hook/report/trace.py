"""Stage [6]: Chrome / Perfetto trace (Trace Event Format, "X" complete events in microseconds) of the
simulated step: one lane (tid) per pipeline stage with its forward/backward passes, the gradient sync,
optimizer and parameter gather; idle gaps between passes are explicit "bubble" events. Open the file in
ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

from typing import Any

from llmperf_hook.schedule.step_estimate import StepEstimate, TimelineEvent

US = 1e6


def _event(ev: TimelineEvent) -> dict[str, Any]:
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
    lanes = sorted({ev.stage for ev in events} | {s.stage for s in estimate.stages})
    meta: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": title}}]
    meta += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": s, "args": {"name": f"pipeline stage {s}"}}
             for s in lanes]
    body = [_event(ev) for ev in events] + _bubbles(events)
    return {"traceEvents": meta + body, "displayTimeUnit": "ms",
            "otherData": {"step_time_s": estimate.step_time_s, "breakdown": dict(estimate.breakdown)}}

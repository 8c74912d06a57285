"""Where the GPU idles in one training step, by phase: forward, backward, optimizer step.

    python benchmarks/gpu_idle_phases.py TRACE.json.gz [...]      (traces by benchmarks/kernel_breakdown.py KB_TRACE)

Each device activity (kernel, memset, memcpy) belongs to the phase whose host call launched it, found through the
trace's correlation ids: the backward runs from the first to the last launch of PyTorch's autograd thread (the
busiest thread beside the one that ran the step's first op); a launch before it is the forward's, one after it the
optimizer step's. Per phase it prints the span
on the device (first start to last end), the device busy time inside it (the union of its activities), the idle
rest, and the launches per phase (the host's issue count). Idle time in a phase means the device waited for the host:
the launch queue was empty (a synchronisation, or Python slower than the kernels it issues).
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass

DEVICE_CATEGORIES = ("kernel", "gpu_memset", "gpu_memcpy")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
PHASES = ("forward", "backward", "step")


@dataclass(frozen=True)
class PhaseTime:
    phase: str
    span_us: float
    busy_us: float
    launches: int

    @property
    def idle_us(self) -> float:
        return self.span_us - self.busy_us


def union_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of (start, end) intervals."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def phase_times(events: list[dict]) -> list[PhaseTime]:
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in LAUNCH_CATEGORIES and e.get("ph") == "X" and "correlation" in e.get("args", {})}
    device = [e for e in events if e.get("cat") in DEVICE_CATEGORIES and e.get("ph") == "X"]
    cpu_ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    main_tid = min(cpu_ops, key=lambda e: e["ts"])["tid"]  # the thread that ran the step's first op
    others = Counter(e["tid"] for e in cpu_ops if e["tid"] != main_tid)
    autograd_tid = others.most_common(1)[0][0] if others else None  # the busiest other thread: autograd's
    backward = [launches[c]["ts"] for c in launches if launches[c]["tid"] == autograd_tid]
    bwd_start, bwd_end = (min(backward), max(backward)) if backward else (float("inf"), float("inf"))
    by_phase: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for e in device:
        launch = launches.get(e.get("args", {}).get("correlation"))
        if launch is None:
            continue
        phase = "forward" if launch["ts"] < bwd_start else "step" if launch["ts"] > bwd_end else "backward"
        by_phase[phase].append((e["ts"], e["ts"] + e["dur"]))
    out = []
    for phase in PHASES:
        spans = by_phase.get(phase, [])
        if spans:
            span = max(s for _, s in spans) - min(s for s, _ in spans)
            out.append(PhaseTime(phase, span, union_us(spans), len(spans)))
    return out


def main() -> None:
    for path in sys.argv[1:]:
        events = json.load(gzip.open(path))["traceEvents"]
        rows = phase_times(events)
        print(path)
        print(f"  {'phase':9s} {'span':>10s} {'busy':>10s} {'idle':>10s} {'device ops':>10s}")
        for r in rows:
            print(f"  {r.phase:9s} {r.span_us / 1e3:8.2f}ms {r.busy_us / 1e3:8.2f}ms {r.idle_us / 1e3:8.2f}ms "
                  f"{r.launches:10d}")
        print(f"  {'all':9s} {sum(r.span_us for r in rows) / 1e3:8.2f}ms {sum(r.busy_us for r in rows) / 1e3:8.2f}ms "
              f"{sum(r.idle_us for r in rows) / 1e3:8.2f}ms {sum(r.launches for r in rows):10d}")


if __name__ == "__main__":
    main()

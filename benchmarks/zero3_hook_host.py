"""Host time of DeepSpeed ZeRO-3's module and gradient hooks in one profiled step, read from a Chrome trace.

    python benchmarks/zero3_hook_host.py TRACE.json.gz [...]     (traces by benchmarks/kernel_breakdown.py KB_TRACE)

The hooks run Python that the profiler records only through the few aten ops they call, so per phase this prints
the host span of the top-level ops (the main thread's before the backward, the autograd thread's), how much of it
lies inside top-level ops and how much in between (Python outside any op: in the forward, mostly ZeRO-3's
pre/post-forward hooks, deepspeed/runtime/zero/parameter_offload.py), and the top-level ops by host time: the
autograd nodes ZeRO-3 adds (PreBackwardFunctionForModule / PostBackwardFunctionModule run fetch_sub_module /
release_sub_module in the backward; AccumulateGrad runs each parameter's gradient hook, stage3.py
reduce_partition_and_remove_grads) against a ZeRO-0/1/2 trace's. Profiled host times are inflated (the profiler
costs a few us per recorded op): compare with the unprofiled wall in the kernel table's header.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from dataclasses import dataclass


def top_level(ops: list[dict]) -> list[dict]:
    """Ops not nested inside an earlier op of the same thread (the trace's X events carry no parent)."""
    out, end = [], float("-inf")
    for e in sorted(ops, key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] >= end:
            out.append(e)
            end = e["ts"] + e["dur"]
    return out


def phase_ops(events: list[dict]) -> dict[str, list[dict]]:
    """Top-level ops of the forward (main thread, before the first autograd op), the backward (autograd thread) and
    the step (main thread, after the backward): the phase split of benchmarks/gpu_idle_phases.py."""
    cpu = [e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    main = min(cpu, key=lambda e: e["ts"])["tid"]
    autograd = Counter(e["tid"] for e in cpu if e["tid"] != main).most_common(1)[0][0]
    bwd = top_level([e for e in cpu if e["tid"] == autograd])
    start, end = bwd[0]["ts"], max(e["ts"] + e["dur"] for e in bwd)
    main_ops = top_level([e for e in cpu if e["tid"] == main])
    return {"forward": [e for e in main_ops if e["ts"] < start], "backward": bwd,
            "step": [e for e in main_ops if e["ts"] > end]}


@dataclass(frozen=True)
class PhaseHost:
    phase: str
    span_us: float
    """First top-level op's start to the last one's end, on the host."""
    in_ops_us: float
    """Host time inside top-level ops; the rest of the span is Python between them."""
    us_by_op: dict[str, float]
    """Host time per top-level op name (autograd's 'evaluate_function: ' prefix dropped)."""
    calls_by_op: dict[str, int]

    @property
    def between_us(self) -> float:
        return self.span_us - self.in_ops_us


def read_events(path: str) -> list[dict]:
    with gzip.open(path) as f:
        raw = json.load(f)
    return raw["traceEvents"] if isinstance(raw, dict) else raw


def phase_host(events: list[dict]) -> list[PhaseHost]:
    """Per phase (forward, backward, step), the host time of its top-level ops and what lies between them."""
    out = []
    for phase, ops in phase_ops(events).items():
        if not ops:
            continue
        spent: Counter[str] = Counter()
        calls: Counter[str] = Counter()
        for e in ops:
            name = e["name"].removeprefix("autograd::engine::evaluate_function: ")
            spent[name] += e["dur"]
            calls[name] += 1
        out.append(PhaseHost(phase, ops[-1]["ts"] + ops[-1]["dur"] - ops[0]["ts"], sum(e["dur"] for e in ops),
                             dict(spent), dict(calls)))
    return out


def render(path: str) -> str:
    lines = [path, f"  {'phase':9s} {'host span':>10s} {'in ops':>9s} {'between':>9s} {'ops':>6s}"]
    for p in phase_host(read_events(path)):
        lines.append(f"  {p.phase:9s} {p.span_us / 1e3:8.2f}ms {p.in_ops_us / 1e3:7.2f}ms {p.between_us / 1e3:7.2f}ms "
                     f"{sum(p.calls_by_op.values()):6d}")
        for name, us in Counter(p.us_by_op).most_common(6):
            n = p.calls_by_op[name]
            lines.append(f"      {us / 1e3:8.2f}ms {n:5d} x {us / n:7.1f}us  {name}")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) < 2:
        print("usage: python benchmarks/zero3_hook_host.py TRACE.json.gz [...]", file=sys.stderr)
        sys.exit(2)
    for path in sys.argv[1:]:
        try:
            print(render(path))
        except (OSError, EOFError, ValueError, KeyError, IndexError) as err:  # absent, not gzip/JSON, no backward
            print(f"{path}: not a readable profiled step ({type(err).__name__}: {err}); give the gzip-compressed "
                  "Chrome trace of one training step that benchmarks/kernel_breakdown.py writes under KB_TRACE",
                  file=sys.stderr)
            sys.exit(2)


if __name__ == "__main__":
    main()

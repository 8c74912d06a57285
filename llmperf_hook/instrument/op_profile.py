"""`--profile-ops K`: a torch.profiler window of K steps, its events mapped onto the graph's op classes.

Each forward op that the graph models (graph/op.py dims table) becomes one sample with its dims read from the
recorded input shapes; its backward is the sum of the autograd nodes that carry the same sequence numbers
as the forward op and its children (the profiler tags a backward node with the sequence number of the forward
op that created it), which is exactly the graph's "one bwd op = dgrad + wgrad of that forward op".

| torch op (outermost mapped)                      | op_class      | dims                                   |
|--------------------------------------------------|---------------|----------------------------------------|
| aten::linear / addmm / mm / matmul (2-D weight)  | gemm          | m, n, k                                |
| aten::bmm / matmul (batched)                     | bmm           | batch, m, n, k                         |
| aten::scaled_dot_product_attention               | attention     | b, s, heads, kv_heads, head_dim, causal |
| aten::layer_norm / aten::rms_norm                | layernorm / rmsnorm | tokens, hidden                   |
| aten::gelu, aten::softmax, aten::add (same-shape)| gelu*, softmax, residual_add | elements / rows, cols   |
| aten::embedding                                  | embedding     | tokens, vocab, hidden                  |
| aten::cross_entropy_loss / nll_loss              | cross_entropy | tokens, vocab                          |
| Optimizer.step#*                                 | optimizer     | params                                 |
| gloo:/nccl: work of a c10d:: collective (pair_collectives) | allreduce, allgather, reducescatter, broadcast, alltoall, p2p | bytes |

* gelu_exact when the job runs the exact GELU: refine files the samples by the job's variant (by_gelu_variant).

A collective's phase is the one it ran in (collective_phase), as the graph places it: "fwd" in a forward (a
tensor-parallel all-reduce, ZeRO-3's parameter fetch), "bwd" in a backward (a gradient reduction from a
gradient hook), "step" after the step's last backward (DeepSpeed's gradient all-reduce at the end of
engine.backward, the optimizer, ZeRO-1/2's parameter all-gather).

Times: CPU time of the op and its children on CPU; on GPU the device (kernel) time under it. A sample is the
median over its occurrences (layers x K steps); `count` says how many.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from llmperf_hook.graph.op import COLLECTIVE_CLASSES
from llmperf_hook.instrument.profiler_stderr import without_kineto_usdt_lines

BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
OPTIMIZER_PREFIX = "Optimizer.step#"
STEP_END_MARK = "llmperf::step_end"
"""A zero-length profiler event the hook records at the end of each profiled step (OpProfiler.mark_step)."""
DTYPES = {"float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16", "double": "fp64"}
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp64": 8}
COLLECTIVE_WORDS = (("reduce_scatter", "reducescatter"), ("reducescatter", "reducescatter"),
                    ("all_gather", "allgather"), ("allgather", "allgather"), ("all_reduce", "allreduce"),
                    ("allreduce", "allreduce"), ("all_to_all", "alltoall"), ("alltoall", "alltoall"),
                    ("broadcast", "broadcast"), ("send", "p2p"), ("recv", "p2p"))


@dataclass
class ProfEvent:
    """The part of a torch.profiler FunctionEvent the mapping needs."""

    name: str
    shapes: list
    dtypes: list
    seconds: float
    sequence_nr: int = -1
    concrete: list = field(default_factory=list)
    parent: "ProfEvent | None" = None
    children: list = field(default_factory=list)
    start_us: float = 0.0
    """When it started (profiler clock): orders a process group's collectives."""
    end_us: float = 0.0
    """When it ended (profiler clock); with start_us, where in the step it ran (collective_phase)."""


def _numel(shape: Any) -> int:
    return math.prod(int(d) for d in shape) if isinstance(shape, (list, tuple)) else 0


def _dtype(ev: ProfEvent) -> str:
    first = next((d for d in ev.dtypes if d), "float")
    return DTYPES.get(first, str(first))


def _gemm(ev: ProfEvent) -> tuple[str, dict] | None:
    s = ev.shapes
    if ev.name == "aten::linear" and len(s) >= 2 and len(s[1]) == 2:
        return "gemm", {"m": _numel(s[0][:-1]), "n": s[1][0], "k": s[1][1]}
    if ev.name == "aten::addmm" and len(s) >= 3 and len(s[1]) == 2 and len(s[2]) == 2:
        return "gemm", {"m": s[1][0], "n": s[2][1], "k": s[1][1]}
    if ev.name in ("aten::mm", "aten::matmul") and len(s) >= 2 and len(s[1]) == 2 and len(s[0]) >= 2:
        return "gemm", {"m": _numel(s[0][:-1]), "n": s[1][1], "k": s[1][0]}
    if ev.name in ("aten::bmm", "aten::matmul") and len(s) >= 2 and len(s[0]) >= 3 and len(s[1]) >= 3:
        return "bmm", {"batch": _numel(s[0][:-2]), "m": s[0][-2], "n": s[1][-1], "k": s[0][-1]}
    return None


def _attention(ev: ProfEvent) -> tuple[str, dict] | None:
    q, k = ev.shapes[0], ev.shapes[1]
    if len(q) != 4 or len(k) != 4:
        return None
    causal = ev.concrete[5] if len(ev.concrete) > 5 and isinstance(ev.concrete[5], bool) else True
    return "attention", {"b": q[0], "s": q[2], "heads": q[1], "kv_heads": k[1], "head_dim": q[3], "causal": int(causal)}


def _rows(op_class: str, rows_key: str, cols_key: str) -> Callable[[ProfEvent], tuple[str, dict] | None]:
    def dims(ev: ProfEvent) -> tuple[str, dict] | None:
        x = ev.shapes[0] if ev.shapes else []
        return (op_class, {rows_key: _numel(x[:-1]), cols_key: x[-1]}) if len(x) >= 2 else None

    return dims


def _elements(op_class: str) -> Callable[[ProfEvent], tuple[str, dict] | None]:
    return lambda ev: (op_class, {"elements": _numel(ev.shapes[0])}) if ev.shapes and ev.shapes[0] else None


def _residual_add(ev: ProfEvent) -> tuple[str, dict] | None:
    s = ev.shapes
    same = len(s) >= 2 and len(s[0]) >= 2 and list(s[0]) == list(s[1])
    return ("residual_add", {"elements": _numel(s[0])}) if same else None


def _embedding(ev: ProfEvent) -> tuple[str, dict] | None:
    w, idx = ev.shapes[0], ev.shapes[1]
    return ("embedding", {"tokens": _numel(idx), "vocab": w[0], "hidden": w[1]}) if len(w) == 2 else None


def _optimizer(ev: ProfEvent) -> tuple[str, dict] | None:
    params = 0
    for d in _descendants(ev):
        if d.name == "aten::addcdiv_" and d.shapes:
            params += _numel(d.shapes[0])
        elif d.name == "aten::_foreach_addcdiv_" and d.shapes:
            params += sum(_numel(s) for s in d.shapes[0])
    return ("optimizer", {"params": params}) if params else None


def _collective_class(ev: ProfEvent) -> str | None:
    lower = ev.name.lower()
    return next((op_class for word, op_class in COLLECTIVE_WORDS if word in lower), None)


def _collective(ev: ProfEvent, launch: ProfEvent | None = None) -> tuple[str, dict] | None:
    """(op class, {bytes}) of a collective's work event. The graph's bytes are the whole buffer (all-gather
    output, reduce-scatter input: the largest tensor of the call); the c10d launch that enqueued it has both
    tensors and the API's name (gloo runs a reduce-scatter as an all_reduce, and its all_gather event holds only
    the input), so its class and largest tensor are used when it was paired with this work."""
    for source in (launch, ev):
        op_class = source and _collective_class(source)
        tensors = [(_numel(shape), dtype) for shape, dtype in zip(source.shapes, source.dtypes)
                   if dtype in DTYPES and isinstance(shape, list)] if source else []  # shape []: a 0-dim tensor
        if op_class and tensors:
            numel, dtype = max(tensors)
            return op_class, {"bytes": numel * ELEMENT_BYTES[DTYPES[dtype]]}
    return None


def pair_collectives(events: Sequence[ProfEvent]) -> dict[int, ProfEvent | None]:
    """{id(work event): its c10d launch, or None} for the window's collectives.

    A c10d collective (`c10d::allreduce_`, ...) is a launch on the calling thread; the backend runs it as a work
    event (`gloo:all_reduce`, `nccl:...`), on gloo in a worker thread, and that event's time is the collective's
    (the launch returns at once; the caller waits later). Both were sampled before: the same collective twice, a
    TensorList launch as a 4-byte one. Launches and works are paired in start order when they pair one to one
    with compatible names; the launches themselves are never samples when works were recorded."""
    launches = sorted((e for e in events if e.name.startswith("c10d::") and _collective_class(e)),
                      key=lambda e: e.start_us)
    works = sorted((e for e in events if e.name.startswith(("gloo:", "nccl:")) and _collective_class(e)),
                   key=lambda e: e.start_us)
    if len(launches) != len(works) or not all(map(_runs_as, launches, works)):
        return {id(w): None for w in works}
    return {id(w): c for c, w in zip(launches, works)}


def _runs_as(launch: ProfEvent, work: ProfEvent) -> bool:
    """Whether `work` can be the backend's run of `launch` (gloo's reduce-scatter is an all_reduce)."""
    launched, ran = _collective_class(launch), _collective_class(work)
    return ran == launched or (launched, ran) == ("reducescatter", "allreduce")


FORWARD_MAP: dict[str, Callable[[ProfEvent], tuple[str, dict] | None]] = {
    "aten::linear": _gemm, "aten::addmm": _gemm, "aten::mm": _gemm, "aten::matmul": _gemm, "aten::bmm": _gemm,
    "aten::scaled_dot_product_attention": _attention,
    "aten::layer_norm": _rows("layernorm", "tokens", "hidden"), "aten::rms_norm": _rows("rmsnorm", "tokens", "hidden"),
    "aten::softmax": _rows("softmax", "rows", "cols"), "aten::_softmax": _rows("softmax", "rows", "cols"),
    "aten::gelu": _elements("gelu"), "aten::add": _residual_add, "aten::embedding": _embedding,
    "aten::cross_entropy_loss": _rows("cross_entropy", "tokens", "vocab"),
    "aten::nll_loss": _rows("cross_entropy", "tokens", "vocab"),
}


def _classify(ev: ProfEvent, works: dict[int, ProfEvent | None]) -> tuple[str, dict] | None:
    if ev.name.startswith(OPTIMIZER_PREFIX):
        return _optimizer(ev)
    if id(ev) in works:
        return _collective(ev, works[id(ev)])
    if ev.name.startswith("c10d::"):  # a launch: sampled only where the backend recorded no work event
        return None if works else _collective(ev)
    return _forward_op(ev)


def _forward_op(ev: ProfEvent) -> tuple[str, dict] | None:
    fn = FORWARD_MAP.get(ev.name)
    return fn(ev) if fn is not None and ev.shapes else None


def _is_collective_call(ev: ProfEvent, works: dict[int, ProfEvent | None]) -> bool:
    """A collective is a sample of its own wherever it ran: launched from a gradient hook it sits inside a
    backward node (on NCCL its work event too), and the graph has it as an op beside that backward."""
    return id(ev) in works or ev.name.startswith("c10d::")


def _descendants(ev: ProfEvent) -> list[ProfEvent]:
    out, stack = [], list(ev.children)
    while stack:
        e = stack.pop()
        out.append(e)
        stack.extend(e.children)
    return out


def _inside_mapped_or_backward(ev: ProfEvent, mapped: set[int]) -> bool:
    p = ev.parent
    while p is not None:
        if id(p) in mapped or p.name.startswith(BACKWARD_PREFIX):
            return True
        p = p.parent
    return False


@dataclass(frozen=True)
class Landmark:
    """A profiled event that says which phase of a step is running: a forward op, a backward node, an optimizer
    step, or the hook's step-end mark."""

    start_us: float
    end_us: float
    phase: str
    """"fwd", "bwd", "step", or "mark" (a step ended)."""


def step_timeline(events: Sequence[ProfEvent]) -> list[Landmark]:
    """The window's landmarks in start order: forward ops (FORWARD_MAP ops the graph models, outside any backward
    node, optimizer step or collective, whose ops are theirs: a scalar aten::add of DeepSpeed's gradient norm
    between the backward and the optimizer is no forward), backward nodes, optimizer steps and the hook's
    step-end marks."""
    out = []
    for ev in events:
        if ev.name == STEP_END_MARK:
            phase = "mark"
        elif ev.name.startswith(BACKWARD_PREFIX):
            phase = "bwd"
        elif ev.name.startswith(OPTIMIZER_PREFIX):
            phase = "step"
        elif _forward_op(ev) is not None and not any(_owns_its_ops(a) for a in _ancestors(ev)):
            phase = "fwd"
        else:
            continue
        out.append(Landmark(ev.start_us, max(ev.end_us, ev.start_us), phase))
    return sorted(out, key=lambda m: m.start_us)


def collective_phase(ev: ProfEvent, timeline: Sequence[Landmark]) -> str:
    """The phase a collective ran in, from its launch `ev` (the c10d call on the training thread; a backend's work
    event when unpaired). Launched from inside a backward node (a gradient hook) it is "bwd", inside an optimizer
    step "step"; else by the last landmark that started before it in its step: a forward op -> "fwd"; an optimizer
    step -> "step"; a backward node -> "bwd" while it runs or when the next landmark is another backward node,
    "fwd" when the next is a forward op (the next micro-batch's), else "step" (the gradient sync after the
    backward, DeepSpeed's allreduce_gradients); none since the step began -> "fwd" (ZeRO-3's first fetch)."""
    for a in _ancestors(ev):
        if a.name.startswith(BACKWARD_PREFIX):
            return "bwd"
        if a.name.startswith(OPTIMIZER_PREFIX):
            return "step"
    i = bisect.bisect_left(timeline, ev.start_us, key=lambda m: m.start_us) - 1  # strictly before it
    last = timeline[i] if i >= 0 else None
    if last is None or last.phase == "mark":
        return "fwd"
    if last.phase != "bwd":
        return last.phase
    following = timeline[i + 1].phase if i + 1 < len(timeline) else "mark"
    if ev.start_us <= last.end_us or following == "bwd":
        return "bwd"
    return "fwd" if following == "fwd" else "step"


def _ancestors(ev: ProfEvent) -> list[ProfEvent]:
    out, p = [], ev.parent
    while p is not None:
        out.append(p)
        p = p.parent
    return out


def _owns_its_ops(ev: ProfEvent) -> bool:
    """A backward node, an optimizer step or a collective: the aten ops inside it are not a forward's."""
    return ev.name.startswith((BACKWARD_PREFIX, OPTIMIZER_PREFIX, "c10d::", "gloo:", "nccl:"))


def up_to_last_step_end(events: Sequence[ProfEvent]) -> list[ProfEvent]:
    """The events of the window's completed steps: those that began before its last step-end mark. A job that
    ends inside the window (fewer steps than --profile-ops) leaves the profiler running through whatever it did
    after its last step (an evaluation, a checkpoint), which is no training step's cost."""
    last_us = max((ev.start_us for ev in events if ev.name == STEP_END_MARK), default=None)
    if last_us is None:
        return []
    kept = [ev for ev in events if ev.start_us <= last_us]
    ids = {id(ev) for ev in kept}
    for ev in kept:
        ev.children = [c for c in ev.children if id(c) in ids]
    return kept


def map_events(events: Sequence[ProfEvent]) -> list[dict[str, Any]]:
    """Samples {op_class, phase, dims, dtype, seconds, count, torch_names} from parent-linked events."""
    backward_s: dict[int, float] = defaultdict(float)
    for ev in events:
        if ev.name.startswith(BACKWARD_PREFIX) and ev.sequence_nr >= 0:
            backward_s[ev.sequence_nr] += ev.seconds
    mapped: set[int] = set()
    groups: dict[tuple, list[float]] = defaultdict(list)
    names: dict[tuple, set[str]] = defaultdict(set)
    works = pair_collectives(events)
    timeline = step_timeline(events)
    for ev in events:  # parents come before their children in profiler order
        if _inside_mapped_or_backward(ev, mapped) and not _is_collective_call(ev, works):
            continue
        hit = _classify(ev, works)
        if hit is None:
            continue
        mapped.add(id(ev))
        op_class, dims = hit
        phase = ("step" if op_class == "optimizer" else
                 collective_phase(works.get(id(ev)) or ev, timeline) if op_class in COLLECTIVE_CLASSES else "fwd")
        _add(groups, names, (op_class, phase, dims, _dtype(ev)), ev.seconds, ev.name)
        seqs = {e.sequence_nr for e in [ev, *_descendants(ev)] if e.sequence_nr >= 0}
        bwd = sum(backward_s.get(s, 0.0) for s in seqs)
        if bwd > 0 and op_class not in ("optimizer",) and not ev.name.startswith(("gloo:", "nccl:", "c10d::")):
            _add(groups, names, (op_class, "bwd", dims, _dtype(ev)), bwd, ev.name)
    return [{"op_class": c, "phase": p, "dims": dict(d), "dtype": t, "seconds": statistics.median(v),
             "count": len(v), "torch_names": sorted(names[(c, p, tuple(sorted(d.items())), t)])}
            for (c, p, d_items, t), v in sorted(groups.items(), key=lambda kv: str(kv[0]))
            for d in [dict(d_items)]]


def by_gelu_variant(samples: Sequence[Mapping[str, Any]], approximate: str) -> list[Mapping[str, Any]]:
    """`samples` with the gelu ones under the profile class of the job's GELU (`approximate`, in torch's names:
    TrainingConfig.gelu_approximate as the launch's prediction recorded it): "none", the exact GELU, is the profile's
    gelu_exact (profile/features.GELU_EXACT), "gelu" samples the tanh one. The event itself cannot tell: torch's
    profiler records aten::gelu's `approximate` string as None among its concrete inputs (torch 2.13)."""
    if approximate != "none":
        return list(samples)
    from llmperf_hook.profile.features import GELU_EXACT

    return [{**s, "op_class": GELU_EXACT} if s.get("op_class") == "gelu" else s for s in samples]


def _add(groups: dict, names: dict, key: tuple, seconds: float, torch_name: str) -> None:
    op_class, phase, dims, dtype = key
    k = (op_class, phase, tuple(sorted((str(a), int(b)) for a, b in dims.items())), dtype)
    groups[k].append(seconds)
    names[k].add(torch_name)


def events_from_profiler(function_events: Sequence[Any], device: str) -> list[ProfEvent]:
    """Convert torch.profiler FunctionEvents (keeping the parent links and the profiler's order)."""
    by_id: dict[int, ProfEvent] = {}
    out: list[ProfEvent] = []
    for fe in function_events:
        us = fe.device_time_total if device == "cuda" else fe.cpu_time_total
        span = getattr(fe, "time_range", None)  # CPU clock: the order of launches, on GPU too
        ev = ProfEvent(fe.name, list(fe.input_shapes or []), list(getattr(fe, "input_dtypes", None) or []),
                       us / 1e6, int(getattr(fe, "sequence_nr", -1)), list(getattr(fe, "concrete_inputs", None) or []),
                       start_us=float(getattr(span, "start", 0.0) or 0.0),
                       end_us=float(getattr(span, "end", 0.0) or 0.0))
        by_id[id(fe)] = ev
        out.append(ev)
    for fe in function_events:
        parent = getattr(fe, "cpu_parent", None)
        if parent is not None and id(parent) in by_id:
            by_id[id(fe)].parent = by_id[id(parent)]
            by_id[id(parent)].children.append(by_id[id(fe)])
    return out


class OpProfiler:
    """The torch.profiler window the recorder opens after the N timed steps and closes K steps later."""

    def __init__(self, num_steps: int) -> None:
        self.num_steps = num_steps
        self._prof: Any = None
        self._device = "cpu"

    def start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(ProfilerActivity.CUDA)
            self._device = "cuda"
        self._prof = profile(activities=activities, record_shapes=True)
        with without_kineto_usdt_lines():
            self._prof.start()

    def mark_step(self) -> None:
        """A zero-length STEP_END_MARK event at the end of a profiled step: where the next step's phases begin
        (collective_phase). A few microseconds, only inside the window."""
        from torch.profiler import record_function

        with record_function(STEP_END_MARK):
            pass

    def stop(self, steps_done: int | None = None) -> Callable[[], list[dict[str, Any]]]:
        """Stop collecting (cheap: on the step path); the returned function maps the window's events to samples
        (about 0.5 s on a small CPU model, seconds on a GPU step: the recorder calls it at exit, off the job's way).
        `steps_done` < num_steps: the job ended inside the window after that many profiled steps; only their
        events are mapped (up_to_last_step_end)."""
        prof, self._prof = self._prof, None
        with without_kineto_usdt_lines():
            prof.stop()
        device = self._device
        partial = steps_done is not None and steps_done < self.num_steps
        num_steps = steps_done if partial else self.num_steps

        def samples() -> list[dict[str, Any]]:
            events = events_from_profiler(prof.events(), device)
            mapped = map_events(up_to_last_step_end(events) if partial else events)
            return [{**s, "profile_steps": num_steps, "device": device} for s in mapped]

        return samples

    def abandon(self) -> None:
        if self._prof is not None:
            prof, self._prof = self._prof, None
            with without_kineto_usdt_lines():
                prof.stop()

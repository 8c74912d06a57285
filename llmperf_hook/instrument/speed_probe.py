"""A speed probe made of a job's own operators: its GEMMs, layernorm and attention, re-timed by the profiler's
sampler code (profile/op_sampler.sample_op) in fp32 and bf16.

Why: the reference workload (instrument/reference_speed.py: 256^3 fp32 GEMMs, 1 MiB copies, tiny adds) did not
track the CPU testbed's drift between runs (correlation +0.06..+0.52), and last session's drift was dtype-specific
(every fp32 configuration 20-35 % faster after the first pass, bf16 ones not). A probe of the step's own shapes in
the step's dtype, timed the way the profile's op samples are, is the candidate that could: it measures what the
profile measured, so a ratio of two probe readings is the ratio by which the profile's samples would have moved.
Whether it tracks is measured by benchmarks/bench_cpu_testbed.py --drift-check. Measured on 28 Nov 2026 at load
8-13 (instrument/reference_speed.py's docstring, benchmarks/results/cpu_testbed_history.md): read in the ranks in
the configuration's dtype it correlates better than the reference (+0.56 fp32, +0.72 bf16), but it moved x1.49 /
x1.29 itself where the step CPU time moved x1.12 / x1.15, so normalising by it widens the spread; nothing is
normalised by it. A reading costs ~50 ms of CPU for fp32 shapes of hidden 256, ~1 s for bf16 ones on an AVX2-only
EPYC (ATen's bf16 GEMM fallback).

Shapes (ProbeShape) of one transformer layer of a GPT with `hidden` h, `heads`, `seq` s, micro-batch b
(tokens t = b s): the QKV GEMM (m = t, n = 3h, k = h) forward and backward, the MLP's first GEMM (n = 4h) forward,
layernorm forward over [t, h], causal attention forward (b, heads, s, h / heads). One thread, process CPU time
(op_sampler's clock), each shape's trimmed mean over ~`target_s` of calls; a reading is the sum over the shapes
per dtype (`probe_s`), lower = faster, comparable only between readings of the same spec.

The probe runs in the ranks' own process when LLMPERF_SPEED_PROBE names its spec (`hidden,heads,seq,mbs`): the
hook's reference reading after the last recorded step of a CPU job (instrument/recorder.py; never on a GPU job, and
no other reading) then carries it in `extra.probe` (reference_speed.measure_reference), at most PROBE_LIMIT_S long.
The in-job reading is the one that correlated best last session (+0.54): the drift looks partly per process.
torch is imported inside the functions only.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from llmperf_hook.instrument.reference_speed import PROBE_ENV

PROBE_DTYPES = ("fp32", "bf16")
TARGET_S = 0.008
"""Work per shape per dtype (op_sampler.measure's target; at least its 5 repetitions after 2 warm-up calls)."""
PROBE_LIMIT_S = 10.0
"""Wall seconds a whole reading may take: a shape whose first call shows its calls would pass what is left is not
run (op_sampler.OverLimit), and the reading is an error. The testbed's bf16 shapes take ~1 s; a real model's shapes
(hidden 4096) on a CPU would hold the job for minutes. Only that first call can pass the limit."""


@dataclass(frozen=True)
class ProbeSpec:
    """One GPT layer's shapes."""

    hidden: int
    heads: int
    seq: int
    mbs: int

    def __post_init__(self) -> None:
        if min(self.hidden, self.heads, self.seq, self.mbs) < 1 or self.hidden % self.heads:
            raise ValueError(f"{self}: positive sizes, hidden a multiple of heads")

    def text(self) -> str:
        return f"{self.hidden},{self.heads},{self.seq},{self.mbs}"


@dataclass(frozen=True)
class ProbeShape:
    op_class: str
    phase: str
    dims: Mapping[str, float]

    def key(self) -> str:
        return f"{self.op_class}-{self.phase}"


def parse_spec(text: str) -> ProbeSpec:
    """`hidden,heads,seq,mbs` -> ProbeSpec; ValueError saying the form otherwise."""
    try:
        hidden, heads, seq, mbs = (int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"{PROBE_ENV}={text!r}: expected hidden,heads,seq,mbs, e.g. 256,4,128,2") from None
    return ProbeSpec(hidden, heads, seq, mbs)


def probe_shapes(spec: ProbeSpec) -> tuple[ProbeShape, ...]:
    """The layer's shapes (module docstring), in op_sampler's dims contract."""
    t, h = spec.mbs * spec.seq, spec.hidden
    return (ProbeShape("gemm", "fwd", {"m": t, "n": 3 * h, "k": h}),
            ProbeShape("gemm", "bwd", {"m": t, "n": 3 * h, "k": h}),
            ProbeShape("gemm", "fwd", {"m": t, "n": 4 * h, "k": h}),
            ProbeShape("layernorm", "fwd", {"tokens": t, "hidden": h}),
            ProbeShape("attention", "fwd", {"b": spec.mbs, "s": spec.seq, "heads": spec.heads,
                                            "kv_heads": spec.heads, "head_dim": h // spec.heads, "causal": 1}))


@dataclass(frozen=True)
class ProbeReading:
    spec: str
    probe_s: Mapping[str, float]
    """Per dtype: the sum of the shapes' times (process CPU seconds per call)."""
    shapes_s: Mapping[str, Mapping[str, float]]
    """Per dtype, per shape key (`gemm-fwd`, ... in probe_shapes order, repeated keys numbered)."""
    cpu_s: float
    """Process CPU seconds the whole reading took."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"probe_s": dict(self.probe_s), "shapes_s": {k: dict(v) for k, v in self.shapes_s.items()}}


def measure_probe(spec: ProbeSpec, dtypes: tuple[str, ...] = PROBE_DTYPES, target_s: float = TARGET_S,
                  limit_s: float = PROBE_LIMIT_S) -> ProbeReading:
    """Time the spec's shapes in each dtype on one torch thread (the caller's thread count restored); OverLimit
    when the reading would take more than `limit_s` wall seconds (PROBE_LIMIT_S)."""
    import torch

    from llmperf_hook.profile.op_sampler import sample_op

    threads, cpu0, deadline = torch.get_num_threads(), time.process_time(), time.perf_counter() + limit_s
    shapes_s: dict[str, dict[str, float]] = {}
    try:
        torch.set_num_threads(1)
        for dtype in dtypes:
            times: dict[str, float] = {}
            for i, shape in enumerate(probe_shapes(spec)):
                timing = sample_op(shape.op_class, shape.dims, shape.phase, dtype, "cpu", target_s=target_s,
                                   limit_s=max(0.0, deadline - time.perf_counter()))
                times[f"{shape.key()}-{i}"] = timing.time_s
            shapes_s[dtype] = times
    finally:
        torch.set_num_threads(threads)
    return ProbeReading(spec.text(), {d: sum(v.values()) for d, v in shapes_s.items()}, shapes_s,
                        time.process_time() - cpu0)


def probe_from_env(env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The probe's reading as JSON when PROBE_ENV is set ({"error": ...} when it cannot be read), else None."""
    text = (os.environ if env is None else env).get(PROBE_ENV)
    if not text:
        return None
    try:
        return measure_probe(parse_spec(text)).to_json()
    except Exception as err:  # noqa: BLE001 - optional, read after the job's timed steps: never breaks the job
        return {"error": f"{type(err).__name__}: {err}"}

"""Micro-benchmarks of single operators with torch, on CPU (process CPU time) or CUDA (CUDA events).

Each op class of the graph's dims contract gets a runner that builds its tensors from the dims and times the
forward op or its whole backward (dgrad + wgrad for a GEMM; autograd of the op with retain_graph for the rest,
so only the backward kernels are timed). Times: warm-up, then repetitions until ~`target_s` of work (at least
`min_reps`), trimmed mean (the middle 60 %). torch is imported inside the functions only.

A measurement given a `limit_s` (the sampler: its time left) stops after its first call when the calls it needs would
pass it (OverLimit): the sampler admits a shape at an estimate from its class's median slowdown, and one shape can be
far slower than that. On an AVX2-only EPYC a bf16 GEMM backward in ATen's fallback took ~78 s a call, so its 7 calls
ran 549 s of a --budget 4 whose sampling had 74 s left (/work/notes/h182.md).

The CPU clock (cpu_clock_kind): with one torch thread every kernel runs on the calling thread, so the process's
CPU time is the op's cost and excludes the time the thread waited for a core that other programs held. On a
shared machine wall time of the same shape moved 2-6x with the load (SDPA fwd b4 h5 d32 s368: 18.0 ms stored
under load, 3.9 ms CPU time); CPU time moves a few per cent (shared caches only). With several intra-op threads
the process's CPU time counts every thread, so wall time (perf_counter) is kept there.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
SAMPLED_CLASSES = ("gemm", "bmm", "attention", "softmax", "layernorm", "rmsnorm", "gelu", "gelu_exact", "swiglu", "rope",
                   "residual_add", "dropout", "embedding", "cross_entropy", "optimizer")


@dataclass(frozen=True)
class Timing:
    """One measured shape."""

    time_s: float
    """Trimmed mean of the repetitions."""
    num_reps: int
    spread: float
    """(p80 - p20) / median of the repetitions: how noisy this measurement was."""


def trimmed_mean(samples: list[float], keep: float = 0.6) -> float:
    """Mean of the middle `keep` fraction (drops the slowest and fastest repetitions)."""
    xs = np.sort(np.asarray(samples, dtype=np.float64))
    cut = int(len(xs) * (1.0 - keep) / 2.0)
    return float(xs[cut: len(xs) - cut].mean()) if len(xs) > 2 * cut else float(np.median(xs))


def cpu_clock_kind(threads: int) -> str:
    """"process_cpu" for one thread per rank, else "wall" (module docstring); part of the CPU fingerprint, so
    samples timed by another clock are never fitted together."""
    return "process_cpu" if threads == 1 else "wall"


def cpu_clock() -> Callable[[], float]:
    """Process CPU time with one torch thread (cpu_clock_kind), else wall time."""
    import torch

    return time.process_time if cpu_clock_kind(torch.get_num_threads()) == "process_cpu" else time.perf_counter


class _Clock:
    def __init__(self, device: str) -> None:
        import torch

        self.torch = torch
        self.cuda = device == "cuda"
        self.now = cpu_clock()

    def time(self, fn: Callable[[], Any], inner: int = 1) -> float:
        """Seconds per call of `inner` back-to-back calls (on CUDA: between two events, queued as in a step)."""
        if self.cuda:
            start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e-3 / inner
        t0 = self.now()
        fn()
        return self.now() - t0


class OverLimit(Exception):
    """A shape not measured: its first call showed that the calls a measurement needs would pass `limit_s`."""

    def __init__(self, call_s: float, call_wall_s: float, calls: int, limit_s: float) -> None:
        super().__init__(f"its first call took {call_wall_s:.1f} s, so its {calls} calls would take about "
                         f"{calls * call_wall_s:.0f} s, past the {limit_s:.0f} s it was given")
        self.call_s = call_s
        """The first call's seconds on the measurement's clock (what Timing.time_s is in)."""


def measure(fn: Callable[[], Any], device: str, target_s: float = 0.05, min_reps: int = 5, max_reps: int = 50,
            warmup: int = 2, limit_s: float = math.inf) -> Timing:
    """Time `fn` (module docstring). `limit_s`: wall seconds the measurement may take; its first (warm-up) call is
    timed on the wall clock, and when `warmup` + `min_reps` calls at that pace would pass it, no other call is made
    (OverLimit)."""
    clock = _Clock(device)
    started_s = time.perf_counter()
    first_s = clock.time(fn)  # a warm-up call (at least one is made)
    call_wall_s, calls = time.perf_counter() - started_s, max(warmup, 1) + min_reps
    if call_wall_s * calls > limit_s:
        raise OverLimit(first_s, call_wall_s, calls, limit_s)
    for _ in range(warmup - 1):
        clock.time(fn)
    times = [clock.time(fn)]
    # On CUDA a short kernel timed alone would include its launch and the event sync; queued back-to-back
    # (as in a training step) it is not, so kernels under ~0.5 ms are timed in groups of up to 16.
    inner = int(np.clip(5e-4 / max(times[0], 1e-7), 1, 16)) if clock.cuda else 1
    reps = int(np.clip(target_s / max(times[0] * inner, 1e-7), min_reps, max_reps))
    times += [clock.time(fn, inner) for _ in range(reps - 1)]
    q20, q50, q80 = np.quantile(times, [0.2, 0.5, 0.8])
    return Timing(trimmed_mean(times), len(times), float((q80 - q20) / q50) if q50 > 0 else 0.0)


def _i(d: Mapping[str, float], key: str) -> int:
    return max(1, int(round(float(d[key]))))


def _grad_runner(torch, out, inputs: list, grad=None) -> Callable[[], Any]:
    g = torch.ones_like(out) if grad is None else grad
    return lambda: torch.autograd.grad(out, inputs, g, retain_graph=True)


def _gemm(torch, d, bwd, kw) -> Callable[[], Any]:
    m, n, k = _i(d, "m"), _i(d, "n"), _i(d, "k")
    x, w = torch.randn(m, k, **kw), torch.randn(n, k, **kw)
    if not bwd:
        return lambda: torch.nn.functional.linear(x, w)
    gy = torch.randn(m, n, **kw)
    return lambda: (gy @ w, gy.t() @ x)  # dgrad [m,k] and wgrad [n,k]


def _bmm(torch, d, bwd, kw) -> Callable[[], Any]:
    b, m, n, k = _i(d, "batch"), _i(d, "m"), _i(d, "n"), _i(d, "k")
    a, c = torch.randn(b, m, k, **kw), torch.randn(b, k, n, **kw)
    if not bwd:
        return lambda: torch.bmm(a, c)
    g = torch.randn(b, m, n, **kw)
    return lambda: (torch.bmm(g, c.transpose(1, 2)), torch.bmm(a.transpose(1, 2), g))


def _attention(torch, d, bwd, kw) -> Callable[[], Any]:
    b, s, h, kvh, hd = (_i(d, x) for x in ("b", "s", "heads", "kv_heads", "head_dim"))
    causal = bool(int(d.get("causal", 1)))
    q = torch.randn(b, h, s, hd, **kw, requires_grad=bwd)
    k, v = (torch.randn(b, kvh, s, hd, **kw, requires_grad=bwd) for _ in range(2))
    f = torch.nn.functional.scaled_dot_product_attention
    extra = {"enable_gqa": True} if kvh != h else {}
    if not bwd:
        return lambda: f(q, k, v, is_causal=causal, **extra)
    return _grad_runner(torch, f(q, k, v, is_causal=causal, **extra), [q, k, v])


def _unary(torch, shape, op, bwd, kw, params: tuple = ()) -> Callable[[], Any]:
    x = torch.randn(*shape, **kw, requires_grad=bwd)
    if not bwd:
        return lambda: op(x)
    return _grad_runner(torch, op(x), [x, *params])


def _norm(torch, d, bwd, kw, rms: bool) -> Callable[[], Any]:
    t, hid = _i(d, "tokens"), _i(d, "hidden")
    w = torch.ones(hid, **kw, requires_grad=bwd)
    F = torch.nn.functional
    op = (lambda x: F.rms_norm(x, (hid,), w)) if rms else (lambda x: F.layer_norm(x, (hid,), w))
    return _unary(torch, (t, hid), op, bwd, kw, (w,))


def _rope(torch, d, bwd, kw) -> Callable[[], Any]:
    t, h, hd = _i(d, "tokens"), _i(d, "heads"), _i(d, "head_dim")
    cos, sin = torch.randn(t, 1, hd, **kw), torch.randn(t, 1, hd, **kw)

    def rot(x):  # applied to q and k: [2, tokens, heads, head_dim]
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin
    return _unary(torch, (2, t, h, hd), rot, bwd, kw)


def _embedding(torch, d, bwd, kw) -> Callable[[], Any]:
    t, v, hid = _i(d, "tokens"), _i(d, "vocab"), _i(d, "hidden")
    idx = torch.randint(0, v, (t,), device=kw["device"])
    w = torch.randn(v, hid, **kw, requires_grad=bwd)
    if not bwd:
        return lambda: torch.nn.functional.embedding(idx, w)
    return _grad_runner(torch, torch.nn.functional.embedding(idx, w), [w])


def _cross_entropy(torch, d, bwd, kw) -> Callable[[], Any]:
    t, v = _i(d, "tokens"), _i(d, "vocab")
    target = torch.randint(0, v, (t,), device=kw["device"])
    op = (lambda x: torch.nn.functional.cross_entropy(x.float(), target))
    return _unary(torch, (t, v), op, bwd, kw)


def _optimizer(torch, d, bwd, kw) -> Callable[[], Any]:
    """torch.optim.Adam (weight decay 0) over fp32 parameters, whatever the sampled dtype: 72 B per parameter
    (profile_io.SAMPLER_ADAM_BYTES_PER_PARAM, the unit of every optimizer regressor `llmperf profile` fits; a profile
    states it in its provenance, and predict/optimizer_bytes.py scales it to the job's Adam). Change both together."""
    # Adam over the parameters in tensors of at most 4M elements (a layer's weights), fp32 master copy.
    total = _i(d, "params")
    sizes = [min(4 << 20, total - i) for i in range(0, total, 4 << 20)]
    params = [torch.nn.Parameter(torch.randn(s, device=kw["device"])) for s in sizes]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.Adam(params, lr=1e-4)
    return opt.step


def _elementwise(torch, d, bwd, kw, kind: str) -> Callable[[], Any]:
    n = _i(d, "elements")
    F = torch.nn.functional
    if kind in ("residual_add", "grad_sum"):  # backward of a residual add is the same add (gradients of two
        # branches summed); grad_sum is autograd's sum of a tied weight's two gradients (input_buffer.cpp accumulate)
        a, b = torch.randn(n, **kw), torch.randn(n, **kw)
        return lambda: a + b
    if kind == "swiglu":
        gate = torch.randn(n, **kw, requires_grad=bwd)
        return _unary(torch, (n,), lambda x: F.silu(gate) * x, bwd, kw, (gate,))
    ops = {"gelu": lambda x: F.gelu(x, approximate="tanh"), "gelu_exact": lambda x: F.gelu(x, approximate="none"),
           "dropout": lambda x: F.dropout(x, 0.1, True)}
    return _unary(torch, (n,), ops[kind], bwd, kw)


def make_runner(op_class: str, dims: Mapping[str, float], bwd: bool, dtype: str, device: str) -> Callable[[], Any]:
    """A zero-argument callable running the op (or its backward) once on fresh tensors of these dims."""
    import torch

    kw = {"dtype": getattr(torch, TORCH_DTYPES[dtype]), "device": device}
    builders: dict[str, Callable] = {
        "gemm": _gemm, "bmm": _bmm, "attention": _attention, "rope": _rope, "embedding": _embedding,
        "cross_entropy": _cross_entropy, "optimizer": _optimizer,
        "layernorm": lambda t, d, b, k: _norm(t, d, b, k, False), "rmsnorm": lambda t, d, b, k: _norm(t, d, b, k, True),
        "softmax": lambda t, d, b, k: _unary(t, (_i(d, "rows"), _i(d, "cols")), lambda x: torch.softmax(x, -1), b, k),
    }
    if op_class in ("gelu", "gelu_exact", "swiglu", "residual_add", "dropout", "grad_sum"):
        return _elementwise(torch, dims, bwd, kw, op_class)
    return builders[op_class](torch, dims, bwd, kw)


def sample_op(op_class: str, dims: Mapping[str, float], phase: str, dtype: str, device: str,
              target_s: float = 0.05, limit_s: float = math.inf) -> Timing:
    """Measure one shape: forward (`phase="fwd"`) or the whole backward (`"bwd"`); OverLimit past `limit_s` wall
    seconds of calls (measure)."""
    runner = make_runner(op_class, dims, phase == "bwd", dtype, device)
    return measure(runner, device, target_s=target_s, limit_s=limit_s)

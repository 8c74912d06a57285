"""CPU framework overhead, the parts measured in child processes: concurrent ranks and DeepSpeed's engine.

Both run the reference GPT of cpu_framework.py in separate Python processes (one thread each, process CPU
time, medians of repetitions). The children are persistent (`Reader`): they build their models (and engines)
once, then answer one reading per request, so cpu_framework_readings.py interleaves them with the in-process
readings and every term gets several readings minutes apart at the cost of one start-up:
- `ConcurrencyReader`: N = logical CPUs / threads per rank processes (at least 2), each holding the
  forward+backward of CONCURRENCY_SHAPES; per reading, the first two alone, then two at once, then (N > 2)
  all N at once: `concurrency_slowdown[2]` and `[N]` = median over shapes and the first two processes of
  together / alone IN THE SAME PROCESS and the same reading (what a rank loses to the others' use of the
  shared caches and memory bandwidth). Session 9 measured "alone" once in the parent and "together" once in
  fresh processes: x1.14 and x1.00 twelve minutes apart on a quiet-ish machine. CPU time, not wall time:
  waiting for a core that other programs hold is the machine's load at that moment, not a property of it.
- `EngineReader`: DeepSpeed's engine (forward, backward, step; gloo, one rank) for ZeRO 0-3 at
  DEEPSPEED_SHAPES, each in a process of its own as in a real job (cpu_engine_workers.py: the allocator's page faults),
  built once; per reading the median of ENGINE_REPS steps of each engine in turn. Minus what
  the fitted cost (per unit, compute scale, per byte, Adam per tensor and per parameter) predicts for the same
  model and optimizer, it is the engine's own work (gradient copies into flat buffers and partitions, the
  gradient norm, fp32 master weights copied back, ZeRO-3 parameter fetch and release bookkeeping) plus
  whatever of a real step the operator graph does not model, as
  `deepspeed_step[zero] = per_step_s + per_param_s * params` (non-negative least squares, relative errors).
  Forward+backward and engine.step() are timed apart: `partition_fraction` is the share of the per-parameter
  work done in the step, which ZeRO 1-3 run on the rank's partition only (graph/cpu_stages.py counts the
  engine's parameters as (1 - fraction) x the model's + fraction x the partition's). On this testbed the
  whole extra counted on every parameter over-predicted the 2-rank ZeRO-1/2/3 steps by 12-17 % and the
  2-rank ZeRO-0 step (no partition) by -3 %.
Empty results when DeepSpeed is not installed or a child fails: predictions then leave the terms out.
"""

from __future__ import annotations

import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time
from typing import Mapping, NoReturn, Sequence

from llmperf_hook.profile.cpu_framework import REPS, Shape, _median_s, fit_nonnegative, fwd_bwd_fn

CONCURRENCY_SHAPES: tuple[Shape, ...] = ((2, 128, 64, 4), (1, 256, 128, 1), (2, 192, 128, 2))
"""Mid-size reference shapes for the concurrency measurement."""
ENGINE_REPS = 5
"""Engine steps timed per (ZeRO stage, shape) in each reading (the median of them)."""
ENGINE_WARMUP = 2
"""Engine steps run once after building each engine (the first steps build buffers)."""
DEEPSPEED_SHAPES: tuple[Shape, ...] = ((2, 128, 64, 2), (1, 128, 256, 1), (2, 256, 64, 2), (1, 512, 64, 1))
"""0.55 M to 3.7 M parameters: DeepSpeed's per-step work = a constant + a cost per parameter."""
ENGINE_METHOD = "one process per engine"
"""How the engine steps were measured, written into the framework file (`engine_method`): each engine in a process of
its own (cpu_engine_workers.deepspeed_child). A file without it measured all sixteen in one process, without the page
faults a real job pays (benchmarks/testbed_setup.py re-measures such a file; cpu_framework.measured_steps keys their
steps apart)."""
MARK = "LLMPERF_READING "
"""Prefix of a child's answer line (DeepSpeed logs to stdout too)."""
START_TIMEOUT_S = 600.0
"""Seconds a child may take to build its models and engines (16 engines: ~15 s quiet, minutes under load)."""
READING_TIMEOUT_S = 600.0
CLOSE_TIMEOUT_S = 5.0
"""Seconds a child may take to exit once its input is closed (then it is killed: it holds nothing to save, and the
--budget's time box has no minute to wait for a slow gloo teardown)."""
INTERRUPT_S = 2.0
"""Seconds children have to end on SIGINT before SIGKILL (stop_children)."""
INTERRUPTIBLE = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
"""Every child's first line: SIGINT raises KeyboardInterrupt again. A process started in the background by a
non-interactive shell (`llmperf profile ... &`, nohup, a batch script) inherits SIGINT ignored, and Python then
installs no KeyboardInterrupt handler: stop_children's SIGINT did nothing and its SIGKILL left the lock behind."""


class ChildFailed(RuntimeError):
    """A measuring child exited, printed no answer, or timed out."""


def _child_env(threads: int) -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS=str(threads), DS_ACCELERATOR="cpu")


def _answer(data: object) -> None:
    print(MARK + json.dumps(data), flush=True)


class Reader:
    """A persistent child running `code`: it answers MARK + JSON once started ("ready") and once per "go".

    Its stdout is read without ever blocking: select() on the pipe, then one os.read() of whatever is there into
    our own buffer, split at newlines, all under one deadline per answer. A buffered readline() after select()
    blocked for good when the child wrote part of a line and stalled (select says readable, readline waits for the
    newline), and waited the whole timeout when a log line and the answer arrived in one read (the answer sat in
    the file object's buffer, where select() cannot see it)."""

    def __init__(self, code: str, threads: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", INTERRUPTIBLE + code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=_child_env(threads))
        self._buffer = b""

    def started(self, timeout_s: float = START_TIMEOUT_S) -> None:
        self.receive(timeout_s)

    def send(self) -> None:
        try:
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise ChildFailed(str(exc)) from exc

    def receive(self, timeout_s: float = READING_TIMEOUT_S) -> object:
        """The child's next answer; ChildFailed when it exits first or gives none within `timeout_s` seconds
        (however much else it prints meanwhile). A failed child is killed: it may be stuck mid-line."""
        deadline = time.monotonic() + timeout_s
        while True:
            line = self._next_line(deadline, timeout_s)
            if line.startswith(MARK.encode()):
                return json.loads(line[len(MARK):])

    def _next_line(self, deadline: float, timeout_s: float) -> bytes:
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            ready = select.select([self.proc.stdout], [], [], left)[0] if left > 0 else []
            if not ready:
                self._fail(f"no answer within {timeout_s:g} s")
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                self._fail(f"closed its output without an answer (exit status {self.proc.poll()})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _fail(self, why: str) -> NoReturn:
        stop_children([self.proc])
        raise ChildFailed(why)

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=CLOSE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            stop_children([self.proc])


def stop_children(procs: Sequence[subprocess.Popen]) -> None:
    """End `procs` now, together: SIGINT first, SIGKILL only to those still running after INTERRUPT_S. A DeepSpeed
    CPU process starting up holds torch's JIT-extension lock file (~/.cache/torch_extensions/.../deepspeed_shm_comm/
    lock, torch.utils.cpp_extension.FileBaton) while it loads DeepSpeed's shm op; a SIGKILL there leaves the file
    behind and every later DeepSpeed CPU process on the machine waits for it for ever (27 Nov 19:02,
    /work/notes/h139.md). SIGINT raises KeyboardInterrupt, whose `finally` releases it (FileBaton.release)."""
    live = [proc for proc in procs if proc.poll() is None]
    for proc in live:
        proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + INTERRUPT_S
    for proc in live:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def concurrent_child(dtype: str, threads: int, shapes: Sequence[Shape] = CONCURRENCY_SHAPES,
                     reps: int = REPS) -> None:
    """One process of ConcurrencyReader: per "go", the fwd+bwd CPU seconds of `shapes` (medians of `reps`)."""
    import torch

    torch.set_num_threads(threads)
    steps = [fwd_bwd_fn(tuple(shape), dtype) for shape in shapes]
    for step in steps:
        step()
    _answer("ready")
    for _ in sys.stdin:
        _answer([_median_s(step, reps) for step in steps])


def concurrent_ranks(threads: int) -> tuple[int, ...]:
    """The rank counts measured: 2 and, where more fit, logical CPUs / threads per rank."""
    most = max(2, (os.cpu_count() or 1) // max(1, threads))
    return (2,) if most == 2 else (2, most)


class ConcurrencyReader:
    """concurrent_child processes; `reading()` = {ranks: slowdown} (module docstring), or None once one of them
    failed (all closed then: predictions take ranks as independent)."""

    def __init__(self, dtype: str, threads: int, ranks: Sequence[int] = (), start_timeout_s: float = START_TIMEOUT_S,
                 shapes: Sequence[Shape] = CONCURRENCY_SHAPES, reps: int = REPS) -> None:
        code = (f"from llmperf_hook.profile.cpu_engine_cost import concurrent_child; "
                f"concurrent_child({dtype!r}, {threads}, {tuple(shapes)!r}, {reps})")
        self.ranks = tuple(ranks) or concurrent_ranks(threads)
        self.children = [Reader(code, threads) for _ in range(max(self.ranks))]
        self.deadline = time.monotonic() + start_timeout_s  # the children start at once: one deadline for all
        try:
            for child in self.children:
                child.started(self._left_s())
        except ChildFailed:
            self.close()

    def _left_s(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def _together(self, count: int) -> list:
        for child in self.children[:count]:
            child.send()
        return [child.receive(self._left_s()) for child in self.children[:count]]

    def _slowdowns(self) -> dict[str, float]:
        alone = []
        for child in self.children[:2]:
            child.send()
            alone.append(child.receive(self._left_s()))
        out = {}
        for count in self.ranks:
            together = self._together(count)[:2]
            out[str(count)] = max(1.0, statistics.median(t / a for ts, als in zip(together, alone)
                                                         for t, a in zip(ts, als)))
        return out

    def reading(self, timeout_s: float = READING_TIMEOUT_S) -> dict[str, float] | None:
        """One reading, or None (the children closed) when they fail or do not answer within `timeout_s`."""
        if not self.children:
            return None
        self.deadline = time.monotonic() + timeout_s
        try:
            return self._slowdowns()
        except (ChildFailed, ValueError):
            self.close()
            return None

    def close(self) -> None:
        for child in self.children:
            child.close()
        self.children = []


class EngineReader:
    """cpu_engine_workers.deepspeed_child; `reading()` = its raw times, or None once it failed (no DeepSpeed, a
    crash)."""

    def __init__(self, dtype: str, threads: int, start_timeout_s: float = START_TIMEOUT_S,
                 shapes: Sequence[Shape] | None = None, reps: int | None = None) -> None:
        code = (f"from llmperf_hook.profile.cpu_engine_workers import deepspeed_child; "
                f"deepspeed_child({dtype!r}, {threads}, {tuple(shapes) if shapes else None!r}, {reps!r})")
        self.child: Reader | None = Reader(code, threads)
        try:
            self.child.started(start_timeout_s)
        except ChildFailed:
            self.close()

    def reading(self, timeout_s: float = READING_TIMEOUT_S) -> dict[str, list[list[float]]] | None:
        """One reading, or None (the child closed) when it fails or does not answer within `timeout_s`."""
        if self.child is None:
            return None
        try:
            self.child.send()
            return self.child.receive(timeout_s)
        except (ChildFailed, ValueError):
            self.close()
            return None

    def close(self) -> None:
        if self.child is not None:
            self.child.close()
            self.child = None


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def modelled_parts_s(parts: Mapping[str, float], cost: Mapping[str, float], tensors: int,
                     params: int) -> tuple[float, float]:
    """What the fitted framework cost predicts for one plain step: (forward+backward, optimizer step)."""
    fb = cost["compute_scale"] * parts["compute_s"] + cost["per_unit_s"] * parts["units"] \
        + cost["per_byte_s"] * parts["bytes"]
    return fb, cost["optimizer_per_tensor_s"] * tensors + cost["optimizer_per_param_s"] * params


def fit_engine_terms(params: Sequence[int], engine_s: Sequence[float], modelled_s: Sequence[float]) -> dict:
    """{"per_step_s", "per_param_s"} of the engine's measured - modelled step (non-negative, errors relative
    to the engine's step)."""
    extra = [max(0.0, e - m) for e, m in zip(engine_s, modelled_s)]
    if not any(extra):
        return {"per_step_s": 0.0, "per_param_s": 0.0}
    per_step, per_param = fit_nonnegative([[1.0, p] for p in params], extra, engine_s)
    return {"per_step_s": per_step, "per_param_s": per_param}


def partition_fraction(params: Sequence[int], step_extra_s: Sequence[float], total: Mapping[str, float],
                       engine_s: Sequence[float] | None = None) -> float:
    """Share of the engine's per-parameter work done in engine.step(): under ZeRO 1-3 that part runs on the
    rank's partition (gradient norm, fp32 partition update and copy back: stage_1_and_2.py step(),
    stage3.py step()), the rest in forward/backward on every parameter (gradient hooks copying into the
    reduction buckets, ZeRO-3 fetch and release). The per-parameter slope of the step's extra over the
    whole extra's, in [0, 1]."""
    if total["per_param_s"] <= 0.0:
        return 0.0
    step_per_param = fit_nonnegative([[1.0, p] for p in params], step_extra_s, engine_s)[1]
    return min(1.0, step_per_param / total["per_param_s"])


def engine_model_rows(dtype: str, hardware_name: str,
                      shapes: Sequence[Shape] | None = None) -> list[tuple[int, int, dict]]:
    """Per engine shape (default DEEPSPEED_SHAPES): (parameters, optimizer tensors as DeepSpeed steps them, predicted
    parts)."""
    from llmperf_hook.profile.cpu_framework import parameter_counts, predicted_parts

    return [(*parameter_counts(shape), predicted_parts(shape, dtype, hardware_name))
            for shape in (shapes or DEEPSPEED_SHAPES)]


def deepspeed_terms(raw: Mapping[str, Sequence[Sequence[float]]], cost: Mapping[str, float],
                    model_rows: Sequence[tuple[int, int, dict]], dtype: str) -> dict[str, dict]:
    """{zero stage: {"per_step_s", "per_param_s", "partition_fraction", "samples"}} of one reading's engine
    times against `cost` (module docstring). Samples: [params, engine fwd+bwd s, engine step s, modelled
    fwd+bwd s, modelled optimizer s]."""
    out = {}
    for zero, engine_s in raw.items():
        rows = []
        for (params, tensors, parts), (fb_s, step_s) in zip(model_rows, engine_s):
            flat = int(zero) >= 1 or dtype != "fp32"  # graph/param_tensors.py: DeepSpeed's flat fp32 partitions
            rows.append([params, fb_s, step_s, *modelled_parts_s(parts, cost, 1 if flat else tensors, params)])
        total = fit_engine_terms([r[0] for r in rows], [r[1] + r[2] for r in rows], [r[3] + r[4] for r in rows])
        fraction = partition_fraction([r[0] for r in rows], [max(0.0, r[2] - r[4]) for r in rows], total,
                                      [r[1] + r[2] for r in rows])
        out[zero] = {**total, "partition_fraction": fraction if int(zero) >= 1 else 0.0, "samples": rows}
    return out

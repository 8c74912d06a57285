"""CPU multi-rank jobs: the CPU time gloo's transport threads spend on a rank's collective bytes.

What it is. torch's ProcessGroupGloo runs every collective on its own worker threads, and gloo's TCP transport
(loopback between ranks of one machine) copies each byte through the kernel on send and receive and sums the
received chunks of a reduction; the calling thread only waits (ProcessGroupGloo.cpp: the work is enqueued to
`workerThreads_`, the caller blocks in `wait()`). That work is process CPU time of the rank on a core the two ranks
share, and it scales with the bytes each rank puts on the wire: RING_FACTOR(n) x the collective's message bytes
(predict/alpha_beta.py, nccl-tests' bus-bandwidth convention: 2 (n - 1) / n for an all-reduce, (n - 1) / n for an
all-gather or reduce-scatter of the full buffer).

Why it is measured apart. The framework-cost terms (cpu_framework.py) come from one rank: the DeepSpeed engine at
world size 1 (cpu_engine_cost.py, where a collective has no peer and no wire) and two independent processes at
once ("2 ranks" x1.00-1.01). On all six testbed records of 27 Nov (bench_cpu_testbed.py --parts) the 2-rank
configurations' CPU time per step sat +0.09..+0.21 (log) over the one-rank level of the same prediction while
their wall beyond that CPU time matched the comm model's collectives to ~1 %: a cost in CPU time that adds to the
step, which no one-rank reading sees.

How (one reading). Three children, one thread each, DS_ACCELERATOR=cpu, gloo: one engine process at world size 1
and a pair at world size 2 (one process group), each with the DeepSpeed engines of TRANSPORT_ENGINES. Per engine,
ENGINE_REPS steps: each step's process CPU time (all threads), its calling thread's CPU time (time.thread_time), and
the wire bytes of the collectives the engine issued (deepspeed.comm's TorchBackend calls, counted as made). The
transport threads' CPU = process - calling thread (one thread per rank: no intra-op pool in the difference; the
framework cost starts this reader only then); at world size 1 it is gloo's local copies (no wire), which the
world-size-1 engine terms already hold. The term: per_byte_s, non-negative least squares through 0 of (pair's
transport CPU, mean of the two ranks - the single process's) on the pair's wire bytes, relative errors
(cpu_framework.fit_nonnegative).

Measured on this 2-core machine, 27 Nov 18:37-18:49 (load 5-10, other helpers' tests; CPU time, not wall: the
transport threads' CPU is what a busy core cannot hide): the testbed's 2-rank engines' transport CPU was 3-25 ms per
step at world size 2 against 0.2-2.7 ms at world size 1 (L2 h256 s128 mbs2 ZeRO-1 fp32: 10.2-13.2 ms; L1 h512 ZeRO-3:
21-25 ms; L4 h256 ZeRO-0: 10.8-13.4 ms), ~0.7-0.95 ns per wire byte; the calling thread's CPU inside the
collectives 0.6-1.1 ms (9.5 ms for ZeRO-3's 15 calls). Results: /work/notes/h139.md.

Predictions price it on the wire bytes of every collective of a CPU job with more than one rank in its group
(predict/cpu_framework.py, graph/cpu_stages.py). torch and deepspeed are imported inside the children only.

The same pair also reads the ranks' step-to-step jitter: each engine row carries every step's process CPU time
after its medians (STEP_COLUMNS), the two ranks' same steps pair up (step_pairs; the file pools them over the
readings, cpu_framework_readings.median_raw) and `step_jitter_cv` = sqrt(pi) / 2 x mean |a - b| / mean is the spread
a rank does not share with its peer (predict/rank_jitter.py), which a synchronised step waits for. On the testbed's
quiet records of 28 Nov 2026 the same estimate from the instrumented 2-rank runs' per-rank steps read 0.078 / 0.084
(fp32, 720 step pairs each) and 0.054 / 0.047 (bf16).

No calling-thread term beside it: checked 28 Nov 2026, /work/notes/h172.md. The question was whether world size 2
costs the engine's calling thread CPU time that the world-size-1 engine terms lack, for example ZeRO-1/2's
partitioned buffers freed and page-faulted again each step. The setup: train_gpt.py's model and train_step, one
engine per forked process, the eight 2-rank testbed configurations (gradient accumulation 2 too). Each round ran one
process at world size 1 alone, then two such processes at once (the pair's concurrency), then the pair at world
size 2. Four sets of 3-5 rounds, 02:53-03:40, load 3.7-12. Against two world-size-1 processes at once, the pair's
calling thread used less CPU at every ZeRO-1/2/3 configuration (median -2.2 to -19.9 % of the step): engine.step()
runs on half the partition. ZeRO-0 (L4 h256) differed by +0.0 %. Forward + backward alone differed by a median of
-1.5 to +0.9 % per configuration over all rounds. The one set whose median rose past 3 %, +9.1 % at ZeRO-0, did not
repeat in the other three sets (-0.5, -0.5, -3.6 %). The calling thread page-faulted 1.6-4.4x less at world size
2: train_gpt.py's bf16 ZeRO-1 (L2 h128) took 334 faults per step against 1,298. The real job under the deepspeed
launcher agrees: rank 0 took 367 faults per step at 2 ranks and 1,344 at 1 rank. The extra process system time at
world size 2 (ZeRO-0: 9.2 ms, calling thread 0.1 ms) belongs to the transport threads, and the term above prices it.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Mapping, Sequence

from llmperf_hook.profile.cpu_engine_cost import (ENGINE_REPS, ENGINE_WARMUP, ChildFailed, Reader, _answer,
                                                  _free_port, stop_children)
from llmperf_hook.profile.cpu_framework import VOCAB, Shape, _gpt, fit_nonnegative

TRANSPORT_ENGINES: tuple[tuple[int, Shape], ...] = ((0, (2, 256, 64, 2)), (1, (1, 512, 64, 1)), (3, (2, 256, 64, 2)))
"""(ZeRO stage, shape) of each engine: an all-reduce of 7.4 MB (ZeRO-0, 1.9 M parameters), an all-reduce and an
all-gather of 14.8 MB (ZeRO-1, 3.7 M; ZeRO-2 issues the same bytes), ZeRO-3's 25 per-layer all-gathers and
reduce-scatters: 7-22 MB on the wire per step, the testbed's range, and one, three and 25 calls. The term is per
byte, whatever issued it. Three engines, not every stage and shape: each is built in three processes and stepped in
every reading, inside the framework cost's time box (cpu_framework_readings.py)."""
WIRE_METHODS = {"all_reduce": "allreduce", "all_reduce_coalesced": "allreduce", "all_gather": "allgather",
                "all_gather_into_tensor": "allgather", "all_gather_base": "allgather",
                "all_gather_coalesced": "allgather", "reduce_scatter": "reducescatter",
                "reduce_scatter_tensor": "reducescatter", "broadcast": "broadcast", "reduce": "allreduce"}
"""deepspeed.comm TorchBackend method -> the graph's collective class (its RING_FACTOR)."""


def _message_bytes(args: tuple, kwargs: Mapping) -> int:
    """The collective's message bytes as the graph counts them (graph/op.py: the full buffer of a gather or
    scatter, the tensor of a reduction)."""
    import torch

    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    lists = [a for a in (*args, *kwargs.values()) if isinstance(a, (list, tuple))
             and a and all(isinstance(t, torch.Tensor) for t in a)]
    sizes = [t.numel() * t.element_size() for t in tensors] + [sum(t.numel() * t.element_size() for t in ts)
                                                               for ts in lists]
    return max(sizes, default=0)


class WireCounter:
    """Wraps deepspeed.comm's TorchBackend collectives: wire bytes (RING_FACTOR x message bytes) and calls since
    reset()."""

    def __init__(self, world_size: int) -> None:
        import importlib

        from llmperf_hook.predict.alpha_beta import RING_FACTOR

        backend = importlib.import_module("deepspeed.comm.torch").TorchBackend
        self.wire_bytes, self.calls = 0.0, 0
        for method, op_class in WIRE_METHODS.items():
            if hasattr(backend, method):
                setattr(backend, method, self._wrap(getattr(backend, method), RING_FACTOR[op_class](world_size)))

    def _wrap(self, fn, factor: float):
        def counted(backend, *args, **kwargs):
            self.wire_bytes += factor * _message_bytes(args, kwargs)
            self.calls += 1
            return fn(backend, *args, **kwargs)
        return counted

    def reset(self) -> None:
        self.wire_bytes, self.calls = 0.0, 0


def _engine_rows(engine, data, counter: WireCounter, reps: int = ENGINE_REPS) -> list[float]:
    """Medians over `reps` steps: [wire bytes, calls, transport threads' CPU s, process CPU s], then each step's
    process CPU s in order (STEP_COLUMNS on: the pair's step-to-step jitter, rank_jitter_cv)."""
    rows = []
    for _ in range(reps):
        counter.reset()
        p0, t0 = time.process_time(), time.thread_time()
        engine.backward(engine(data[:, :-1], data[:, 1:]))
        engine.step()
        process_s, thread_s = time.process_time() - p0, time.thread_time() - t0
        rows.append([counter.wire_bytes, counter.calls, max(0.0, process_s - thread_s), process_s])
    return [statistics.median(col) for col in zip(*rows)] + [row[3] for row in rows]


STEP_COLUMNS = 4
"""Where an engine row's per-step process CPU times start (rows written before 28 Nov 2026 15:30 end there)."""


def transport_child(dtype: str, threads: int, world_size: int, rank: int, port: int,
                    engines: Sequence[tuple[int, Shape]] = TRANSPORT_ENGINES, reps: int = ENGINE_REPS) -> None:
    """One process of TransportReader: the (ZeRO stage, shape) `engines` at `world_size`; per "go", one
    _engine_rows row per engine: [wire bytes, calls, transport CPU s, process CPU s], medians of `reps` steps, then
    each step's process CPU s."""
    import torch

    torch.set_num_threads(threads)
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    # Without LOCAL_SIZE == world size DeepSpeed creates no /dev/shm all-reduce buffer (shm_interface.cpp
    # initialize), which it never unlinks; its training collectives go through gloo either way (comm/torch.py: the
    # shm op serves inference_all_reduce only). One inherited from a launcher must not leave 69 MB per rank behind.
    os.environ.pop("LOCAL_SIZE", None)
    import deepspeed

    counter = WireCounter(world_size)
    deepspeed.init_distributed(dist_backend="gloo")
    built = []
    for zero, (layers, hidden, seq, mbs) in engines:
        torch.manual_seed(0)
        model = _gpt(layers, hidden, seq)
        config = {"train_micro_batch_size_per_gpu": mbs, "gradient_accumulation_steps": 1,
                  "train_batch_size": mbs * world_size, "zero_optimization": {"stage": zero},
                  "steps_per_print": 10 ** 9, **({"bf16": {"enabled": True}} if dtype == "bf16" else {})}
        engine, *_ = deepspeed.initialize(model=model, config=config,
                                          optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4))
        data = torch.randint(0, VOCAB, (mbs, seq + 1), generator=torch.Generator().manual_seed(rank))
        for _ in range(ENGINE_WARMUP):
            engine.backward(engine(data[:, :-1], data[:, 1:]))
            engine.step()
        built.append((engine, data))
    _answer("ready")
    for _ in sys.stdin:
        _answer([_engine_rows(engine, data, counter, reps) for engine, data in built])


class TransportReader:
    """transport_child at world size 1 and a pair at world size 2; `reading()` = {"single": rows, "pair": [rows,
    rows]} (module docstring), or None once a child failed (all closed then: predictions leave the term out)."""

    def __init__(self, dtype: str, threads: int, start_timeout_s: float,
                 engines: Sequence[tuple[int, Shape]] = TRANSPORT_ENGINES, reps: int = ENGINE_REPS) -> None:
        port = _free_port()
        code = ("from llmperf_hook.profile.cpu_rank_transport import transport_child; "
                "transport_child({!r}, {}, {}, {}, {}, {!r}, {})")
        engines = tuple((zero, tuple(shape)) for zero, shape in engines)
        self.children = [Reader(code.format(dtype, threads, 1, 0, _free_port(), engines, reps), threads)] + \
            [Reader(code.format(dtype, threads, 2, rank, port, engines, reps), threads) for rank in (0, 1)]
        deadline = time.monotonic() + start_timeout_s
        try:
            for child in self.children:
                child.started(max(0.0, deadline - time.monotonic()))
        except ChildFailed:
            self.close(kill=True)

    def reading(self, timeout_s: float) -> dict | None:
        """One reading, or None (the children closed) when they fail or do not answer within `timeout_s`."""
        if not self.children:
            return None
        deadline = time.monotonic() + timeout_s
        try:
            single, pair = self.children[0], self.children[1:]
            single.send()
            out = {"single": single.receive(max(0.0, deadline - time.monotonic()))}
            for child in pair:  # both ranks at once: the collectives need both
                child.send()
            out["pair"] = [child.receive(max(0.0, deadline - time.monotonic())) for child in pair]
            return out
        except (ChildFailed, ValueError):
            self.close(kill=True)
            return None

    def close(self, kill: bool = False) -> None:
        """Close the children; `kill` (after a failure) ends them now, SIGINT first (cpu_engine_cost.stop_children:
        a SIGKILL at start-up can leave torch's JIT-extension lock behind): a pair whose peer is gone may wait in
        gloo for it, and the --budget's time box has no CLOSE_TIMEOUT_S per child to spare."""
        if kill:
            stop_children([c.proc for c in self.children])
        for child in self.children:
            child.close()
        self.children = []


def transport_rows(raw: Mapping[str, Sequence]) -> list[dict]:
    """Per engine of a reading (or of the median times): the pair's wire bytes per rank, its transport CPU beyond
    the single process's (mean of the two ranks) and its process CPU (the larger rank's)."""
    rows = []
    for single, *ranks in zip(raw["single"], *raw["pair"]):
        transport_s = statistics.fmean(r[2] for r in ranks)
        rows.append({"wire_bytes": ranks[0][0], "calls": ranks[0][1], "extra_s": max(0.0, transport_s - single[2]),
                     "process_s": max(r[3] for r in ranks)})
    return rows


def step_pairs(raw: Mapping[str, Sequence]) -> list[tuple[float, float]]:
    """The pair's per-step process CPU (rank 0, rank 1) of every engine: the same step of both ranks, which meet at
    its collectives; `raw["step_pairs"]` where median_raw pooled them over the readings."""
    if "step_pairs" in raw:
        return [(float(a), float(b)) for a, b in raw["step_pairs"]]
    pair = raw.get("pair") or []
    if len(pair) != 2:
        return []
    return [(a, b) for r0, r1 in zip(*pair) for a, b in zip(r0[STEP_COLUMNS:], r1[STEP_COLUMNS:])]


def fit_transport(raw: Mapping[str, Sequence]) -> dict:
    """{"per_byte_s", "samples"}: the transport CPU per wire byte (module docstring), errors relative to the
    engine step's process CPU time, so a small step's row does not dominate; with "step_jitter_cv" where the
    reading kept each step's CPU: the ranks' step-to-step jitter that a synchronised step waits for
    (predict/rank_jitter.py)."""
    from llmperf_hook.predict.rank_jitter import jitter_cv

    cv = jitter_cv(step_pairs(raw))
    jitter = {} if cv is None else {"step_jitter_cv": cv}
    rows = [r for r in transport_rows(raw) if r["wire_bytes"] > 0]
    if not rows:
        return {"per_byte_s": 0.0, "samples": [], **jitter}
    (per_byte,) = fit_nonnegative([[r["wire_bytes"]] for r in rows], [r["extra_s"] for r in rows],
                                  [r["process_s"] for r in rows])
    return {"per_byte_s": per_byte, "samples": rows, **jitter}

"""cpu_engine_cost.EngineReader's process: DeepSpeed's engine for ZeRO 0-3 at cpu_engine_cost.DEEPSPEED_SHAPES, each
in a process of its own forked from it after the imports, as a real job runs one engine per process (deepspeed_child
says why: the allocator's page faults). Its answers are cpu_engine_cost's raw engine times."""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any, Sequence

from llmperf_hook.profile import cpu_engine_cost as ec
from llmperf_hook.profile.cpu_framework import Shape, VOCAB, _gpt


def _engine(shape: Shape, zero: int, dtype: str):
    """(DeepSpeed engine of the reference GPT at ZeRO `zero`, its token batch), warmed up."""
    import deepspeed
    import torch

    torch.manual_seed(0)
    model = _gpt(*shape[:3])
    data = torch.randint(0, VOCAB, (shape[3], shape[2] + 1))
    config = {"train_micro_batch_size_per_gpu": shape[3], "gradient_accumulation_steps": 1,
              "train_batch_size": shape[3], "zero_optimization": {"stage": zero}, "steps_per_print": 10 ** 9}
    if dtype == "bf16":
        config["bf16"] = {"enabled": True}
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4),
                                      config=config)
    for _ in range(ec.ENGINE_WARMUP):
        engine.backward(engine(data[:, :-1], data[:, 1:]))
        engine.step()
    return engine, data


def _engine_step_s(engine, data, reps: int | None = None) -> tuple[float, float]:
    """Median seconds of `reps` (default ENGINE_REPS) engine steps: (forward + backward, step)."""
    from llmperf_hook.profile.op_sampler import cpu_clock

    clock, fb, st = cpu_clock(), [], []
    for _ in range(reps or ec.ENGINE_REPS):
        t0 = clock()
        engine.backward(engine(data[:, :-1], data[:, 1:]))
        t1 = clock()
        engine.step()
        fb.append(t1 - t0)
        st.append(clock() - t1)
    return statistics.median(fb), statistics.median(st)


def _engine_worker(conn, shape: Shape, zero: int, dtype: str, parent_pid: int, reps: int | None = None) -> None:
    """One engine in a process of its own (forked by deepspeed_child): world size 1 on its own port; per "go" on
    `conn`, [fwd+bwd s, step s] (_engine_step_s). It ends on any other message, or once its parent is gone: a
    sibling forked later holds a copy of `conn`'s other end, so its closing is no end of file here."""
    import deepspeed

    os.environ["MASTER_PORT"] = str(ec._free_port())
    deepspeed.init_distributed(dist_backend="gloo")
    engine, data = _engine(shape, zero, dtype)
    conn.send("ready")
    while os.getppid() == parent_pid:
        if conn.poll(1.0):
            if conn.recv() != "go":
                return
            conn.send(list(_engine_step_s(engine, data, reps)))


def _start_engine_workers(dtype: str, shapes: Sequence[Shape] | None = None,
                          reps: int | None = None) -> list[tuple[int, Any, Any]]:
    """[(zero stage, connection, process)] of one forked _engine_worker per (ZeRO stage, `shapes`: default
    DEEPSPEED_SHAPES, cpu_reading_plan.py's plan otherwise), each started once the one before it built its engine (one
    build at a time, as before)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    workers = []
    for zero in range(4):
        for shape in shapes or ec.DEEPSPEED_SHAPES:
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=_engine_worker, args=(theirs, tuple(shape), zero, dtype, os.getpid(), reps),
                               daemon=True)
            proc.start()
            theirs.close()
            if mine.recv() != "ready":
                raise ec.ChildFailed(f"engine worker ZeRO-{zero} {shape} did not start")
            workers.append((zero, mine, proc))
    return workers


def deepspeed_child(dtype: str, threads: int, shapes: Sequence[Shape] | None = None, reps: int | None = None) -> None:
    """EngineReader's process (one rank, gloo): an engine per (ZeRO stage, `shapes`: default DEEPSPEED_SHAPES), each
    in a process of its own forked from this one after the imports (_engine_worker), built once; per "go", {zero
    stage: [[fwd+bwd s, step s] per shape]}, each engine's `reps` (default ENGINE_REPS) steps in turn.

    One process per engine because a real job is one: glibc's malloc raises its mmap threshold (and with it the
    heap-trim threshold, 2x) to the largest mmapped block a process has freed, and never lowers it. In a fresh
    job DeepSpeed's per-step temporaries (bf16: FP16_UnfusedOptimizer's fp32 gradient copies at ZeRO-0; ZeRO-1/2's
    fp32 gradient partition, stage_1_and_2.py step()) are trimmed back to the kernel at every step and
    page-faulted in again at the next: L2 h256 s64 mbs2 bf16 ZeRO-0 alone in a process, 2,033 minor faults and
    3.9 ms of system time per 27 ms step; the same engine after fifteen others in one process, 0 faults and
    0.0 ms (/work/notes/h159.md). All sixteen in one process (until 27 Nov 2026) measured the engine term without
    that cost: bf16 testbed steps were predicted 14-16 % low.

    A worker inherits the threshold this process's imports left (torch._dynamo's import raises it from 0.9 to
    1.9 MiB), as a real rank does: the testbed's train_gpt.py builds its AdamW, which imports torch._dynamo, before
    DeepSpeed's first step. Per-step faults of a worker and of train_gpt.py's rank agree (28 Nov,
    /work/notes/r56.md): h256 ZeRO-0 2,190 / 2,033, ZeRO-1 4,531 / 4,506; h128 ZeRO-0 21 / 0.5, ZeRO-1 1,300 /
    1,278; a bare process building its model before that import paid 464 and 286 at h128."""
    import torch

    torch.set_num_threads(threads)
    _one_rank_env()
    from deepspeed.comm.torch import build_shm_op

    build_shm_op()  # loaded once here: a worker never builds it (stop_children's lock file)
    # A process's first engine imports torch._dynamo (AdamW's constructor) and DeepSpeed's Muon optimizer
    # (zero/utils.is_zero_supported_optimizer): 2.3 of its 2.5 CPU seconds. Imported here once, not in each worker.
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])
    try:
        import deepspeed.runtime.zero.muon.muon_optimizer  # noqa: F401
    except ImportError:
        pass
    workers = _start_engine_workers(dtype, shapes, reps)
    ec._answer("ready")
    for _ in sys.stdin:
        out: dict[str, list[list[float]]] = {}
        for zero, conn, _ in workers:
            conn.send("go")
            out.setdefault(str(zero), []).append(conn.recv())
        ec._answer(out)
    stop_engine_workers(workers)


def _one_rank_env() -> None:
    """deepspeed_child's environment: rank 0 of world size 1 (each worker adds its own MASTER_PORT). Without a
    LOCAL_SIZE: one equal to the world size (1, inherited from a launcher) makes each worker's init_distributed create
    a /dev/shm all-reduce buffer (shm_interface.cpp initialize), 64 MiB that DeepSpeed never unlinks, sixteen times
    on sixteen ports; its training collectives go through gloo either way (as cpu_rank_transport.transport_child)."""
    os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"})
    os.environ.pop("LOCAL_SIZE", None)


def stop_engine_workers(workers: Sequence[tuple[int, Any, Any]]) -> None:
    """Tell each _engine_worker to end and wait for it (cpu_engine_cost.CLOSE_TIMEOUT_S in all; then it is killed)."""
    for _, conn, _ in workers:
        try:
            conn.send("stop")
        except OSError:  # it has ended already
            pass
    deadline = time.monotonic() + ec.CLOSE_TIMEOUT_S
    for _, conn, proc in workers:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.exitcode is None:
            proc.kill()
            proc.join()
        conn.close()

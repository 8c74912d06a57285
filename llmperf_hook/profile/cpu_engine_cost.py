"""CPU framework overhead, the parts measured in child processes: concurrent ranks and DeepSpeed's engine.

Both run the reference GPT of cpu_framework.py in separate Python processes (one thread each, process CPU
time, medians of repetitions, the quietest of interleaved rounds):
- `measure_concurrency`: forward+backward of CONCURRENCY_SHAPES in 2 .. N processes at once (N = logical CPUs
  / threads per rank) against alone: `concurrency_slowdown[ranks]`, what a rank loses to the others' use of
  the shared caches and memory bandwidth. CPU time, not wall time: waiting for a core that other programs
  hold is the machine's load at that moment, not a property of the machine (the testbed benchmark records
  the load and the wall / CPU ratio of every run).
- `measure_deepspeed_step`: DeepSpeed's engine (forward, backward, step; gloo, one rank) for ZeRO 0-3 at
  DEEPSPEED_SHAPES, minus what the fitted cost (per unit, compute scale, per byte, Adam per tensor and per
  parameter) predicts for the same model and optimizer: the engine's own work (gradient copies into flat
  buffers and partitions, the gradient norm, fp32 master weights copied back, ZeRO-3 parameter fetch and
  release bookkeeping) plus whatever of a real step the operator graph does not model, as
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
import statistics
import subprocess
import sys
from typing import Mapping, Sequence

from llmperf_hook.profile.cpu_framework import (ROUNDS, Shape, VOCAB, _gpt, fit_nonnegative,
                                                interleaved_quietest, measure_fwd_bwd, predicted_parts)

CONCURRENCY_SHAPES: tuple[Shape, ...] = ((2, 128, 64, 4), (1, 256, 128, 1), (2, 192, 128, 2))
"""Mid-size reference shapes for the concurrency measurement."""
ENGINE_REPS = 9
"""Engine steps timed per (ZeRO stage, shape) in each of the ROUNDS rounds."""
DEEPSPEED_SHAPES: tuple[Shape, ...] = ((2, 128, 64, 2), (1, 128, 256, 1), (2, 256, 64, 2), (1, 512, 64, 1))
"""0.55 M to 3.7 M parameters: DeepSpeed's per-step work = a constant + a cost per parameter."""


def concurrent_child(dtype: str, threads: int) -> None:
    """One of the processes of measure_concurrency: prints the fwd+bwd CPU seconds of CONCURRENCY_SHAPES."""
    import torch

    torch.set_num_threads(threads)
    print(json.dumps(interleaved_quietest(lambda s: measure_fwd_bwd(s, dtype), CONCURRENCY_SHAPES)))


def _child_env(threads: int) -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS=str(threads), DS_ACCELERATOR="cpu")


def measure_concurrency(dtype: str, threads: int) -> dict[str, float]:
    """{ranks: slowdown} for 2 .. logical CPUs / threads ranks; median over shapes and processes."""
    alone = interleaved_quietest(lambda s: measure_fwd_bwd(s, dtype), CONCURRENCY_SHAPES)
    out: dict[str, float] = {}
    code = f"from llmperf_hook.profile.cpu_engine_cost import concurrent_child; concurrent_child({dtype!r}, {threads})"
    for ranks in range(2, max(2, (os.cpu_count() or 1) // threads) + 1):
        procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                  env=_child_env(threads)) for _ in range(ranks)]
        times = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
        out[str(ranks)] = max(1.0, statistics.median(t[i] / alone[i] for t in times for i in range(len(alone))))
    return out


def _engine_step_s(shape: Shape, zero: int, dtype: str) -> tuple[float, float]:
    """Median seconds of one DeepSpeed engine step of the reference GPT: (forward + backward, step)."""
    import deepspeed
    import torch

    from llmperf_hook.profile.op_sampler import cpu_clock

    torch.manual_seed(0)
    model = _gpt(*shape[:3])
    data = torch.randint(0, VOCAB, (shape[3], shape[2] + 1))
    config = {"train_micro_batch_size_per_gpu": shape[3], "gradient_accumulation_steps": 1,
              "train_batch_size": shape[3], "zero_optimization": {"stage": zero}, "steps_per_print": 10 ** 9}
    if dtype == "bf16":
        config["bf16"] = {"enabled": True}
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4),
                                      config=config)
    clock, fb, st = cpu_clock(), [], []
    for rep in range(2 + ENGINE_REPS):  # the first steps build buffers
        t0 = clock()
        engine.backward(engine(data[:, :-1], data[:, 1:]))
        t1 = clock()
        engine.step()
        if rep >= 2:
            fb.append(t1 - t0)
            st.append(clock() - t1)
    return statistics.median(fb), statistics.median(st)


def deepspeed_child(dtype: str, threads: int) -> None:
    """Prints {zero stage: [[fwd+bwd s, step s] per DEEPSPEED_SHAPES]} (one process, one rank, gloo): medians
    of ENGINE_REPS steps, the stages interleaved in ROUNDS rounds, the quietest round's."""
    import torch

    torch.set_num_threads(threads)
    os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"})
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    cases = [(zero, shape) for zero in range(4) for shape in DEEPSPEED_SHAPES]
    runs = [[_engine_step_s(shape, zero, dtype) for zero, shape in cases] for _ in range(ROUNDS)]
    out: dict[str, list[list[float]]] = {}
    for i, (zero, _) in enumerate(cases):
        out.setdefault(str(zero), []).append([min(r[i][k] for r in runs) for k in range(2)])  # quietest round
    print(json.dumps(out))


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


def measure_deepspeed_step(dtype: str, threads: int, cost: Mapping[str, float],
                           hardware_name: str) -> dict[str, dict]:
    """{zero stage: {"per_step_s", "per_param_s", "partition_fraction", "samples"}} (module docstring);
    {} without DeepSpeed. Samples: [params, engine fwd+bwd s, engine step s, modelled fwd+bwd s, modelled
    optimizer s]."""
    code = f"from llmperf_hook.profile.cpu_engine_cost import deepspeed_child; deepspeed_child({dtype!r}, {threads})"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_child_env(threads),
                              timeout=900)
        raw = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return {}
    out = {}
    for zero, engine_s in raw.items():
        rows = []
        for shape, (fb_s, step_s) in zip(DEEPSPEED_SHAPES, engine_s):
            model = _gpt(*shape[:3])
            params = sum(p.numel() for p in model.parameters())
            flat = int(zero) >= 1 or dtype != "fp32"  # graph/param_tensors.py: DeepSpeed's flat fp32 partitions
            parts = predicted_parts(shape, dtype, hardware_name)
            rows.append([params, fb_s, step_s, *modelled_parts_s(parts, cost, 1 if flat else
                                                                 len(list(model.parameters())), params)])
        total = fit_engine_terms([r[0] for r in rows], [r[1] + r[2] for r in rows], [r[3] + r[4] for r in rows])
        fraction = partition_fraction([r[0] for r in rows], [max(0.0, r[2] - r[4]) for r in rows], total,
                                      [r[1] + r[2] for r in rows])
        out[zero] = {**total, "partition_fraction": fraction if int(zero) >= 1 else 0.0, "samples": rows}
    return out

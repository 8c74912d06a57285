"""CPU framework overhead: what a training step costs on a CPU beyond the sum of its isolated operators.

`llmperf profile --device cpu` samples every operator class alone (op_sampler.py). Inside a real eager-mode
training step, one thread also pays, for every modelled op, the framework work around it: the views,
transposes, bias adds and copies a modelled op stands for, autograd recording in forward and the autograd
engine's node dispatch and gradient accumulation in backward; and the optimizer step runs torch's
per-parameter-tensor Adam loop. On a GPU that host work overlaps the kernels (predict/host_issue.py); on a
CPU host issue and compute are the same thread, so it adds up.

Measured here, once per machine and dtype, after the operator profile is fitted:
1. A Megatron-style GPT (pre-LayerNorm, fused QKV, causal SDPA, GELU MLP, tied LM head, cross-entropy: the
   network llmperf's graph describes) runs forward + backward for REFERENCE_SHAPES; the graph of the same
   shape is predicted with the just-fitted profile (no framework term). Fitted (non-negative least squares on
   relative errors): measured = per_unit_s * units + compute_scale * predicted + per_byte_s * bytes, with
   units = issued op units (host_issue.KERNELS_PER_PHASE: 1 per forward op, 2 per backward op: eager
   dispatch and autograd bookkeeping), bytes = the ops' modelled traffic (the views, transposes, contiguous
   copies and gradient accumulations a modelled op stands for move data in proportion), compute_scale = what
   the operators cost inside the step per second of their isolated samples (warm caches shared with the
   neighbouring ops).
2. torch AdamW steps the reference models' fp32 parameters as the module's separate tensors and as one flat
   tensor (what DeepSpeed's ZeRO / bf16 optimizers step): measured = per_tensor_s * tensors
   + per_param_s * params, which replaces the profile's optimizer op (sampled on one tensor) on this CPU.
3. The ranks of a job share the machine: forward+backward of CONCURRENCY_SHAPES run in 2 .. N processes at
   once (N = logical CPUs / threads per rank); `concurrency_slowdown[ranks]` = their CPU time / CPU time alone.
4. DeepSpeed's engine (when installed) on one rank, ZeRO 0-3: its forward + backward + step minus the plain
   model's and torch AdamW's, at two sizes: `deepspeed_step[zero]` = per_step_s + per_param_s * params.
The result is `framework_overhead.json` in the profile directory (FILE_NAME); predict/cpu_framework.py adds
it to the op times of every prediction on that hardware. torch is imported inside the functions only.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Sequence

FILE_NAME = "framework_overhead.json"
MIN_BUDGET_MIN = 1.0
"""`llmperf profile --device cpu` measures the framework cost when its --budget is at least this (minutes)."""
RESERVED_S = 75.0
"""Seconds of the budget the framework measurement takes (both dtypes, DeepSpeed included), kept off sampling."""
FORMAT = "llmperf-cpu-framework-overhead"

REFERENCE_SHAPES: tuple[tuple[int, int, int, int], ...] = (
    # (layers, hidden, seq, micro-batch): small to mid shapes spanning the op-count and traffic regimes,
    # 46 k to 3.7 M parameters (the optimizer's per-parameter cost leaves the caches on the way)
    (1, 32, 16, 1), (2, 64, 64, 1), (1, 128, 128, 2), (2, 128, 64, 4), (1, 256, 128, 1), (2, 192, 128, 2),
    (1, 256, 256, 2), (3, 96, 128, 2), (2, 256, 64, 2), (1, 512, 64, 1),
)
VOCAB = 1024
HEAD_DIM = 32
REPS = 5
ROUNDS = 3
CONCURRENCY_SHAPES = ((2, 128, 64, 4), (1, 256, 128, 1), (2, 192, 128, 2))
"""Mid-size reference shapes for the concurrency measurement."""


def _gpt(layers: int, hidden: int, seq: int):
    """The reference network (Megatron GPT layer structure, learned positions, tied LM head)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads = max(1, hidden // HEAD_DIM)
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            b, s, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.pos = nn.Embedding(VOCAB, hidden), nn.Embedding(seq, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(hidden)
            for name, param in self.named_parameters():  # Megatron's init_method_std 0.02, zero biases: with
                if param.dim() > 1:                      # torch's N(0, 1) embeddings the tied head's logits
                    nn.init.normal_(param, std=0.02)     # underflow and the softmax runs on denormals (5x slower)
                elif name.endswith("bias"):
                    nn.init.zeros_(param)

        def forward(self, tokens, labels):
            x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1]))
            for block in self.blocks:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.embed.weight)
            return F.cross_entropy(logits.float().view(-1, VOCAB), labels.reshape(-1))

    return GPT()


def _median_s(fn, reps: int = REPS, clock=time.perf_counter) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times)


def measure_shape(shape: tuple[int, int, int, int], dtype: str,
                  clock=time.perf_counter) -> tuple[float, float, float, int, int]:
    """(fwd+bwd s, AdamW step over the module's tensors s, over one flat tensor s, tensors, params)."""
    import torch

    layers, hidden, seq, mbs = shape
    torch.manual_seed(0)
    model = _gpt(layers, hidden, seq)
    if dtype == "bf16":
        model = model.to(torch.bfloat16)
    data = torch.randint(0, VOCAB, (mbs, seq + 1))

    def fwd_bwd() -> None:
        model(data[:, :-1], data[:, 1:]).backward()

    fb_s = _median_s(fwd_bwd, clock=clock)
    params = [p for p in model.parameters()]
    for p in params:
        p.grad = torch.randn_like(p)
    # fp32 master weights: DeepSpeed's bf16 optimizer and torch AdamW on fp32 models step fp32 tensors
    master = [p.detach().float().requires_grad_() for p in params]
    for m in master:
        m.grad = torch.randn_like(m)
    per_tensor = torch.optim.AdamW(master, lr=1e-4)
    numel = sum(p.numel() for p in params)
    flat = torch.zeros(numel, requires_grad=True)
    flat.grad = torch.randn(numel)
    flat_opt = torch.optim.AdamW([flat], lr=1e-4)
    return fb_s, _median_s(per_tensor.step), _median_s(flat_opt.step), len(params), numel


def _reference_config(shape: tuple[int, int, int, int], dtype: str):
    from llmperf_hook.api import resolve_job

    layers, hidden, seq, mbs = shape
    flags = ["--num-layers", layers, "--hidden-size", hidden, "--num-attention-heads", max(1, hidden // HEAD_DIM),
             "--seq-length", seq, "--max-position-embeddings", seq, "--micro-batch-size", mbs,
             "--vocab-size", VOCAB, "--attention-dropout", 0, "--hidden-dropout", 0]
    flags += ["--bf16"] if dtype == "bf16" else []
    _, cfg = resolve_job(["python", "pretrain_gpt.py", *map(str, flags)], {})
    return cfg


def predicted_parts(shape: tuple[int, int, int, int], dtype: str, hardware_name: str) -> dict[str, float]:
    """The graph of `shape` on `hardware_name` predicted with the fitted profile alone: fwd+bwd compute
    seconds, issued op units, modelled bytes, and the optimizer op's seconds."""
    from llmperf_hook.api import build_graph
    from llmperf_hook.hardware.load import load_hardware
    from llmperf_hook.hardware.spec import ClusterSpec, NetworkTier
    from llmperf_hook.predict import fitted
    from llmperf_hook.predict.dispatch import op_id, predict_ops
    from llmperf_hook.predict.host_issue import KERNELS_PER_PHASE

    tier = NetworkTier(1e9, 1e-5)
    cluster = ClusterSpec(hardware_name, load_hardware(hardware_name), 1, tier, tier)
    graph = build_graph(_reference_config(shape, dtype), cluster)
    profile = fitted.find_profile(hardware_name, dtype)
    seconds, _ = predict_ops(graph.all_ops(), cluster, profile, None)
    parts = {"compute_s": 0.0, "units": 0.0, "bytes": 0.0, "optimizer_s": 0.0}
    for stage in graph.stages:
        for chunk in stage.chunks:
            for block in chunk.blocks:
                for op in (*block.fwd, *block.bwd):
                    if op.collective is None:
                        parts["compute_s"] += seconds[op_id(op)] * block.count
                        parts["units"] += KERNELS_PER_PHASE.get(op.phase, 1) * block.count
                        parts["bytes"] += op.bytes_moved * block.count
        parts["optimizer_s"] += sum(seconds[op_id(op)] for op in stage.step_ops if op.op_class == "optimizer")
    return parts


def fit_nonnegative(x: Sequence[Sequence[float]], y: Sequence[float]) -> list[float]:
    """Coefficients c >= 0 of y ~ x @ c minimising the RELATIVE squared error (rows weighted 1 / y: small and
    large shapes count alike, as in a MAPE): exact non-negative least squares for a few features, by least
    squares on every subset of the features and the best subset whose coefficients are all >= 0."""
    from itertools import combinations

    import numpy as np

    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    w = 1.0 / np.maximum(np.abs(b), 1e-12)
    aw, bw = a * w[:, None], b * w
    scale = np.maximum(np.abs(aw).max(axis=0), 1e-30)  # columns of similar size for the solver
    best, best_err = np.zeros(a.shape[1]), float(bw @ bw)
    for k in range(1, a.shape[1] + 1):
        for cols in combinations(range(a.shape[1]), k):
            sub = aw[:, cols] / scale[list(cols)]
            coef = np.linalg.lstsq(sub, bw, rcond=None)[0]
            err = float(((sub @ coef - bw) ** 2).sum())
            if (coef >= 0).all() and err < best_err - 1e-15 * max(1.0, best_err):
                best, best_err = np.zeros(a.shape[1]), err
                best[list(cols)] = coef / scale[list(cols)]
    return [float(c) for c in best]


def measure_shapes(dtype: str, shapes: Sequence[tuple[int, int, int, int]] = REFERENCE_SHAPES,
                   rounds: int = ROUNDS, clock=time.perf_counter) -> list[tuple[float, float, float, int, int]]:
    """measure_shape for every shape, `rounds` interleaved rounds, the median of the rounds' medians (the
    central estimate the op sampler and the testbed benchmark take too)."""
    runs = [[measure_shape(shape, dtype, clock) for shape in shapes] for _ in range(rounds)]
    return [(*(statistics.median(r[i][k] for r in runs) for k in range(3)), *runs[0][i][3:])
            for i in range(len(shapes))]


def concurrent_child(dtype: str, threads: int) -> None:
    """One of the processes of measure_concurrency: prints the fwd+bwd CPU seconds of CONCURRENCY_SHAPES."""
    import torch

    torch.set_num_threads(threads)
    print(json.dumps([m[0] for m in measure_shapes(dtype, CONCURRENCY_SHAPES, 1, time.process_time)]))


def measure_concurrency(dtype: str, threads: int) -> dict[str, float]:
    """{ranks: slowdown}: how much more CPU time a rank's forward+backward takes while `ranks` ranks of
    `threads` threads run at once on this machine (they share caches and memory bandwidth), for 2 .. logical
    CPUs / threads ranks; median over CONCURRENCY_SHAPES and processes. CPU time, not wall time: waiting for
    a core that other programs hold is the machine's load at that moment, not a property of the machine
    (the testbed benchmark records the load and the wall / CPU ratio of every run)."""
    import os
    import subprocess
    import sys

    alone = [m[0] for m in measure_shapes(dtype, CONCURRENCY_SHAPES, ROUNDS, time.process_time)]
    out: dict[str, float] = {}
    code = f"from llmperf_hook.profile.cpu_framework import concurrent_child; concurrent_child({dtype!r}, {threads})"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    for ranks in range(2, max(2, (os.cpu_count() or 1) // threads) + 1):
        procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
                 for _ in range(ranks)]
        times = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
        out[str(ranks)] = max(1.0, statistics.median(t[i] / alone[i] for t in times for i in range(len(alone))))
    return out


def measure_framework_overhead(hardware_name: str, dtype: str, threads: int = 1) -> dict:
    """Step 1 and 2 of the module docstring for one dtype: the fitted coefficients and the samples behind them."""
    rows = []
    for shape, measured in zip(REFERENCE_SHAPES, measure_shapes(dtype)):
        fb_s, opt_tensors_s, opt_flat_s, tensors, params = measured
        parts = predicted_parts(shape, dtype, hardware_name)
        rows.append({"shape": list(shape), "fwd_bwd_s": fb_s, "predicted_compute_s": parts["compute_s"],
                     "units": parts["units"], "bytes": parts["bytes"], "optimizer_tensors_s": opt_tensors_s,
                     "optimizer_flat_s": opt_flat_s, "predicted_optimizer_s": parts["optimizer_s"],
                     "tensors": tensors, "params": params})
    per_unit_s, compute_scale, per_byte_s = fit_nonnegative(
        [[r["units"], r["predicted_compute_s"], r["bytes"]] for r in rows], [r["fwd_bwd_s"] for r in rows])
    opt_x = [[r["tensors"], r["params"]] for r in rows] + [[1, r["params"]] for r in rows]
    opt_y = [r["optimizer_tensors_s"] for r in rows] + [r["optimizer_flat_s"] for r in rows]
    per_tensor_s, per_param_s = fit_nonnegative(opt_x, opt_y)
    return {"per_unit_s": per_unit_s, "compute_scale": compute_scale, "per_byte_s": per_byte_s,
            "optimizer_per_tensor_s": per_tensor_s,
            "concurrency_slowdown": measure_concurrency(dtype, threads),
            "deepspeed_step": measure_deepspeed_step(dtype, threads),
            "optimizer_per_param_s": per_param_s, "samples": rows}


def write_framework_overhead(profile_dir: Path, hardware_name: str, dtypes: Sequence[str], threads: int) -> Path:
    """Measure every dtype the profile serves and write FILE_NAME next to its profile.json."""
    import torch

    torch.set_num_threads(threads)
    path = profile_dir / FILE_NAME
    path.unlink(missing_ok=True)  # the residual is measured against the profile alone
    doc = {"format": FORMAT, "format_version": 1, "device": "cpu", "threads": threads,
           "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "method": "llmperf_hook/profile/cpu_framework.py: reference GPT forward+backward and AdamW steps "
                     "against the fitted profile's prediction of the same graph",
           "dtypes": {dt: measure_framework_overhead(hardware_name, dt, threads) for dt in dtypes}}
    path.write_text(json.dumps(doc, indent=1))
    return path


ENGINE_REPS = 15
"""Engine steps timed per (ZeRO stage, shape): its cost is a difference of two times, so it needs more."""
DEEPSPEED_SHAPES = ((2, 128, 64, 2), (2, 256, 64, 2))
"""Two sizes (0.55 M and 1.9 M parameters): DeepSpeed's per-step work = a constant + a cost per parameter."""


def _engine_step_s(model, data, zero: int, dtype: str) -> float:
    import deepspeed
    import torch

    config = {"train_micro_batch_size_per_gpu": data.shape[0], "gradient_accumulation_steps": 1,
              "train_batch_size": data.shape[0], "zero_optimization": {"stage": zero}, "steps_per_print": 10 ** 9}
    if dtype == "bf16":
        config["bf16"] = {"enabled": True}
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4),
                                      config=config)

    def step() -> None:
        engine.backward(engine(data[:, :-1], data[:, 1:]))
        engine.step()

    _median_s(step, reps=2)  # first steps build buffers
    return _median_s(step, reps=ENGINE_REPS)


def deepspeed_child(dtype: str, threads: int) -> None:
    """Prints {zero stage: [[params, engine step s, plain fwd+bwd s, plain optimizer s], ...]} (one process, one
    rank, gloo): DeepSpeed's engine (forward, backward, step) against the same model in plain torch."""
    import os

    import torch

    torch.set_num_threads(threads)
    os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"})
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    out: dict[str, list] = {}
    plain = measure_shapes(dtype, DEEPSPEED_SHAPES)
    for zero in range(4):
        for shape, (fb_s, tensors_s, flat_s, _, params) in zip(DEEPSPEED_SHAPES, plain):
            torch.manual_seed(0)
            model = _gpt(*shape[:3])
            data = torch.randint(0, VOCAB, (shape[3], shape[2] + 1))
            plain_opt_s = flat_s if zero >= 1 or dtype != "fp32" else tensors_s
            out.setdefault(str(zero), []).append([params, _engine_step_s(model, data, zero, dtype), fb_s, plain_opt_s])
    print(json.dumps(out))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure_deepspeed_step(dtype: str, threads: int) -> dict[str, dict[str, float]]:
    """{zero stage: {"per_step_s", "per_param_s"}}: what a DeepSpeed engine step costs on this CPU beyond the
    plain model's forward + backward and torch AdamW step (gradient copies into flat buffers and partitions,
    the gradient norm, fp32 master weights copied back, ZeRO-3 parameter fetch/release bookkeeping),
    a constant + a cost per parameter from DEEPSPEED_SHAPES. Empty when DeepSpeed is not installed."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS=str(threads), DS_ACCELERATOR="cpu")
    code = f"from llmperf_hook.profile.cpu_framework import deepspeed_child; deepspeed_child({dtype!r}, {threads})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        return {}
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    out = {}
    for zero, rows in raw.items():
        extra = [(p, max(0.0, ds - fb - opt)) for p, ds, fb, opt in rows]
        (p0, e0), (p1, e1) = extra[0], extra[-1]
        per_param = max(0.0, (e1 - e0) / (p1 - p0)) if p1 != p0 else 0.0
        out[zero] = {"per_step_s": max(0.0, e0 - per_param * p0), "per_param_s": per_param, "samples": rows}
    return out

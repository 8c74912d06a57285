"""CPU framework overhead: what a training step costs on a CPU beyond the sum of its isolated operators.

`llmperf profile --device cpu` samples every operator class alone (op_sampler.py). Inside a real eager-mode
training step, one thread also pays, for every modelled op, the framework work around it: the views,
transposes, bias adds and copies a modelled op stands for, autograd recording in forward and the autograd
engine's node dispatch and gradient accumulation in backward; and the optimizer step runs torch's
per-parameter-tensor Adam loop. On a GPU that host work overlaps the kernels (predict/host_issue.py); on a
CPU host issue and compute are the same thread, so it adds up.

Every effect is measured by a difference designed to isolate it, in process CPU time (one thread: what the
rank computes, not the minutes it waited for a core another program held), medians of repetitions; the
coefficients are bounded to their physical range (>= 0). One pass over all of them is a reading; the file
keeps, per term, the median over several interleaved readings (cpu_framework_readings.py: one reading was not
a stable profile). Once per machine and dtype, after the operator profile is fitted, on a Megatron-style
GPT (pre-LayerNorm, fused QKV, causal SDPA, GELU MLP, tied LM head, cross-entropy: the network llmperf's graph
describes), gradients set to None before every backward as a training step does:
1. per issued op unit (host_issue.KERNELS_PER_PHASE: 1 per forward op, 2 per backward op): two tiny models
   (hidden 32, sequence 16) of 1 and 9 layers; their forward+backward difference (the two steps timed in
   interleaved pairs: paired_difference_s) minus the same difference's operators sampled alone between those
   pairs (IsolatedDifference, a round of every op after every few pairs: the tiny ops lie below the profile's
   training ranges, so its prediction of them was an extrapolation that moved with compute_scale), per unit of
   the difference (TINY_LAYERS: the isolated ops are ~1/2 of it in bf16, ~1/3 in fp32).
2. (a) `compute_scale`: the compute ops of BIAS_SHAPES' graphs sampled alone with the operator sampler,
   against the fitted profile's prediction of them (the regressors' systematic error for the dtype; the
   in-step cost of a kernel is taken as its isolated cost); (b) per byte of the ops' modelled traffic
   (views, transposes, contiguous copies and bias gradients a modelled op stands for) and per parameter
   (the backward's gradient accumulation: AccumulateGrad, the tied embedding's two contributions summed,
   bias-gradient reductions): REFERENCE_SHAPES' forward+backward minus the per-unit cost of 1. and the ops
   at compute_scale, non-negative least squares on relative errors. Fitting the scale together with (b)
   drifted 0.71-0.94 between two measurements (the features are correlated); measured apart it is one
   ratio of two sums. The
   per-parameter part is paid once per step like the optimizer's, so it is added to optimizer_per_param_s
   (the file keeps both parts: adam_per_param_s, backward_per_param_s). Under ZeRO the optimizer op counts
   the rank's partition, the backward the whole model: DeepSpeed's engine term (5.) is measured against
   this model on one rank and takes up the rest.
3. torch AdamW steps the reference models' fp32 parameters as the module's separate tensors and as one flat
   tensor (DeepSpeed's ZeRO / bf16 optimizers): per tensor = (module tensors - flat) / (tensors - 1) at each
   shape, per parameter from the flat steps; medians over shapes.
4. The ranks of a job share the machine: `concurrency_slowdown[ranks]` (cpu_engine_cost.py).
5. DeepSpeed's engine on one rank, ZeRO 0-3: its measured step minus what 1.-3. predict for the same model
   (cpu_engine_cost.py): everything the engine does beyond the modelled operators.
6. The CPU time gloo's transport threads spend per byte a rank puts on the wire, from a DeepSpeed engine at world
   size 2 against the same at world size 1 (cpu_rank_transport.py): what a multi-rank step costs in CPU that 4. and
   5. (one rank, or ranks without a process group) cannot see.
The shapes named above are the full plan's. A dtype whose steps cost over twice fp32's on this CPU (bf16 without a
native kernel: ATen's fallback on an AVX2-only EPYC, ~2.5-3 min of CPU a full reading) is read on the light plan
instead: the same terms by the same differences, in that dtype, on steps of fewer tokens and smaller hidden sizes
(cpu_reading_plan.py; each entry's `reading_plan` says which plan and how each term was obtained).
The result is `framework_overhead.json` in the profile directory (FILE_NAME, written by
cpu_framework_readings.write_framework_overhead); predict/cpu_framework.py adds it to the op times of every
prediction on that hardware. torch is imported inside the functions only.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from llmperf_hook.profile.op_sampler import cpu_clock

if TYPE_CHECKING:
    from llmperf_hook.graph.op import Op

FILE_NAME = "framework_overhead.json"
MIN_BUDGET_MIN = 3.0
"""`llmperf profile --device cpu` measures the framework cost when its --budget is at least this (minutes)."""
RESERVED_S = 120.0
"""Seconds of the budget the framework measurement takes, kept off sampling and split evenly over the dtypes
measured (cpu_framework_readings.py: per dtype the children's start, then readings while they fit its share,
less what the dtypes before ran over theirs; 3 to 7 readings; on a loaded machine 3 readings run over)."""
FORMAT = "llmperf-cpu-framework-overhead"
FORMAT_VERSION = 3
"""3: each term from interleaved readings (2: one reading, the quietest of 3 rounds per time). Same fields whether the
terms are the median of each reading's fit (until session 13) or one fit of the median times (since): a file of
either reads the same, so the version is unchanged (cpu_framework_readings.py, 3.)."""
STEP_VERSIONS = (2, 3)
"""Format versions whose measured steps are the same steps (measured_steps keys; carried_history)."""

Shape = tuple[int, int, int, int]
"""(layers, hidden, sequence, micro-batch) of the reference GPT."""
REFERENCE_SHAPES: tuple[Shape, ...] = (
    # mid shapes spanning the op-count, token and traffic regimes of CPU jobs (6-55 ms steps, 0.35 M to 3.7 M
    # parameters, 128-512 tokens per micro-batch). No tiny shape: its fixed per-step cost (~0.4 ms: loss,
    # arange, the autograd engine's start) is no op's and would bias the per-op terms; DeepSpeed's engine
    # term (cpu_engine_cost.py) takes it up.
    (1, 128, 128, 2), (2, 128, 64, 4), (1, 256, 128, 1), (2, 192, 128, 2), (1, 256, 256, 2), (3, 96, 128, 2),
    (2, 256, 64, 2), (1, 512, 64, 1), (2, 128, 512, 1), (3, 192, 128, 4), (4, 256, 64, 4),
)
BIAS_SHAPES: tuple[Shape, ...] = ((1, 128, 128, 2), (2, 192, 128, 2), (1, 512, 64, 1), (2, 128, 512, 1))
"""Step 2a's shapes (every op class of the graph; GEMM-, attention- and parameter-heavy)."""
TINY_LAYERS: tuple[Shape, Shape] = ((1, 32, 16, 1), (9, 32, 16, 1))
"""Step 1's pair: same tiny shape, 8 layers apart (240 op units; their isolated ops are ~1/2 of the difference in bf16,
~1/3 in fp32)."""
ISOLATED_REPS = 5
"""Samples of each tiny op per reading (IsolatedDifference rounds, between the pairs; 3 in a row until 28 Nov 2026), the
median kept: one 10-ms sample of each put the bf16 difference's isolated ops at 3.6-7.0 ms over twelve readings at
load 9 (a sample that met a burst)."""
SCALE_BOUNDS = (0.5, 2.0)
"""compute_scale (isolated / profile-predicted seconds) beyond these bounds means a broken profile, not a bias."""
VOCAB = 1024
HEAD_DIM = 32
REPS = 5


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


def _median_s(fn, reps: int = REPS, clock: Callable[[], float] | None = None) -> float:
    clock = clock or cpu_clock()
    fn()
    times = []
    for _ in range(reps):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times)


def paired_difference_s(small_fn: Callable[[], None], large_fn: Callable[[], None], pairs: int,
                        clock: Callable[[], float] | None = None, between: Callable[[], object] | None = None,
                        every: int = 0) -> tuple[float, float]:
    """(median seconds of `small_fn`, median over `pairs` of large - small timed back to back): the steps of a
    difference interleaved, so each pair sees the same state of the machine (the co-runner on the other core, its
    cache and memory traffic) and a shift between them cancels instead of landing in the difference. Timed as two
    blocks of medians (the method until session 18), the tiny pair's 8-layer difference spread 34 % (half-range /
    median, 10 readings at load 7) against 12 % paired (/work/notes/h156.md). `between` (untimed) runs after every
    `every` pairs: IsolatedDifference.sample_round, so the isolated ops see the states of the machine the pairs do."""
    clock = clock or cpu_clock()
    small_fn()  # warm-up pair
    large_fn()
    small, diffs = [], []
    for done in range(1, pairs + 1):
        t0 = clock()
        small_fn()
        t1 = clock()
        large_fn()
        small.append(t1 - t0)
        diffs.append(clock() - t1 - (t1 - t0))
        if between is not None and every > 0 and done % every == 0:
            between()
    return statistics.median(small), statistics.median(diffs)


def parameter_counts(shape: Shape) -> tuple[int, int]:
    """(parameters, parameter tensors) of the reference GPT of `shape`."""
    params = list(_gpt(*shape[:3]).parameters())
    return sum(p.numel() for p in params), len(params)


def reference_model(shape: Shape, dtype: str):
    """(model, token batch) of `shape`, seeded, in `dtype`."""
    import torch

    layers, hidden, seq, mbs = shape
    torch.manual_seed(0)
    model = _gpt(layers, hidden, seq)
    if dtype == "bf16":
        model = model.to(torch.bfloat16)
    return model, torch.randint(0, VOCAB, (mbs, seq + 1))


def fwd_bwd_fn(shape: Shape, dtype: str) -> Callable[[], None]:
    """One training forward + backward of the reference model of `shape` (gradients None before it, as after
    a step), the model built once."""
    model, data = reference_model(shape, dtype)

    def fwd_bwd() -> None:
        model.zero_grad(set_to_none=True)
        model(data[:, :-1], data[:, 1:]).backward()

    return fwd_bwd


def measure_fwd_bwd(shape: Shape, dtype: str, clock: Callable[[], float] | None = None) -> float:
    """Median seconds of one training forward + backward (fwd_bwd_fn)."""
    return _median_s(fwd_bwd_fn(shape, dtype), clock=clock)


def optimizer_steps(shape: Shape) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(AdamW step over the reference model's fp32 tensors, over one flat fp32 tensor of as many parameters)."""
    import torch

    model, _ = reference_model(shape, "fp32")
    # fp32 master weights: DeepSpeed's bf16 optimizer and torch AdamW on fp32 models step fp32 tensors
    master = [p.detach().float().requires_grad_() for p in model.parameters()]
    for m in master:
        m.grad = torch.randn_like(m)
    numel = sum(m.numel() for m in master)
    flat = torch.zeros(numel, requires_grad=True)
    flat.grad = torch.randn(numel)
    return torch.optim.AdamW(master, lr=1e-4).step, torch.optim.AdamW([flat], lr=1e-4).step


def _reference_config(shape: Shape, dtype: str):
    from dataclasses import replace

    from llmperf_hook.api import resolve_job

    layers, hidden, seq, mbs = shape
    flags = ["--num-layers", layers, "--hidden-size", hidden, "--num-attention-heads", max(1, hidden // HEAD_DIM),
             "--seq-length", seq, "--max-position-embeddings", seq, "--micro-batch-size", mbs,
             "--vocab-size", VOCAB, "--attention-dropout", 0, "--hidden-dropout", 0]
    flags += ["--bf16"] if dtype == "bf16" else []
    _, cfg = resolve_job(["python", "pretrain_gpt.py", *map(str, flags)], {})
    # _gpt runs torch's exact F.gelu, not Megatron's fused tanh one (frameworks/script_gelu.py)
    return replace(cfg, gelu_approximate="none")


def _predicted_ops(shape: Shape, dtype: str, hardware_name: str) -> tuple[list[tuple], float]:
    """([(compute op, count per step, profile seconds)], optimizer op seconds): the graph of `shape` on
    `hardware_name` predicted with the fitted profile alone."""
    from llmperf_hook.api import build_graph
    from llmperf_hook.hardware.load import load_hardware
    from llmperf_hook.hardware.spec import ClusterSpec, NetworkTier
    from llmperf_hook.predict import fitted
    from llmperf_hook.predict.dispatch import op_id, predict_ops

    tier = NetworkTier(1e9, 1e-5)
    cluster = ClusterSpec(hardware_name, load_hardware(hardware_name), 1, tier, tier)
    graph = build_graph(_reference_config(shape, dtype), cluster)
    seconds, _ = predict_ops(graph.all_ops(), cluster, fitted.find_profile(hardware_name, dtype), None)
    ops, optimizer_s = [], 0.0
    for stage in graph.stages:
        for chunk in stage.chunks:
            for block in chunk.blocks:
                ops += [(op, block.count, seconds[op_id(op)]) for op in (*block.fwd, *block.bwd)
                        if op.collective is None]
        optimizer_s += sum(seconds[op_id(op)] for op in stage.step_ops if op.op_class == "optimizer")
    return ops, optimizer_s


def predicted_parts(shape: Shape, dtype: str, hardware_name: str) -> dict[str, float]:
    """The graph of `shape` predicted with the fitted profile alone: fwd+bwd compute seconds, issued op units,
    modelled bytes, and the optimizer op's seconds."""
    from llmperf_hook.predict.host_issue import KERNELS_PER_PHASE

    ops, optimizer_s = _predicted_ops(shape, dtype, hardware_name)
    return {"compute_s": sum(n * t for _, n, t in ops), "units": sum(KERNELS_PER_PHASE.get(op.phase, 1) * n
                                                                     for op, n, _ in ops),
            "bytes": sum(op.bytes_moved * n for op, n, _ in ops), "optimizer_s": optimizer_s}


def measure_profile_bias(dtype: str, hardware_name: str, shapes: Sequence[Shape]) -> dict:
    """Step 2a: the compute ops of `shapes`' graphs measured alone (op_sampler, the profile's own clock and
    runners) against the fitted profile's prediction of them: {"ratio": measured / predicted, per-shape
    sums}. The regressors' systematic error for this dtype, isolated from any in-step effect."""
    rows = []
    for shape in shapes:
        ops, _ = _predicted_ops(shape, dtype, hardware_name)
        measured = sum(n * _isolated_s(op, dtype) for op, n, _ in ops)
        rows.append({"shape": list(shape), "isolated_s": measured, "predicted_s": sum(n * t for _, n, t in ops)})
    return {"ratio": sum(r["isolated_s"] for r in rows) / sum(r["predicted_s"] for r in rows), "samples": rows}


def isolated_difference_s(dtype: str, hardware_name: str, small: Shape, large: Shape) -> float:
    """Step 1's operators, measured: the ops of `large`'s graph minus those of `small`'s, each distinct op sampled
    alone ISOLATED_REPS times (op_sampler, the profile's own clock and runners; the median kept) and counted as
    often as each graph issues it. The tiny pair's ops lie below every regressor's training range (hidden 32 and 16
    tokens against gemm k >= 64 and m >= 72, attention s >= 64, elementwise >= 4 k elements: profile.json
    train_ranges), so the profile's prediction of them is an extrapolation (bf16: 5.2 ms of a measured 7.5 ms step
    difference, against 3.5 ms sampled). A reading samples them between its pairs instead (IsolatedDifference)."""
    isolated = IsolatedDifference(dtype, hardware_name, small, large)
    for _ in range(ISOLATED_REPS):
        isolated.sample_round()
    return isolated.seconds()


class IsolatedDifference:
    """isolated_difference_s a round at a time: each round samples every distinct op of the difference once, and
    seconds() counts each op's median over the rounds. A reading runs one round after every TINY_PAIRS //
    ISOLATED_REPS of its tiny pairs (paired_difference_s's `between`): the per-unit term is (pairs' difference -
    these ops) / units, with the ops ~45 % of the difference in fp32, so ops sampled in one burst of ~0.1 s beside
    pairs spread over ~0.4 s moved it by the machine's change between the two moments, amplified ~2x. Alternating
    readings at load 8-14 (28 Nov, /work/notes/h191.md): per unit half-range / median 59 % sampled after the pairs,
    21 % between them."""

    def __init__(self, dtype: str, hardware_name: str, small: Shape, large: Shape) -> None:
        from llmperf_hook.predict.dispatch import op_id

        counts: dict[str, list] = {}  # op id: [op, issued in large - issued in small]
        for sign, shape in ((-1, small), (1, large)):
            for op, n, _ in _predicted_ops(shape, dtype, hardware_name)[0]:
                counts.setdefault(op_id(op), [op, 0])[1] += sign * n
        self.dtype = dtype
        self.ops = [(op, n) for op, n in counts.values() if n]
        self.samples: list[list[float]] = [[] for _ in self.ops]

    def sample_round(self) -> None:
        for (op, _), samples in zip(self.ops, self.samples):
            samples.append(_isolated_s(op, self.dtype))

    def seconds(self) -> float:
        return sum(n * statistics.median(samples) for (_, n), samples in zip(self.ops, self.samples))


def _isolated_s(op: Op, dtype: str) -> float:
    """Seconds of one call of compute `op` sampled alone on the CPU (op_sampler: the profile's own clock and
    runners, up to 10 ms of repetitions)."""
    from llmperf_hook.profile.features import profile_class
    from llmperf_hook.profile.op_sampler import sample_op

    return sample_op(profile_class(op.op_class, op.tags), op.dims, "bwd" if op.phase == "bwd" else "fwd", dtype, "cpu",
                     target_s=0.01).time_s


def fit_nonnegative(x: Sequence[Sequence[float]], y: Sequence[float],
                    relative_to: Sequence[float] | None = None) -> list[float]:
    """Coefficients c >= 0 of y ~ x @ c minimising the RELATIVE squared error (rows weighted 1 / relative_to,
    default y: small and large shapes count alike, as in a MAPE; where y is a part of a measured total, pass
    the totals, so a row whose part is small does not dominate): exact non-negative least squares for a few
    features, by least squares on every subset of the features and the best subset whose coefficients are
    all >= 0."""
    from itertools import combinations

    import numpy as np

    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    w = 1.0 / np.maximum(np.abs(np.asarray(relative_to if relative_to is not None else y, dtype=float)), 1e-12)
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


def per_unit_from_difference(small_s: float, large_s: float, small: dict, large: dict, compute_scale: float = 1.0,
                             per_byte_s: float = 0.0, per_param_s: float = 0.0,
                             isolated_diff_s: float | None = None) -> float:
    """Step 1: (measured difference - the compute, traffic and parameters of the difference) / unit difference;
    the compute is `isolated_diff_s` where measured (isolated_difference_s), else the profile's at compute_scale."""
    compute_s = compute_scale * (large["compute_s"] - small["compute_s"]) if isolated_diff_s is None \
        else isolated_diff_s
    rest = compute_s + per_byte_s * (large["bytes"] - small["bytes"]) \
        + per_param_s * (large.get("params", 0) - small.get("params", 0))
    return max(0.0, (large_s - small_s - rest) / (large["units"] - small["units"]))


def fit_compute_terms(rows: Sequence[dict], per_unit_s: float, compute_scale: float) -> tuple[float, float]:
    """Step 2b: (per_byte_s, per_param_s) of the reference rows' forward+backward beyond the per-unit cost and
    the operators at `compute_scale` x their profile time."""
    y = [r["fwd_bwd_s"] - per_unit_s * r["units"] - compute_scale * r["predicted_compute_s"] for r in rows]
    per_byte, per_param = fit_nonnegative([[r["bytes"], r["params"]] for r in rows], y,
                                          [r["fwd_bwd_s"] for r in rows])
    return per_byte, per_param


def fit_optimizer_terms(rows: Sequence[dict]) -> tuple[float, float]:
    """Step 3: (per tensor s, per parameter s), medians over the shapes of the isolating differences."""
    per_tensor = statistics.median(max(0.0, (r["optimizer_tensors_s"] - r["optimizer_flat_s"]) / (r["tensors"] - 1))
                                   for r in rows)
    per_param = statistics.median(max(0.0, r["optimizer_flat_s"] - per_tensor) / r["params"] for r in rows)
    return per_tensor, per_param


def step_holdout_log_errors(doc: dict) -> list[float]:
    """The framework file's own step-level held-out error: log(predicted / measured) of every step it measured
    (each dtype's reference forward+backward rows of step 2b and DeepSpeed engine steps of step 5), each
    predicted by the cost refitted without it (leave-one-out: per_byte_s and the backward's per-parameter term
    for a reference row, the ZeRO stage's engine terms for an engine row; the per-unit cost and compute scale
    are measured on other models and kept). What a step of a job the file never saw is off by, from the file's
    samples alone; refine/shrinkage.py takes its variances from it. [] for a file without samples."""
    from llmperf_hook.profile.cpu_engine_cost import fit_engine_terms

    errors: list[float] = []
    for entry in (doc.get("dtypes") or {}).values():
        rows = entry.get("samples") or []
        for i, row in enumerate(rows if len(rows) > 2 else ()):
            rest = rows[:i] + rows[i + 1:]
            per_byte, per_param = fit_compute_terms(rest, entry["per_unit_s"], entry["compute_scale"])
            predicted = entry["per_unit_s"] * row["units"] + entry["compute_scale"] * row["predicted_compute_s"] \
                + per_byte * row["bytes"] + per_param * row["params"]
            errors.append(_log_ratio(predicted, row["fwd_bwd_s"]))
        for stage in (entry.get("deepspeed_step") or {}).values():
            engine = stage.get("samples") or []
            for i, (params, fb_s, step_s, model_fb_s, model_opt_s) in enumerate(engine if len(engine) > 2 else ()):
                rest = engine[:i] + engine[i + 1:]
                terms = fit_engine_terms([r[0] for r in rest], [r[1] + r[2] for r in rest], [r[3] + r[4] for r in rest])
                predicted = model_fb_s + model_opt_s + terms["per_step_s"] + terms["per_param_s"] * params
                errors.append(_log_ratio(predicted, fb_s + step_s))
    return [e for e in errors if math.isfinite(e)]


def _log_ratio(predicted_s: float, measured_s: float) -> float:
    return math.log(predicted_s / measured_s) if predicted_s > 0 and measured_s > 0 else math.nan


MAX_HISTORY = 12
"""Earlier measurements of the steps a framework file keeps (carried_history)."""


def measured_steps(doc: dict) -> dict[str, float]:
    """{step key: measured seconds} of every whole step the file measured (each dtype's reference
    forward+backward rows and DeepSpeed engine steps): the same keys in every file of STEP_VERSIONS, but the engine
    steps of a file measured one process per engine (cpu_engine_cost.ENGINE_METHOD) keyed apart from those of the
    files before it: they include the page faults those did not (a method's change, not the machine's drift); and
    the engine steps of a dtype measured on another plan than the full one (cpu_reading_plan.py: other shapes under the
    same engine index) keyed by that plan."""
    out: dict[str, float] = {}
    engine = "deepspeed_process_z" if doc.get("engine_method") else "deepspeed_z"
    for dtype, entry in (doc.get("dtypes") or {}).items():
        for i, row in enumerate(entry.get("samples") or []):
            out[f"{dtype}/fwd_bwd/" + "x".join(map(str, row.get("shape") or [i]))] = float(row["fwd_bwd_s"])
        plan = (entry.get("reading_plan") or {}).get("name", "full")
        for zero, stage in (entry.get("deepspeed_step") or {}).items():
            for i, sample in enumerate(stage.get("samples") or []):
                key = f"{engine}{zero}/{i}" if plan == "full" else f"{plan}/{engine}{zero}/{i}"
                out[f"{dtype}/{key}"] = float(sample[1] + sample[2])
    return {k: v for k, v in out.items() if v > 0}


def carried_history(old: dict | None) -> list[dict]:
    """The history a re-measured file keeps: the replaced file's own steps (when of these steps,
    STEP_VERSIONS) and the history it carried, newest first, at most MAX_HISTORY. How far the same steps moved
    between measurements is the machine's step-time drift (refine/shrinkage.step_drift_sd)."""
    if not isinstance(old, dict) or old.get("format_version", 1) not in STEP_VERSIONS:
        return []
    entry = {"measured_utc": old.get("measured_utc"), "load_avg_1m": old.get("load_avg_1m"),
             "steps": measured_steps(old)}
    earlier = [h for h in old.get("history") or [] if isinstance(h, dict)]
    return ([entry] if entry["steps"] else []) + earlier[:MAX_HISTORY - 1]


def write_framework_overhead(profile_dir: Path, hardware_name: str, dtypes: Sequence[str], threads: int,
                             deadline_s: float | None = None, keep_earlier: bool = False) -> Path:
    """FILE_NAME next to the profile's profile.json, measured until `deadline_s` (time.perf_counter(); default
    RESERVED_S from now) (cpu_framework_readings.write_framework_overhead)."""
    from llmperf_hook.profile.cpu_framework_readings import write_framework_overhead as write

    return write(profile_dir, hardware_name, dtypes, threads, deadline_s, keep_earlier)

"""The sampling plan: which shapes to measure first, so a few minutes of sampling give the most useful profile.

Order: (1) with `--for -- <command>`, exactly the compute ops of that job and of its tuning neighbours (micro-
batch x2 and /2, TP x2 and /2, PP x2 and /2); (2) a space-filling Latin hypercube over the log-dims of every op
class (round-robin over classes, so a short budget still covers all of them); (3) adaptively, the candidate
shapes where bootstrap regressors disagree most (sampler.py does this step, after a first fit, with the rule of
adaptive.py that the operator benchmark's --design adaptive also applies).
The plan states its cost: samples and estimated device-minutes (roofline time x repetitions + overhead).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from llmperf_hook.profile.features import RooflineConstants, build_features, profile_class, profile_dims

if TYPE_CHECKING:
    from llmperf_hook.profile.build_profile import Samples

Range = Mapping[str, tuple[float, float]]

# Dims ranges of the space-filling design, per device kind. CPU: the small GPTs trained on CPU (hidden 64-512,
# sequence 64-512, micro-batch 1-8 => tokens 64-4096; vocab up to GPT-2's 50,257 padded), one thread per rank.
CPU_RANGES: Mapping[str, Range] = {
    "gemm": {"m": (64, 4096), "n": (64, 4096), "k": (64, 2048)},
    "bmm": {"batch": (1, 64), "m": (64, 512), "n": (16, 512), "k": (16, 512)},
    "attention": {"b": (1, 8), "s": (64, 512), "heads": (1, 16), "head_dim": (16, 128)},
    "softmax": {"rows": (64, 65536), "cols": (64, 512)},
    "layernorm": {"tokens": (64, 4096), "hidden": (64, 2048)},
    "rmsnorm": {"tokens": (64, 4096), "hidden": (64, 2048)},
    "gelu": {"elements": (4096, 8 << 20)}, "gelu_exact": {"elements": (4096, 8 << 20)},
    "swiglu": {"elements": (4096, 8 << 20)},
    "residual_add": {"elements": (4096, 4 << 20)}, "dropout": {"elements": (4096, 4 << 20)},
    "rope": {"tokens": (64, 4096), "heads": (1, 16), "head_dim": (16, 128)},
    "embedding": {"tokens": (64, 4096), "vocab": (256, 50304), "hidden": (64, 1024)},
    "cross_entropy": {"tokens": (64, 4096), "vocab": (256, 50304)},
    "optimizer": {"params": (1e4, 3e7)},
}
# GPU: Megatron-scale per-rank shapes (hidden 1k-16k / TP, sequence 1k-8k, micro-batch 1-8), each tensor a
# few GB at most so an 80 GB GPU never runs out of memory while sampling.
GPU_RANGES: Mapping[str, Range] = {
    "gemm": {"m": (512, 65536), "n": (256, 65536), "k": (256, 32768)},
    "bmm": {"batch": (8, 128), "m": (512, 8192), "n": (64, 8192), "k": (64, 8192)},
    "attention": {"b": (1, 8), "s": (512, 8192), "heads": (1, 64), "head_dim": (64, 128), "kv_group": (1, 8)},
    "softmax": {"rows": (1024, 262144), "cols": (512, 8192)},
    "layernorm": {"tokens": (512, 65536), "hidden": (1024, 16384)},
    "rmsnorm": {"tokens": (512, 65536), "hidden": (1024, 16384)},
    "gelu": {"elements": (1 << 20, 1 << 30)}, "swiglu": {"elements": (1 << 20, 1 << 30)},
    "residual_add": {"elements": (1 << 20, 1 << 30)}, "dropout": {"elements": (1 << 20, 1 << 30)},
    "rope": {"tokens": (512, 65536), "heads": (1, 64), "head_dim": (64, 128)},
    "embedding": {"tokens": (512, 65536), "vocab": (4096, 262144), "hidden": (1024, 16384)},
    "cross_entropy": {"tokens": (512, 16384), "vocab": (4096, 131072)},
    "optimizer": {"params": (1e6, 2e9)},
    "gelu_exact": {"elements": (1 << 20, 1 << 30)},
}
CPU_DEFAULT_OPS = ("gemm", "attention", "layernorm", "gelu", "residual_add", "dropout", "embedding", "cross_entropy",
                   "optimizer", "softmax", "bmm", "rmsnorm", "swiglu", "rope", "gelu_exact")
"""What a plain-torch / Megatron GPT layer runs forward and backward (plus the unfused-attention and LLaMA-style
kernels), in the order the design interleaves them. gelu is the tanh GELU (Megatron's fused bias_gelu), gelu_exact the
erf one (torch's F.gelu default); gelu_exact comes last (also in GPU_RANGES, the GPU's order), so the design's points
of the classes before it are those an earlier profile stored (one random stream over the classes: design_specs), and
topping up such a profile samples gelu_exact alone."""
FWD_ONLY = frozenset({"optimizer"})
PER_SAMPLE_OVERHEAD_S = 0.02
"""Tensor allocation, warm-up and bookkeeping per measured shape (measured on CPU)."""


@dataclass(frozen=True)
class SampleSpec:
    """One shape to measure."""

    op_class: str
    phase: str
    """"fwd" | "bwd"."""
    dims: Mapping[str, float]
    origin: str
    """"job" | "neighbour" | "design" | "aligned" | "adaptive"."""


@dataclass(frozen=True)
class PlanCost:
    num_samples: int
    device_minutes: float
    guessed: tuple[str, ...] = ()
    """"class/phase" of the planned shapes whose slowdown over the roofline this device has not measured."""
    guess_factor: float = 0.0
    """The slowdown they are taken at (slowdown_guess)."""
    guess_source: str = ""

    def describe(self) -> str:
        """The cost, saying which part of it is a guess."""
        text = f"{self.num_samples} to measure = about {self.device_minutes:.1f} device-minutes"
        if self.guessed:
            text += (f" (a guess for {len(self.guessed)} class/direction(s) not sampled on this device yet, "
                     f"{', '.join(self.guessed[:4])}{', ...' if len(self.guessed) > 4 else ''}: taken at "
                     f"{self.guess_factor:.1f}x their roofline time, {self.guess_source})")
        return text


def latin_hypercube(ranges: Range, n: int, rng: np.random.Generator) -> list[dict[str, float]]:
    """n points, one per stratum of every log-dimension, rounded to multiples of 8 (of 1 below 64)."""
    keys = list(ranges)
    cols = {}
    for key in keys:
        lo, hi = (math.log(v) for v in ranges[key])
        u = (rng.permutation(n) + rng.random(n)) / n
        vals = np.exp(lo + u * (hi - lo))
        cols[key] = np.where(vals >= 64, np.round(vals / 8) * 8, np.maximum(np.round(vals), 1))
    return [{k: float(cols[k][i]) for k in keys} for i in range(n)]


def config_stratified_subset(keys: np.ndarray, num: int, rng: np.random.Generator) -> np.ndarray:
    """`num` row indices dealt round-robin over the distinct rows of `keys` (one configuration each, e.g. the
    settings of one run of a sweep): every configuration gets one row (a random one of its rows) before any gets
    a second, configurations in random order within a round. Where each row is its own configuration this is a
    random subset."""
    _, config = np.unique(keys, axis=0, return_inverse=True)
    config = config.reshape(-1)
    order = rng.permutation(len(config))
    order = order[np.argsort(config[order], kind="stable")]  # grouped by configuration, random within
    first = np.r_[0, np.flatnonzero(np.diff(config[order])) + 1]
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order)) - np.repeat(first, np.diff(np.r_[first, len(order)]))
    return np.lexsort((rng.random(len(config)), rank))[:num]


def maximin_subset(points: np.ndarray, num: int, seed: int = 0) -> np.ndarray:
    """Indices of `num` rows of `points` [n, d] chosen by greedy farthest-point (maximin) selection on the
    standardised columns (Gonzalez 1985: within 2x of the optimal covering radius): which candidate shapes to
    measure when only a fraction can be. Duplicates are picked last, so repeats of one shape do not use the
    budget while unseen shapes remain."""
    z = (points - points.mean(axis=0)) / np.maximum(points.std(axis=0), 1e-12)
    first = int(np.random.default_rng(seed).integers(len(z)))
    chosen = [first]
    dist = np.sum((z - z[first]) ** 2, axis=1)
    for _ in range(min(num, len(z)) - 1):
        nxt = int(np.argmax(dist))
        chosen.append(nxt)
        dist = np.minimum(dist, np.sum((z - z[nxt]) ** 2, axis=1))
    return np.asarray(chosen, dtype=np.int64)


def complete_dims(op_class: str, dims: dict[str, float]) -> dict[str, float]:
    """Fill dims the design does not vary (attention: causal; kv_heads = heads, or with `kv_group` in the design,
    grouped-query attention with that many query heads per KV head, rounded to a power of two, and heads rounded
    to a multiple of it)."""
    if op_class != "attention":
        return dims
    out = {k: v for k, v in dims.items() if k != "kv_group"}
    group = 2 ** int(round(math.log2(max(1.0, dims.get("kv_group", 1.0)))))
    heads = max(group, int(round(dims["heads"] / group)) * group)
    return {**out, "heads": float(heads), "kv_heads": float(heads // group), "causal": 1.0}


def design_specs(op_classes: Sequence[str], ranges: Mapping[str, Range], per_class: int,
                 seed: int = 0) -> list[SampleSpec]:
    """Space-filling design, interleaved across classes and directions."""
    rng = np.random.default_rng(seed)
    columns = []
    for cls in op_classes:
        pts = [complete_dims(cls, p) for p in latin_hypercube(ranges[cls], per_class, rng)]
        phases = ("fwd",) if cls in FWD_ONLY else ("fwd", "bwd")
        for phase in phases:
            columns.append([SampleSpec(cls, phase, p, "design") for p in pts])
    return [col[i] for i in range(per_class) for col in columns if i < len(col)]


ALIGNED_CLASSES = ("gemm",)
"""Classes whose time jumps at power-of-two dims, which the design's multiples of 8 almost never hit: on one EPYC
thread (AVX2, ATen's bf16 fallback) the bf16 GEMM backward at k = 256 or 512 runs at half the speed of its neighbours
(m 256: n 1024 k 256 150 ms CPU vs k 240 66 ms, k 320 86 ms, k 192 52 ms; n 512 k 512 110 ms vs n 520 k 520 56 ms;
/work/notes/h192.md), and the testbed's hidden 256 ran at exactly those. Models are built of such dims (hidden, FFN
and head sizes), so the plan also samples them (aligned_specs)."""
ALIGNED_PER_CLASS = 12


def aligned_specs(op_classes: Sequence[str], ranges: Mapping[str, Range], per_class: int = ALIGNED_PER_CLASS,
                  seed: int = 1) -> list[SampleSpec]:
    """Latin-hypercube points of ALIGNED_CLASSES with every dim rounded to the nearest power of two (in log, within
    its range), deduplicated, interleaved as design_specs; their own random stream, so the design's points stay those
    an earlier profile stored. Smallest first (by the product of the dims): a bf16 GEMM backward of m 4096, n 2048,
    k 512 took 37 s a call here, and a short --budget should reach the many cheap ones before it."""
    rng = np.random.default_rng(seed)
    columns = []
    for cls in (c for c in op_classes if c in ALIGNED_CLASSES):
        points: dict[tuple, dict[str, float]] = {}
        for p in latin_hypercube(ranges[cls], per_class, rng):
            q = {k: float(np.clip(2.0 ** round(math.log2(v)), *ranges[cls][k])) for k, v in p.items()}
            points.setdefault(tuple(sorted(q.items())), complete_dims(cls, q))
        ordered = sorted(points.values(), key=lambda p: math.prod(p[k] for k in ranges[cls]))
        for phase in ("fwd",) if cls in FWD_ONLY else ("fwd", "bwd"):
            columns.append([SampleSpec(cls, phase, p, "aligned") for p in ordered])
    return [col[i] for i in range(max(map(len, columns), default=0)) for col in columns if i < len(col)]


def fit_first(specs: Sequence[SampleSpec], min_per_group: int) -> list[SampleSpec]:
    """`specs` reordered so that the first `min_per_group` shapes of every (op class, direction) come first, one
    group after the other in the order groups first appear; then the rest in their own order. A budget too short
    for the whole first round then still fits a regressor for the leading classes (GEMM first), instead of
    leaving every class a few samples short of a fit; a budget that covers the first round is unaffected."""
    counts: dict[tuple[str, str], int] = {}
    first: dict[tuple[str, str], list[SampleSpec]] = {}
    rest: list[SampleSpec] = []
    for spec in specs:
        key = (spec.op_class, spec.phase)
        counts[key] = counts.get(key, 0) + 1
        (first.setdefault(key, []) if counts[key] <= min_per_group else rest).append(spec)
    return [s for group in first.values() for s in group] + rest


INIT_BYTES_PER_S = 1e9
"""Filling freshly allocated tensors with torch.randn, per thread (measured on CPU: about 1-2 GB/s)."""


def alloc_elements(spec: SampleSpec) -> float:
    """Elements op_sampler.py allocates for one spec (inputs, weights, outputs; x2 for backward: their
    gradients), so shapes that would not fit, or would take longer to fill than to time, are known before
    allocating (a --for job of a large model on a CPU used to spend the budget filling tables)."""
    d = {k: float(v) for k, v in spec.dims.items()}
    per_class = {
        "gemm": lambda: d["m"] * d["k"] + d["k"] * d["n"] + d["m"] * d["n"],
        "bmm": lambda: d["batch"] * (d["m"] * d["k"] + d["k"] * d["n"] + d["m"] * d["n"]),
        "attention": lambda: d["b"] * d["s"] * d["head_dim"] * (2 * d["heads"] + 2 * d.get("kv_heads", d["heads"])),
        "embedding": lambda: d["vocab"] * d["hidden"] + d["tokens"] * d["hidden"],
        "cross_entropy": lambda: 2 * d["tokens"] * d["vocab"],
        "optimizer": lambda: 4 * d["params"],
        "softmax": lambda: 2 * d["rows"] * d["cols"],
        "rope": lambda: 2 * d["tokens"] * d["heads"] * d["head_dim"] + 2 * d["tokens"] * d["head_dim"],
    }
    if spec.op_class in per_class:
        n = per_class[spec.op_class]()
    elif "elements" in d:
        n = 3 * d["elements"]
    else:  # layernorm / rmsnorm
        n = 2 * d.get("tokens", 1.0) * d.get("hidden", 1.0)
    return n * (2 if spec.phase == "bwd" else 1)


ROOFLINE_SLOWDOWN = 2.0
"""An op's time over its roofline time before this device has samples of it: kernels reach about half of the
roofline on a single CPU thread. Measured medians on one EPYC thread run from 0.4x (residual add) to 15x (fp32
dropout) and 32x (bf16 cross-entropy backward), so a device's own samples replace it (measured_slowdowns)."""


def estimate_seconds(spec: SampleSpec, rc: RooflineConstants, target_s: float = 0.05,
                     slowdown: float = ROOFLINE_SLOWDOWN) -> float:
    """Predicted wall time of measuring one spec: filling its tensors, reps of its time (`slowdown` x the roofline
    time; at least 5 reps) plus overhead."""
    block = build_features(spec.op_class, spec.phase == "bwd", {k: np.array([v]) for k, v in spec.dims.items()}, rc)
    one = float(block.roofline_s[0]) * slowdown
    reps = min(50, max(5, int(target_s / max(one, 1e-7))))
    fill_s = alloc_elements(spec) * rc.dtype_bytes / INIT_BYTES_PER_S
    return (reps + 2) * one + fill_s + PER_SAMPLE_OVERHEAD_S


def measured_slowdowns(samples: Mapping[tuple[str, str, str], Samples], rc: RooflineConstants,
                       dtype: str) -> dict[tuple[str, str], float]:
    """{(op class, phase): median measured time / roofline time} of this device's samples in `dtype` (3 or more)."""
    out = {}
    for (op_class, phase, dt), s in samples.items():
        if dt == dtype and len(s.time_s) >= 3:
            roof = build_features(op_class, phase == "bwd", s.dims, rc).roofline_s
            out[(op_class, phase)] = float(np.median(np.asarray(s.time_s) / np.maximum(roof, 1e-12)))
    return out


def slowdown_guess(known: Mapping[tuple[str, str], float]) -> tuple[float, str]:
    """(slowdown, where it comes from) for a class this device has not measured: the median of the classes it has
    measured (the device's own speed off its roofline, 0.4-32x by class on one EPYC thread), else ROOFLINE_SLOWDOWN."""
    if known:
        return float(np.median(list(known.values()))), f"the median of the {len(known)} this device has measured"
    return ROOFLINE_SLOWDOWN, "nothing sampled on this device in this dtype yet (measured 0.4-32x by class on a CPU)"


def plan_cost(specs: Sequence[SampleSpec], rc: RooflineConstants,
              slowdowns: Mapping[tuple[str, str], float] | None = None) -> PlanCost:
    """Samples and device-minutes of measuring `specs`, each class at its measured slowdown where one is known, the
    others at slowdown_guess (named in the result)."""
    known = slowdowns or {}
    guess, source = slowdown_guess(known)
    seconds = sum(estimate_seconds(s, rc, slowdown=known.get((s.op_class, s.phase), guess)) for s in specs)
    guessed = tuple(dict.fromkeys(f"{s.op_class}/{s.phase}" for s in specs if (s.op_class, s.phase) not in known))
    return PlanCost(len(specs), seconds / 60.0, guessed, guess if guessed else 0.0, source if guessed else "")


def job_precision(argv: Sequence[str], env: Mapping[str, str], model: str | None = None, *,
                  nnodes: int | None = None, nproc_per_node: int | None = None) -> str:
    """The dtype the job in `argv` computes in (fp8 jobs run their non-GEMM ops in bf16: sampled as bf16)."""
    precision = _job_config(argv, env, model, nnodes, nproc_per_node).precision
    return precision if precision in ("fp32", "fp16", "bf16") else "bf16"


def _job_config(argv: Sequence[str], env: Mapping[str, str], model: str | None, nnodes: int | None,
                nproc_per_node: int | None):
    """The job's TrainingConfig, with llmperf's --model / --nnodes / --nproc-per-node as predict applies them."""
    from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job

    overrides = JobOverrides(nnodes=nnodes, nproc_per_node=nproc_per_node, model=model)
    return resolve_job(list(argv), dict(env), overrides)[1]


def _op_spec(op, origin: str) -> SampleSpec | None:
    if op.is_comm or op.op_class not in CPU_RANGES:
        return None
    phase = "bwd" if op.phase == "bwd" else "fwd"
    op_class = profile_class(op.op_class, op.tags)  # the exact GELU's samples are gelu_exact's
    # The job's op as the sampler keys it (features.profile_dims: a rope's q + k heads are two tensors).
    dims = profile_dims(op.op_class, {k: float(v) for k, v in op.dims.items()})
    if op.op_class == "rope":  # whole heads, as op_sampler rounds them (round(2.5) = 2 is what it would time)
        dims["heads"] = float(max(1, round(dims["heads"])))
    return SampleSpec(op_class, phase, dims, origin)


def _neighbours(cfg) -> list:
    """Tuning neighbours of a TrainingConfig: micro-batch, TP and PP doubled and halved (valid ones only)."""
    out = []
    b, p = cfg.batch, cfg.parallel
    for mbs in (b.micro_batch_size * 2, b.micro_batch_size // 2):
        if mbs >= 1 and b.global_batch_size % (mbs * p.dp) == 0:
            out.append(replace(cfg, batch=replace(b, micro_batch_size=mbs,
                                                  num_microbatches=b.global_batch_size // (mbs * p.dp))))
    for key in ("tp", "pp"):
        for val in (getattr(p, key) * 2, getattr(p, key) // 2):
            rest = cfg.world_size // max(1, val * (p.pp if key == "tp" else p.tp) * p.cp)
            if val >= 1 and rest >= 1 and val * rest * (p.pp if key == "tp" else p.tp) * p.cp == cfg.world_size:
                par = replace(p, **{key: val, "dp": rest})
                out.append(replace(cfg, parallel=par, batch=replace(b, num_microbatches=max(
                    1, b.global_batch_size // (b.micro_batch_size * rest)))))
    return out


def job_specs(argv: Sequence[str], env: Mapping[str, str], cluster, model: str | None = None, *,
              nnodes: int | None = None, nproc_per_node: int | None = None) -> list[SampleSpec]:
    """The compute ops of the job in `argv` (`model`: --model PRESET|FILE for a script without Megatron-style
    shape flags; `nnodes`, `nproc_per_node`: llmperf's --nnodes / --nproc-per-node, for a launch that does not
    say, e.g. deepspeed without --num_gpus), then those its tuning neighbours add (deduplicated)."""
    from llmperf_hook.graph.build import build_graph

    cfg = _job_config(argv, env, model, nnodes, nproc_per_node)
    specs: dict[tuple, SampleSpec] = {}
    for origin, c in [("job", cfg)] + [("neighbour", n) for n in _neighbours(cfg)]:
        try:
            ops = build_graph(c, cluster).all_ops()
        except Exception:  # noqa: BLE001 - a neighbour the framework would reject is simply not sampled
            if origin == "job":
                raise
            continue
        for op in ops:
            spec = _op_spec(op, origin)
            if spec is not None:
                specs.setdefault((spec.op_class, spec.phase, tuple(sorted(spec.dims.items()))), spec)
    return list(specs.values())

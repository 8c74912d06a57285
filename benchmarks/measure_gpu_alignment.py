"""Alignment questions, timed on one GPU in one call: does an unaligned GEMM or bmm width cost more per FLOP
than its aligned neighbour, and how much?

    bash benchmarks/measure_gpu_alignment.sh      (the device call, both parts, ~1-1.5 min; with the device tool:
                                                   run(command="bash benchmarks/measure_gpu_alignment.sh",
                                                   timeout_s=300), then give_back; no wheels needed)
    python benchmarks/measure_gpu_alignment.py --device cuda --out DIR    (what the shell script runs)
    python benchmarks/measure_gpu_alignment.py --device cpu --quick --out DIR   (same code path, tiny shapes)
    python benchmarks/measure_gpu_alignment.py --report DIR               (per-FLOP slowdown table of DIR's CSVs)
    python benchmarks/measure_gpu_alignment.py --estimate                 (the planned seconds per part, no torch)

Part `lm_head` (lm_head.csv; /work/notes/h133.md): S24's vTrain TP1 cells spend as if their LM-head GEMMs ran ~2.5x
slower than an aligned one. Hypothesis: vTrain's own model (gpt_modeling.py, nn.Embedding(vocab_size // world_size,
h), vocab 50257) runs an unpadded head, n = 50257 (odd) at TP1, 25128 (multiple of 8) at TP2, 12564 (of 4) at TP4,
6282 (of 2) at TP8, where Megatron-DeepSpeed pads to 128 x TP (50304, 25216, 12608, 6400 after
_vocab_size_with_padding). Times Megatron's three head GEMMs (LinearWithGradAccumulationAndAsyncCommunication:
forward X @ W^T, input gradient dY @ W, weight gradient dY^T @ X) for tokens x hidden x width, fp16 and bf16.
Part `attention` (attention.csv; /work/notes/h131.md): P06's head 150 and pytorch#83272's head 140. Times Megatron's
unfused core attention (DotProductAttention: torch.baddbmm of Q K^T, torch.bmm of P V) on the strided views of the
fused QKV projection it really takes (batch stride 3 x head dim, so the head start offsets are 3 hn elements apart),
the same on contiguous tensors, and SDPA's math / flash / efficient backends (a backend the dtype or the device
refuses is a row with status "unsupported: ..."), forward and backward, for head dims 64-160.
Part `gemm_dims` (gemm_dims.csv; not in measure_gpu_alignment.sh's default run: benchmarks/measure_gpu_gemm_dims.sh):
which dimension's alignment costs. Megatron's linear at GEMM_BASES with one of m, k, n at a time set to base - 8/4/2/1
(measured: measurements/h200-sxm-141gb-2026-11-27-d, h100-sxm5-80gb-2026-11-27).

Each shape is timed by llmperf profile's own timer (llmperf_hook/profile/op_sampler.measure: CUDA events, 2
warm-ups, kernels under 0.5 ms queued in groups, repetitions up to ~50 ms of work, trimmed mean of the middle 60 %);
rows are flushed as they are measured, so a timeout keeps what was done. Each folder gets alignment_meta.json: the
hardware fingerprint (local_hardware.fingerprint) and library versions (build_profile.library_versions), as
`llmperf profile` stores them, the grid and the run's times.

Time budget (H100 SXM, `--estimate`, estimate_s): every shape costs at least its ~50 ms of repetitions plus
warm-up, so the count of shapes sets it more than the FLOPs do: lm_head 2 dtypes x 3 x 2 x 8 widths x 3 GEMMs = 288
timings, 1.0e14 FLOP per pass of the grid (0.2 s at 500 TFLOP/s): ~17 s, with every unaligned width assumed 10x
slower (50 TFLOP/s); attention 2 x 3 points x 7 head dims x (4 bmm + 3 SDPA) x 2 phases = 588 timings, 8.7e13 FLOP:
~33 s. With the CUDA start-up and the prologue ~1-1.5 min; measure_gpu_alignment.sh stops adding shapes at 75 s per
part (--budget-s) and kills the run at 190 s: ~3.5 min at the very most, whatever the GPU does.

What each outcome means (the next session decides; nothing here changes a prediction):
- lm_head, 50257 -> 50304 ~2.5x per FLOP (fp16) and 25128 -> 25216 ~1x: S24's TP1 cells measured vTrain's unpadded
  vocab, not Megatron-DeepSpeed's padded head: flag those cells in benchmarks (as measuring a shape no Megatron run
  has), do not price them. 12564 and 6282 then say how much TP4 / TP8 keep (h133: little or none measured).
- lm_head, no width > ~1.2x: the hypothesis is dead; h133's gap is elsewhere (the head's GEMMs are priced right).
- lm_head, every unaligned width slow alike (50257, 12564, 6282 all ~2.5x): alignment is real but then TP4/TP8 should
  show it in S24 and do not (h133 section 6): the cells are not vTrain's shapes either; re-read vTrain's traces.
- attention, head 150 (4-byte aligned) and 140 (8-byte) vs 152 / 144 (16-byte): the per-FLOP slowdown of each bmm
  in Megatron's strided layout is what an unaligned-head price would use (P06, 2.4 % of the layer's FLOPs: even 2.5x
  adds ~3.5 %, h131). ~1x: head alignment is not worth modelling on this GPU and cuBLAS.
The slowdowns are per FLOP of the same op, dtype and other dims: (t_u / flop_u) / (t_a / flop_a). The aligned
neighbour of a width is the nearest larger measured width within 1/8 that is divisible by a higher power of two
(50257 -> 50304, 25128 -> 25216, 12564 -> 12608, 6282 -> 6400, 140 -> 144, 150 -> 152, 144 / 152 -> 160); the
attention table also gives each head dim against 128. The device is an H100 / H200, not the A100 the rows ran on:
a slowdown measured here says the effect exists in this cuBLAS; its size on an A100 is not measured.
Keep a run as measurements/<gpu>-<date>-alignment/ (the CSVs, alignment_meta.json, report.txt from results.tgz).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: llmperf_hook is the repository's package
    sys.path.insert(0, str(ROOT))

DTYPES = ("fp16", "bf16")
VOCAB_WIDTHS = (50257, 50304, 25128, 25216, 12564, 12608, 6282, 6400)
"""vTrain's unpadded 50257 // TP for TP 1/2/4/8 beside Megatron's 128 x TP padding of it (h133 section 6)."""
HEAD_TOKENS, HEAD_HIDDEN = (2048, 4096, 8192), (1024, 2048)
HEAD_DIMS = (128, 144, 140, 152, 150, 160, 64)
"""Aligned references first, so a budget cut keeps the comparisons (P06 150, pytorch#83272 140)."""
ATTN_POINTS = ((24, 2048), (64, 2048), (384, 1024))
"""(batch x heads, seq): P06's 200B row at s 2048 (96 heads / TP8 = 12 per rank, times an assumed micro-batch 2;
the per-FLOP ratio of two head dims is what is read, not the batch), a mid point, and pytorch#83272's bmm
[384 x 1024 x 1024] x [1024 x 140]."""
QUICK = {"tokens": (32, 64), "hidden": (32,), "vocab": (252, 256, 503, 512), "heads": (128, 144, 140),
         "points": ((4, 64),)}
ATTN_OPS = (("qk_baddbmm", "megatron"), ("av_bmm", "megatron"), ("qk_baddbmm", "contiguous"),
            ("av_bmm", "contiguous"), ("sdpa_math", "contiguous"), ("sdpa_flash", "contiguous"),
            ("sdpa_efficient", "contiguous"))
GEMM_BASES = ((4096, 4096, 4096), (8192, 2048, 5120))
"""(m, k, n) of Megatron's linear forward Y[m, n] = X[m, k] @ W[n, k]^T; part `gemm_dims` varies one of the three
at a time by GEMM_OFFSETS below it (the others as here), to tell which dimension's alignment costs."""
GEMM_OFFSETS = (0, 8, 4, 2, 1)
"""base - offset: the aligned base first, then widths aligned to 8, 4, 2 and 1 elements (bases are multiples of 1024)."""
GEMM_DIMS = ("m", "k", "n")
REFERENCE_HEAD_DIM = 128
OUTPUT_FILES = ("lm_head.csv", "attention.csv", "gemm_dims.csv", "alignment_meta.json")
FIELDS = ("part", "dtype", "op", "phase", "layout", "m", "k", "width", "alignment", "flop", "time_s", "num_reps",
          "spread", "tflops", "status", "device", "torch")
"""m, k: tokens and hidden for lm_head; batch x heads and seq for attention; for gemm_dims the two dimensions
not varied, in m, k, n order (layout names the varied one: vary_m, vary_k, vary_n). width: the vocab columns, the
head dim or the varied GEMM dimension. alignment: the largest power of two dividing width (elements)."""


@dataclass(frozen=True)
class Shape:
    """One timing to take."""

    part: str
    dtype: str
    op: str
    phase: str
    layout: str
    m: int
    k: int
    width: int

    @property
    def flop(self) -> float:
        """Nominal FLOPs: the per-FLOP ratio of two widths of one op is their width ratio whatever the constant."""
        if self.part in ("lm_head", "gemm_dims"):
            return 2.0 * self.m * self.k * self.width
        return 2.0 * self.m * self.k * self.k * self.width * (2 if self.op.startswith("sdpa") else 1) \
            * (2 if self.phase == "bwd" else 1)


def alignment(width: int) -> int:
    return width & -width


def lm_head_shapes(quick: bool) -> list[Shape]:
    tokens, hidden, vocab = (QUICK["tokens"], QUICK["hidden"], QUICK["vocab"]) if quick else \
        (HEAD_TOKENS, HEAD_HIDDEN, VOCAB_WIDTHS)
    return [Shape("lm_head", dt, op, op, "megatron", t, h, n) for dt in DTYPES for t in tokens for h in hidden
            for n in vocab for op in ("fwd", "dgrad", "wgrad")]


def attention_shapes(quick: bool) -> list[Shape]:
    heads, points = (QUICK["heads"], QUICK["points"]) if quick else (HEAD_DIMS, ATTN_POINTS)
    return [Shape("attention", dt, op, phase, layout, b, s, d) for dt in DTYPES for b, s in points for d in heads
            for op, layout in ATTN_OPS for phase in ("fwd", "bwd")]


def gemm_dims_shapes(quick: bool) -> list[Shape]:
    bases = ((64, 64, 64),) if quick else GEMM_BASES
    shapes = []
    for dt in DTYPES:
        for base in bases:
            for i, dim in enumerate(GEMM_DIMS):
                fixed = [b for j, b in enumerate(base) if j != i]
                shapes += [Shape("gemm_dims", dt, op, op, f"vary_{dim}", fixed[0], fixed[1], base[i] - off)
                           for off in GEMM_OFFSETS for op in ("fwd", "dgrad", "wgrad")]
    return shapes


def _gemm_dims_runner(torch, s: Shape, kw: dict) -> Callable[[], Any]:
    """Megatron's linear at (m, k, n) with one dimension varied (GEMM_BASES): the three GEMMs of _lm_head_runner."""
    varied = s.layout.removeprefix("vary_")
    fixed = iter((s.m, s.k))
    m, k, n = (s.width if d == varied else next(fixed) for d in GEMM_DIMS)
    return _lm_head_runner(torch, Shape("lm_head", s.dtype, s.op, s.phase, "megatron", m, k, n), kw)


def _lm_head_runner(torch, s: Shape, kw: dict) -> Callable[[], Any]:
    # Megatron's head: logits [T, n] = X [T, h] @ W[n, h]^T; dX = dY @ W; dW = dY^T @ X (tensor_parallel/layers.py).
    x, w = torch.randn(s.m, s.k, **kw), torch.randn(s.width, s.k, **kw)
    if s.op == "fwd":
        return lambda: torch.matmul(x, w.t())
    dy = torch.randn(s.m, s.width, **kw)
    return (lambda: dy.matmul(w)) if s.op == "dgrad" else (lambda: dy.t().matmul(x))


def _qkv(torch, s: Shape, kw: dict, grad: bool) -> tuple:
    """q, k, v as [B, s, hn]: Megatron's views of the fused projection [s, B, 3 hn] (DotProductAttention's
    query.transpose(0, 1), strides (3 hn, 3 B hn, 1)), or contiguous tensors."""
    if s.layout == "megatron":
        mixed = torch.randn(s.k, s.m, 3 * s.width, **kw)
        views = [mixed[..., i * s.width:(i + 1) * s.width].transpose(0, 1) for i in range(3)]
    else:
        views = [torch.randn(s.m, s.k, s.width, **kw) for _ in range(3)]
    return tuple(v.detach().requires_grad_(grad) for v in views)  # detach keeps the strides: a leaf view


def _backward(torch, out, inputs: list) -> Callable[[], Any]:
    g = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, inputs, g, retain_graph=True)


def _attention_runner(torch, s: Shape, kw: dict) -> Callable[[], Any]:
    bwd = s.phase == "bwd"
    q, k, v = _qkv(torch, s, kw, bwd)
    if s.op == "qk_baddbmm":  # baddbmm(buffer, q, k^T, beta=0, alpha=1/sqrt(hn)) as Megatron
        buf = torch.empty(s.m, s.k, s.k, **kw)
        fn = (lambda: torch.baddbmm(buf, q, k.transpose(1, 2), beta=0.0, alpha=s.width ** -0.5))
        return _backward(torch, fn(), [q, k]) if bwd else fn
    if s.op == "av_bmm":
        p = torch.softmax(torch.randn(s.m, s.k, s.k, **kw), -1).requires_grad_(bwd)
        fn = (lambda: torch.bmm(p, v))
        return _backward(torch, fn(), [p, v]) if bwd else fn
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"sdpa_math": SDPBackend.MATH, "sdpa_flash": SDPBackend.FLASH_ATTENTION,
               "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}[s.op]
    q4, k4, v4 = (t.unsqueeze(0) for t in (q, k, v))  # [1, B, s, hn]: heads x batch folded into heads

    def fn():
        with sdpa_kernel([backend]):
            return torch.nn.functional.scaled_dot_product_attention(q4, k4, v4, is_causal=True)
    if not bwd:
        return fn
    out = fn()
    g = torch.randn_like(out)

    def grad():
        with sdpa_kernel([backend]):
            return torch.autograd.grad(out, [q, k, v], g, retain_graph=True)
    return grad


def time_shape(s: Shape, device: str, target_s: float) -> dict:
    """One CSV row: the shape timed by op_sampler.measure, or its status when the op cannot run here."""
    import torch

    from llmperf_hook.profile.op_sampler import TORCH_DTYPES, measure

    kw = {"dtype": getattr(torch, TORCH_DTYPES[s.dtype]), "device": device}
    row = {"part": s.part, "dtype": s.dtype, "op": s.op, "phase": s.phase, "layout": s.layout, "m": s.m, "k": s.k,
           "width": s.width, "alignment": alignment(s.width), "flop": f"{s.flop:.6g}", "device": _device_name(device),
           "torch": torch.__version__}
    try:
        runner = RUNNERS[s.part](torch, s, kw)
        timing = measure(runner, device, target_s=target_s)
    except (RuntimeError, ValueError, MemoryError) as err:  # a backend this dtype/device refuses, out of memory
        if device == "cuda":
            torch.cuda.empty_cache()
        return {**row, "status": "unsupported: " + str(err).splitlines()[0][:160]}
    return {**row, "time_s": f"{timing.time_s:.6e}", "num_reps": timing.num_reps, "spread": f"{timing.spread:.3f}",
            "tflops": f"{s.flop / timing.time_s / 1e12:.4g}", "status": "ok"}


RUNNERS = {"lm_head": _lm_head_runner, "attention": _attention_runner, "gemm_dims": _gemm_dims_runner}


def _device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name()
    from llmperf_hook.profile.local_hardware import cpu_model_name

    return cpu_model_name()


def run_part(part: str, shapes: list[Shape], out_dir: Path, device: str, deadline_s: float, target_s: float) -> int:
    """Time `shapes` into out_dir/PART.csv until the deadline (time.monotonic()); returns the rows written."""
    done = 0
    with open(out_dir / f"{part}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for s in shapes:
            if time.monotonic() > deadline_s:
                print(f"{part}: budget reached after {done} of {len(shapes)} shapes", file=sys.stderr)
                break
            writer.writerow(time_shape(s, device, target_s))
            f.flush()
            done += 1
    return done


def write_meta(out_dir: Path, args: argparse.Namespace, started_utc: str, rows: dict[str, int]) -> None:
    from llmperf_hook.profile.build_profile import library_versions
    from llmperf_hook.profile.local_hardware import fingerprint

    meta = {"fingerprint": fingerprint(args.device, 1), "library_versions": library_versions(),
            "started_utc": started_utc, "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "rows": rows, "quick": args.quick, "budget_s_per_part": args.budget_s,
            "timer": "llmperf_hook.profile.op_sampler.measure (CUDA events / process CPU time, trimmed mean)",
            "grid": {"dtypes": DTYPES, "vocab_widths": QUICK["vocab"] if args.quick else VOCAB_WIDTHS,
                     "head_dims": QUICK["heads"] if args.quick else HEAD_DIMS,
                     "gemm_bases": ((64, 64, 64),) if args.quick else GEMM_BASES, "gemm_offsets": GEMM_OFFSETS,
                     "attention_points": QUICK["points"] if args.quick else ATTN_POINTS}}
    (out_dir / "alignment_meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")


# ---------------------------------------------------------------- the plan's time, from the FLOPs (no torch)

RATE_FLOP_PER_S = {"lm_head": (500e12, 50e12), "attention": (200e12, 20e12), "gemm_dims": (600e12, 60e12)}
"""(aligned, unaligned) dense fp16/bf16 rates assumed on an H100 SXM: 8192^3 bf16 ran 776 TFLOP/s there
(measurements/h100-sxm5-80gb-2026-11-26/op_samples_meta.json), head GEMMs reach ~65 % of it; attention bmm and SDPA
of these sizes far less. Unaligned: 10x slower, four times the 2.5x h133 infers."""


def estimate_s(shapes: list[Shape], target_s: float = 0.05, overhead_s: float = 0.01) -> float:
    """op_sampler.measure's cost per shape: 3 untimed-or-first calls, then reps filling target_s (5-50 reps)."""
    total = 0.0
    for s in shapes:
        aligned_rate, unaligned_rate = RATE_FLOP_PER_S[s.part]
        call_s = s.flop / (aligned_rate if alignment(s.width) >= 8 else unaligned_rate)
        total += 3 * call_s + min(max(target_s, 5 * call_s), 50 * call_s) + overhead_s
    return total


# ---------------------------------------------------------------- the reader

def neighbour(width: int, widths: set[int]) -> int | None:
    """The nearest larger measured width within 1/8 that a higher power of two divides (module docstring)."""
    better = [w for w in widths if width < w <= width * 9 / 8 and alignment(w) > alignment(width)]
    return min(better) if better else None


def _per_flop(row: dict) -> float:
    return float(row["time_s"]) / float(row["flop"])


def slowdowns(rows: list[dict]) -> Iterator[dict]:
    """Per-FLOP time of each width over its aligned neighbour's (and, for attention, over head 128's), same part,
    dtype, op, phase, layout, m and k."""
    ok = [r for r in rows if r.get("status") == "ok"]
    by_key: dict[tuple, dict[int, dict]] = {}
    for r in ok:
        by_key.setdefault(tuple(r[f] for f in FIELDS[:7]), {})[int(r["width"])] = r
    for key, by_width in by_key.items():
        for width, r in sorted(by_width.items()):
            near = neighbour(width, set(by_width))
            ref = by_width.get(REFERENCE_HEAD_DIM) if key[0] == "attention" and width != REFERENCE_HEAD_DIM else None
            if near is None and ref is None:
                continue
            yield {**dict(zip(FIELDS[:7], key)), "width": width, "alignment": alignment(width), "neighbour": near,
                   "slowdown": _per_flop(r) / _per_flop(by_width[near]) if near else None,
                   "vs_128": _per_flop(r) / _per_flop(ref) if ref else None, "tflops": float(r["tflops"])}


class ReportError(ValueError):
    """A folder the reader cannot report on (exit 2)."""


def read_rows(folder: Path) -> list[dict]:
    rows: list[dict] = []
    for part in ("lm_head", "attention", "gemm_dims"):
        path = folder / f"{part}.csv"
        if path.exists():
            with open(path, newline="") as f:
                rows += list(csv.DictReader(f))
    if not rows:
        raise ReportError(f"--report {folder}: no lm_head.csv, attention.csv or gemm_dims.csv there (a run's --out DIR holds them, "
                          f"results.tgz's alignment/ after the device call); give the folder a run wrote.")
    return rows


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def report(folder: Path) -> str:
    """The per-shape table and, per (part, dtype, op, layout, phase, width), the median and range over shapes."""
    items = list(slowdowns(read_rows(folder)))
    lines = [f"{'part':<9} {'dtype':<5} {'op':<15} {'phase':<5} {'layout':<10} {'m':>5} {'k':>5} {'width':>6} "
             f"{'align':>5} {'vs':>6} {'slowdown':>8} {'vs128':>6} {'TFLOP/s':>8}"]
    for i in items:
        lines.append(f"{i['part']:<9} {i['dtype']:<5} {i['op']:<15} {i['phase']:<5} {i['layout']:<10} {i['m']:>5} "
                     f"{i['k']:>5} {i['width']:>6} {i['alignment']:>5} {i['neighbour'] or '-':>6} "
                     f"{_fmt(i['slowdown']):>8} {_fmt(i['vs_128']):>6} {i['tflops']:>8.3g}")
    groups: dict[tuple, list[float]] = {}
    for i in items:
        if i["slowdown"] is not None:
            groups.setdefault((i["part"], i["dtype"], i["op"], i["layout"], i["phase"], i["width"], i["neighbour"]),
                              []).append(i["slowdown"])
    lines += ["", "per-FLOP slowdown against the aligned neighbour, over the measured shapes: median [min, max] (n)"]
    for (part, dtype, op, layout, phase, width, near), xs in sorted(groups.items()):
        lines.append(f"{part:<9} {dtype:<5} {op:<15} {layout:<10} {phase:<5} {width:>6} -> {near:<6} "
                     f"{statistics.median(xs):5.2f} [{min(xs):.2f}, {max(xs):.2f}] ({len(xs)})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--quick", action="store_true", help="tiny shapes (a CPU test of the code path)")
    p.add_argument("--out", type=Path, help="folder for lm_head.csv, attention.csv, alignment_meta.json")
    p.add_argument("--parts", default="lm_head,attention")
    p.add_argument("--budget-s", type=float, default=75.0, help="seconds per part; later shapes are skipped")
    p.add_argument("--report", type=Path, metavar="DIR", help="print the slowdown table of DIR's CSVs")
    p.add_argument("--estimate", action="store_true", help="print the planned seconds per part and exit")
    args = p.parse_args(argv)
    plans = {"lm_head": lm_head_shapes(args.quick), "attention": attention_shapes(args.quick),
             "gemm_dims": gemm_dims_shapes(args.quick)}
    parts = [x for x in args.parts.split(",") if x]
    if unknown := [x for x in parts if x not in plans]:
        p.error(f"--parts {args.parts}: unknown {unknown}; use lm_head, attention and/or gemm_dims")
    if args.report:
        try:
            print(report(args.report))
        except ReportError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    if args.estimate:
        for part in parts:
            print(f"{part}: {len(plans[part])} timings, {sum(s.flop for s in plans[part]):.3g} FLOP, "
                  f"~{estimate_s(plans[part]):.0f} s")
        return 0
    if args.out is None:
        p.error("--out DIR is needed to measure (or give --report DIR / --estimate)")
    if args.out.exists() and (not args.out.is_dir() or any((args.out / f).exists() for f in OUTPUT_FILES)):
        p.error(f"--out {args.out}: {'not a folder' if not args.out.is_dir() else 'already holds a run'}; "
                f"give a new folder (a run's CSVs are never overwritten)")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    target_s = 0.005 if args.quick else 0.05  # 0.05: op_sampler.sample_op's default, what `llmperf profile` uses
    write_meta(args.out, args, started, {})  # first, so a run killed by its timeout still says where it ran
    rows = {part: run_part(part, plans[part], args.out, args.device, time.monotonic() + args.budget_s, target_s)
            for part in parts}
    write_meta(args.out, args, started, rows)
    print(report(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

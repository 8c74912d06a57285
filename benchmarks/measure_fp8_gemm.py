"""FP8 vs BF16 GEMM throughput on one Hopper GPU at the linear-layer shapes of Llama-3 training, and the cost of the
per-tensor quantize kernel in front of each FP8 GEMM (what Transformer Engine's delayed/current scaling runs).

    python benchmarks/measure_fp8_gemm.py OUT.csv      (on a CUDA GPU with FP8 tensor cores, torch >= 2.4)

For each (M tokens, N out, K in): bf16 `torch.matmul`, FP8 e4m3 x e4m3 -> bf16 `torch._scaled_mm` with per-tensor
scales (the operand layouts cuBLASLt needs: A row-major, B column-major), with and without fast accumulation
(Transformer Engine uses the fast, split-free accumulator for the forward GEMM, the precise one for the backward
GEMMs), and the cast of the M x K activation to e4m3 (one 2-byte read and one 1-byte write: the cast kernel TE
runs before each FP8 GEMM, whose delayed-scaling amax is fused into it). CUDA events, 5
warm-ups, median of 20 repetitions. Prints and writes one row per shape; the FP8/BF16 rows are what
predict/roofline.py's FP8 efficiency ratio is checked against (measurements/h200-sxm-141gb-2026-11-26/fp8_gemm.csv).
"""

from __future__ import annotations

import csv
import statistics
import sys

import torch

# (name, M tokens, N, K): Llama-3 8B (h 4096, ffn 14336, GQA 8 x 128) at TP 1 and 70B (h 8192, ffn 28672) at
# TP 8, 4,096 and 8,192 tokens per micro-batch, plus the 8192^3 square of the roofline measurement.
SHAPES = [
    ("8b.qkv", 8192, 6144, 4096), ("8b.proj", 8192, 4096, 4096), ("8b.fc1", 8192, 28672, 4096),
    ("8b.fc2", 8192, 4096, 14336), ("8b.fc1.m4096", 4096, 28672, 4096), ("8b.fc2.m4096", 4096, 4096, 14336),
    ("70b.tp8.qkv", 8192, 1280, 8192), ("70b.tp8.proj", 8192, 8192, 1024), ("70b.tp8.fc1", 8192, 7168, 8192),
    ("70b.tp8.fc2", 8192, 8192, 3584), ("square8192", 8192, 8192, 8192),
]


def _time_ms(fn, reps: int = 20) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    amax = x.abs().amax().float()
    scale = torch.finfo(torch.float8_e4m3fn).max / torch.clamp(amax, min=1e-12)
    return (x.float() * scale).to(torch.float8_e4m3fn), scale.reciprocal()


def measure(name: str, m: int, n: int, k: int) -> dict:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    bf16_ms = _time_ms(lambda: torch.matmul(a, w.t()))
    a8, sa = _quantize(a)
    w8, sw = _quantize(w)
    fp8_ms = _time_ms(lambda: torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16))
    fast_ms = _time_ms(lambda: torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16,
                                                use_fast_accum=True))
    cast_ms = _time_ms(lambda: a.to(torch.float8_e4m3fn))
    flop = 2.0 * m * n * k
    return {"shape": name, "m": m, "n": n, "k": k, "bf16_ms": round(bf16_ms, 5), "fp8_ms": round(fp8_ms, 5),
            "fp8_fast_accum_ms": round(fast_ms, 5), "cast_act_ms": round(cast_ms, 5),
            "bf16_tflops": round(flop / bf16_ms / 1e9, 1), "fp8_tflops": round(flop / fp8_ms / 1e9, 1),
            "fp8_fast_tflops": round(flop / fast_ms / 1e9, 1), "fp8_speedup": round(bf16_ms / fp8_ms, 3),
            "fp8_fast_speedup": round(bf16_ms / fast_ms, 3)}


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "fp8_gemm.csv"
    print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), flush=True)
    rows = []
    for shape in SHAPES:
        row = measure(*shape)
        rows.append(row)
        print(row, flush=True)
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()

"""Does SDPA's speed depend on how q, k, v are laid out in memory? The profile's sampler against the job's layout.

    python benchmarks/measure_sdpa_layout.py [--device cuda] [--reps 30]      (one GPU, about a minute)

Why (notes/h187.md): the hold-out runs (measurements/h200-sxm-141gb-2026-11-28/kernels/h04, h05, h06.txt) ran
aten::_cudnn_attention_forward/backward, and so, by every sign, did the profile's sampler (same torch 2.11 and cuDNN
9.19; SDPA forced to flash on the same H200, ../h200-sxm-141gb-2026-11-27-c/attention.csv, is 2.2x / 1.6x slower
than the sampler's default-backend samples at b x h 64, s 2048, head 128). Yet the jobs' backward is 24-30 % faster
than the samples (forward 10-12 %). The two differ in layout: profile/op_sampler.py _attention times separate
contiguous [b, h, s, d] tensors and a ones_like gradient; examples/cpu-testbed/train_gpt.py passes views of one
packed projection, qkv.view(b, s, 3, h, d).permute(2, 0, 3, 1, 4) (Hugging Face and most SDPA callers pass
view(b, s, h, d).transpose(1, 2)), and its gradient arrives through out.transpose(1, 2).reshape(b, s, h * d).

Per shape (the hold-out jobs' attention) and layout it prints the backend torch picks (torch._fused_sdp_choice:
torch.nn.attention.SDPBackend's values) and the median forward and backward times (CUDA events), so the sampler's
layout can be matched to the jobs' if it is the cause. The times are CUDA events around the whole call (forward, or
autograd.grad: any copy the strided gradient needs is in it), while the jobs' kernel tables give the attention ops'
own kernels (profiler self time): compare the two layouts with each other, not with the tables.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any, Callable

SHAPES = {"h04": (2, 20, 2048, 128), "h05": (8, 8, 2048, 128), "h06": (2, 40, 2048, 128)}
"""(batch, heads, sequence, head dim) of the hold-out jobs' attention (their README's table)."""


def sampler_inputs(torch: Any, b: int, h: int, s: int, d: int, kw: dict) -> tuple:
    """As profile/op_sampler._attention: three contiguous [b, h, s, d] leaves."""
    return tuple(torch.randn(b, h, s, d, **kw, requires_grad=True) for _ in range(3))


def job_inputs(torch: Any, b: int, h: int, s: int, d: int, kw: dict) -> tuple:
    """As train_gpt.py: q, k, v are views of one packed [b, s, 3 h d] projection (a leaf here)."""
    packed = torch.randn(b, s, 3 * h * d, **kw, requires_grad=True)
    return tuple(packed.view(b, s, 3, h, d).permute(2, 0, 3, 1, 4))


def timed_ms(torch: Any, fn: Callable[[], Any], reps: int) -> float:
    """Median milliseconds of `fn` on the current stream (3 warm-up calls)."""
    for _ in range(3):
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


def measure(torch: Any, layout: str, shape: tuple[int, int, int, int], kw: dict, reps: int) -> dict[str, Any]:
    """The backend torch picks for `layout` and its median forward and backward milliseconds (NaN off CUDA)."""
    b, h, s, d = shape
    q, k, v = (job_inputs if layout == "job" else sampler_inputs)(torch, b, h, s, d, kw)
    f = torch.nn.functional.scaled_dot_product_attention
    names = {int(v): n for n, v in torch.nn.attention.SDPBackend.__members__.items()}
    backend = names.get(int(torch._fused_sdp_choice(q, k, v, is_causal=True)), "?")
    out = f(q, k, v, is_causal=True)
    if layout == "job":
        out = out.transpose(1, 2).reshape(b, s, h * d)  # the gradient arrives through this view, as in the job
    grad = torch.ones_like(out)
    fwd = lambda: f(q, k, v, is_causal=True)  # noqa: E731
    bwd = lambda: torch.autograd.grad(out, [q, k, v], grad, retain_graph=True)  # noqa: E731
    if kw["device"] != "cuda":
        fwd(), bwd()
        return {"backend": backend, "fwd_ms": float("nan"), "bwd_ms": float("nan")}
    return {"backend": backend, "fwd_ms": timed_ms(torch, fwd, reps), "bwd_ms": timed_ms(torch, bwd, reps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--tiny", action="store_true", help="small shapes (a CPU check of the script itself)")
    args = ap.parse_args()
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: this check times a GPU; `--device cpu --tiny` only runs the script's code",
              file=sys.stderr)
        sys.exit(2)
    kw = {"device": args.device, "dtype": torch.bfloat16}
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, device {args.device}")
    print(f"{'job':4s} {'layout':8s} {'backend':>15s} {'fwd ms':>8s} {'bwd ms':>8s}")
    for name, shape in SHAPES.items():
        shape = (1, 2, 64, shape[3]) if args.tiny else shape
        for layout in ("sampler", "job"):
            r = measure(torch, layout, shape, kw, args.reps)
            print(f"{name:4s} {layout:8s} {r['backend']:>15s} {r['fwd_ms']:8.3f} {r['bwd_ms']:8.3f}")


if __name__ == "__main__":
    main()

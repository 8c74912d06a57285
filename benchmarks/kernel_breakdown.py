"""Every kernel of a few training steps of the testbed GPT, by name (torch.profiler), for DeepSpeed or plain torch.

    python benchmarks/kernel_breakdown.py OUT.txt --deepspeed_config examples/cpu-testbed/ds_zero1.json \
        --num-layers 12 --hidden-size 2048 ... --bf16          (flags of examples/cpu-testbed/train_gpt.py)

Runs 6 warm-up steps, then profiles 3 steps and writes the kernels' device time per step (or CPU time on a CPU),
sorted, with the measured wall time per step: what a framework adds beyond the graph's operators (DeepSpeed's
mixed-precision copies, gradient norms, bucket copies) shows up by name. Single process (WORLD_SIZE 1).

`--as-fused-adam` (first flag after OUT.txt): DeepSpeed wraps a client optimizer in FP16_Optimizer (flat fp16
and fp32 master buffers, runtime/fp16/fused_optimizer.py) only when it is a FusedAdam
(engine._configure_fp16_optimizer's isinstance check), as Megatron-DeepSpeed's Adam is; any other optimizer gets
FP16_UnfusedOptimizer. FusedAdam JIT-compiles a CUDA op, so this points the check at torch's AdamW instead: the
same FP16_Optimizer bookkeeping around the same Adam arithmetic over the flat fp32 master buffer.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "cpu-testbed"))
os.environ.setdefault("RANK", "0")
os.environ.setdefault("LOCAL_RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29511")

import torch  # noqa: E402
import train_gpt  # noqa: E402

WARMUP, PROFILED = 6, 3
NOT_KERNELS = frozenset({"Command Buffer Full"})
"""CUPTI's record of the host waiting for a full launch queue, with the wait as its 'device' time: no kernel (it made
measurements/h200-sxm-141gb-2026-11-28/kernels/h06.txt's total 1,025.9 ms, of which 928.7 ms this wait)."""


def main() -> None:
    argv = sys.argv[2:]
    if argv[:1] == ["--as-fused-adam"]:
        import deepspeed.runtime.engine as ds_engine

        argv = argv[1:]
        ds_engine.FusedAdam = torch.optim.AdamW
    out, args = Path(sys.argv[1]), train_gpt.parse_args(argv)
    device = train_gpt.pick_device(args)
    with device:
        model = train_gpt.GPT(args)
    engine, accum = train_gpt.build_engine(args, model, 1, device)
    gen = torch.Generator().manual_seed(1)

    def step() -> None:
        train_gpt.train_step(args, engine, accum, gen, device)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(WARMUP):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(PROFILED):
        step()
    sync()
    wall_s = (time.perf_counter() - t0) / PROFILED
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(PROFILED):
            step()
        sync()
    write_table(out, prof, wall_s, device.type == "cuda", " ".join(sys.argv[2:]))
    if os.environ.get("KB_CPROFILE"):  # where the host's time goes, by Python function (framework hooks included)
        host_profile(Path(os.environ["KB_CPROFILE"]), step, sync)
    if os.environ.get("KB_TRACE"):  # one more step's timeline (host ops and kernels), gzip-compressed Chrome trace
        chrome_trace(Path(os.environ["KB_TRACE"]), step, sync, acts)


def chrome_trace(out: Path, step, sync, acts) -> None:
    """One profiled step as a Chrome trace (`out`, gzip-compressed): where the device idles between kernels and
    what the host was doing then (benchmarks/gpu_idle_phases.py reads it)."""
    import gzip
    import shutil

    with torch.profiler.profile(activities=acts) as prof:
        step()
        sync()
    raw = out.with_suffix(".tmp.json")
    prof.export_chrome_trace(str(raw))
    with raw.open("rb") as src, gzip.open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()


def host_profile(out: Path, step, sync) -> None:
    """PROFILED more steps under cProfile: the functions with the most own time and the most cumulative time, summed
    over those steps. cProfile slows Python code, so the shares matter here, not the absolute times."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(PROFILED):
        step()
    sync()
    prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(45)
    stats.sort_stats("cumulative").print_stats(35)
    out.write_text(f"# cProfile of {PROFILED} steps\n" + text.getvalue())


def write_table(out: Path, prof, wall_s: float, cuda: bool, argv: str) -> None:
    rows = []
    for e in prof.key_averages():  # per aten op: the device time of the kernels it launched itself (or CPU time)
        t = (e.self_device_time_total if cuda else e.self_cpu_time_total) / PROFILED  # us per step
        if t > 0 and e.device_type.name == "CPU" and e.key not in NOT_KERNELS:
            rows.append((t, e.count / PROFILED, e.key))
    rows.sort(reverse=True)
    total_us = sum(t for t, _, _ in rows)
    lines = [f"# {argv}", f"# wall per step {wall_s * 1e3:.2f} ms (unprofiled, median of {PROFILED} steps' mean); "
             f"{'kernels' if cuda else 'CPU self time'} {total_us / 1e3:.2f} ms per step",
             "# us_per_step calls_per_step name"]
    lines += [f"{t:10.1f} {c:8.1f} {k[:160]}" for t, c, k in rows]
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:40]))


if __name__ == "__main__":
    main()

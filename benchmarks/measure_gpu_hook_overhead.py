"""Overhead of the step-timing hook on a GPU job (`llmperf run --instrument N` on CUDA): target <= 1 % of step time.

    python benchmarks/measure_gpu_hook_overhead.py OUT.json [--rounds 12]

Run on a GPU machine (benchmarks/measure_gpu_extra.sh). GPU-only costs of the hook, which bench_hook_overhead.py's
CPU figures cannot show: a synchronize at a step boundary drains the launch queue, so the next step's first kernels
wait for the host; the caching allocator's counters are read per step. Here, in one process, the testbed GPT
(examples/cpu-testbed/train_gpt.py's model, plain torch AdamW, bf16 weights) trains in blocks of steps, the arms in
turn (order rotated each round): recorder disabled (every hook entry returns at once), the hook as shipped
(events read at flush time, one allocator call), and the hook before 2026-11-26 (a synchronize per boundary and
three allocator calls) with its two parts alone. Each block is timed between two torch.cuda.synchronize() calls
with no other synchronize inside it than the hook's, so a disabled block runs the host ahead of the GPU as a job
without the hook does. Cost per step = median(arm's blocks) - median(disabled blocks), for three models: a tiny
stress case (host-bound, ~2 ms steps), the smallest testbed model, and a 12-layer 1024-wide model (~35 ms).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEVICE = "cuda"
sys.path.insert(0, str(REPO))
MODELS = {  # name: (layers, hidden, heads, seq, micro-batch, steps per block)
    "tiny": (1, 64, 4, 64, 1, 100),
    "smallest-testbed": (2, 128, 4, 128, 2, 100),
    "l12h1024-s1024-m8": (12, 1024, 16, 1024, 8, 10),
}


def train_gpt_module():
    spec = importlib.util.spec_from_file_location("train_gpt", REPO / "examples" / "cpu-testbed" / "train_gpt.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(rec, name_: str, rounds: int) -> dict:
    import torch

    layers, hidden, heads, seq, mbs, block = MODELS[name_]
    tg = train_gpt_module()
    args = tg.parse_args(["--num-layers", str(layers), "--hidden-size", str(hidden), "--num-attention-heads",
                          str(heads), "--seq-length", str(seq), "--micro-batch-size", str(mbs), "--vocab-size",
                          "50304", "--bf16"])
    with torch.device(DEVICE):
        model = tg.GPT(args).to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = torch.randint(0, 50304, (mbs, seq + 1), device=DEVICE)

    sync = torch.cuda.synchronize if DEVICE == "cuda" else (lambda: None)

    def steps(n: int) -> float:
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            model(data[:, :-1], data[:, 1:]).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        sync()
        return (time.perf_counter() - t0) / n

    arms = hook_arms()
    rec.enabled = True
    steps(block)  # warm-up, with the hook: its timer and memory probe are created here
    times: dict[str, list[float]] = {name: [] for name in arms}
    for r in range(rounds):
        names = list(arms)
        for name in names[r % len(names):] + names[:r % len(names)]:  # rotate the order round by round
            timer, probe = arms[name]
            rec.enabled = timer is not None
            if timer is not None:
                rec._timer, rec._memory, rec._start_mark = timer, probe, None
            times[name].append(steps(block))
    rec.enabled = True
    off = statistics.median(times["off"])
    row = {"model": name_, "shape": MODELS[name_], "step_off_s": off}
    for arm in arms:
        if arm != "off":
            cost = statistics.median(times[arm]) - off
            row[arm] = {"step_s": statistics.median(times[arm]), "cost_per_step_s": cost,
                        "overhead_pct": 100 * max(cost, 0.0) / off}
    row["blocks_s"] = times
    return row


class SyncingTimer:
    """The hook's timer before 2026-11-26's change: a synchronize at every step boundary."""
    name, device = "cuda_event", "cuda"

    def mark(self):
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        event.synchronize()
        return event

    def elapsed_s(self, start, end) -> float:
        return start.elapsed_time(end) / 1e3

    def ready(self, end) -> bool:  # the writer's periodic flush asks (step_timer.StepTimer): synchronized at mark
        return True


class ThreeCallProbe:
    """The hook's memory probe before the change: max_memory_allocated(), max_memory_reserved(), memory_allocated()."""

    def sample_and_reset(self, usage=None) -> dict:  # the recorder passes the step's getrusage (rank_memory.py)
        import torch

        sample = {"gpu_peak_allocated_bytes": int(torch.cuda.max_memory_allocated()),
                  "gpu_peak_reserved_bytes": int(torch.cuda.max_memory_reserved()),
                  "gpu_allocated_bytes": int(torch.cuda.memory_allocated())}
        torch.cuda.reset_peak_memory_stats()
        return sample


def hook_arms() -> dict:
    """{arm: (timer, memory probe)}; timer None = recorder disabled."""
    from llmperf_hook.instrument.rank_memory import CudaMemoryProbe
    from llmperf_hook.instrument.step_timer import CudaEventTimer

    return {"off": (None, None), "hook": (CudaEventTimer(), CudaMemoryProbe()),
            "old_sync_and_3_calls": (SyncingTimer(), ThreeCallProbe()),
            "old_sync_only": (SyncingTimer(), CudaMemoryProbe()),
            "old_3_calls_only": (CudaEventTimer(), ThreeCallProbe())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke test of this script only")
    args = ap.parse_args()
    import torch

    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda":
        torch.cuda.init()
    from llmperf_hook.instrument.hook import install

    results = {"device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu", "torch": torch.__version__, "rounds": args.rounds, "models": []}
    with tempfile.TemporaryDirectory() as tmp:
        rec = install({"run_dir": tmp, "job_id": "gpu-overhead", "num_steps": 10 ** 9})
        for name in MODELS:
            row = measure(rec, name, args.rounds)
            print(json.dumps({k: v for k, v in row.items() if not k.startswith("blocks")}), flush=True)
            rec.writer.flush()
            results["models"].append(row)
        results["steps_recorded"] = rec._num_steps_done
        rec.writer.flush()
        lines = (Path(tmp) / "rank0.jsonl").read_text().splitlines()
        steps = [json.loads(x) for x in lines if '"kind":"step"' in x]
        results["step_records"] = {"count": len(steps), "timers": sorted({r.get("timer") for r in steps}),
                                   "last": steps[-1] if steps else None}
    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

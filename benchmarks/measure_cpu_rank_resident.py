"""Measure the resident memory of a CPU training rank before its model's tensors, and write it as shipped data.

    python benchmarks/measure_cpu_rank_resident.py [--repeats 3] [--write]

A rank of a CPU job (DS_ACCELERATOR=cpu, gloo) holds, besides its model's tensors, the Python interpreter, torch's
and DeepSpeed's code and import-time state, gloo's process group, and what its engine and first step set up once
(DeepSpeed's engine and ZeRO optimizer modules, the communication op it builds, autograd's engine and the CPU
kernels' state). schedule/memory_cpu.py adds that figure to the tensors it predicts. Each sample is a fresh job of
`world` processes (one job at a time, OMP_NUM_THREADS=1, as the testbed runs them); each rank

  1. imports torch (and deepspeed), init_process_group("gloo"), barrier: `imports` (the idle rank);
  2. trains a 4 x 4 nn.Linear (80 bytes of weights: nothing against the figure) three steps with torch.optim.AdamW,
     as examples/cpu-testbed/train_gpt.py does: through deepspeed.initialize with ZeRO stage Z, or (torch) wrapped in
     DistributedDataParallel where world > 1: `running` (what a rank holds besides its model's tensors)

and reports its resident set size (/proc/self/statm) after each. The figure is the median over --repeats jobs and
their ranks, per (engine, world size). --write replaces configs/memory/cpu_rank_resident.yaml with it and its
provenance (machine, versions, time, samples); without --write it only prints.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "configs" / "memory" / "cpu_rank_resident.yaml"
ENGINES = ("torch", "deepspeed-zero0", "deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3")
"""A plain torch script (torchrun + DDP), or a DeepSpeed job at each ZeRO stage (the engine it builds differs)."""
WORLDS = (1, 2)
MiB = 2**20

RANK_CODE = """
import gc, json, os, sys
def rss():
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
engine, world = sys.argv[1], int(os.environ["WORLD_SIZE"])
import torch
if engine != "torch":
    import deepspeed
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
out = {"imports": rss()}
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
if engine == "torch":
    run = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
else:
    config = {"train_micro_batch_size_per_gpu": 1, "train_batch_size": world,
              "zero_optimization": {"stage": int(engine[-1])}}
    run, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
for _ in range(3):
    loss = run(torch.randn(1, 4)).sum()
    if engine == "torch":
        loss.backward(); optimizer.step(); optimizer.zero_grad(set_to_none=True)
    else:
        run.backward(loss); run.step()
out["running"] = rss()
print(json.dumps(out))
dist.barrier()
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def remove_shm_buffers(port: str, started_s: float) -> None:
    """DeepSpeed's CPU all-reduce buffers our job left in /dev/shm (one per rank, never unlinked by DeepSpeed:
    tests/deepspeed_shm.py): only files naming this job's port, owned by us, written since it started."""
    for path in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_{port}_*"):
        try:
            st = path.stat()
            if st.st_uid == os.getuid() and st.st_mtime >= started_s - 1:
                path.unlink()
        except OSError:
            pass


def one_job(engine: str, world: int) -> list[dict[str, int]]:
    """The readings of every rank of one fresh job (torchrun's and DeepSpeed's launcher's environment)."""
    port, started_s = str(free_port()), time.time()
    try:
        return _ranks(engine, world, port)
    finally:
        remove_shm_buffers(port, started_s)


def _ranks(engine: str, world: int, port: str) -> list[dict[str, int]]:
    procs = []
    for r in range(world):
        env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "RANK": str(r), "LOCAL_RANK": str(r),
               "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port}
        procs.append(subprocess.Popen([sys.executable, "-c", RANK_CODE, engine], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"rank failed ({engine}, world {world}):\n{stderr[-2000:]}")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


Samples = dict[str, dict[str, dict[int, list[int]]]]
"""{reading: {engine: {world: bytes per rank}}}."""


def measure(repeats: int) -> Samples:
    samples: Samples = {k: {e: {w: [] for w in WORLDS} for e in ENGINES} for k in ("imports", "running")}
    for _ in range(repeats):  # interleaved, so a change of the machine's state over minutes hits every cell alike
        for engine in ENGINES:
            for world in WORLDS:
                for reading in one_job(engine, world):
                    for k in samples:
                        samples[k][engine][world].append(reading[k])
    return samples


def provenance(repeats: int) -> dict[str, str]:
    import deepspeed
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": cpu,
            "logical_cpus": str(os.cpu_count()), "memory_GiB": f"{ram / 2**30:.2f}",
            "python": platform.python_version(), "torch": str(torch.__version__),
            "deepspeed": str(deepspeed.__version__),
            "glibc": "-".join(platform.libc_ver()), "repeats": str(repeats),
            "method": "benchmarks/measure_cpu_rank_resident.py (its docstring): fresh jobs of 1 and 2 processes "
                      "(one job at a time, OMP_NUM_THREADS=1, DS_ACCELERATOR=cpu); /proc/self/statm resident pages "
                      "after the imports and init_process_group('gloo') (imports), and after three steps of a 4 x 4 "
                      "nn.Linear through the engine (running); median over jobs and ranks"}


def document(samples: Samples, repeats: int) -> dict:
    def table(fn) -> dict:
        return {k: {e: {w: fn(v) for w, v in by_world.items()} for e, by_world in by_engine.items()}
                for k, by_engine in samples.items()}

    return {
        "description": "Resident memory of a CPU training rank besides its model's tensors: `running` is what "
                       "schedule/memory_cpu.py adds to a CPU rank's predicted tensors, by engine (torch: a plain "
                       "torch script; deepspeed-zeroN: a DeepSpeed job at ZeRO stage N) and the job's world size; "
                       "`imports` is the idle rank after the imports and init_process_group('gloo').",
        "provenance": provenance(repeats),
        "resident_MiB": table(lambda v: round(statistics.median(v) / MiB, 1)),
        "samples_MiB": table(lambda v: [round(x / MiB, 1) for x in v]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="jobs per (engine, world size)")
    ap.add_argument("--write", action="store_true", help=f"write {DATA.relative_to(REPO)}")
    args = ap.parse_args()
    if args.repeats < 1:
        sys.exit("--repeats must be at least 1")
    doc = document(measure(args.repeats), args.repeats)
    text = yaml.safe_dump(doc, sort_keys=False)
    print(text)
    if args.write:
        DATA.parent.mkdir(parents=True, exist_ok=True)
        DATA.write_text("# Written by benchmarks/measure_cpu_rank_resident.py --write; do not edit by hand.\n" + text)
        print(f"wrote {DATA}")


if __name__ == "__main__":
    main()

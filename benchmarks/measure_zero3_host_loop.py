"""Host time per rank of the Python loops DeepSpeed v0.3.x-v0.5.x ran around every ZeRO-3 list collective.

    OMP_NUM_THREADS=1 python benchmarks/measure_zero3_host_loop.py [--ranks N]

Re-enacts, on CPU tensors with a one-rank gloo group standing in for the data-parallel group, the per-rank work
of (git show v0.3.13:deepspeed/runtime/zero/partition_parameters.py):
- `_allgather_param`: for every rank, `flat_tensor.narrow(...)` appended to a list and
  `torch.distributed.get_rank(group=...)` compared with the loop index (graph/zero3_legacy.py
  GATHER_LOOP_S_PER_RANK);
- `_reduce_scatter_gradient`: for every rank, the bounds test and a `narrow` view appended to a list
  (REDUCE_LOOP_S_PER_RANK);
- for reference, the dispatch of one `copy_` per rank (torch's list all-gather copy-out) without the CUDA launch.
Prints the best of 101 repetitions in microseconds per rank (one thread): the development machine is shared
(2 cores, load ~4), and the median there moves 2x between runs with what else runs, while the best is the loop's
own cost, as on a training host's dedicated core. The figures depend on the host CPU and
the torch version: the shipped constants are this script's figures on the development machine (torch 2.13).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _best_us_per_rank(fn: Callable[[], object], ranks: int, reps: int = 101) -> float:
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return min(samples) / ranks * 1e6


def main(ranks: int, chunk: int = 4096) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    group = dist.new_group([0])
    flat = torch.empty(ranks * chunk, dtype=torch.float16)
    own = torch.empty(chunk, dtype=torch.float16)

    def gather_loop() -> list:
        partitions = []
        for i in range(ranks):
            partitions.append(flat.narrow(0, chunk * i, chunk))
            if i == dist.get_rank(group=group):
                partitions[i].data.copy_(own, non_blocking=True)
        return partitions

    def reduce_loop() -> list:
        inputs = []
        for i in range(ranks):
            start, end = i * chunk, (i + 1) * chunk
            if start < ranks * chunk and end <= ranks * chunk:
                inputs.append(flat.narrow(0, start, chunk))
        return inputs

    outputs = [torch.empty(chunk, dtype=torch.float16) for _ in range(ranks)]
    rows = flat.view(ranks, chunk)

    def copy_out() -> None:
        for j in range(ranks):
            outputs[j].copy_(rows[j], True)

    print(f"torch {torch.__version__}, {ranks} ranks, one thread (us per rank, best of 101):")
    print(f"  _allgather_param loop (narrow + get_rank(group))      {_best_us_per_rank(gather_loop, ranks):.2f}")
    print(f"  _reduce_scatter_gradient loop (bounds + narrow)       {_best_us_per_rank(reduce_loop, ranks):.2f}")
    print(f"  copy_ dispatch per rank (CPU, no CUDA launch)         {_best_us_per_rank(copy_out, ranks):.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1536)
    main(parser.parse_args().ranks)

"""Host time per (parameter, rank) of the copy loop that DeepSpeed < v0.5.5 ran after every ZeRO-3 optimizer step.

    OMP_NUM_THREADS=1 python benchmarks/measure_zero3_persistent_gather.py [--ranks N]

stage3.py `_post_step` re-gathers the persistent parameters (those under stage3_param_persistence_threshold:
biases, norms) with `all_gather(persistent_parameters)`, async_op=False, which runs
partition_parameters.py `_allgather_params` (git show v0.3.13:deepspeed/runtime/zero/partition_parameters.py):
one coalesced list all-gather, then for every persistent parameter a Python loop over the world size whose body
is `partitions[i].narrow(...)`, `replicated_tensor.view(-1).narrow(...)` and a `copy_` of that rank's few
elements (graph/zero3_legacy.py PERSISTENT_COPY_LOOP_S). This re-enacts the loop body on CPU tensors without the
`copy_` (whose cost is COPY_S_PER_RANK, one kernel on the GPU) and prints the best of 101 repetitions in
microseconds per iteration (one thread; the best is the loop's own cost on a dedicated core, see
measure_zero3_host_loop.py). The figure depends on the host CPU and the torch version.
"""

from __future__ import annotations

import argparse
import os

from measure_zero3_host_loop import _best_us_per_rank  # best of 101 timed calls, in us per unit

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main(ranks: int, numel: int = 20480) -> None:
    import torch

    torch.set_num_threads(1)
    part = -(-numel // ranks)  # _aligned_size / world_size: the padded partition of one rank
    partitions = [torch.empty(4 * part, dtype=torch.float16).narrow(0, 0, 4 * part) for _ in range(ranks)]
    replicated = torch.empty(numel, dtype=torch.float16)
    offset = part

    def loop_without_copy() -> list:
        views = []
        for i in range(ranks):
            param_start = i * part
            if param_start < numel:
                numel_to_copy = min(numel - param_start, part)
                src = partitions[i].narrow(0, offset, numel_to_copy)
                views.append((replicated.view(-1).narrow(0, param_start, numel_to_copy), src))
        return views

    iterations = min(ranks, -(-numel // part))
    print(f"torch {torch.__version__}, {ranks} ranks, a {numel}-element parameter ({iterations} copies), one thread:")
    print(f"  _allgather_params copy loop without the copy_ (narrow + view + narrow)  "
          f"{_best_us_per_rank(loop_without_copy, iterations):.2f} us per iteration (best of 101)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2240)
    main(parser.parse_args().ranks)

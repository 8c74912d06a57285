"""Stage [5]: the memory of ranks that run on a CPU (DeepSpeed's CPU accelerator or a plain torch script, gloo), and
the verdict of all the ranks of one host against that host's RAM.

A CPU rank is one process whose memory is its resident set (what the hook records: instrument/rank_memory.py,
peak RSS), not a GPU's:
- no CUDA context, cuBLAS workspaces or NCCL buffers (gloo keeps its pairs' buffers in the process, part of the
  resident baseline below) and no CUDA caching allocator: torch's CPU allocator is the C library's (c10/core/impl/
  alloc_cpu.cpp alloc_cpu: posix_memalign), so there is no caching-allocator reserve (allocator_reserve.py);
- the process itself: the interpreter, torch's and DeepSpeed's code and import-time state, gloo's process group,
  and what the engine and the first step set up once (DeepSpeed's engine and ZeRO optimizer modules and the
  communication op it builds, autograd's engine, the CPU kernels' state). Measured on this machine, not assumed:
  configs/memory/cpu_rank_resident.yaml, written by benchmarks/measure_cpu_rank_resident.py, the median resident set
  of ranks that trained a 4 x 4 nn.Linear three steps (`running`), by engine (plain torch, DeepSpeed at each ZeRO
  stage) and world size. The idle rank after the imports and init_process_group('gloo') (`imports`, 221 MiB with
  torch, 243 with deepspeed) is 80-135 MiB short of it: DeepSpeed's initialize alone adds 80 MiB at ZeRO-0 and 127
  at ZeRO-1/2 (28 Nov 2026, torch 2.13, deepspeed 0.19.8);
- memory is resident only once written: glibc serves a large request with mmap, whose pages the kernel maps on
  first touch (mallopt(3) M_MMAP_THRESHOLD; mmap(2) MAP_ANONYMOUS), so DeepSpeed's torch.empty(reduce_bucket_size)
  gradient buckets (stage_1_and_2.py setup_buckets; stage3.py ipg buckets) hold only the pages the gradients copied
  into them touch: at most the rank's gradients (DEEPSPEED reduce_bucket_size 5e8 elements, 1.9 GiB in fp32,
  against a few MiB written for the CPU testbed's models). Every other tensor the memory model counts is written
  when it is made (weights, optimizer states, activations, gradients).
The tensors themselves are memory.stage_memory's; this module only changes what a CPU does differently.

The verdict: the ranks of one host share its RAM, so the sum of their peaks (each rank's stage's peak, ranks placed
host by host, pipeline stage outermost: Megatron-LM's default order tp-cp-ep-dp-pp, DeepSpeed's
PipeDataParallelTopology ['pipe', 'data']) plus what the offloads pin on the host must fit the RAM of the hardware
file (what `llmperf profile --device cpu` measured: the machine's physical memory). Tight within the memory model's
error band on the host's sum.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.hardware.spec import ClusterSpec, HardwareSpec
from llmperf_hook.schedule.optimizer_state import FP32_BYTES
from llmperf_hook.schedule.step_estimate import MemoryEstimate

GiB = float(2**30)
RESIDENT_PART = "process_resident"
"""The component of a CPU rank's peak that is its process before any model tensor (module docstring)."""
GPU_ONLY_PARTS = ("cuda_context", "nccl_buffers")
"""memory.buffer_bytes' components that exist only on a GPU."""
RESIDENT_FILE = ("memory", "cpu_rank_resident.yaml")
"""Under configs/: the measured resident figure and its provenance."""
CPU_MODEL_ERROR_FRACTION = round(603 / 448 - 1, 3)  # = 0.346
"""The CPU model's error band, as a share of its prediction: a measured peak RSS per rank was at most 34.6 % above the
predicted one (every CPU job is predicted low), the testbed's 2-rank ZeRO-3 h512 command: 603 MiB measured (median
of 5 runs) against 448 predicted, 603 / 448 = 1.346, an error of (448 - 603) / 603 = -25.7 % of the measured peak
(benchmarks/bench_cpu_memory.py over the CPU testbed's 12 commands, 58 recorded runs, MAPE 8.9 %:
benchmarks/results/cpu_memory_2026-11-28-h206.txt). H194's three own runs (their folders are gone) were at most
12.8 % low, the DeepSpeed one 9.0 % as R81 re-predicted it. The rule is H194's (the largest error over the measured CPU jobs), taken against
the prediction, which is what the verdict has: a peak up to 25.7 % of the measured one short is a measured peak up to
1 / (1 - 0.257) = 1.346 times the prediction. Low because the C library's heap keeps growing over the steps (arenas,
fragments it does not return; 4.4 % MAPE against the RSS at the end of the first step) and ZeRO-3's engine holds more
than the resident figure's 4x4 Linear shows (R81). A host whose RAM is above its ranks' sum by less than this share
of it may run out."""


def on_cpu(gpu: HardwareSpec | None) -> bool:
    """Whether a rank of this hardware runs on the host's CPU (HardwareSpec.device)."""
    return gpu is not None and gpu.device == "cpu"


def written_bucket_bytes(bucket_bytes: float, bucket_elems: float, gradient_elems: float) -> float:
    """The resident bytes of DeepSpeed's gradient buckets on a CPU: of `bucket_elems` elements allocated
    (reduce_bucket_size times the buffers), the rank's `gradient_elems` gradients copied in at most (module
    docstring)."""
    if bucket_elems <= 0:
        return bucket_bytes
    return bucket_bytes * min(1.0, gradient_elems / bucket_elems)


def cpu_rank_buffers(parts: Mapping[str, float], bucket_elems: float, gradient_elems: float) -> dict[str, float]:
    """memory.stage_memory's components of a rank on a CPU before they are composed: no GPU-only buffer, the gradient
    buckets by the pages written."""
    out = {k: v for k, v in parts.items() if k not in GPU_ONLY_PARTS}
    if "zero_buckets" in out:
        out["zero_buckets"] = written_bucket_bytes(out["zero_buckets"], bucket_elems, gradient_elems)
    return out


SINGLE_TENSOR_ADAM_TEMPORARY_BYTES = 8.0
"""Bytes per element of the tensor torch.optim's Adam / AdamW steps on a CPU: torch picks the single-tensor loop there
(optimizer.py _default_to_fused_or_foreach: foreach and fused only on CUDA-like devices), whose
`denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)` holds two fp32 temporaries of the tensor at once
(torch/optim/adam.py _single_tensor_adam L544, torch 2.13)."""


def cpu_step_temporary_bytes(cfg: TrainingConfig, partition_params: float) -> float:
    """What a CPU rank's optimizer step allocates beyond the gradients memory.optimizer_step_bytes counts: DeepSpeed
    ZeRO-1/2 hands a client torch.optim Adam (torch_optimizer_impl foreach: torch's default, single-tensor on a CPU)
    its fp32 partition as one flat tensor (stage_1_and_2.py single_partition_of_fp32_groups), so the temporaries are
    the partition's; amsgrad's (foreach_amsgrad) the same two (torch.maximum(..., out=max_exp_avg_sqs[i]) in place,
    then the denominator of the maxima); Adam's L2 decay (torch_weight_decay "l2") a third, grad = grad.add(param,
    alpha=weight_decay), alive until the iteration ends. A script stepping its own parameters makes them one tensor
    at a time (not counted), fused=True none, DeepSpeed's own optimizers their C++ loop."""
    o = cfg.optimizer
    client_adam = (o.name == "adam" and o.torch_optimizer_impl in ("foreach", "foreach_amsgrad")
                   and o.offload_optimizer == "none")
    if "deepspeed" not in cfg.framework or o.zero_stage not in (1, 2) or not client_adam:
        return 0.0
    l2_gradient_copy = FP32_BYTES if o.torch_weight_decay == "l2" else 0
    return (SINGLE_TENSOR_ADAM_TEMPORARY_BYTES + l2_gradient_copy) * partition_params


@lru_cache(maxsize=4)
def _resident_table(path: str, mtime_ns: int) -> dict[str, Any]:
    import yaml

    raw = yaml.safe_load(Path(path).read_text())
    return raw if isinstance(raw, dict) else {}


def resident_table() -> dict[str, dict[int, float]]:
    """{engine: {world size: MiB}} of the `running` readings of configs/memory/cpu_rank_resident.yaml."""
    from llmperf_hook.resources import configs_dir

    path = configs_dir().joinpath(*RESIDENT_FILE)
    table = _resident_table(str(path), path.stat().st_mtime_ns).get("resident_MiB", {}).get("running", {})
    return {str(k): {int(w): float(v) for w, v in by_world.items()} for k, by_world in table.items()}


def engine_of(cfg: TrainingConfig) -> str:
    """The measured engine a job's ranks run: DeepSpeed at its ZeRO stage, else a plain torch script."""
    return f"deepspeed-zero{min(3, cfg.optimizer.zero_stage)}" if "deepspeed" in cfg.framework else "torch"


def resident_bytes(cfg: TrainingConfig) -> float:
    """The measured resident memory of one rank besides its tensors, for its engine at the job's world size; above
    the largest world measured (2), that one's: gloo's pairs with more peers are not in it."""
    by_world = resident_table()[engine_of(cfg)]
    return by_world[max(w for w in by_world if w <= max(1, cfg.world_size))] * 2**20


def cpu_rank_memory(cfg: TrainingConfig, parts: Mapping[str, float]) -> dict[str, int]:
    """A CPU rank's composed components (memory.stage_memory, without the caching allocator's reserve) and its
    process's resident baseline: they sum to its predicted peak RSS."""
    out = {k: int(v) for k, v in parts.items()}
    out[RESIDENT_PART] = int(resident_bytes(cfg))
    return out


def ranks_per_host(cfg: TrainingConfig) -> int:
    """The processes the launch starts on each host (nproc_per_node: torchrun --nproc-per-node, deepspeed --num_gpus
    or the hostfile's slots, Slurm --ntasks-per-node), whatever the cluster file's gpus_per_node says: a CPU host
    holds every rank started on it."""
    world = max(1, cfg.world_size)
    return max(1, min(cfg.nproc_per_node or world, world))


def host_ranks_bytes(cfg: TrainingConfig, per_stage_peak_bytes: Sequence[float]) -> tuple[int, int]:
    """(ranks on the busiest host, the sum of their peaks): ranks placed host by host, nproc_per_node each, rank r on
    pipeline stage r // (world / pp) (module docstring)."""
    world, pp = max(1, cfg.world_size), max(1, len(per_stage_peak_bytes))
    per_host = ranks_per_host(cfg)
    per_stage_ranks = max(1, world // pp)
    best = 0.0
    for first in range(0, world, per_host):
        ranks = range(first, min(world, first + per_host))
        best = max(best, sum(per_stage_peak_bytes[min(pp - 1, r // per_stage_ranks)] for r in ranks))
    return per_host, int(best)


def cpu_memory_estimate(cfg: TrainingConfig, cluster: ClusterSpec, per_stage: Sequence[Mapping[str, int]],
                        host: Mapping[str, int]) -> MemoryEstimate:
    """The MemoryEstimate of a job on CPU hardware: the busiest rank's components (peak RSS), and the verdict of the
    busiest host's ranks plus its offloads (must_fit_bytes) against the host's RAM (capacity_bytes; headroom_bytes is
    the RAM less that sum)."""
    peaks = [sum(parts.values()) for parts in per_stage]
    worst = max(range(len(peaks)), key=lambda i: peaks[i])
    capacity = cluster.gpu.memory_capacity_bytes
    _, ranks_sum = host_ranks_bytes(cfg, peaks)
    need = ranks_sum + sum(host.values())
    fits = need <= capacity
    # must_fit_bytes: the host's need, so tune's rule (memory_rule.fits_gpu against capacity_bytes) is this verdict
    return MemoryEstimate(peak_bytes_per_gpu=peaks[worst], capacity_bytes=capacity, fits=fits, must_fit_bytes=need,
                          tight=fits and capacity < need * (1.0 + CPU_MODEL_ERROR_FRACTION),
                          headroom_bytes=capacity - need, components=per_stage[worst], stage=worst,
                          per_stage_peak_bytes=tuple(peaks), host_components=host, host_capacity_bytes=0)


def runs_on_cpu(mem: MemoryEstimate) -> bool:
    """Whether an estimate is a CPU job's (its components hold the process's resident baseline)."""
    return RESIDENT_PART in mem.components


def host_need_words(mem: MemoryEstimate, cfg: TrainingConfig) -> str:
    """The host's ranks, their resident sum (the busiest rank's and its process part), the offloads and the RAM, in
    words, for the messages below."""
    ranks, ranks_sum = host_ranks_bytes(cfg, mem.per_stage_peak_bytes)
    offload = f" + {mem.host_bytes_per_node / GiB:.2f} GiB its offloads pin" if mem.host_components else ""
    return (f"{ranks} rank(s) on a host, {ranks_sum / GiB:.2f} GiB of resident memory together (the busiest "
            f"{mem.peak_bytes_per_gpu / GiB:.2f} GiB, {mem.components.get(RESIDENT_PART, 0) / GiB:.2f} GiB of it the "
            f"process itself){offload}, against the host's {mem.capacity_bytes / GiB:.2f} GiB of RAM")


def cpu_tight_warning(mem: MemoryEstimate, cfg: TrainingConfig) -> str:
    """The warning of a CPU job that fits its host by less than the model's error band."""
    return (f"memory fits, tight: {host_need_words(mem, cfg)}, {mem.headroom_bytes / GiB:.2f} GiB to spare, less than "
            f"the CPU memory model's error band ({CPU_MODEL_ERROR_FRACTION:.0%} of the need: measured peaks were up to "
            f"that much above predicted ones). Run fewer ranks on the host, or a "
            f"smaller micro-batch, or free the host's RAM of other programs.")


def cpu_short_message(mem: MemoryEstimate, cfg: TrainingConfig) -> str:
    """The exit-3 sentence of a CPU job whose host cannot hold its ranks (`run --require-fit`)."""
    return (f"predicted memory does not fit the host: {host_need_words(mem, cfg)}, short by "
            f"{-mem.headroom_bytes / GiB:.2f} GiB (--require-fit; every rank of a CPU job is a process in the host's "
            f"RAM: schedule/memory_cpu.py).")


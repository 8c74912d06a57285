"""Stage [5]: host (CPU) memory per node that the job's offloads take, compared with the cluster's host RAM.

What a rank keeps in host memory, per parameter of its ZeRO partition (DeepSpeed 0.19, deepspeed/runtime/zero/):
  optimizer      offload_optimizer cpu: the fp32 master partition and Adam's exp_avg / exp_avg_sq on the CPU
                 (DeepSpeedCPUAdam), 12 B (SGD with momentum 8), of the offloaded share (ZeRO-3 offload ratio)
  fp32 grads     the fp32 gradient of that partition, which the CPU optimizer reads: 4 B (stage_1_and_2.py
                 initialize_optimizer_states: single_partition_of_fp32_groups[i].grad = pin_memory(zeros);
                 stage3.py: fp32_partitioned_groups_flat[i].grad on the offload device)
  16-bit grads   ZeRO-3: grad_partitions_flat_buffer in the gradient-accumulation dtype (2 B, 4 for fp32) on the
                 CPU under any offload_optimizer (stage3.py: device = cpu when offload_optimizer); ZeRO-1/2 with
                 gradient accumulation: a buffer per parameter the partition touches, whole, in its dtype
                 (_zero12_offload_copies)
  parameters     offload_param cpu: the 16-bit partition (param.ds_tensor, pinned; partition_parameters.py), and
                 with offload_param.pin_memory zero.Init's own pinned copy of each parameter's partition, left in
                 torch's pinned cache (_zero_init_cached_blocks);
                 offload_param nvme: its first max_in_cpu (1e9) elements, moved there for good when the optimizer
                 is built (stage3.py _create_param_groups_fp16_flat_cpu_memory; whole sub-groups: an upper bound);
                 ZeRO-1/2 offload: a 16-bit copy of the partition that the updated fp32 weights are cast into
                 before their copy to the GPU (stage_1_and_2.py param_buffer_of_bit16_for_cpu_offload_groups, 2 B,
                 since v0.17.0: 17c8be070, #7309) and a 16-bit staging buffer of the largest parameter
                 (temp_grad_buffer_for_cpu_offload)
  swap buffers   ZeRO-Infinity: offload_param nvme pins the ds_config's offload_param.buffer_count (default 5)
                 buffers of buffer_size elements in the parameters' dtype (partitioned_param_swapper.py: torch.empty(
                 aligned_elements_per_buffer x param_buffer_count), pinned by the aio handle); offload_optimizer nvme
                 pins offload_optimizer.buffer_count (default 4) fp32 buffers of the largest optimizer sub-group
                 (optimizer_utils.py SwapBufferManager(num_elems=largest_numel, count=swap_config.buffer_count)). The
                 aio section sizes no buffer: its block_size and queue_depth shape the libaio requests, and each
                 buffer is only rounded up to 1024 x intra_op_parallelism bytes (AIO_ALIGNED_BYTES,
                 _io_aligned_numel): under 1 MiB a buffer, not counted.
  checkpoints    Megatron-DeepSpeed --checkpoint-in-cpu: the full-recompute checkpoints of the micro-batches in
                 flight (schedule/memory.checkpoints_off_gpu_bytes)
Megatron-LM --optimizer-cpu-offload (with --use-precision-aware-optimizer and the distributed optimizer it needs):
HybridDeviceOptimizer (core/optimizer/cpu_offloading/hybrid_optimizer.py, param_update_in_fp32=True) moves the
first --optimizer-offload-fraction (default 1.0) of the rank's shard, by elements, to a CPU torch.optim.AdamW: per
offloaded parameter an fp32 copy (pinned unless --no-pin-cpu-params), its fp32 gradient (torch.empty(...,
pin_memory=pin_cpu_grads), copied from the GPU each step) and Adam's exp_avg / exp_avg_sq, 8 B (SGD: momentum, 4):
16 B; the GPU keeps the rest (schedule/memory.py state_bytes), each pinned copy in a power-of-two block, and the
first of its two builds stays in torch's pinned cache (megatron_pinned_copies). Megatron-LM's --cpu-offloading:
the saved activations of its first --cpu-offloading-num-layers layers (schedule/activations.cpu_offloaded_layers;
per-tensor power-of-two rounding not applied: the tensor list is not modelled, and s x b x h products of powers of
two round to themselves).
PyTorch FSDP CPU offload (Trainer --fsdp "... offload", accelerate fsdp_offload_params) keeps the same 16 B per
parameter of the rank's shard on the host: the fp32 flat-parameter shard, its fp32 gradient ("offloads gradients to
CPU as well, meaning that the optimizer step runs on CPU": torch.distributed.fsdp.CPUOffload) and Adam's two fp32
states of that CPU step. NO_SHARD (priced as ZeRO-0) shards nothing: each rank offloads the whole model.
Several ranks share one host: the verdict is per node, each rank's bytes times the launch's processes per host
(host_memory_per_node). Pinned (page-locked) or pageable, both take the host's RAM: what is pinned is noted per
component above; pinned memory cannot be swapped out and counts against `ulimit -l`, and a tensor pinned through
torch takes a power-of-two block (pinned_block_bytes; DeepSpeed's buffers: deepspeed_pinned, their size under
DS_PIN_MEMORY_BACKEND=native).
DeepSpeed's own estimators, per parameter per node: estimate_zero3_model_states_mem_needs at zero_init 16 B with
offload_optimizer, 18 with offload_param too (no 16-bit gradient partition); estimate_zero2_model_states_mem_needs
max(16, 4 x GPUs) B (the larger for a whole fp32 model copy per GPU while the model loads; no 16-bit copies).
benchmarks/bench_memory_reference.py prints theirs beside ours. Not counted: each process's own footprint (Python,
CUDA and NCCL host allocations, the data loader), a few GB per rank that the cluster's RAM must also hold.
"""

from __future__ import annotations

import math
from typing import Callable

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.op_graph import OpGraph, StageGraph
from llmperf_hook.graph.step_ops import offloaded_optimizer_share, param_bytes
from llmperf_hook.hardware.spec import ClusterSpec
from llmperf_hook.schedule import activations as act
from llmperf_hook.schedule.memory_cpu import on_cpu, ranks_per_host
from llmperf_hook.schedule.memory import (checkpoints_off_gpu_bytes, partition_params, shard_counts,
                                          stage_param_tensors)

FP32_BYTES = 4


def _offloaded_state(cfg: TrainingConfig, stage: StageGraph, partition: float,
                     gpus_per_node: int) -> dict[str, float]:
    """offload_optimizer cpu: optimizer states and fp32 gradients of the offloaded share, ZeRO-3's gradient
    partition, ZeRO-1/2's 16-bit copies; offload_param: the 16-bit parameter partition (nvme: up to max_in_cpu).
    The buffers DeepSpeed pins (ds_config pin_memory) take power-of-two blocks (deepspeed_pinned)."""
    o = cfg.optimizer
    out: dict[str, float] = {}
    opt_pin = o.offload_optimizer_pin_memory
    if o.offload_optimizer == "cpu":
        share = partition * offloaded_optimizer_share(cfg, int(partition))
        moments = 8 if o.name == "adam" else 4  # DeepSpeedCPUAdam's zeros_like states: pageable
        master = deepspeed_pinned(cfg, FP32_BYTES * share, opt_pin and o.zero_stage in (1, 2))
        out["host_optimizer_states"] = share * moments + master
        out["host_fp32_gradients"] = sum(deepspeed_pinned(cfg, FP32_BYTES * n, opt_pin)
                                         for n in _sub_groups(cfg, share))
    if o.offload_optimizer != "none" and o.zero_stage == 3:
        accum = FP32_BYTES if o.grad_accum_dtype == "fp32" else 2
        out["host_gradient_partition"] = deepspeed_pinned(cfg, partition * accum, opt_pin)
    if o.offload_optimizer == "cpu" and o.zero_stage in (1, 2):
        out.update(_zero12_offload_copies(cfg, stage, partition, gpus_per_node))
    if o.offload_param != "none" and o.zero_stage == 3:
        resident = partition if o.offload_param == "cpu" else min(partition, o.nvme_param_max_in_cpu_elems)
        # pinned whatever offload_param.pin_memory says (stage3.py _create_param_groups_fp16_flat_cpu_memory: one
        # get_accelerator().pin_memory buffer per parameter group, unconditional since 2021)
        out["host_parameters"] = deepspeed_pinned(cfg, resident * param_bytes(cfg), True)
        out["host_zero_init_pinned_cache"] = _zero_init_cached_blocks(cfg, stage, partition, gpus_per_node)
    return out


def _zero12_offload_copies(cfg: TrainingConfig, stage: StageGraph, partition: float,
                           gpus_per_node: int) -> dict[str, float]:
    """ZeRO-1/2 offload_optimizer's 16-bit host buffers (stage_1_and_2.py, pinned under offload_optimizer.pin_memory):
    the partition the updated fp32 weights are cast into, the staging buffer of the largest parameter
    (temp_grad_buffer_for_cpu_offload = torch.zeros(largest_param_numel, device=cpu)), and with gradient
    accumulation one buffer per parameter of the partition (async_accumulate_grad_in_cpu_via_gpu:
    accumulated_grads_in_cpu[param_id] = torch.zeros(param.numel()), the whole parameter, so one astride two
    partitions is held whole by both), each its own pinned block: the busiest data-parallel rank's."""
    o, pb = cfg.optimizer, param_bytes(cfg)
    pin = o.offload_optimizer_pin_memory
    tensors = stage_param_tensors(cfg, stage)
    largest = max((n for part in tensors for n in part), default=0)
    out = {"host_parameter_copy": deepspeed_pinned(cfg, partition * pb, pin),
           "host_gradient_staging": deepspeed_pinned(cfg, largest * pb, pin)}
    if cfg.batch.num_microbatches > 1:
        out["host_accumulated_gradients"] = sum(
            max(_partition_buffers(part, shards, lambda n: deepspeed_pinned(cfg, n * pb, pin)), default=0.0)
            for part, shards in zip(tensors, shard_counts(cfg, gpus_per_node)))
    return out


def _partition_buffers(tensors: list[int], shards: int, buffer: Callable[[int], float]) -> list[float]:
    """Per data-parallel rank, the bytes of one buffer (`buffer(numel)`) for every tensor its ZeRO-1/2 partition
    touches: the flattened group cut into `shards` equal partitions (stage_1_and_2.py partition_size = len(flat) //
    dp, the flat group padded to a multiple of 2 x dp elements, which moves no tensor's start)."""
    total = sum(tensors)
    if not total:
        return []
    size = -(-total // (2 * shards)) * 2  # partition_size after align_dense_tensors
    per_rank = [0.0] * shards
    start = 0
    for n in tensors:
        for rank in range(start // size, min(shards - 1, (start + n - 1) // size) + 1):
            per_rank[rank] += buffer(n)
        start += n
    return per_rank


def _zero_init_cached_blocks(cfg: TrainingConfig, stage: StageGraph, partition: float, gpus_per_node: int) -> float:
    """ZeRO-3 offload_param cpu with pin_memory: zero.Init (the user's, or the engine's _convert_to_zero_parameters,
    both told offload_param.pin_memory) pins each parameter's partition on its own (partition_parameters.py
    _partition_param: get_accelerator().pin_memory(torch.empty(partition_size))); the optimizer then copies them into
    its pinned flat buffer and points each ds_tensor at it (stage3.py _move_to_flat_buffer: src.data = dest.data),
    freeing the zero.Init blocks into torch's pinned cache, which neither DeepSpeed nor torch.cuda.empty_cache
    empties (only torch._C._host_emptyCache does): they stay, but for those a later pinned buffer of the same power
    of two takes (the offloaded optimizer's gradient partition and, offloaded to the CPU, its sub-groups' fp32
    gradients). Native pinning frees them (deepspeed/utils/pin_memory.py: munlock + free when the tensor goes)."""
    o = cfg.optimizer
    if o.offload_param != "cpu" or not o.offload_param_pin_memory or o.native_pinned_memory:
        return 0.0
    cached: dict[float, int] = {}
    for part, shards in zip(stage_param_tensors(cfg, stage), shard_counts(cfg, gpus_per_node)):
        for n in part:
            block = pinned_block_bytes(-(-n // shards) * param_bytes(cfg))
            cached[block] = cached.get(block, 0) + 1
    later: list[float] = []
    if o.offload_optimizer != "none" and o.offload_optimizer_pin_memory:
        accum = FP32_BYTES if o.grad_accum_dtype == "fp32" else 2
        later = [pinned_block_bytes(partition * accum)]
    if o.offload_optimizer == "cpu" and o.offload_optimizer_pin_memory:
        # nvme swaps each sub-group's gradient instead (stage3.py initialize_optimizer_states: a pinned
        # subgroup_gradient_buffer only for a sub-group _swappable_optimizer_subgroup refuses, under 1 MiB)
        share = partition * offloaded_optimizer_share(cfg, int(partition))
        later += [pinned_block_bytes(FP32_BYTES * n) for n in _sub_groups(cfg, share)]
    for block in later:
        if cached.get(block, 0):
            cached[block] -= 1
    return sum(block * count for block, count in cached.items())


def deepspeed_pinned(cfg: TrainingConfig, num_bytes: float, pinned: bool) -> float:
    """Host bytes of one DeepSpeed offload buffer: pinned (offload_optimizer / offload_param pin_memory, default True
    since DeepSpeed 0.19.5, 7dfa67aea) through get_accelerator().pin_memory -> tensor.pin_memory(), a power-of-two
    block (pinned_block_bytes); under DS_PIN_MEMORY_BACKEND=native (OptimizerConfig.native_pinned_memory) the
    request's size, page-aligned (csrc/pin_memory/page_alloc.cpp posix_memalign + mlock); pageable, its size.
    Pinned ones: ZeRO-1/2's fp32 master partition, its fp32 gradient and its 16-bit copy (stage_1_and_2.py:
    weights_partition, temp_buffer_bit16, single_partition_of_fp32_groups[i].grad), ZeRO-3's gradient partition and
    each offloaded sub-group's fp32 gradient (stage3.py grad_partitions_flat_buffer, subgroup_gradient_buffer);
    ZeRO-3's 16-bit parameter partition (param_groups_fp16_flat_cpu_memory) is pinned even with pin_memory false;
    ZeRO-3's fp32 partitions and DeepSpeedCPUAdam's moments are pageable. Each partition is one optimizer parameter
    group's (the weight-decay group holds all but the norms' and biases': one block per partition)."""
    return pinned_block_bytes(num_bytes) if pinned and not cfg.optimizer.native_pinned_memory else num_bytes


def _sub_groups(cfg: TrainingConfig, elems: float) -> list[float]:
    """Element counts of ZeRO-3's optimizer sub-groups over `elems` (zero_optimization.sub_group_size each, the last
    one the rest); ZeRO-1/2 keep one partition."""
    size = cfg.optimizer.sub_group_size_elems
    if cfg.optimizer.zero_stage != 3 or elems <= size:
        return [elems]
    full = int(elems // size)
    return [float(size)] * full + ([elems - full * size] if elems > full * size else [])


def _swap_buffers(cfg: TrainingConfig, partition: float) -> float:
    """Pinned ZeRO-Infinity swap buffers of one rank (the ds_config's buffer counts)."""
    o = cfg.optimizer
    pinned = 0.0
    if o.offload_param == "nvme" and o.zero_stage == 3:
        pinned += o.nvme_param_buffer_count * o.nvme_param_buffer_elems * param_bytes(cfg)
    if o.offload_optimizer == "nvme":
        pinned += o.nvme_optimizer_buffer_count * min(partition, o.sub_group_size_elems) * FP32_BYTES
    return pinned


def torch_offloaded_state(cfg: TrainingConfig, stage: StageGraph, partition: float,
                          gpus_per_node: int) -> dict[str, float]:
    """Megatron --optimizer-cpu-offload (HybridDeviceOptimizer) or FSDP CPU offload: per parameter of the offloaded
    share of the rank's shard, fp32 parameters (4 B), fp32 gradients (4 B) and the CPU optimizer's states (Adam 8 B,
    SGD 4 B). An unsharded optimizer (FSDP NO_SHARD) offloads the stage's every parameter. Megatron's pinned copies
    are priced as torch's host allocator takes them (megatron_pinned_copies)."""
    o = cfg.optimizer
    if o.offload_optimizer != "cpu":
        return {}
    on_rank = partition if (o.distributed_optimizer or o.zero_stage >= 1) else float(stage.num_params)
    share = on_rank * offloaded_optimizer_share(cfg, int(on_rank))
    out = {"host_optimizer_states": share * _cpu_states_bytes(cfg), "host_fp32_parameters": share * FP32_BYTES,
           "host_fp32_gradients": share * FP32_BYTES}
    if cfg.framework == "megatron" and o.fsdp == "none" and stage.chunks:
        out.update(megatron_pinned_copies(cfg, stage, gpus_per_node, share / on_rank if on_rank else 0.0))
    return out


def _cpu_states_bytes(cfg: TrainingConfig) -> int:
    """Bytes per parameter of the CPU torch.optim step's states: Adam's exp_avg and exp_avg_sq, SGD's momentum."""
    return 8 if cfg.optimizer.name == "adam" else 4


def pinned_block_bytes(num_bytes: float) -> float:
    """Host bytes torch's CUDA caching host allocator takes for one pinned tensor (Tensor.pin_memory(), torch.empty(
    ..., pin_memory=True)): the request rounded up to the next power of two (ATen/core/CachingHostAllocator.h
    allocate: c10::llvm::PowerOf2Ceil under the default pinned_max_round_threshold; measured on an H200, torch 2.11:
    3 / 96 / 600 / 1,025 / 3,000 MiB take 4 / 128 / 1,024 / 2,048 / 4,096 MiB,
    measurements/h200-sxm-141gb-2026-11-27/pinned.txt). A freed block stays cached for a request of the same power
    of two (maybe_cache_block; default pinned_max_cached_size unlimited): the process keeps it."""
    return float(2 ** math.ceil(math.log2(num_bytes))) if num_bytes >= 1 else 0.0


def megatron_pinned_copies(cfg: TrainingConfig, stage: StageGraph, gpus_per_node: int,
                           fraction: float) -> dict[str, float]:
    """Megatron's HybridDeviceOptimizer host tensors, block by block where pinned (pin_cpu_params / pin_cpu_grads, both
    on unless --no-pin-cpu-params / --no-pin-cpu-grads: then pageable, their size; hybrid_optimizer.py at Megatron-LM
    d98e8a6, faecf6b50: megatron-core 0.16.1 pins no fp32 copy, only the bf16 staging ones).

    It is built twice: core/optimizer/__init__.py builds one over the rank's whole (TP-split, unsharded) parameters,
    then DistributedOptimizer.__init__ builds the one it keeps over its shards (distrib_optimizer.py: `self.optimizer
    = HybridDeviceOptimizer(params=[g["orig_group"] ...], **self.optimizer.defaults)`) while the first is still
    referenced. Each build pins, per offloaded parameter, an fp32 copy (hybrid_optimizer.py
    _get_sub_optimizer_param_groups: clone().cpu().pin_memory(), then clone().float().pin_memory()); the first's copies
    are freed into torch's pinned cache, never back to the OS, where only a request of the same power of two reuses
    them: the fp32 gradients (_set_sub_optimizer_grads, torch.empty(shape, pin_memory=True) at the first step) do
    when the shard is the whole parameter (one shard). Every tensor's shard is taken as its size / shards (the
    distributed optimizer's ranges cut tensors at bucket offsets: an approximation for tensors that straddle them).
    The first `fraction` of the elements is offloaded (the walk's order is not modelled: the same fraction of every
    tensor's blocks). The bf16 staging copies each build pins and frees one tensor at a time are not counted."""
    tensors = [(n, d) for part, d in zip(stage_param_tensors(cfg, stage), shard_counts(cfg, gpus_per_node))
               for n in part]
    o = cfg.optimizer
    pageable = fraction * sum(FP32_BYTES * n / d for n, d in tensors)
    shards = fraction * sum(pinned_block_bytes(FP32_BYTES * n / d) for n, d in tensors)
    out = {"host_fp32_parameters": shards if o.pin_cpu_params else pageable,
           "host_fp32_gradients": shards if o.pin_cpu_grads else pageable}
    if not o.pin_cpu_params:
        # pageable, the first build is freed once DistributedOptimizer replaces it, before the first step allocates
        # the gradients and Adam's lazy states: its init peak counts only beyond theirs
        step = out["host_fp32_gradients"] + fraction * sum(n / d for n, d in tensors) * _cpu_states_bytes(cfg)
        out["host_first_build_fp32_copies"] = max(0.0, fraction * sum(FP32_BYTES * n for n, _ in tensors) - step)
        return out
    whole = fraction * sum(pinned_block_bytes(FP32_BYTES * n) for n, _ in tensors)
    # pinned gradients of whole tensors (one shard) take the first build's cached blocks
    reused = fraction * sum(pinned_block_bytes(FP32_BYTES * n) for n, d in tensors if d == 1 and o.pin_cpu_grads)
    out["host_first_build_fp32_copies"] = whole - reused
    return out


def rank_host_bytes(cfg: TrainingConfig, stage: StageGraph, gpus_per_node: int) -> dict[str, float]:
    """Host bytes one rank of `stage` keeps, by component (empty when nothing is offloaded)."""
    partition = partition_params(cfg, stage, gpus_per_node)
    if "deepspeed" not in cfg.framework:
        out = torch_offloaded_state(cfg, stage, partition, gpus_per_node)
        # Megatron --cpu-offloading: the offloaded layers' saved activations, one micro-batch (pp 1)
        out["host_offloaded_activations"] = act.cpu_offloaded_layers(cfg) * act.layer_activation_bytes(cfg)
        return {k: v for k, v in out.items() if v > 0}
    out = _offloaded_state(cfg, stage, partition, gpus_per_node)
    swap = _swap_buffers(cfg, partition)
    if swap:
        out["host_nvme_swap_buffers"] = swap
    if cfg.recompute.checkpoint_in_cpu:
        per_microbatch = sum(checkpoints_off_gpu_bytes(cfg, c.num_layers) for c in stage.chunks)
        out["host_activation_checkpoints"] = per_microbatch * act.microbatches_in_flight(cfg, stage.stage)
    return {k: v for k, v in out.items() if v > 0}


def host_memory_per_node(cfg: TrainingConfig, graph: OpGraph, cluster: ClusterSpec,
                         gpus_per_node: int) -> dict[str, int]:
    """Host bytes of one node by component: its ranks (the launch's processes per host) times the busiest pipeline
    rank's (ranks of one host may hold different stages; the busiest bounds them)."""
    per_rank = [rank_host_bytes(cfg, s, gpus_per_node) for s in graph.stages]
    worst = max(per_rank, key=lambda parts: sum(parts.values()))
    ranks = min(cfg.nproc_per_node or cluster.host_gpus, cluster.host_gpus, cfg.world_size)
    if on_cpu(cluster.gpu):  # every process the launch starts on a CPU host (memory_cpu.py)
        ranks = ranks_per_host(cfg)
    return {k: int(v * ranks) for k, v in worst.items()}

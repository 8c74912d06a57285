"""Stage [5]: peak memory per GPU of the busiest pipeline rank, compared with the GPU's capacity.

Model and optimizer state per parameter on a rank (Rajbhandari et al. 2020, ZeRO, Sec. 3.1: mixed-precision
Adam holds 2 + 2 + 12 bytes; Megatron keeps fp32 main gradients, 2 + 4 + 12, and its distributed optimizer
shards the 12 over data-parallel ranks: 6 + 12/d, docs/source/api-guide/dist_optimizer.md):
  weights        2 (bf16/fp16) or 4 (fp32); ZeRO-3: 2/d plus the gathered parameters (DeepSpeed: the peak of its
                 fetch trace, held by the reuse distance, running and prefetched: graph/zero3_trace.py)
  gradients      4 (fp32 main grads) or 2; ZeRO-2/3: /d (DeepSpeed keeps the fp16 partition); 0 on the GPU under
                 ZeRO-2/3 offload_optimizer (the partition lives on the host)
  optimizer      Adam 12 (fp32 master, m, v; 8 when training in fp32 without a master copy), SGD 8; a plain-torch
                 script stepping its 16-bit model with torch.optim (OptimizerConfig.master_weights False): Adam 4,
                 SGD 2 (momentum), with 16-bit gradients (2); Megatron's precision-aware optimizer by its dtype
                 flags (schedule/optimizer_state.py; e.g. 10 with the defaults: int16 master remainders);
                 /d under the distributed optimizer or ZeRO >= 1; 0 on the GPU when offloaded (ZeRO-3 partial
                 offload: the GPU's share of the sub-groups stays)
  DeepSpeed      ZeRO++ hpZ secondary weights 2/k; a wider data_types.grad_accum_dtype (grad_accum_extra_bytes);
                 Megatron-DeepSpeed --partition-activations / --checkpoint-in-cpu take checkpoints off the GPU
  fp8            Megatron + Transformer Engine: the cached fp8 copy of every linear weight (row-wise + transpose,
                 2 per linear parameter on Hopper, 1 on Blackwell with a per-tensor recipe, 2 + scales under mxfp8;
                 per micro-batch in flight, column-wise only, with --disable-parameter-transpose-cache); with
                 --fp8-param-gather the weight itself is fp8 (1) plus its column-wise usage (fp8_weight_bytes)
Megatron's distributed optimizer pads its buffers (64-element parameter starts, bucket ends to lcm(DP, 128)):
distopt_bucket_padding, in the weights' and gradients' dtypes (graph/ddp_buckets.distopt_padding_elems).
Activations: schedule/activations.py (Korthikanti et al. 2022) times the micro-batches in flight.
Overheads (documented constants below): CUDA context and library workspaces, NCCL buffers per
communicator, DeepSpeed's bucket buffers; and the caching allocator's reserve over the allocated peak
(allocator_fragmentation, schedule/allocator_reserve.py), which what must fit leaves out (schedule/memory_fit.py).
A rank on CPU hardware (HardwareSpec.device "cpu") has none of the GPU's overheads but its process's measured
resident memory, and its host's ranks share one RAM: schedule/memory_cpu.py.
Two phases: the backward (state + activations + buffers; without gradients where they are freed at every step and
the step has one micro-batch: schedule/gradient_lifetime.py) and the optimizer step (DeepSpeed's fp32 cast of the
gradient partition, torch.optim's foreach temporaries: optimizer_step_bytes); the peak is the larger, the
components sum to it (optimizer_step_working_set tops the backward up when the step is larger). Measured on the
single-GPU H100/H200 runs of measurements/ (benchmarks/bench_gpu_steps.py): every run's allocated peak within 1 %.
DeepSpeed's own estimators count the step's fp32 gradients as always alive; Megatron's theoretical_memory_usage.py
counts what this module counts, less the terms tests/schedule/test_memory_reference.py names.
"""

from __future__ import annotations

from typing import Mapping

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.ddp_buckets import chunk_tensors, distopt_padding_elems, fp8_param_gather
from llmperf_hook.graph.op_graph import ChunkOps, OpGraph, StageGraph
from llmperf_hook.graph.params import position_table_rows
from llmperf_hook.graph.step_ops import (DTYPE_BYTES, FP8_PARAM_BYTES, dp_groups, fp8_linear_params,
                                         offloaded_optimizer_share, param_bytes, runs_bf16_optimizer)
from llmperf_hook.graph.zero3_trace import deepspeed_zero, stage_trace
from llmperf_hook.hardware.spec import ClusterSpec, HardwareSpec
from llmperf_hook.schedule import activations as act
from llmperf_hook.schedule.allocator_reserve import (allocator_reserve_bytes, gradients_outgrow_activations,
                                                     loss_blocks)
from llmperf_hook.schedule.gradient_lifetime import (backward_starts_without_gradients, bucket_allocated_after_loss,
                                                     gradients_freed_each_step)
from llmperf_hook.schedule.memory_cpu import (cpu_memory_estimate, cpu_rank_buffers, cpu_rank_memory,
                                             cpu_step_temporary_bytes, on_cpu)
from llmperf_hook.schedule.memory_fit import fit_verdict
from llmperf_hook.schedule.memory_rule import must_fit_bytes
from llmperf_hook.schedule.optimizer_state import (FP32_BYTES, foreach_step_temporary_bytes_per_param,
                                                   optimizer_bytes_per_param, step_temporary_bytes_per_param)
from llmperf_hook.schedule.step_estimate import MemoryEstimate

CUDA_CONTEXT_BYTES = 800 * 2**20
"""CUDA context + cuBLAS/cuDNN workspaces of a PyTorch rank: 500-1,000 MiB in nvidia-smi after init on A100/H100
(PyTorch CUDA semantics notes; lazy module loading). 800 MiB."""
NCCL_BYTES_PER_COMMUNICATOR = 200 * 2**20
"""NCCL buffers per communicator: NCCL_BUFFSIZE 4 MiB x (send + recv) x up to 16-32 channels, plus proxies;
~100-300 MiB per communicator with more than one rank (NCCL environment-variable docs)."""
DEEPSPEED_BUCKET_ELEMS = 500_000_000
"""DeepSpeed reduce_bucket_size / allgather_bucket_size defaults (deepspeed/runtime/zero/config.py)."""
DEEPSPEED_ZERO3_LIVE_ELEMS = 1_000_000_000
"""DeepSpeed stage3_max_live_parameters default."""
DEEPSPEED_ZERO3_PREFETCH_ELEMS = 50_000_000
"""DeepSpeed stage3_prefetch_bucket_size default."""


def shard_counts(cfg: TrainingConfig, gpus_per_node: int) -> tuple[int, int]:
    """(dense, expert) ranks the sharded state of one rank is split over: the dp x cp group and the expert
    data-parallel group, each split into Megatron's --num-distributed-optimizer-instances (parallel_state.py:
    intra_partial_data_parallel_size = dp x cp / N, and the expert data-parallel group's intra-partial size
    likewise), whose every instance holds a whole copy of the sharded state."""
    dense, edp = dp_groups(cfg, gpus_per_node)
    n = max(1, cfg.optimizer.distopt_instances)
    return max(1, dense.group_size // n), max(1, edp.group_size // n)


def partition_params(cfg: TrainingConfig, stage: StageGraph, gpus_per_node: int) -> float:
    """Parameters of one rank's share of the sharded state (distributed optimizer, ZeRO, FSDP): the one place that
    divides a stage's parameters by its shard counts."""
    d_dense, d_expert = shard_counts(cfg, gpus_per_node)
    num_expert = float(stage.num_expert_params)
    return (stage.num_params - num_expert) / d_dense + num_expert / d_expert


def state_bytes(cfg: TrainingConfig, stage: StageGraph, gpus_per_node: int,
                gpu: HardwareSpec | None = None) -> dict[str, float]:
    o = cfg.optimizer
    d_dense, d_expert = shard_counts(cfg, gpus_per_node)
    total, sharded = float(stage.num_params), partition_params(cfg, stage, gpus_per_node)
    fp32 = cfg.precision == "fp32"
    weight_b = 4 if fp32 else 2
    grad_b = 4 if (fp32 or (o.fp32_main_grads and "deepspeed" not in cfg.framework)) else 2
    # by optimizer and state dtypes (schedule/optimizer_state.py); DeepSpeed ZeRO-1/2's master clone of fp32 weights
    opt_b = optimizer_bytes_per_param(cfg) + zero_fp32_master_bytes_per_param(cfg)
    weights = sharded * weight_b if o.zero_stage >= 3 else total * weight_b
    grads = sharded * grad_b if o.zero_stage >= 2 else total * grad_b
    if gradient_partition_on_host(cfg):
        grads = 0.0  # only the bucket being reduced stays on the GPU (zero_buckets)
    # ZeRO-1/2's fp32 gradient partition exists only during the step: optimizer_step_bytes.
    if "deepspeed" in cfg.framework and o.zero_stage == 0 and not fp32:
        # bf16_optimizer.py fp32_groups_gradients_flat, in grad_acc_dtype (fp16: FP16_Optimizer's fp32 flat grads)
        grads += total * (DTYPE_BYTES[str(o.zero0_bf16_accum_dtype)] if runs_bf16_optimizer(cfg) else 4)
    grads += grad_accum_extra_bytes(cfg, total, sharded, grad_b)
    # BF16_Optimizer without ZeRO partitions the fp32 master and the optimizer state over DP as ZeRO-1 does
    opt = sharded * opt_b if (o.distributed_optimizer or o.zero_stage >= 1 or runs_bf16_optimizer(cfg)) else total * opt_b
    # Partial offload (ZeRO-3 offload_optimizer.ratio < 1): the GPU keeps its sub-groups' optimizer state.
    opt *= 1.0 - offloaded_optimizer_share(cfg, int(sharded))
    if o.offload_param != "none" and o.zero_stage >= 3:
        weights = 0.0
    out = {"weights": weights, "gradients": grads, "optimizer_states": opt}
    fp8_primary, fp8_copies = fp8_weight_bytes(cfg, stage, gpu)
    if fp8_copies:
        out["weights"] -= fp8_primary  # 1 byte, not 2, per fp8 primary weight
        out["fp8_weight_copies"] = fp8_copies
    padding = distopt_padding_elems(cfg, stage.stage, stage.chunks, d_dense, d_expert)
    if padding:
        # the padded parameter and gradient buffers; the fp32 shards cover parameters only (distrib_optimizer.py)
        out["distopt_bucket_padding"] = padding * (weight_b + grad_b)
    k = min(o.zero_hpz_partition_size, d_dense)
    if o.zero_stage == 3 and k > 1 and o.offload_param == "none":
        # hpZ secondary partition: 1/k of every 16-bit weight, in the parameters' dtype, kept from a layer's first
        # release until the step (partition_parameters.py _partition_param_sec: tensor_size // num_ranks_in_param_group;
        # ZeRO++ Sec. 3.2, memory overhead M/k).
        out["zero_hpz_secondary"] = total / k * weight_b
    return out


def zero_fp32_master_bytes_per_param(cfg: TrainingConfig) -> float:
    """The fp32 master partition DeepSpeed ZeRO-1/2 clones of fp32 weights: 4 bytes per partition parameter.
    stage_1_and_2.py __init__ builds single_partition_of_fp32_groups from
    `parallel_partitioned_bit16_groups[i][partition_id].detach().clone().to(dtype=master_weights_and_grads_dtype)`,
    a copy whatever the weights' dtype (deepspeed 0.19.8 L560; 0.19.6 L492), which optimizer_bytes_per_param's fp32
    Adam (8: the two moments) leaves out; 16-bit weights have it in their 12. ZeRO-3 appends the fp32 weights'
    own flat partition as the master when the dtypes match (stage3.py _create_fp32_partitions): no copy."""
    o = cfg.optimizer
    fp32_zero12 = "deepspeed" in cfg.framework and cfg.precision == "fp32" and o.zero_stage in (1, 2)
    return float(FP32_BYTES) if fp32_zero12 else 0.0


FP8_COPY_BYTES_PER_PARAM = 2
"""Transformer Engine's fp8 copy of a 16-bit linear weight on Hopper: the row-wise data the forward GEMM reads and the
column-wise (transposed) data the backward's data-gradient GEMM reads, one byte each. Hopper's fp8 GEMMs take only
the TN layout (TransformerEngine 2.17 pytorch/utils.py L657-662 is_non_tn_fp8_gemm_supported: sm 10.x and >= 13
only); fp8_copy_bytes_per_param has the other GPUs and recipes."""
MX_SCALE_BYTES_PER_PARAM = 1.0 / 32
"""MXFP8: one E8M0 scale byte per block of 32 elements, per orientation (OCP Microscaling Formats spec v1.0)."""


def non_tn_fp8_gemms(gpu: HardwareSpec | None) -> bool:
    """TE's is_non_tn_fp8_gemm_supported on `gpu`: compute capability 10.x (B200, GB200) or >= 13. Unknown: Hopper's
    TN-only GEMMs."""
    cc = gpu.compute_capability if gpu is not None else 0.0
    return 10.0 <= cc < 12.0 or cc >= 13.0


def fp8_copy_bytes_per_param(cfg: TrainingConfig, gpu: HardwareSpec | None) -> tuple[float, float]:
    """(row-wise, column-wise) bytes per linear parameter of a quantized weight. Per-tensor recipes (delayed,
    tensorwise): one byte each on Hopper; on Blackwell one layout serves both usages (TE docs, features/low_precision_
    training/performance_considerations: 'On Blackwell, rowwise and columnwise usages share the same memory layout'),
    so the column-wise half costs nothing. mxfp8 scales 1x32 blocks along rows and along columns: two copies with
    their scales on any GPU; blockwise (1x128 / 128x128) keeps a transposed copy too."""
    if cfg.fp8_recipe == "mxfp8":
        return 1 + MX_SCALE_BYTES_PER_PARAM, 1 + MX_SCALE_BYTES_PER_PARAM
    if cfg.fp8_recipe != "blockwise" and non_tn_fp8_gemms(gpu):
        return 1.0, 0.0
    return 1.0, 1.0


def fp8_weight_bytes(cfg: TrainingConfig, stage: StageGraph, gpu: HardwareSpec | None = None) -> tuple[float, float]:
    """(bytes `weights` over-counts, bytes of fp8 weight copies) of a rank under Megatron + Transformer Engine fp8.

    Without --fp8-param-gather every linear weight stays bf16 and TE caches its fp8 cast across micro-batches and
    steps (module/linear.py L421-433 quantize_weight(workspace=..., cache=args.cache_weight), L1924 cache_weight =
    cache_name is not None, which Megatron requests by passing is_first_microbatch unless
    --disable-parameter-transpose-cache: megatron/core/extensions/transformer_engine.py L1338-1344): row-wise +
    column-wise bytes per linear parameter (fp8_copy_bytes_per_param). With that flag each forward quantizes the
    weight afresh and saves only its column-wise usage for the data gradient (linear.py: weightmat.update_usage(
    rowwise_usage=False) before ctx.save_for_backward): one copy per micro-batch in flight (one layer's under full
    recompute, whose forward saves nothing). With --fp8-param-gather the weight is the fp8 tensor itself, row-wise
    data in Megatron's uint8 parameter buffer (graph/step_ops.FP8_PARAM_BYTES), and its column-wise usage is created
    beside it after each all-gather (megatron/core/distributed/param_and_grad_buffer.py L343 calls
    fp8_utils.post_all_gather_processing -> TE tensor/utils.py L950-956 _create_transpose)."""
    if not act.fp8_saves_gemm_inputs(cfg) or cfg.framework != "megatron" or cfg.optimizer.zero_stage >= 3:
        return 0.0, 0.0
    linear = float(fp8_linear_params(cfg, stage.stage, stage.num_params, stage.num_layers))
    rowwise_b, columnwise_b = fp8_copy_bytes_per_param(cfg, gpu)
    if fp8_param_gather(cfg):
        # the fp8 weight is the copy's row-wise half: only its column-wise usage is extra
        return linear * (2 - FP8_PARAM_BYTES), linear * (rowwise_b + columnwise_b - FP8_PARAM_BYTES)
    if not cfg.parameter_transpose_cache:
        layers = 1.0 / max(1, stage.num_layers) if cfg.recompute.granularity == "full" else \
            act.microbatches_in_flight(cfg, stage.stage)
        return 0.0, linear * (columnwise_b or rowwise_b) * layers  # the row-wise layout where it serves both
    return 0.0, linear * (rowwise_b + columnwise_b)


def gradient_partition_on_host(cfg: TrainingConfig) -> bool:
    """DeepSpeed ZeRO-2/3 with offload_optimizer: the rank's gradient partition lives in host memory. ZeRO-2
    copies each reduced gradient straight into the CPU fp32 partition (stage_1_and_2.py self.device = 'cpu';
    copy_grads_in_partition returns before grads_in_partition is allocated), ZeRO-3 allocates
    grad_partitions_flat_buffer on self.device, the CPU under any offload_optimizer (stage3.py), partial ratio
    included. ZeRO-1 still accumulates the whole model's 16-bit gradients in param.grad until the boundary; its
    fp32 partition is on the host too (state_bytes). DeepSpeed's own estimators agree: ZeRO-2 offload 2 bytes per
    parameter on the GPU, ZeRO-3 offload_optimizer 2/d (estimate_zero{2,3}_model_states_mem_needs)."""
    o = cfg.optimizer
    return "deepspeed" in cfg.framework and o.zero_stage >= 2 and o.offload_optimizer != "none"


def grad_accum_extra_bytes(cfg: TrainingConfig, total: float, sharded: float, grad_b: int) -> float:
    """DeepSpeed data_types.grad_accum_dtype wider than the 16-bit model: ZeRO-1 keeps a full-model accumulation
    buffer (BF16_Optimizer fp32_groups_gradients_flat, whose partition is a view replacing the fp32 partition;
    otherwise stage_1_and_2.py param.grad_accum per parameter); ZeRO-2/3 accumulate the gradient partition in it
    (stage_1_and_2.py averaged_gradients, stage3.py grad_partitions_flat_buffer dtype=gradient_accumulation_dtype)."""
    o = cfg.optimizer
    if ("deepspeed" not in cfg.framework or cfg.precision == "fp32" or o.grad_accum_dtype not in DTYPE_BYTES
            or gradient_partition_on_host(cfg)):
        return 0.0
    accum_b = DTYPE_BYTES[o.grad_accum_dtype]
    if accum_b <= grad_b:
        return 0.0
    if o.zero_stage == 1:
        return total * accum_b
    return sharded * (accum_b - grad_b) if o.zero_stage >= 2 else 0.0


def zero_reduce_bucket_bytes(cfg: TrainingConfig) -> float:
    """DeepSpeed's gradient reduction bucket: torch.empty(reduce_bucket_size) in the reduction dtype, whatever the
    model's size: the model's, or at ZeRO-1 a wider grad_accum_dtype (stage_1_and_2.py
    _gradient_reduction_buffer_dtype: gradient_accumulation_dtype only under use_grad_accum_attribute, set when it
    differs from the model's dtype and gradients are not partitioned; 'ZeRO-2 keeps low-precision staging'); ZeRO-1/2
    allocate it per backward (setup_buckets, a second one with overlap_comm) and free it at its end
    (_release_ipg_buffers), ZeRO-3 once (stage3.py, one per parameter dtype). The all-gather of the updated weights
    writes into the flat 16-bit parameter buffer itself (runtime/utils.py all_gather_dp_groups): allgather_bucket_size
    allocates nothing."""
    o = cfg.optimizer
    accum = DTYPE_BYTES.get(o.grad_accum_dtype or "", 0)
    dtype_b = max(4 if cfg.precision == "fp32" else 2, accum if o.zero_stage == 1 else 0)
    if o.zero_stage == 3 and o.zero3_comm_dtype_bucket and o.grad_comm_dtype in DTYPE_BYTES:
        dtype_b = DTYPE_BYTES[o.grad_comm_dtype]  # stage3.py ipg_buckets[communication_data_type] (v0.17.2 on)
    return float((o.grad_bucket_size_elems or DEEPSPEED_BUCKET_ELEMS) * dtype_b * zero_bucket_count(cfg))


def zero_bucket_count(cfg: TrainingConfig) -> int:
    """Reduction buckets' worth of gradient memory DeepSpeed holds in backward. contiguous_gradients (the default):
    its ipg buffers, two under ZeRO-1/2 overlap_comm (setup_buckets' double buffer), one otherwise; each gradient is
    copied in and param.grad becomes a view of it. contiguous_gradients false allocates no buffer (stage3.py /
    setup_buckets only `if self.contiguous_gradients`): a bucket's gradients stay separate param.grad tensors until
    reduce_bucket_size of them are ready, and the reduction flattens them into a temporary of the same size
    (stage_1_and_2.py buffered_reduce_fallback -> flatten; stage3.py __avg_scatter_grads -> reduce_scatter_coalesced's
    torch.cat): two buckets, ZeRO-3 included; ZeRO-2 with overlap_comm frees the other partitions' gradients of a
    bucket only during the next reduction (previous_reduced_grads): three. ZeRO-1 keeps every gradient anyway (in
    `gradients`): only the flatten temporary. Offloading ZeRO-1/2 forces contiguous gradients (cpu_offload)."""
    o = cfg.optimizer
    contiguous = o.contiguous_gradients or (o.zero_stage in (1, 2) and o.offload_optimizer != "none")
    if contiguous:
        return 2 if o.zero_stage in (1, 2) and o.overlap_grad_reduce else 1
    if o.zero_stage == 1:
        return 1
    return 3 if o.zero_stage == 2 and o.overlap_grad_reduce else 2


def buffer_bytes(cfg: TrainingConfig, stage: StageGraph, gpus_per_node: int) -> dict[str, float]:
    o, p = cfg.optimizer, cfg.parallel
    out: dict[str, float] = {"cuda_context": float(CUDA_CONTEXT_BYTES)}
    score_buffer = act.score_buffer_bytes(cfg)
    if score_buffer:
        out["attention_score_buffer"] = score_buffer
    communicators = sum(1 for n in (p.tp, p.cp, p.dp * p.cp, p.pp, p.ep) if n > 1)
    out["nccl_buffers"] = float(NCCL_BYTES_PER_COMMUNICATOR * communicators)
    if "deepspeed" in cfg.framework and o.zero_stage >= 1:
        out["zero_buckets"] = zero_reduce_bucket_bytes(cfg)
    if "deepspeed" in cfg.framework and o.zero_stage in (1, 2) and o.offload_optimizer != "none":
        # stage_1_and_2.py: temp_grad_buffer_for_gpu_offload = torch.zeros(largest_param_numel, device=GPU) in the
        # model's dtype, the GPU side of each gradient's copy to and from the host, kept for the whole run
        largest = max((n for part in stage_param_tensors(cfg, stage) for n in part), default=0)
        out["zero_offload_grad_staging"] = float(largest * param_bytes(cfg))
    if o.zero_stage >= 3 and deepspeed_zero(cfg):
        # held by the reuse distance, running, and prefetched, over DeepSpeed's fetch trace (graph/zero3_trace.py);
        # none over a partition group of one rank, whose fetch makes each parameter a view of its partition
        # (partition_parameters.py all_gather_coalesced -> _no_gather_coalesced: NoGatherHandle sets param.data =
        # ds_tensor.data.to(device), the same tensor; measured: z3a-c and h04 allocate no gathered copy)
        if max(shard_counts(cfg, gpus_per_node)) > 1:
            out["zero3_live_params"] = float(stage_trace(cfg, stage.stage).peak_live_elems * param_bytes(cfg))
    elif o.zero_stage >= 3:
        layer = stage.num_params / max(1, stage.num_layers)
        prefetch = o.stage3_prefetch_bucket_size_elems  # 0 = no prefetch buffer (fetch on demand)
        live = min(o.stage3_max_live_parameters or DEEPSPEED_ZERO3_LIVE_ELEMS,
                   2 * layer + (DEEPSPEED_ZERO3_PREFETCH_ELEMS if prefetch is None else prefetch))
        out["zero3_live_params"] = float(live * 2)
    return out


def stage_param_tensors(cfg: TrainingConfig, stage: StageGraph) -> tuple[list[int], list[int]]:
    """(dense, expert) parameter tensors of a pipeline rank in registration order, the order ZeRO and Megatron's
    buffers flatten them: chunk_tensors, whose one embedding entry is the word embedding and the learned position
    table, separate nn.Embedding parameters (language_model_embedding.py word_embeddings / position_embeddings)."""
    dense: list[int] = []
    expert: list[int] = []
    for chunk in stage.chunks:
        d, e = chunk_tensors(cfg, chunk)
        if d and chunk.blocks and chunk.blocks[0].name == "embedding":
            positions = position_table_rows(cfg) * cfg.model.hidden_size
            d = [d[0] - positions, positions, *d[1:]]
        dense += [n for n in d if n > 0]
        expert += [n for n in e if n > 0]
    return dense, expert


def checkpoints_off_gpu_bytes(cfg: TrainingConfig, chunk_layers: int) -> float:
    """Full-recompute checkpoint bytes of a chunk (one micro-batch) that Megatron-DeepSpeed's deepspeed.checkpointing
    keeps off this GPU: --partition-activations stores 1/TP of each (checkpointing.py partition_activations:
    narrow(0, get_partition_start, size / mp_size)), --checkpoint-in-cpu stores them in host memory (buffer_device
    cpu). Checkpoints per chunk as activations.chunk_layer_bytes counts them."""
    r, t = cfg.recompute, cfg.parallel.tp
    if r.granularity != "full" or not (r.partition_activations or r.checkpoint_in_cpu):
        return 0.0
    n = max(1, r.num_layers or 1)
    count = min(n, chunk_layers) if r.method == "block" and r.num_layers is not None else -(-chunk_layers // n)
    stored = count * act.layer_activation_bytes(cfg)  # 2sbh (/t under SP) each
    kept = 0.0 if r.checkpoint_in_cpu else stored / (t if r.partition_activations else 1)
    return stored - kept


def moe_layer_count(chunk: ChunkOps) -> int | None:
    """MoE layers of a chunk from its blocks (graph/build.py _layer_blocks), None when it lists no layer block."""
    names = [(b.name, b.count) for b in chunk.blocks if b.name.startswith(("dense_layer", "moe_layer"))]
    return sum(n for name, n in names if name.startswith("moe_layer")) if names else None


def activation_bytes(cfg: TrainingConfig, stage: StageGraph) -> dict[str, float]:
    in_flight = act.microbatches_in_flight(cfg, stage.stage)
    mixes = [(c.num_layers, moe_layer_count(c)) for c in stage.chunks]  # a chunk's bytes follow its layer mix alone
    of_mix = {mix: act.chunk_layer_bytes(cfg, *mix) - checkpoints_off_gpu_bytes(cfg, mix[0]) for mix in set(mixes)}
    per_chunk = [of_mix[mix] for mix in mixes]
    offloaded = act.cpu_offloaded_layers(cfg) * act.layer_activation_bytes(cfg)  # held in host memory instead
    out = {"activations": sum(per_chunk) / len(per_chunk) * cfg.parallel.vpp * in_flight - offloaded}
    recompute = act.recompute_working_bytes(cfg)
    if recompute:
        out["recompute_working_set"] = recompute
    softmax_backward = act.softmax_backward_extra_bytes(cfg)
    if softmax_backward:
        out["softmax_backward_working_set"] = softmax_backward
    if stage.stage == 0:
        out["embedding_activations"] = act.embedding_activation_bytes(cfg) * in_flight
    if stage.stage == cfg.parallel.pp - 1:
        out["logits_and_loss"] = act.output_activation_bytes(cfg)
        deferred = act.deferred_embedding_wgrad_bytes(cfg)
        if deferred:
            out["deferred_embedding_wgrad"] = deferred
        if cfg.model.mtp_num_layers:
            out["mtp_activations"] = act.mtp_activation_bytes(cfg)
    return out


TRANSIENT_PARTS = frozenset({"activations", "recompute_working_set", "softmax_backward_working_set",
                             "embedding_activations", "logits_and_loss", "mtp_activations",
                             "deferred_embedding_wgrad"})
"""Components alive in the backward only; the caching allocator's residue applies to them
(allocator_reserve.FRAGMENTATION_FRACTION)."""


def stage_must_fit_bytes(parts: Mapping[str, float]) -> int:
    """memory_rule.must_fit_bytes of one rank's components (stage_memory): its peak less the allocator's reserve."""
    return int(must_fit_bytes(sum(parts.values()), parts.get("allocator_fragmentation", 0)))


BACKWARD_WORKING_PARTS = ("recompute_working_set", "softmax_backward_working_set")
"""Transients of one layer's backward (its recomputed forward, the PyTorch softmax's gradient tensors)."""


def one_peak_of_two(parts: dict[str, float]) -> dict[str, float]:
    """The logits and loss of the last stage and a layer's backward working set are never alive together: the
    layers' backward starts after the LM head's and the cross-entropy's backward have freed them (autograd runs the
    head first; only the sbh gradient into the last layer remains), so the peak holds the larger of the two. The
    smaller is dropped from the components, which sum to the peak."""
    logits = parts.get("logits_and_loss", 0.0)
    working = sum(parts.get(k, 0.0) for k in BACKWARD_WORKING_PARTS)
    if not logits or not working:
        return parts
    if logits >= working:
        return {k: v for k, v in parts.items() if k not in BACKWARD_WORKING_PARTS}
    return {k: v for k, v in parts.items() if k != "logits_and_loss"}


def stage_memory(cfg: TrainingConfig, stage: StageGraph, gpus_per_node: int,
                 gpu: HardwareSpec | None = None) -> dict[str, int]:
    """Bytes per component at the rank's peak; they sum to the caching allocator's reserved peak, of which
    allocator_fragmentation is not allocated (schedule/allocator_reserve.py).

    Two phases never overlap: the backward (state, every saved activation, the loss's or a layer's working set,
    buckets and gathered parameters) and the optimizer step (state and what optimizer_step_bytes holds). Where the
    backward starts without gradients (backward_starts_without_gradients) its peak holds none; the gradients then
    count only what the later phase (the backward's end, every gradient allocated; or the step) holds beyond the
    backward's transients, which it replaces."""
    parts = {**state_bytes(cfg, stage, gpus_per_node, gpu), **activation_bytes(cfg, stage),
             **buffer_bytes(cfg, stage, gpus_per_node)}
    if on_cpu(gpu):  # no CUDA context / NCCL; DeepSpeed's buckets resident by the gradients written (memory_cpu.py)
        bucket_elems = (cfg.optimizer.grad_bucket_size_elems or DEEPSPEED_BUCKET_ELEMS) * zero_bucket_count(cfg)
        parts = cpu_rank_buffers(parts, bucket_elems, stage.num_params)
    parts = one_peak_of_two(parts)
    if bucket_allocated_after_loss(cfg) and "logits_and_loss" in parts and "zero_buckets" in parts:
        smaller = min(("zero_buckets", "logits_and_loss"), key=lambda k: parts[k])
        parts = {k: v for k, v in parts.items() if k != smaller}  # never alive together: the peak holds the larger
    transient = sum(v for k, v in parts.items() if k in TRANSIENT_PARTS)
    freed_buckets = cfg.optimizer.zero_stage in (1, 2) or not cfg.optimizer.contiguous_gradients
    backward_only = transient + parts.get("zero3_live_params", 0.0) + (
        parts.get("zero_buckets", 0.0) if freed_buckets else 0.0)
    grads, step = parts["gradients"], optimizer_step_bytes(cfg, stage, gpus_per_node)
    if on_cpu(gpu):  # torch.optim's single-tensor Adam on the flat partition (memory_cpu.py)
        step += cpu_step_temporary_bytes(cfg, partition_params(cfg, stage, gpus_per_node))
    no_grads = backward_starts_without_gradients(cfg)
    if no_grads:
        later = max(grads, step)
        parts["gradients"] = min(grads, max(0.0, later - backward_only))
        top_up = later - backward_only - parts["gradients"]
    else:
        top_up = step - grads - backward_only
    if top_up > 0:
        # The optimizer step is the peak (the two phases never overlap): the components sum to the larger.
        parts["optimizer_step_working_set"] = top_up
    if on_cpu(gpu):
        return cpu_rank_memory(cfg, parts)  # the C library's allocator: no caching-allocator reserve
    allocated = sum(parts.values()) - parts.get("cuda_context", 0.0)
    held_later = max(0.0, top_up) + (parts["gradients"] if no_grads else 0.0)
    partition, step_buffers = step_flat_buffers(cfg, stage, gpus_per_node)
    own_segments = weight_gradient_bytes(cfg, stage) if gradients_outgrow_activations(cfg) else 0.0
    parts["allocator_fragmentation"] = allocator_reserve_bytes(
        allocated, allocated - held_later, transient, loss_blocks(cfg, stage.stage == cfg.parallel.pp - 1),
        ((partition,) if partition and no_grads else ()) + step_buffers, own_segments)
    return {k: int(v) for k, v in parts.items()}


def weight_gradient_bytes(cfg: TrainingConfig, stage: StageGraph) -> float:
    """Bytes of the param.grad tensors a backward allocates one per weight, in the model's dtype, where the gradients
    are freed at every step (gradients_freed_each_step) and stay per-parameter tensors until the step: DeepSpeed
    ZeRO-0/1 (ZeRO-2 copies each into its partition bucket by bucket) and torch.optim scripts."""
    if not gradients_freed_each_step(cfg) or cfg.optimizer.zero_stage >= 2:
        return 0.0
    return float(stage.num_params * param_bytes(cfg))


def step_flat_buffers(cfg: TrainingConfig, stage: StageGraph, gpus_per_node: int) -> tuple[float, tuple[float, ...]]:
    """(the contiguous gradient partition, the step's flat tensors in order): bytes of the single flat tensors
    DeepSpeed allocates after the backward's peak (the caching allocator serves each from one block:
    schedule/allocator_reserve.py). ZeRO-1/2: the contiguous gradient partition (copy_grads_in_partition: torch.empty
    of the partition, from the first gradient after the loss; with accumulation it is alive at later backwards'
    peaks already, so it counts only where backward_starts_without_gradients), then the step's
    flatten_dense_tensors_aligned copy and its
    .to(fp32) (stage_1_and_2.py step), over fp32 weights the partition and the copy in fp32 alone. ZeRO-3: per
    optimizer sub-group the flattened gradient partition and its fp32 cast (stage3.py
    _prepare_fp32_grad_for_sub_group; optimizer_step_bytes), its gradient partition being allocated once. Without
    ZeRO on a 16-bit model, FP16_Optimizer's flattened fp32 gradient (fp16/fused_optimizer.py step:
    _flatten_dense_tensors of every p.grad.to(fp32)). None elsewhere (other fp32 training, offload, BF16_Optimizer's
    buffers allocated at init, Megatron's buffers allocated once)."""
    o = cfg.optimizer
    fp32 = cfg.precision == "fp32"
    if ("deepspeed" not in cfg.framework or (fp32 and o.zero_stage not in (1, 2)) or o.offload_optimizer != "none"
            or runs_bf16_optimizer(cfg)):
        return 0.0, ()
    if o.zero_stage == 0:
        return 0.0, (4.0 * stage.num_params,)
    sharded = partition_params(cfg, stage, gpus_per_node)
    if fp32:  # ZeRO-1/2 over fp32 weights: the flattened copy is already fp32 (optimizer_step_bytes)
        return (4.0 * sharded if o.contiguous_gradients else 0.0), (4.0 * sharded,)
    if o.zero_stage >= 3:
        sub_group = min(sharded, o.sub_group_size_elems)
        partition_b = max(2, DTYPE_BYTES.get(o.grad_accum_dtype or "", 0))
        return 0.0, (partition_b * sub_group,) + ((4.0 * sub_group,) if partition_b < 4 else ())
    return (2.0 * sharded if o.contiguous_gradients else 0.0), (2.0 * sharded, 4.0 * sharded)


def optimizer_step_bytes(cfg: TrainingConfig, stage: StageGraph, gpus_per_node: int) -> float:
    """Gradient bytes alive during the optimizer step (DeepSpeed's; Megatron-LM's below), once the backward's
    activations and buckets are freed (the weights and optimizer states are alive in both phases).

    ZeRO-1/2: the step flattens the rank's 16-bit gradient partition, casts it to an fp32 partition for Adam and
    frees it after the step (stage_1_and_2.py step: flatten(averaged_gradients).to(fp32), then
    single_partition_of_fp32_groups[i].grad = None): 2 + 2 + 4 bytes per parameter of the partition; the other
    ranks' gradients are freed first (free_grad_in_param_list). Over fp32 weights 4 + 4: the fp32 gradient partition
    and its flattened copy, whose .to(fp32) is the same tensor (deepspeed 0.19.8 stage_1_and_2.py L3114-3118).
    ZeRO-3 does the same per optimizer sub-group (_prepare_fp32_grad_for_sub_group, _release_sub_group) beside its
    gradient partition, which is in the grad_accum_dtype (grad_partitions_flat_buffer): an fp32 partition's flattened
    copy is already fp32 (4, not 2 + 4), the partition 4 bytes per parameter. DeepSpeed's
    estimate_zero{2,3}_model_states_mem_needs count the fp32 gradients (4 of their 18 bytes) as always alive.
    Measured on one H100 (measurements/h100-sxm5-80gb-2026-11-26, ZeRO-1 bf16, torch AdamW): 22.0 bytes per
    parameter at the peak of the runs the step dominates (c05, c06) = 2 + 12 + 8. Offloaded optimizers add
    nothing; without ZeRO (BF16_Optimizer / FP16_Optimizer, whose fp32 gradients `gradients` counts, or a client
    optimizer) and in a plain torch script, a torch.optim foreach Adam's temporaries (torch_foreach_step_bytes:
    measured h01, c03: 2 + 12 + 2 + 4 + 4 bytes per parameter at the step). Megatron-LM:
    the fp32 copies Transformer Engine's FusedAdam makes of the precision-aware optimizer's lower-precision
    states, or the fp32 copies of 16-bit main gradients
    (schedule/optimizer_state.step_temporary_bytes_per_param), beside its gradient buffer."""
    o = cfg.optimizer
    temporaries = step_temporary_bytes_per_param(cfg)
    if temporaries:
        on_rank = partition_params(cfg, stage, gpus_per_node) if o.distributed_optimizer else stage.num_params
        return state_bytes(cfg, stage, gpus_per_node)["gradients"] + temporaries * on_rank
    if "deepspeed" not in cfg.framework or o.zero_stage == 0 or runs_bf16_optimizer(cfg):
        return torch_foreach_step_bytes(cfg, stage, gpus_per_node)
    if o.offload_optimizer != "none" or (cfg.precision == "fp32" and o.zero_stage == 3):
        return 0.0
    sharded = partition_params(cfg, stage, gpus_per_node)
    if o.zero_stage == 3:
        partition_b = max(2, DTYPE_BYTES.get(o.grad_accum_dtype or "", 0))
        sub_group_b = partition_b + (4 if partition_b < 4 else 0)  # flatten, then .to(fp32) copies unless fp32
        return partition_b * sharded + sub_group_b * min(sharded, o.sub_group_size_elems)
    return 8.0 * sharded


def torch_foreach_step_bytes(cfg: TrainingConfig, stage: StageGraph, gpus_per_node: int) -> float:
    """Gradient and temporary bytes alive while a torch.optim multi-tensor Adam steps the rank's parameters (a plain
    torch script, DeepSpeed without ZeRO stepping its client optimizer, BF16_Optimizer's partition): every gradient
    the step reads, and the square roots of the second moments it allocates for the step
    (optimizer_state.foreach_step_temporary_bytes_per_param). 0 where no such temporary exists (fused kernels, the
    frameworks' own Adam) or under FSDP."""
    per_param = foreach_step_temporary_bytes_per_param(cfg)
    if not per_param or cfg.optimizer.fsdp != "none":
        return 0.0
    partitioned = cfg.optimizer.distributed_optimizer or runs_bf16_optimizer(cfg)
    stepped = partition_params(cfg, stage, gpus_per_node) if partitioned else float(stage.num_params)
    return state_bytes(cfg, stage, gpus_per_node)["gradients"] + per_param * stepped


def estimate_memory(cfg: TrainingConfig, graph: OpGraph, cluster: ClusterSpec) -> MemoryEstimate:
    """Peak bytes per GPU on the busiest pipeline rank and whether it fits the GPU; the host memory per node that
    the offloads pin (schedule/host_memory.py) against the cluster's host RAM."""
    from llmperf_hook.graph.build import ranks_per_node
    from llmperf_hook.schedule.host_memory import host_memory_per_node  # it builds on this module

    gpus_per_node = ranks_per_node(cfg, cluster)
    per_stage = [stage_memory(cfg, s, gpus_per_node, cluster.gpu) for s in graph.stages]
    peaks = [sum(parts.values()) for parts in per_stage]
    worst = max(range(len(peaks)), key=lambda i: peaks[i])
    capacity = cluster.gpu.memory_capacity_bytes
    host = host_memory_per_node(cfg, graph, cluster, gpus_per_node)
    if on_cpu(cluster.gpu):  # peak RSS per rank; the host's ranks and offloads against its RAM (memory_cpu.py)
        return cpu_memory_estimate(cfg, cluster, per_stage, host)
    # what each rank allocates and the residue it cannot free must fit, its cached segments need not
    # (schedule/memory_rule.py); every stage, since the busiest by peak need not be the busiest by must-fit bytes
    must = [stage_must_fit_bytes(parts) for parts in per_stage]
    verdicts = [fit_verdict(p, m, capacity) for p, m in zip(peaks, must)]
    fits = all(v.fits for v in verdicts)
    return MemoryEstimate(peak_bytes_per_gpu=peaks[worst], capacity_bytes=capacity, fits=fits,
                          must_fit_bytes=max(must), tight=fits and any(v.tight for v in verdicts),
                          headroom_bytes=capacity - peaks[worst],
                          components=per_stage[worst], stage=worst, per_stage_peak_bytes=tuple(peaks),
                          host_components=host, host_capacity_bytes=cluster.host_memory_bytes)

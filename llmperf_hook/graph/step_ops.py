"""Data-parallel gradient sync, parameter gathers and the optimizer step, once per step (the per-layer ZeRO-2/3 ops
are graph/zero_layer_ops.py's).

Semantics followed:
- Megatron DDP (megatron/core/distributed/distributed_data_parallel.py): one gradient all-reduce over the
  data-parallel (x context-parallel) group per step, bucketed and overlapped with the last micro-batch's
  backward under --overlap-grad-reduce; with --use-distributed-optimizer a reduce-scatter instead, then an
  all-gather of the updated bf16 parameters (overlapped with the next forward under --overlap-param-gather).
- DeepSpeed ZeRO (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py): stage 0 all-reduce and stage 1
  reduce-scatter at the gradient-accumulation boundary; stage 2 reduce-scatters in every micro-step's backward
  (gradients are partitioned), overlapped when overlap_comm; stages 1-2 all-gather the updated parameters
  after the step; stage 3 all-gathers each layer's parameters before its forward and again before its
  backward (prefetched, overlapped with compute) and reduce-scatters its gradients in backward.
- ZeRO++ (Wang et al. 2023, arXiv:2306.10209) at stage 3: hpZ, qwZ and qgZ (graph/zero_layer_ops.py); the gradient
  reduction in communication_data_type; a partial optimizer offload (offload_optimizer.ratio) splits the step.
- DeepSpeed ZeRO-3 before v0.5.5 / v0.6.0 (runs of that era, validate/framework_era.py): per-tensor list
  all-gathers and reduce-scatters with their per-rank host loop and copies, and (before v0.5.5) the step's
  re-gather of the persistent parameters with one copy per parameter and rank (graph/zero3_legacy.py).
- Expert parameters synchronise over the expert data-parallel group (world / (pp * etp * ep) ranks).
"""

from __future__ import annotations

from dataclasses import replace

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph import params as pc
from llmperf_hook.graph.ddp_buckets import fp8_param_gather, rank_grad_buckets
from llmperf_hook.graph.megatron_step import FUSED_SGD_ACCESSES, megatron_step_ops
from llmperf_hook.graph.nvme_swap_ops import optimizer_nvme_swap_ops
from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.graph.op_graph import ChunkOps
from llmperf_hook.graph.param_tensors import model_param_tensors, optimizer_param_tensors
from llmperf_hook.graph.placement import place_group
from llmperf_hook.graph.zero3_grad_dtypes import zero3_comm_dtype_differs, zero3_grad_dtype_bytes
from llmperf_hook.graph.zero3_hooks import zero3_hook_ops
from llmperf_hook.graph.zero3_legacy import persistent_gather_ops
from llmperf_hook.hardware.spec import ClusterSpec

PARAM_BYTES = 2
"""bf16/fp16 parameter copies gathered by the distributed optimizer and ZeRO (fp32 when training in fp32)."""


def grad_bytes(cfg: TrainingConfig) -> int:
    if cfg.precision == "fp32":
        return 4
    return 4 if cfg.optimizer.fp32_main_grads else 2


def param_bytes(cfg: TrainingConfig) -> int:
    return 4 if cfg.precision == "fp32" else PARAM_BYTES


DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}


def runs_bf16_optimizer(cfg: TrainingConfig) -> bool:
    """DeepSpeed ZeRO-1 with bf16 and data_types.grad_accum_dtype fp32 (no CPU offload) runs BF16_Optimizer, not the
    ZeRO optimizer (engine.py _do_optimizer_sanity_check returns BFLOAT16): an fp32 gradient buffer of the whole
    model, gradients all-reduced by the engine, then each rank steps its fp32 partition and all-gathers the bf16
    weights (bf16_optimizer.py). Without ZeRO it runs for fp32 accumulation, and for bf16 accumulation under the
    PipelineEngine (OptimizerConfig.zero0_bf16_accum_dtype), the same partitioned step."""
    o = cfg.optimizer
    if "deepspeed" not in cfg.framework or cfg.precision != "bf16" or o.offload_optimizer != "none":
        return False
    if o.zero_stage == 0:
        return o.zero0_bf16_accum_dtype == "fp32" or (o.zero0_bf16_accum_dtype == "bf16" and cfg.deepspeed_pipeline_engine)
    return o.zero_stage == 1 and o.grad_accum_dtype == "fp32"


def grad_comm_bytes(cfg: TrainingConfig) -> int:
    """Bytes per element of the gradient reduction. DeepSpeed reduces in engine.communication_data_type: the
    ds_config's when set, else the model's dtype (engine.py: fp16 -> fp16, bf16 -> bf16, else fp32), whatever the
    gradients are accumulated in: ZeRO-1/2's and ZeRO-3's reduction buckets are allocated in it (stage_1_and_2.py /
    stage3.py ipg_buckets[communication_data_type]) and BF16_Optimizer's fp32 gradients are cast to it before the
    all-reduce (engine.allreduce_bucket). An fp8 job's engine runs 16-bit weights (param_bytes). Other frameworks:
    grad_bytes."""
    dtype = cfg.optimizer.grad_comm_dtype
    if dtype in DTYPE_BYTES:
        return DTYPE_BYTES[dtype]
    if "deepspeed" in cfg.framework:
        return param_bytes(cfg)
    return grad_bytes(cfg)


def dp_groups(cfg: TrainingConfig, gpus_per_node: int) -> tuple[Collective, Collective]:
    """(dense gradient group = dp x cp, expert gradient group = expert data parallel)."""
    p = cfg.parallel
    dense = place_group("dp_cp", p.dp * p.cp, p, gpus_per_node)
    edp = max(1, p.tp * p.cp * p.dp // (max(1, p.etp) * p.ep))
    return dense, place_group("edp", edp, p, gpus_per_node)


def comm_op(name: str, op_class: str, phase: str, nbytes: float, coll: Collective, cfg: TrainingConfig,
          overlap: str | None) -> Op:
    tags = {"overlap": overlap} if overlap else {}
    return Op(name, op_class, phase, {"bytes": int(nbytes)}, dtype=cfg.precision, collective=coll, tags=tags)


NCCL_RINGS_PER_NIC = 2
"""Channels (one thread block, one SM each) of an NCCL ring across nodes per NIC of the node (github.com/NVIDIA/nccl
src/graph/search.cc ncclTopoCompute: the search starts a channel at speedArrayInter / sm90SpeedArrayInter just under
the NIC's bandwidth, 24 GB/s on HDR, 48 on NDR, so one channel fills one NIC; ncclTopoDupChannels leaves them (sm80:
bwIntra < 25; sm90: < 50 with more than 4 channels); src/graph/connect.cc ncclTopoPostset doubles every ring:
2 x NICs. A DGX A100 or DGX H100 ring across nodes: 16 thread blocks)."""
NCCL_RING_SEARCH_MAX_CHANNELS = 32
"""Most channels the ring search keeps, however many NICs a node has (src/init.cc ringGraph->maxChannels =
MAXCHANNELS / 2, MAXCHANNELS 64 in src/include/device.h; ncclTopoPostset's doubling is capped at MAXCHANNELS):
a ring holds at most 64 thread blocks per GPU. Binds where the node is a whole NVLink domain (GB200 NVL72: 72 NICs)."""


def inter_node_ring_sm_share(cluster: ClusterSpec) -> float:
    """Share of the GPU's SMs an NCCL ring across nodes holds while the backward's GEMMs run beside it: 2 x NICs
    thread blocks over the GPU's SMs; a cluster that states no NIC count is taken as one NIC per GPU (the DGX /
    HGX rail layout); 0 where the preset states no SMs: no contention priced."""
    sms = cluster.gpu.streaming_multiprocessors
    channels = min(cluster.nics_per_node or cluster.gpus_per_node, NCCL_RING_SEARCH_MAX_CHANNELS)
    return min(1.0, NCCL_RINGS_PER_NIC * channels / sms) if sms > 0 else 0.0


def reduces_in_backward(cfg: TrainingConfig) -> bool:
    """The gradient reduction runs during the last backward (OptimizerConfig.overlap_grad_reduce: Megatron's
    --overlap-grad-reduce, FSDP, DeepSpeed's overlap_comm), except where DeepSpeed reduces after it whatever
    overlap_comm says: ZeRO-0 and BF16_Optimizer have no reduction hooks, and engine._backward_epilogue calls
    allreduce_gradients once the backward is done, which reduces through buffered_allreduce_fallback (engine.py;
    BF16_Optimizer has no reduce_gradients). The ZeRO optimizer's hooks reduce inside the backward of the
    accumulation boundary (stage_1_and_2.py), which the PipelineEngine reaches only in its ReduceGrads
    instruction, after every backward (pipe/engine.py _exec_reduce_grads sets _force_grad_boundary)."""
    o = cfg.optimizer
    after_backward = "deepspeed" in cfg.framework and (o.zero_stage == 0 or runs_bf16_optimizer(cfg)
                                                       or cfg.deepspeed_pipeline_engine)
    return o.overlap_grad_reduce and not after_backward


def _grad_sync(cfg: TrainingConfig, name: str, params: int, coll: Collective, sharded: bool,
               buckets: list[int], sm_shares: tuple[float, float] = (0.0, 0.0)) -> list[Op]:
    """One reduction per bucket (graph/ddp_buckets.py); `buckets` empty = the whole `params` at once. Overlapped
    with the last backward, each carries the share of the SMs its NCCL kernel takes from the GEMMs (`sm_shares`:
    in-node ring, ring across nodes), which schedule/compose.step_ops_cost charges."""
    if params <= 0 or coll.group_size == 1:
        return []
    overlap = "grad_reduce" if reduces_in_backward(cfg) else None
    op_class = "reducescatter" if sharded else "allreduce"
    ops = [comm_op(f"{name}.grad_{op_class}", op_class, "step", n * grad_comm_bytes(cfg), coll, cfg, overlap)
           for n in (buckets or [params])]
    share = sm_shares[0] if coll.intra_node else sm_shares[1]
    if overlap and share > 0:
        ops = [replace(op, tags={**op.tags, "sm_share": f"{share:.4f}"}) for op in ops]
    return ops


def _param_gather(cfg: TrainingConfig, name: str, params: int, coll: Collective, fp8_params: int = 0) -> list[Op]:
    """The distributed optimizer's all-gather of the updated weights, one per DDP buffer: the 16-bit buffer's, and
    under --fp8-param-gather the uint8 buffer of the `fp8_params` fp8 weights, 1 byte each (Megatron groups them
    apart: param_and_grad_buffer.py group_params_for_buffers, graph/ddp_buckets.chunk_buffers)."""
    if params <= 0 or coll.group_size == 1:
        return []
    overlap = "param_gather" if cfg.optimizer.overlap_param_gather else None
    parts = [(name, (params - fp8_params) * param_bytes(cfg)), (f"{name}.fp8", fp8_params * FP8_PARAM_BYTES)]
    return [comm_op(f"{part}.param_allgather", "allgather", "step", nbytes, coll, cfg, overlap)
            for part, nbytes in parts if nbytes > 0]


FP8_PARAM_BYTES = 1
"""An fp8 primary weight: Megatron's parameter buffer holds Transformer Engine's Float8Tensor data as torch.uint8
(megatron/core/distributed/param_and_grad_buffer.py L894-923: 'param_dtype: storage dtype (torch.uint8 for
FP8/NVFP4 parameters)'), so its all-gather moves one byte per parameter."""


def fp8_linear_params(cfg: TrainingConfig, stage: int, num_params: int, num_layers: int) -> int:
    """Of a rank's `num_params`, those in Transformer Engine linear layers (QKV, projection, FC1, FC2, experts):
    all but the stage's embedding / output layer and each layer's two norm weights (TE's LayerNormLinear keeps
    layer_norm_weight in high precision under fp8_model_init). Biases are counted with the linear layers."""
    return max(0, num_params - _non_layer_params(cfg, stage) - num_layers * 2 * pc.norm_params(cfg))


MAIN_GRAD_ADD_KERNELS_PER_LAYER = 12
"""Parameter tensors of a dense GPT layer with biases (two norms' weight and bias, QKV, projection, FC1, FC2 weight
and bias): the DDP hook's main_grad.add_ runs once per tensor."""


def main_grad_add_ops(cfg: TrainingConfig, layer_params: int) -> tuple[Op, ...]:
    """--no-gradient-accumulation-fusion under Megatron's DDP (TrainingConfig.gradient_accumulation_fusion False):
    the linear layers' wgrad GEMMs write param.grad and the backward hook adds it into main_grad, every micro-batch
    (megatron/core/distributed/distributed_data_parallel.py _make_backward_post_hook: param.main_grad.add_(param.grad.data)).
    Read main_grad and param.grad, write main_grad: 2 x grad_bytes + the parameter's bytes per parameter. With the
    fusion the GEMM accumulates into main_grad itself (fused_weight_gradient_mlp_cuda / TE fuse_wgrad_accumulation);
    the adds of norms, biases and the embedding, which run either way, are not priced. Measured on an H100
    (measurements/h100-sxm5-80gb-2026-11-26-b/kernels/l24h2048-m2-norc.txt): aten::add_ 27.4 ms per step, of which
    this formula gives 17.6 ms (1.3 B parameters x 10 B x 4 micro-batches at 2.98 TB/s). DeepSpeed's own accumulation
    of each micro-batch's gradients (Megatron-DeepSpeed included) is priced once per step in the bookkeeping op
    (deepspeed_mixed_precision: DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM x (m - 1)), not here."""
    if cfg.gradient_accumulation_fusion or layer_params <= 0:
        return ()
    per_param = 2 * grad_bytes(cfg) + param_bytes(cfg)
    return (Op("layer.main_grad_add", "grad_accumulate", "bwd",
               {"params": layer_params, "tensors": MAIN_GRAD_ADD_KERNELS_PER_LAYER}, flops=0.0,
               bytes_moved=float(layer_params * per_param), dtype=cfg.precision),)


def _non_layer_params(cfg: TrainingConfig, stage: int) -> int:
    extra = pc.embedding_params(cfg) if stage == 0 else 0
    return extra + (pc.head_params(cfg) if stage == cfg.parallel.pp - 1 else 0)


def build_step_ops(cfg: TrainingConfig, stage: int, num_params: int, num_expert: int,
                   gpus_per_node: int, num_layers: int = 0, chunks: tuple[ChunkOps, ...] = (),
                   sm_shares: tuple[float, float] = (0.0, 0.0)) -> tuple[Op, ...]:
    """The rank's once-per-step ops; `chunks` (its model chunks) lay out Megatron's DDP buckets (graph/ddp_buckets.py),
    without them each gradient buffer is reduced whole; `sm_shares` (in-node ring, ring across nodes) are tagged on
    an overlapped gradient reduction (_grad_sync)."""
    o, p = cfg.optimizer, cfg.parallel
    dense, edp = dp_groups(cfg, gpus_per_node)
    sharded = o.distributed_optimizer or o.zero_stage >= 1 or runs_bf16_optimizer(cfg)
    num_dense = num_params - num_expert
    # ZeRO-2/3 reduce layer gradients inside backward (zero_layer_ops.zero3_layer_comm), DeepSpeed's embedding and
    # head too (zero_edge_ops); FSDP's embedding / head remain here.
    step_dense = num_dense
    if o.zero_stage >= 2 and dense.group_size > 1:
        step_dense = 0 if "deepspeed" in cfg.framework else _non_layer_params(cfg, stage)
    # ZeRO-1/2 under DeepSpeed >= 0.12.4 all-reduce each bucket and keep their partition (OptimizerConfig.zero_grad_allreduce)
    reduce_sharded = sharded and not runs_bf16_optimizer(cfg) and not o.zero_grad_allreduce
    # Megatron's DDP buckets (graph/ddp_buckets.py); under ZeRO-2/3 and FSDP only the embedding / head remain here
    bucketed = chunks and "deepspeed" not in cfg.framework and o.overlap_grad_reduce and step_dense == num_dense
    ops = (_grad_sync(cfg, "dp", step_dense, dense, reduce_sharded,
                      rank_grad_buckets(cfg, stage, chunks, expert=False) if bucketed else [], sm_shares)
           + _grad_sync(cfg, "edp", num_expert, edp, reduce_sharded,
                        rank_grad_buckets(cfg, stage, chunks, expert=True) if bucketed else [], sm_shares))
    ops += _tied_embedding_sync(cfg, stage, gpus_per_node)
    # Megatron --num-distributed-optimizer-instances N: each rank steps its share of dp x cp / N (parallel_state.py
    # intra_partial_data_parallel_size); the gradient reduction is still priced over the whole group
    n = max(1, o.distopt_instances)
    shard_dense = max(1, dense.group_size // n) if sharded else 1
    shard_expert = max(1, edp.group_size // n) if sharded else 1
    local = num_dense // shard_dense + num_expert // shard_expert
    tags = {"offload": o.offload_optimizer} if o.offload_optimizer != "none" else {}
    dims = {"params": local}
    if not sharded and num_expert == 0 and optimizer_param_tensors(cfg, stage, num_layers) > 1:
        # A step over the model's own tensors updates whole layers and the stage's embedding / head
        # (features.OPTIONAL_DIMS): the profile's Adam model tells first, middle and last stages apart by these.
        # DeepSpeed's mixed-precision optimizers step one flat buffer instead: the params-only answer.
        dims.update(layers=num_layers, embedding_params=_non_layer_params(cfg, stage))
    ops += _optimizer_steps(cfg, local, dims, tags)
    ops += optimizer_nvme_swap_ops(cfg, round(local * offloaded_optimizer_share(cfg, local)), local, gpus_per_node)
    ops += megatron_step_ops(cfg, num_params, local, dense.group_size, grad_bytes(cfg), param_bytes(cfg),
                             model_param_tensors(cfg, stage, num_layers))
    ops += deepspeed_mixed_precision(cfg, stage, num_layers, local, num_params)
    ops += zero3_hook_ops(cfg, stage, num_layers)
    ops += zero12_grad_norm_ops(cfg, dense)
    if sharded and o.zero_stage < 3:
        fp8 = fp8_linear_params(cfg, stage, num_params, num_layers) if fp8_param_gather(cfg) else 0
        fp8_expert = min(fp8, num_expert)
        ops += (_param_gather(cfg, "dp", num_dense, dense, fp8 - fp8_expert)
                + _param_gather(cfg, "edp", num_expert, edp, fp8_expert))
    if o.zero_stage == 3:
        ops += persistent_gather_ops(cfg, num_layers, stage == p.pp - 1, dense)
    return tuple(ops)


GRAD_NORM_BYTES = 4
"""The fp32 scalar DeepSpeed's ZeRO-1/2 optimizer all-reduces for the global gradient norm."""


def zero12_grad_norm_ops(cfg: TrainingConfig, dense: Collective) -> list[Op]:
    """DeepSpeed's ZeRO-1/2 step all-reduces the gradient norm's square sum (GRAD_NORM_BYTES, SUM) over the
    data-parallel group once per optimizer parameter group (DeepSpeed 0.19.8 runtime/zero/stage_1_and_2.py: step ->
    scaled_global_norm -> get_grad_norm_direct, dist.all_reduce(total_norm, group=self.dp_process_group); offloaded:
    complete_grad_norm_calculation_for_cpu_offload, the same call), every step, clipping or not. Priced as one call
    (a script's AdamW(model.parameters()) has one group; Megatron-DeepSpeed's and the HF Trainer's two add one more
    such latency). Not priced: the same scalar's all-reduce over the model-parallel group (_model_parallel_all_reduce,
    Megatron-DeepSpeed with TP / PP), the overflow flag's all-reduce (has_overflow) and compute_grad_norm false
    (which needs gradient_clipping 0). ZeRO-0 and the BF16 optimizer step elsewhere (runtime/bf16_optimizer.py)."""
    zero12 = "deepspeed" in cfg.framework and cfg.optimizer.zero_stage in (1, 2) and not runs_bf16_optimizer(cfg)
    if not zero12 or dense.group_size == 1:
        return []
    return [comm_op("zero.gradient_norm_allreduce", "allreduce", "step", GRAD_NORM_BYTES, dense, cfg, None)]


def offloaded_optimizer_share(cfg: TrainingConfig, local_params: int) -> float:
    """Share of a rank's optimizer partition on the host. ZeRO-3 partial offload (offload_optimizer.ratio < 1,
    ZeRO-Offload++ 'twin-flow') assigns whole optimizer sub-groups: stage3.py _create_fp32_partitions puts sub-group
    i on the CPU when i >= int((1 - ratio) x n), n = ceil(local / sub_group_size); one sub-group (a partition
    under sub_group_size, 1e9 by default) means all or nothing."""
    o = cfg.optimizer
    if o.offload_optimizer == "none":
        return 0.0
    if o.offload_optimizer_ratio >= 1.0:
        return 1.0
    if "deepspeed" not in cfg.framework:
        # Megatron --optimizer-offload-fraction: HybridDeviceOptimizer moves whole parameters to the CPU optimizer,
        # in order, until their elements reach fraction x the rank's (hybrid_optimizer.py
        # _get_sub_optimizer_param_groups: offload_threshold = gpu_params_total_numel * offload_fraction)
        return max(0.0, o.offload_optimizer_ratio)
    if o.zero_stage != 3:
        return 1.0
    n = max(1, -(-local_params // max(1, o.sub_group_size_elems)))
    on_gpu = int((1.0 - o.offload_optimizer_ratio) * n)
    return (n - on_gpu) / n


def _optimizer_steps(cfg: TrainingConfig, local: int, dims: dict[str, int], tags: dict[str, str]) -> list[Op]:
    """The Adam step, split between the GPU (a torch AdamW over its sub-groups, stage3.py backup_optimizer) and
    the host (DeepSpeedCPUAdam) under a partial offload; its bytes are those of the Adam the job runs
    (adam_bytes_per_param), which predict/optimizer_bytes.py sets against the Adam a profile's samples ran."""
    share = offloaded_optimizer_share(cfg, local)
    parts = [(local, tags if share else {})] if share in (0.0, 1.0) else \
        [(local - round(local * share), {}), (round(local * share), tags)]
    per_param, dtype = adam_bytes_per_param(cfg)
    return [Op("optimizer.step", "optimizer", "step", {**dims, "params": n}, flops=0.0,
               bytes_moved=float(n * per_param), dtype=dtype, tags=t) for n, t in parts if n > 0]


def adam_bytes_per_param(cfg: TrainingConfig) -> tuple[float, str]:
    """(HBM bytes per parameter, dtype) of the job's Adam step: torch.optim over the 16-bit model itself
    (OptimizerConfig.master_weights False), torch.optim over fp32 weights (torch_optimizer_impl set: a DeepSpeed client
    or torch_adam optimizer stepping the fp32 partition, a plain-torch fp32 script, a Hugging Face Trainer's --optim),
    else the framework's fused multi-tensor Adam (Megatron's apex / TE FusedAdam, DeepSpeed's FusedAdam for an
    optimizer section of type Adam / AdamW: engine.py _configure_basic_optimizer), which is also what an unrecognised
    optimizer is priced as."""
    o = cfg.optimizer
    if not o.master_weights and cfg.precision != "fp32":
        return torch_step_bytes_per_param(o.torch_optimizer_impl or "foreach", o.torch_weight_decay, 2), cfg.precision
    if o.torch_optimizer_impl:
        return torch_step_bytes_per_param(o.torch_optimizer_impl, o.torch_weight_decay, 4), "fp32"
    if o.precision_aware and cfg.precision in ("bf16", "fp16") and "deepspeed" not in cfg.framework:
        return ADAM_BYTES_PER_PARAM + PARAM_BYTES, "fp32"
    return ADAM_BYTES_PER_PARAM, "fp32"


ADAM_BYTES_PER_PARAM = 4 * 4 + 3 * 4
"""Fused Adam step traffic per parameter: read fp32 param, grad, m, v (16 B), write param, m, v (12 B): 28 B
(DeepSpeed's FusedAdam, ops/adam/fused_adam.py: multi_tensor_adam over [g, p, m, v]; apex's / Transformer Engine's
FusedAdam under Megatron without master weights in the kernel). The 16-bit model copy is a pass of the framework's
own: DeepSpeed's in DEEPSPEED_MP_BYTES_PER_PARAM ('the fp32 master copied back to bf16', measured), Megatron's in
graph/megatron_step.py (_copy_main_params_to_model_params), except that Transformer Engine's FusedAdam writes it
in-kernel under --use-precision-aware-optimizer (+2 B, adam_bytes_per_param). Until session 22 this was 30 B, the
copy's 2 B write counted here too: for DeepSpeed's FusedAdam a second time."""


TORCH_ADAM_FOREACH_ACCESSES = 18
"""Element accesses per parameter of torch.optim's foreach Adam step without weight decay (torch/optim/adam.py
_multi_tensor_adam, torch 2.x): exp_avg.lerp_(grad) (read 2, write 1), exp_avg_sq.mul_ (1 + 1), addcmul_(grad, grad)
(2 + 1), _foreach_sqrt (1 + 1), div_ by the bias correction (1 + 1), add_ eps (1 + 1), param.addcdiv_(exp_avg, denom)
(3 + 1): 18, x 4 B = 72 B in fp32 (op_sampler's Adam), x 2 B = 36 B over a 16-bit model."""
TORCH_WEIGHT_DECAY_ACCESSES = {"decoupled": 2, "l2": 3, "none": 0}
"""The weight-decay pass (OptimizerConfig.torch_weight_decay): AdamW's _foreach_mul_(params) reads and writes each
parameter (2); Adam's L2 term _foreach_add(grads, params, alpha=wd) reads both and writes a new gradient (3); none
with weight_decay 0. AdamW with its default decay, fp32: (18 + 2) x 4 = 80 B; measured for the c08 model on an H100
(measurements/h100-sxm5-80gb-2026-11-26/kernels/plain.txt, 0.71 B parameters, bf16 AdamW foreach: 11.5 ms, 48 B per
parameter at 2.98 TB/s against 40) and a DeepSpeed ZeRO-1 step's fp32 AdamW (kernels/ds_zero1.txt, the _foreach_
rows: 20.8 ms, 87 B against 80)."""
TORCH_STEP_ACCESSES = {"fused": 7, "fused_amsgrad": 9, "sgd": 3, "sgd_momentum": 8, "sgd_nesterov": 11,
                       "sgd_fused": 3, "sgd_momentum_fused": 5, **FUSED_SGD_ACCESSES}
"""Element accesses per parameter of the other torch.optim steps (frameworks/torch_step_impl.py reads which):
fused=True Adam / AdamW: one kernel reading param, grad, m, v and writing param, m, v (7; its weight decay
in-kernel), with amsgrad also reading and writing max_exp_avg_sq (9). torch.optim.SGD (torch/optim/sgd.py
_multi_tensor_sgd): without momentum param.add_(grad, alpha=-lr), read 2, write 1 (3: the Trainer's --optim sgd
passes only lr); with momentum _foreach_mul_(bufs) (2) and _foreach_add_(bufs, grads) (3) before the update (8),
nesterov _foreach_add_(grads, bufs) (3) more (11); fused=True (_fused_sgd_) reads param and grad (and the momentum
buffer) and writes param (and the buffer): 3 / 5. The foreach SGD's weight decay first adds the params into new
gradients, _foreach_add(grads, params, alpha=wd), the "l2" pass of TORCH_WEIGHT_DECAY_ACCESSES; fused ones apply
it in-kernel. Megatron's TE / apex FusedSGD: FUSED_SGD_ACCESSES (graph/megatron_step.py)."""
TORCH_AMSGRAD_ACCESSES = 3
"""foreach Adam / AdamW with amsgrad=True: torch._foreach_maximum_(max_exp_avg_sqs, exp_avg_sqs) reads both and
writes the maximum before the square root (torch/optim/adam.py _multi_tensor_adam), which then reads the maximum
instead of exp_avg_sq (no change)."""
ADAM_8BIT_BYTES_PER_PARAM = {4: 15.0, 2: 9.0}
"""bitsandbytes' 8-bit AdamW (optim/adamw.py AdamW8bit, optimizer_update_8bit_blockwise: one kernel per tensor) by
the parameter's bytes: read param, grad and the two uint8 states, write param and the states: 3 x 4 + 3 x 1 = 15
in fp32, 3 x 2 + 3 = 9 in 16 bits; the states' per-block absmax (one fp32 per 256 elements, read and written) adds
0.06 B. From the kernel's arguments, not measured."""


def torch_step_bytes_per_param(impl: str, weight_decay: str, elem_bytes: int) -> float:
    """Bytes per parameter of a torch.optim (or bitsandbytes) step over `elem_bytes`-wide parameters and states."""
    if impl == "adam_8bit":
        return ADAM_8BIT_BYTES_PER_PARAM[elem_bytes]
    if impl in ("sgd", "sgd_momentum", "sgd_nesterov"):
        decay = TORCH_WEIGHT_DECAY_ACCESSES["l2"] if weight_decay != "none" else 0
        return float((TORCH_STEP_ACCESSES[impl] + decay) * elem_bytes)
    if impl in TORCH_STEP_ACCESSES:
        return float(TORCH_STEP_ACCESSES[impl] * elem_bytes)
    amsgrad = TORCH_AMSGRAD_ACCESSES if impl == "foreach_amsgrad" else 0
    return float((TORCH_ADAM_FOREACH_ACCESSES + amsgrad + TORCH_WEIGHT_DECAY_ACCESSES.get(weight_decay, 2)) * elem_bytes)


TORCH_16BIT_ADAM_BYTES_PER_PARAM = {impl: torch_step_bytes_per_param(impl, "decoupled", 2)
                                    for impl in ("foreach", "fused")}
"""torch.optim.AdamW (default weight decay) over 16-bit parameters, bytes per parameter: foreach 40, fused 14."""
TORCH_FP32_ADAM_BYTES_PER_PARAM = {impl: torch_step_bytes_per_param(impl, "decoupled", 4)
                                   for impl in ("foreach", "fused")}
"""The same over fp32 parameters and states: foreach 80, fused 28."""


DEEPSPEED_MP_BYTES_PER_PARAM = {0: 73.0, 1: 87.5, 2: 87.5, 3: 81.5}
"""HBM traffic per local parameter (by ZeRO stage; ZeRO-0 for bf16) of DeepSpeed's mixed-precision bookkeeping
around the Adam update: the gradients copied into the reduction buckets and cast for the reduction (communication_data_type fp32 for
bf16), flattened into the fp32 partition (ZeRO-1/2, runtime/zero/stage_1_and_2.py) or accumulated into the fp32
gradient buffer (ZeRO-0, runtime/bf16_optimizer.py), averaged, checked for inf/nan and normed tensor by tensor,
scaled by the clip coefficient, and the fp32 master copied back to bf16. Measured kernel by kernel on an H100
SXM5 (DeepSpeed 0.19.8, torch 2.11): the kernel time of a DeepSpeed step beyond the same model's plain-torch step,
Adam itself excluded, at the measured 2.98 TB/s (measurements/h100-sxm5-80gb-2026-11-26/kernels/). ZeRO-2 and 3 on
an H200 (measurements/h200-sxm-141gb-2026-11-27-b/kernels/, benchmarks/deepspeed_step_cost.py at 4.22 TB/s, scaled
by bf16 ZeRO-0's 73 / 87.8, read on the H200 of ../h200-sxm-141gb-2026-11-27/kernels/): ZeRO-2 101.5 B -> 84 (ZeRO-1's
87.5 kept). ZeRO-3's 127.6 B hold its split-out bias adds, which graph/zero_layer_ops.zero3_bias_add_ops prices in the
forward (ZERO3_BIAS_ADD_PASSES, from the same aten::add_ row): 5,535 - 539 us of aten::add_ (plain torch's own sums) =
4,996 us per step, 4.996e-3 s x 4.22e12 B/s / 711.5e6 parameters = 29.6 B, so 127.6 - 29.6 = 98.0 B -> 81.5. Counted
twice before, they over-priced the kernels of that 12 x 2048 ZeRO-3 step by 4.2 ms (110.4 predicted, 106.0 and
104.1 measured in two tables; 106.2 without the double count). Below ZeRO-1/2's: ZeRO-3's table has none of their
per-tensor checks (abs / ne / eq / amax / amin: 7 / 3 / 3 / 0 / 0 calls, ZeRO-2's 601 / 300 / 300 / 148 / 148)."""
DEEPSPEED_FP16_ZERO0_BYTES_PER_PARAM = 30.0
"""ZeRO-0 with fp16 runs FP16_Optimizer (runtime/fp16/fused_optimizer.py) instead, on flat buffers: flatten the
fp16 gradients (2 + 2 B), an overflow check (2), cast to the fp32 flat gradient (2 + 4), its global norm (4), the
unscale-and-clip scale (4 + 4), the fp32 master copied back to fp16 (4 + 2): 30 B. The source checks overflow
tensor by tensor, not on the flat buffer: CheckOverflow.has_overflow_serial runs float(x.float().sum()) on every
gradient (runtime/utils.py, the same in 2023's 2ded2ff0 and today), 10 B per parameter and one host sync per
tensor. Priced that way (42 B, syncs included) S23 improved by 0.1-0.15 point, but S24 (vTrain's single-node runs
of this stack) went 7.19 -> 7.36-7.63 % and the ranking lost 1-4 groups (notes h84, h92). S24's per-step cost,
20 ps per parameter, is already below what the 30 B and Adam price, so 30 B stays until a DeepSpeed fp16 step is
measured."""
DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM = 6.0
"""Each micro-batch after the first adds its bf16 gradients into the accumulated ones (read 2 + 2, write 2);
measured 5.8 B per parameter per micro-batch on the same H100 (kernels/ds_zero1_accum4.txt, aten::add_)."""
DEEPSPEED_REDUCE_BYTES_PER_MICROBATCH = {2: (8.0, 4.0), 3: (8.0, 0.0)}
"""Bytes that ZeRO-2/3 add for each micro-batch after the first, beyond the accumulation above, as (per gradient the
rank computes, per local parameter): they reduce in every micro-batch's backward (ZeRO-1 only at the boundary), and
DEEPSPEED_MP_BYTES_PER_PARAM holds the first micro-batch's reduction. Each gradient the rank computes is copied into
the ipg bucket (read 2, write 2) and the whole bucket is divided by the DP size (2 + 2), at any DP size; ZeRO-2 then
copies only its partition out of it (2 + 2; stage_1_and_2.py reduce_independent_p_g_buckets_and_remove_grads,
average_tensor, copy_grads_in_partition), where ZeRO-3 adds it (the accumulation above; stage3.py
__add_grad_to_ipg_bucket, reduce_scatter_coalesced's cat and div_, partition_grads). Measured on one H200 (DP 1, so
both counts are the same; measurements/h200-sxm-141gb-2026-11-27-b/kernels, ds_bf16_zero2/3_accum4 against
ds_bf16_zero2/3): 2 more aten::div_ per micro-batch, 661 us (3.9 B per parameter at 4.22 TB/s); 316 / 168 more
aten::copy_ per micro-batch (ZeRO-1 on the H100: 14), 8.9 / 3.9 B once the model's own copies of the twice larger
batch are taken out (plain_bf16: 3.8 ms). In all 12.8 / 7.8 B."""
ZERO3_FP32_ACCUM_BYTES_PER_PARAM = (10.0, 12.0)
"""Bytes per local parameter that data_types.grad_accum_dtype fp32 adds under ZeRO-3 with a 16-bit model: (the first
micro-batch, each further one), beyond the 16-bit accumulation above. stage3.py keeps the gradient partition
(grad_partitions_flat_buffer) in gradient_accumulation_dtype and casts each reduce-scattered partition to it
(`g.to(self.gradient_accumulation_dtype)`: read 2, write 4), then partition_grads copies it in at micro-step 0
(read 4, write 4 where bf16 reads 2, writes 2) and adds it after (read 4 + 4, write 4 where bf16 moves 6): first
6 + 4 = 10, then 6 + 6 = 12. From v0.19.2 on (56e7e0c55, #8056); v0.10.1-v0.19.1 cast the partition to the
model's dtype and only partition_grads widened it (copy_ 2 + 4: +2 first; add_ after `.to(fp32)` the same +12). The
optimizer step reads the fp32 partition where it flattened and cast the bf16 one (_prepare_fp32_grad_for_sub_group:
8 B against 2 + 2 + 2 + 4, offset by the norm's wider read): left out. Read from the source, not measured here."""
ZERO3_FP32_ACCUM_FIRST_BYTES_UNCAST = 2.0
"""The first micro-batch's bytes per local parameter under DeepSpeed v0.10.1-v0.19.1
(OptimizerConfig.zero3_accum_cast_on_reduce False): the reduce-scattered partition stays bf16 and partition_grads'
`grad_buffer.copy_(grad_partition)` widens it into the fp32 buffer, read 2, write 4 where bf16 moves 2 + 2. Read from
stage3.py at v0.10.1 .. v0.19.1 (56e7e0c55 changed it in v0.19.2); the further micro-batches' +12 is the same there."""
DEEPSPEED_STEP_LAUNCHES_PER_TENSOR = {1: 20.5, 2: 20.5}
"""Device ops that ZeRO-1/2's step issues per parameter tensor, one Python call each (stage_1_and_2.py's per-tensor
inf/nan test, norm and copies): the kernel tables of the c01 model (148 tensors) count 3,035 device ops per step
beyond the plain-torch step, the same for ZeRO-1 bf16 on the H100 (measurements/h100-sxm5-80gb-2026-11-26/kernels/
ds_zero1.txt), ZeRO-1 fp16 and ZeRO-2 bf16 on the H200 (h200-sxm-141gb-2026-11-27/kernels/ds_fp16_zero1.txt,
-27-b/kernels/ds_bf16_zero2.txt): per tensor 4 abs, 2 each of ne, eq, logical_not, logical_and and mul, about 3
copy_, one linalg_vector_norm, amax and amin: 3,035 / 148 = 20.5."""
DEEPSPEED_STEP_HOST_S_PER_LAUNCH = 5.5e-6
"""Host seconds per launch of that loop (Python, the dispatcher and cudaLaunchKernel of one small op). Read from
the one development configuration whose step is host-bound, c02 (12 x 1024, 147 tensors: hidden 1024 makes each
tensor's kernels short), measured three times: the H100 (measurements/h100-sxm5-80gb-2026-11-26/runs/c02, 55.6 ms)
and two H200 machines (h200-sxm-141gb-2026-11-26/runs/c02 48.5 ms, -27/run_r1 52.8 ms). Priced by
schedule/compose.step_bookkeeping_s at 5 / 5.5 / 6 / 6.5 / 7 us, their mean |error| is 3.4 / 3.1 / 3.3 / 4.7 / 6.6 %
(3.3 % with the loop priced as 30 us per tensor added), and over all 19 ZeRO-0/1/2 development runs 4.58 / 4.54 /
4.57 / 4.79 / 5.10 % (4.57 %; the runs with large tensors do not move): 5.5 us, about what a small eager op costs
(the launch alone 4-5 us: LAUNCH_QUEUE_DEPTH's source). One configuration pins it to about +-0.5 us, not better."""
DEEPSPEED_HOST_S_PER_TENSOR = {0: 83e-6, 1: 30e-6, 2: 30e-6, 3: 30e-6}
"""Host time per parameter tensor in DeepSpeed's step that the GPU waits for, added to the step's kernels: ZeRO-0's
bf16 optimizer reads three scalars per tensor back to the host (447 aten::_local_scalar_dense per step for 148
tensors), each a stall of the launch queue. ZeRO-1/2 loop over the tensors in Python without syncing; their loop's
issue is priced as launches (DEEPSPEED_STEP_LAUNCHES_PER_TENSOR, schedule/compose.step_bookkeeping_s), which for
the c01 model hide behind the backward's queued kernels, and this is what c01's step still shows beyond its kernels
(its few syncs: 6 aten::_local_scalar_dense per step). From the same H100 runs: step wall time minus kernel time,
beyond a plain-torch step's (14.1 / 6.3 vs 1.8 ms for 148 tensors). ZeRO-2 on an H200 read 85 us, 40 on the H100's
scale: ZeRO-1's kept. ZeRO-3 is given ZeRO-2's; its hooks' time beyond ZeRO-2, measured against ZeRO-2 on one
machine, is graph/zero3_hooks.py's."""


def deepspeed_mixed_precision(cfg: TrainingConfig, stage: int, num_layers: int, local: int,
                              rank_params: int) -> list[Op]:
    """DeepSpeed bf16/fp16 bookkeeping of the step (ZeRO 0-3; ZeRO-3's per-micro-batch hooks: zero3_hooks.py):
    the step's own work over the rank's `local` (ZeRO-partitioned) parameters, and the accumulation of each
    micro-batch after the first over the gradients the rank keeps, `accumulated_grad_params`, and ZeRO-2/3's bucket
    copy and division over every gradient it computes, `rank_params` (DEEPSPEED_REDUCE_BYTES_PER_MICROBATCH)."""
    zero = cfg.optimizer.zero_stage
    offloaded = cfg.optimizer.offload_optimizer != "none"
    if "deepspeed" not in cfg.framework or cfg.precision == "fp32" or offloaded:
        return []
    further = max(0, cfg.batch.num_microbatches - 1)
    bucket_b, partition_b = DEEPSPEED_REDUCE_BYTES_PER_MICROBATCH.get(zero, (0.0, 0.0))
    accumulated = further * (DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM + partition_b) + zero3_fp32_accum_bytes(cfg)
    grad_params = accumulated_grad_params(cfg, local, rank_params)
    tensors = model_param_tensors(cfg, stage, num_layers)
    flat_fp16 = zero == 0 and cfg.precision == "fp16"
    kind = 0 if runs_bf16_optimizer(cfg) else zero  # BF16_Optimizer: the bookkeeping measured at ZeRO-0 bf16
    per_param = DEEPSPEED_FP16_ZERO0_BYTES_PER_PARAM if flat_fp16 else DEEPSPEED_MP_BYTES_PER_PARAM[kind]
    widened = zero3_grad_dtype_bytes(cfg, local, rank_params)  # ZeRO-3 reducing in another dtype than the model's
    return [Op("optimizer.deepspeed_mixed_precision", "deepspeed_bookkeeping", "step",
               {"params": local, "param_tensors": tensors}, flops=0.0,
               bytes_moved=float(local * per_param + grad_params * accumulated + rank_params * further * bucket_b
                                 + widened), dtype=cfg.precision, tags=_step_host_tags(kind, tensors, flat_fp16))]


def _step_host_tags(kind: int, tensors: int, flat_fp16: bool) -> dict[str, str]:
    """The host work of the step. host_s: DEEPSPEED_HOST_S_PER_TENSOR, added to the op's GPU time. ZeRO-1/2 also
    carry their per-tensor loop's launches (host_launches, host_s_per_launch), which schedule/compose.py
    step_bookkeeping_s issues behind the backward's queued GPU work."""
    if flat_fp16:
        return {}
    tags = {"host_s": f"{tensors * DEEPSPEED_HOST_S_PER_TENSOR[kind]:.6g}"}
    if kind in DEEPSPEED_STEP_LAUNCHES_PER_TENSOR:
        tags.update(host_launches=f"{tensors * DEEPSPEED_STEP_LAUNCHES_PER_TENSOR[kind]:.6g}",
                    host_s_per_launch=f"{DEEPSPEED_STEP_HOST_S_PER_LAUNCH:.6g}")
    return tags


def zero3_fp32_accum_bytes(cfg: TrainingConfig) -> float:
    """Bytes per local parameter a step's micro-batches add under ZeRO-3 with fp32 gradient accumulation
    (ZERO3_FP32_ACCUM_BYTES_PER_PARAM); 0 otherwise, and where the reduction runs in another dtype than the model's
    (graph/zero3_grad_dtypes.py prices that whole path)."""
    if cfg.optimizer.zero_stage != 3 or cfg.optimizer.grad_accum_dtype != "fp32" or cfg.precision == "fp32":
        return 0.0
    if zero3_comm_dtype_differs(cfg):
        return 0.0
    first, further = ZERO3_FP32_ACCUM_BYTES_PER_PARAM
    if not cfg.optimizer.zero3_accum_cast_on_reduce:
        first = ZERO3_FP32_ACCUM_FIRST_BYTES_UNCAST
    return first + max(0, cfg.batch.num_microbatches - 1) * further


def accumulated_grad_params(cfg: TrainingConfig, local: int, rank_params: int) -> int:
    """Parameters whose gradients DeepSpeed accumulates on this rank every micro-batch after the first. ZeRO-0 and
    ZeRO-1 keep whole gradients until the accumulation boundary (stage_1_and_2.py
    reduce_ready_partitions_and_remove_grads reduces only under partition_gradients or at the boundary), so autograd's
    AccumulateGrad adds each micro-batch's gradient into param.grad for every parameter of the rank;
    BF16_Optimizer.update_hp_grads adds every lp.grad into an fp32 buffer of the whole group (bf16_optimizer.py
    fp32_groups_gradients_flat = zeros_like(bf16_groups_flat)), not only the rank's optimizer partition. ZeRO-2
    and ZeRO-3 reduce in the backward and keep their partition: `local`."""
    return rank_params if cfg.optimizer.zero_stage <= 1 else local


def _tied_embedding_sync(cfg: TrainingConfig, stage: int, gpus_per_node: int) -> list[Op]:
    """Megatron all-reduces the word-embedding gradient between the first and last stage when tied and pp > 1, or
    when the last stage holds the MTP block's copy of the embedding (finalize_model_grads, embedding group)."""
    p = cfg.parallel
    shared = not cfg.model.untie_embeddings or cfg.model.mtp_num_layers > 0
    if p.pp == 1 or not shared or stage not in (0, p.pp - 1):
        return []
    pair = place_group("pp", p.pp, p, gpus_per_node)
    coll = Collective(group="pp", group_size=2, ranks_per_node=1 if pair.ranks_per_node < p.pp else 2,
                      groups_sharing_node=pair.groups_sharing_node)
    nbytes = cfg.model.padded_vocab_size // p.tp * cfg.model.hidden_size * grad_bytes(cfg)
    return [comm_op("embedding.tied_grad_allreduce", "allreduce", "step", nbytes, coll, cfg, None)]

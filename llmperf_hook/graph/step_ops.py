"""Data-parallel gradient sync, parameter gathers and the optimizer step (per step or per layer under ZeRO-3).

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
- Expert parameters synchronise over the expert data-parallel group (world / (pp * etp * ep) ranks).
"""

from __future__ import annotations

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph import params as pc
from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.graph.param_tensors import model_param_tensors, optimizer_param_tensors
from llmperf_hook.graph.placement import place_group

PARAM_BYTES = 2
"""bf16/fp16 parameter copies gathered by the distributed optimizer and ZeRO (fp32 when training in fp32)."""


def grad_bytes(cfg: TrainingConfig) -> int:
    if cfg.precision == "fp32":
        return 4
    return 4 if cfg.optimizer.fp32_main_grads else 2


def param_bytes(cfg: TrainingConfig) -> int:
    return 4 if cfg.precision == "fp32" else PARAM_BYTES


def dp_groups(cfg: TrainingConfig, gpus_per_node: int) -> tuple[Collective, Collective]:
    """(dense gradient group = dp x cp, expert gradient group = expert data parallel)."""
    p = cfg.parallel
    dense = place_group("dp_cp", p.dp * p.cp, p, gpus_per_node)
    edp = max(1, p.tp * p.cp * p.dp // (max(1, p.etp) * p.ep))
    return dense, place_group("edp", edp, p, gpus_per_node)


def _comm(name: str, op_class: str, phase: str, nbytes: float, coll: Collective, cfg: TrainingConfig,
          overlap: str | None) -> Op:
    tags = {"overlap": overlap} if overlap else {}
    return Op(name, op_class, phase, {"bytes": int(nbytes)}, dtype=cfg.precision, collective=coll, tags=tags)


def zero3_gather_modules(cfg: TrainingConfig, layer_params: int) -> tuple[int, ...]:
    """Parameters of the modules ZeRO-3 fetches one by one in a layer (QKV, projection, MLP up, MLP down).

    DeepSpeed fetches a module's parameters in its pre-forward / pre-backward hook
    (deepspeed/runtime/zero/parameter_offload.py, partitioned_param_coordinator.fetch_sub_module); norms and
    small biases stay resident (stage3_param_persistence_threshold, 1e5 elements by default), so a dense layer
    makes four gathers. An MoE layer's MLP part (router + local experts) is split up/down the same way."""
    m, t = cfg.model, cfg.parallel.tp
    qkv = m.hidden_size * (m.num_attention_heads + 2 * m.num_query_groups) * m.kv_channels // t
    proj = m.num_attention_heads * m.kv_channels * m.hidden_size // t
    rest = max(0, layer_params - qkv - proj - 2 * pc.norm_params(cfg))
    up_share = 2.0 / 3.0 if m.swiglu else 0.5  # up = ffn (x2 with SwiGLU) x h, down = ffn x h
    up = int(rest * up_share)
    return tuple(n for n in (qkv, proj, up, rest - up) if n > 0)


def zero3_layer_comm(cfg: TrainingConfig, layer_params: int, gpus_per_node: int,
                     recomputed: bool = False) -> tuple[tuple[Op, ...], tuple[Op, ...], tuple[Op, ...]]:
    """Per-layer, per-micro-batch ZeRO-2/3 comm: (gathers before forward, gathers in backward, grad reduce).

    ZeRO-3 releases a module's gathered parameters after its forward and fetches them again before its
    backward, and again before a recomputed forward (full recompute: three fetches per micro-batch). With
    prefetching (stage3_prefetch_bucket_size > 0, the default) the fetches run ahead on a side stream and
    hide behind compute (one op per fetch phase, tagged overlap). With stage3_prefetch_bucket_size 0 each
    module's fetch starts when the module is reached and the module waits for it: one exposed all-gather per
    module (zero3_gather_modules), in execution order."""
    zero, o = cfg.optimizer.zero_stage, cfg.optimizer
    dense, _ = dp_groups(cfg, gpus_per_node)
    if zero < 2 or dense.group_size == 1:
        return (), (), ()
    grad_overlap = "grad_reduce" if o.overlap_grad_reduce else None
    reduce = (_comm("zero.grad_reduce_scatter", "reducescatter", "bwd", layer_params * grad_bytes(cfg), dense, cfg,
                    grad_overlap),)
    if zero < 3:
        return (), (), reduce
    if o.stage3_prefetch_bucket_size_elems == 0:
        modules = zero3_gather_modules(cfg, layer_params)
        fetch = tuple(_comm("zero3.param_fetch", "allgather", "fwd", n * param_bytes(cfg), dense, cfg, None)
                      for n in modules)
        return fetch, fetch * (2 if recomputed else 1), reduce
    nbytes = layer_params * param_bytes(cfg)
    gather_f = (_comm("zero3.param_allgather", "allgather", "fwd", nbytes, dense, cfg, "param_gather"),)
    gather_b = (_comm("zero3.param_allgather", "allgather", "bwd", nbytes, dense, cfg, "param_gather"),)
    return gather_f, gather_b * (2 if recomputed else 1), reduce


def _grad_sync(cfg: TrainingConfig, name: str, params: int, coll: Collective, sharded: bool) -> list[Op]:
    if params <= 0 or coll.group_size == 1:
        return []
    overlap = "grad_reduce" if cfg.optimizer.overlap_grad_reduce else None
    op_class = "reducescatter" if sharded else "allreduce"
    return [_comm(f"{name}.grad_{op_class}", op_class, "step", params * grad_bytes(cfg), coll, cfg, overlap)]


def _param_gather(cfg: TrainingConfig, name: str, params: int, coll: Collective) -> list[Op]:
    if params <= 0 or coll.group_size == 1:
        return []
    overlap = "param_gather" if cfg.optimizer.overlap_param_gather else None
    return [_comm(f"{name}.param_allgather", "allgather", "step", params * param_bytes(cfg), coll, cfg, overlap)]


def _non_layer_params(cfg: TrainingConfig, stage: int) -> int:
    extra = pc.embedding_params(cfg) if stage == 0 else 0
    return extra + (pc.head_params(cfg) if stage == cfg.parallel.pp - 1 else 0)


def build_step_ops(cfg: TrainingConfig, stage: int, num_params: int, num_expert: int,
                   gpus_per_node: int, num_layers: int = 0) -> tuple[Op, ...]:
    o, p = cfg.optimizer, cfg.parallel
    dense, edp = dp_groups(cfg, gpus_per_node)
    sharded = o.distributed_optimizer or o.zero_stage >= 1
    num_dense = num_params - num_expert
    # ZeRO-2/3 reduce layer gradients inside backward (zero3_layer_comm); only embedding/head remain here.
    step_dense = _non_layer_params(cfg, stage) if o.zero_stage >= 2 and dense.group_size > 1 else num_dense
    ops = _grad_sync(cfg, "dp", step_dense, dense, sharded) + _grad_sync(cfg, "edp", num_expert, edp, sharded)
    ops += _tied_embedding_sync(cfg, stage, gpus_per_node)
    shard_dense = dense.group_size if sharded else 1
    shard_expert = edp.group_size if sharded else 1
    local = num_dense // shard_dense + num_expert // shard_expert
    tags = {"offload": o.offload_optimizer} if o.offload_optimizer != "none" else {}
    dims = {"params": local}
    if not sharded and num_expert == 0 and optimizer_param_tensors(cfg, stage, num_layers) > 1:
        # A step over the model's own tensors updates whole layers and the stage's embedding / head
        # (features.OPTIONAL_DIMS): the profile's Adam model tells first, middle and last stages apart by these.
        # DeepSpeed's mixed-precision optimizers step one flat buffer instead: the params-only answer.
        dims.update(layers=num_layers, embedding_params=_non_layer_params(cfg, stage))
    ops.append(Op("optimizer.step", "optimizer", "step", dims, flops=0.0,
                  bytes_moved=float(local * ADAM_BYTES_PER_PARAM), dtype="fp32", tags=tags))
    ops += deepspeed_mixed_precision(cfg, stage, num_layers, local)
    if sharded and o.zero_stage < 3:
        ops += _param_gather(cfg, "dp", num_dense, dense) + _param_gather(cfg, "edp", num_expert, edp)
    return tuple(ops)


ADAM_BYTES_PER_PARAM = 4 * 4 + 3 * 4 + 2
"""Adam step traffic per parameter: read fp32 param, grad, m, v (16 B), write param, m, v (12 B), write the
bf16/fp16 model copy (2 B) (Megatron's fused multi-tensor Adam; DeepSpeed FusedAdam)."""


DEEPSPEED_MP_BYTES_PER_PARAM = {0: 73.0, 1: 87.5, 2: 87.5}
"""HBM traffic per local parameter (by ZeRO stage; ZeRO-0 for bf16) of DeepSpeed's mixed-precision bookkeeping
around the Adam update: the gradients copied into the reduction buckets and cast for the reduction (communication_data_type fp32 for
bf16), flattened into the fp32 partition (ZeRO-1/2, runtime/zero/stage_1_and_2.py) or accumulated into the fp32
gradient buffer (ZeRO-0, runtime/bf16_optimizer.py), averaged, checked for inf/nan and normed tensor by tensor,
scaled by the clip coefficient, and the fp32 master copied back to bf16. Measured kernel by kernel on an H100
SXM5 (DeepSpeed 0.19.8, torch 2.11): the kernel time of a DeepSpeed step beyond the same model's plain-torch step,
Adam itself excluded, at the measured 2.98 TB/s (measurements/h100-sxm5-80gb-2026-11-26/kernels/)."""
DEEPSPEED_FP16_ZERO0_BYTES_PER_PARAM = 30.0
"""ZeRO-0 with fp16 runs FP16_Optimizer (runtime/fp16/fused_optimizer.py) instead, on flat buffers: flatten the
fp16 gradients (2 + 2 B), one overflow check on the flat buffer (2), cast to the fp32 flat gradient (2 + 4), its
global norm (4), the unscale-and-clip scale (4 + 4), the fp32 master copied back to fp16 (4 + 2): 30 B, with a
few host syncs per step rather than per tensor (read from the source; not measured here)."""
DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM = 6.0
"""Each micro-batch after the first adds its bf16 gradients into the accumulated ones (read 2 + 2, write 2);
measured 5.8 B per parameter per micro-batch on the same H100 (kernels/ds_zero1_accum4.txt, aten::add_)."""
DEEPSPEED_HOST_S_PER_TENSOR = {0: 83e-6, 1: 30e-6, 2: 30e-6}
"""Host time per parameter tensor in DeepSpeed's step that the GPU waits for: ZeRO-0's bf16 optimizer reads
three scalars per tensor back to the host (447 aten::_local_scalar_dense per step for 148 tensors), each a
stall of the launch queue; ZeRO-1/2 loop over the tensors in Python without syncing. From the same H100 runs:
step wall time minus kernel time, beyond a plain-torch step's (14.1 / 6.3 vs 1.8 ms for 148 tensors)."""


def deepspeed_mixed_precision(cfg: TrainingConfig, stage: int, num_layers: int, local: int) -> list[Op]:
    """DeepSpeed bf16/fp16 bookkeeping of the step (ZeRO 0-2; ZeRO-3's own per-layer path has none of it here)."""
    zero = cfg.optimizer.zero_stage
    offloaded = cfg.optimizer.offload_optimizer != "none"
    if "deepspeed" not in cfg.framework or cfg.precision == "fp32" or zero > 2 or offloaded:
        return []
    accumulated = max(0, cfg.batch.num_microbatches - 1) * DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM
    tensors = model_param_tensors(cfg, stage, num_layers)
    flat_fp16 = zero == 0 and cfg.precision == "fp16"
    per_param = DEEPSPEED_FP16_ZERO0_BYTES_PER_PARAM if flat_fp16 else DEEPSPEED_MP_BYTES_PER_PARAM[zero]
    host_s = 0.0 if flat_fp16 else tensors * DEEPSPEED_HOST_S_PER_TENSOR[zero]
    return [Op("optimizer.deepspeed_mixed_precision", "deepspeed_bookkeeping", "step",
               {"params": local, "param_tensors": tensors}, flops=0.0,
               bytes_moved=float(local * (per_param + accumulated)), dtype=cfg.precision,
               tags={"host_s": f"{host_s:.6g}"} if host_s else {})]


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
    return [_comm("embedding.tied_grad_allreduce", "allreduce", "step", nbytes, coll, cfg, None)]

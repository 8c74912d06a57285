"""DeepSpeed ZeRO-2/3 ops of one transformer layer, per micro-batch: parameter fetches, gradient reduction, host copies.

Semantics followed (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py, partitioned_param_coordinator.py):
- ZeRO-2 reduce-scatters (or, since v0.12.4, all-reduces) each layer's gradients in every micro-step's backward,
  overlapped when overlap_comm; ZeRO-3 also all-gathers each layer's parameters before its forward and again
  before its backward (prefetched, overlapped with compute) and before a recomputed forward.
- ZeRO++ (Wang et al. 2023, arXiv:2306.10209) at stage 3: hpZ, qwZ and qgZ; the gradient reduction in
  communication_data_type.
- offload_param: the rank's partition is copied from the host before each fetch; Megatron-DeepSpeed's
  deepspeed.checkpointing adds its own TP all-gather and host copies to a recomputed layer.
- DeepSpeed ZeRO-3 before v0.5.5 / v0.6.0: per-tensor list collectives (graph/zero3_legacy.py).
- ZeRO-3's memory-efficient linear takes nn.Linear's bias add out of the GEMM (zero3_bias_add_ops).
The once-per-step ops (gradient sync outside the layers, optimizer step) are graph/step_ops.py's.
"""

from __future__ import annotations

from dataclasses import replace

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.layer_ops import DTYPE_BYTES as ACT_BYTES
from llmperf_hook.graph.nvme_swap_ops import param_nvme_read_ops
from llmperf_hook.graph.op import Collective, Op, Phase
from llmperf_hook.graph.params import zero3_gather_modules
from llmperf_hook.graph.placement import place_group
from llmperf_hook.graph.step_ops import comm_op, dp_groups, grad_comm_bytes, param_bytes
from llmperf_hook.graph.zero3_legacy import list_gather_overhead_ops, per_tensor_reduce_ops
from llmperf_hook.graph.zero3_trace import layer_bwd_fetch_share, recomputed_layer_fetches


def zero3_layer_comm(cfg: TrainingConfig, layer_params: int, gpus_per_node: int, recomputed: bool = False,
                     moe: bool = False) -> tuple[tuple[Op, ...], tuple[Op, ...], tuple[Op, ...]]:
    """Per-layer, per-micro-batch ZeRO-2/3 comm: (gathers before forward, gathers in backward, grad reduce).

    ZeRO-3 releases a module's gathered parameters after its forward and fetches them again before its
    backward, and again before a recomputed forward, unless the reuse distance keeps them gathered in between
    (full recompute: up to three fetches per micro-batch, zero3_trace.recomputed_layer_fetches). With
    prefetching (stage3_prefetch_bucket_size > 0, the default) the fetches run ahead on a side stream and
    hide behind compute (one op per fetch phase, tagged overlap). With stage3_prefetch_bucket_size 0 each
    module's fetch starts when the module is reached and the module waits for it: one exposed all-gather per
    module (zero3_gather_modules), in execution order. ZeRO++ changes groups and bytes (zero3_fetch_ops,
    zero_grad_reduce_ops). A recomputed layer also carries DeepSpeed activation checkpointing's traffic
    (ds_checkpoint_ops). The forward (and a recomputed forward) carries ZeRO-3's separate bias adds
    (zero3_bias_add_ops; an MoE layer's, `moe`, without the MLP's)."""
    ckpt_fwd, ckpt_bwd = ds_checkpoint_ops(cfg, gpus_per_node, recomputed)
    fwd, bwd, reduce = _zero_layer_comm(cfg, layer_params, gpus_per_node, recomputed)
    bias_add = zero3_bias_add_ops(cfg, moe)
    # a recomputed forward adds them again
    fwd, bwd = bias_add + fwd, tuple(replace(op, phase="recompute") for op in bias_add if recomputed) + bwd
    copy_fwd, copy_bwd = offload_param_copy_ops(cfg, layer_params, dp_groups(cfg, gpus_per_node)[0].group_size,
                                                ranks_per_host=gpus_per_node)
    # a partition is copied in for each fetch that runs (a parameter still gathered is not)
    copy_bwd = tuple(op for share in bwd_fetch_phases(cfg, recomputed) for op in _scaled(copy_bwd, share))
    return copy_fwd + fwd + ckpt_fwd, copy_bwd + bwd + ckpt_bwd, reduce


ZERO3_BIAS_ADD_PASSES = 5.8
"""Bytes per output element, in units of the activation's bytes, of `output += bias` after a ZeRO-3 linear. Measured
on one H200 (measurements/h200-sxm-141gb-2026-11-27-b/kernels, 12 x 2048 testbed GPT, micro-batch 4): ZeRO-3's
aten::add_ takes 5,535 us per step where plain torch's (../h200-sxm-141gb-2026-11-27/kernels/plain_bf16.txt, the
model's own in-place gradient sums) takes 539, and ZeRO-2 runs the 48 linears as aten::addmm instead: 4,996 us for
48 bias adds over 8,192 tokens x 9 x 2,048 outputs x 12 layers = 1.81e9 elements, 11.6 B per element at the
measured 4.22 TB/s where a read and a write of bf16 are 4: the broadcast operand keeps PyTorch's elementwise kernel
off its vectorized path (TensorIterator is not contiguous). The 4-micro-batch table agrees: 192 bias adds over twice
the tokens, the model's own sums and 3 x 148 bf16 partition adds (stage3.py partition_grads: read 2 + 2, write 2 B a
parameter) predict 14.1 ms of aten::add_ against 14.9 measured."""


def zero3_bias_add_ops(cfg: TrainingConfig, moe: bool = False) -> tuple[Op, ...]:
    """The bias adds DeepSpeed ZeRO-3 splits out of transformers-style linears, once per layer and micro-batch.

    ZeRO-3 converts the model with deepspeed.zero.Init (parameter_offload.py _convert_to_zero_parameters, or the
    script's own zero.Init), which with zero_optimization.memory_efficient_linear (default true) replaces
    torch.nn.functional.linear by zero3_linear_wrap (partition_parameters.py _enable_mem_efficient_linear), so
    every nn.Linear runs LinearFunctionForZeroStage3 (runtime/zero/linear.py): on a 3-D input `input.matmul(
    weight.t())` then `output += bias`, where torch fuses the bias into the GEMM (aten::addmm). Megatron's layers
    call their own autograd functions, not F.linear (TrainingConfig.torch_linear_layers False for its entry
    points), nor does GPT-2's Conv1D (torch.addmm), nor any linear under zero_optimization.memory_efficient_linear
    false or, before v0.19.4 (617061d6b, #8189), in a model built outside zero.Init (deepspeed_release.
    zero3_splits_bias sets the flag). Which linears have biases: zero3_biased_outputs_per_token."""
    m = cfg.model
    if ("deepspeed" not in cfg.framework or cfg.optimizer.zero_stage != 3 or not cfg.torch_linear_layers
            or m.multi_latent_attention):
        return ()
    per_token = zero3_biased_outputs_per_token(cfg, moe)
    if not per_token:
        return ()
    p = cfg.parallel
    elements = cfg.batch.micro_batch_size * m.seq_length // max(1, p.cp) * per_token // max(1, p.tp)
    return (Op("zero3.linear_bias_add", "zero3_bias_add", "fwd", {"elements": elements}, flops=0.0,
               bytes_moved=ZERO3_BIAS_ADD_PASSES * elements * ACT_BYTES[cfg.precision], dtype=cfg.precision),)


def zero3_biased_outputs_per_token(cfg: TrainingConfig, moe: bool) -> int:
    """Output columns of a layer's biased nn.Linears, per token: the fused or separate QKV (ModelShape.qkv_biased,
    also alone: Qwen2's q, k, v), the output projection (add_bias_linear: Llama's o_proj with attention_bias) and a
    dense layer's MLP wherever it has biases of its own (ModelShape.mlp_biased): fc1 and fc2 (GPT-NeoX's
    dense_h_to_4h / dense_4h_to_h, biased even with attention_bias false), or Llama's gate_proj, up_proj and
    down_proj under mlp_bias (2 x ffn + h). An MoE layer (`moe`) adds none for its MLP: transformers' experts are
    no nn.Linear (gpt-oss's GptOssExperts multiply their own parameters and add their biases themselves, as
    without ZeRO-3), and the router's linear reads the tokens flattened to 2-D, which LinearFunctionForZeroStage3
    runs as torch.addmm with the bias fused (runtime/zero/linear.py: `if input.dim() == 2 and bias is not None`)."""
    m = cfg.model
    qkv = (m.num_attention_heads + 2 * m.num_query_groups) * m.kv_channels if m.qkv_biased else 0
    proj = m.hidden_size if m.add_bias_linear else 0
    mlp = m.ffn_hidden_size * (2 if m.swiglu else 1) + m.hidden_size if m.mlp_biased and not moe else 0
    return qkv + proj + mlp


def bwd_fetch_phases(cfg: TrainingConfig, recomputed: bool) -> tuple[float, ...]:
    """The share of a layer each ZeRO-3 fetch phase after its forward gathers, each phase its own ops: the
    backward's (the last layers can stay gathered into it: zero3_trace.layer_bwd_fetch_share), or under full
    recompute the recompute's, then the backward's (recomputed_layer_fetches: 0 to 2 layers in all). ZeRO-3 runs
    without pipeline parallelism (frameworks/validation.py), so the trace is rank 0's."""
    fetches = recomputed_layer_fetches(cfg, 0) if recomputed else layer_bwd_fetch_share(cfg, 0)
    return tuple(share for share in (min(1.0, fetches), fetches - 1.0) if share > 0)


def _scaled(ops: tuple[Op, ...], share: float) -> tuple[Op, ...]:
    """`share` of the bytes of each per-fetch op (a host copy's bytes, an NVMe read's read/write bytes)."""
    return tuple(replace(op, dims={k: int(v * share) if k.endswith("bytes") else v for k, v in op.dims.items()})
                 for op in ops)


HOST_LINK = Collective(group="host", group_size=1, ranks_per_node=1)
"""The GPU <-> host link as the 'group' of a host copy that runs on the all-gather stream: the composer hides such
an op behind compute where it is tagged overlap, as it hides the gathers, or charges it as exposed ZeRO time."""


def offload_param_copy_ops(cfg: TrainingConfig, layer_params: int, d: int, modules: tuple[int, ...] | None = None,
                           ranks_per_host: int = 1) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """(forward, backward) host-to-device copies of a layer's parameter partition under ZeRO-3 offload_param.

    The rank's partition (param.ds_tensor, 1/d of each parameter in its 16-bit dtype) lives in host memory
    (partition_parameters.py _partition_param: ds_tensor on the offload device, pinned with pin_memory), so every
    fetch copies it to the GPU before gathering it, on the all-gather stream (partitioned_param_coordinator.py
    __all_gather_params_: `with get_accelerator().stream(self.__allgather_stream)`). With several ranks the copy is
    all_gather_coalesced -> _all_gather_dtype's `param_ds_tensor.to(current_device_name())`, a blocking copy: the
    Python thread that issues the compute kernels waits for it (and for the gathers queued before it on that
    stream), so prefetching does not hide it: one exposed copy per fetch, per module without prefetching. One rank:
    _no_gather_coalesced copies with non_blocking=True, which a prefetch (stage3_prefetch_bucket_size > 0) runs
    behind compute like a gather. Fetched before the forward and the backward (and a recompute), as the gathers."""
    o = cfg.optimizer
    if o.zero_stage < 3 or o.offload_param == "none" or layer_params <= 0:
        return (), ()
    per_rank = param_bytes(cfg) / max(1, d)
    hidden = {"overlap": "param_gather"} if d <= 1 and o.stage3_prefetch_bucket_size_elems != 0 else {}
    sizes = (layer_params,) if o.stage3_prefetch_bucket_size_elems != 0 else \
        modules or zero3_gather_modules(cfg, layer_params)

    def phase_ops(phase: Phase) -> tuple[Op, ...]:  # offload_param nvme: each partition is read from NVMe first
        return param_nvme_read_ops(cfg, sizes, d, phase, ranks_per_host) + tuple(
            Op("zero3.param_h2d_copy", "host_copy", phase, {"bytes": int(n * per_rank)}, flops=0.0, bytes_moved=0.0,
               dtype=cfg.precision, collective=HOST_LINK, tags=dict(hidden)) for n in sizes)
    return phase_ops("fwd"), phase_ops("bwd")


def _zero_layer_comm(cfg: TrainingConfig, layer_params: int, gpus_per_node: int,
                     recomputed: bool) -> tuple[tuple[Op, ...], tuple[Op, ...], tuple[Op, ...]]:
    dense, _ = dp_groups(cfg, gpus_per_node)
    if cfg.optimizer.zero_stage < 2 or dense.group_size == 1:
        return (), (), ()
    reduce = zero_grad_reduce_ops(cfg, layer_params, dense)
    if cfg.optimizer.zero_stage < 3:
        return (), (), reduce
    secondary = hpz_group(cfg, dense, gpus_per_node)
    m = max(1, cfg.batch.num_microbatches)
    # hpZ: the secondary copy exists from the first release after a forward until the optimizer step
    # (stage3.py _post_step -> invalidate_secondary_tensor), so micro-batch 1's forward gathers over the whole
    # DP group and every later fetch (later forwards, all backwards and recomputes) inside the hpZ group
    # (partition_parameters.py all_gather_coalesced: `ds_process_group = self.zero_param_process_group`).
    if secondary is None or m == 1:
        fwd = zero3_fetch_ops(cfg, layer_params, dense, "fwd", 1.0)
    else:
        fwd = zero3_fetch_ops(cfg, layer_params, dense, "fwd", 1.0 / m) + \
            zero3_fetch_ops(cfg, layer_params, secondary, "fwd", (m - 1) / m)
    bwd = tuple(op for share in bwd_fetch_phases(cfg, recomputed)
                for op in zero3_fetch_ops(cfg, layer_params, secondary or dense, "bwd", share))
    return fwd, bwd, reduce


def ds_checkpoint_ops(cfg: TrainingConfig, gpus_per_node: int, recomputed: bool) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """(forward, backward) ops of one recomputed layer under Megatron-DeepSpeed's deepspeed.checkpointing
    (activation_checkpointing/checkpointing.py CheckpointFunction): --partition-activations stores 1/TP of the
    checkpointed input (partition_activations) and all-gathers it over TP before the recompute (get_full_inputs);
    --checkpoint-in-cpu copies the stored checkpoint to the host in forward and back in backward. One checkpoint
    per --checkpoint-num-layers layers (uniform), so a layer carries that share of it."""
    r, p, m = cfg.recompute, cfg.parallel, cfg.model
    if not recomputed or not (r.partition_activations or r.checkpoint_in_cpu):
        return (), ()
    share = 1.0 if r.method == "block" else 1.0 / max(1, r.num_layers or 1)
    full = ACT_BYTES[cfg.precision] * m.seq_length / p.cp * cfg.batch.micro_batch_size * m.hidden_size * share
    full /= p.tp if p.sequence_parallel else 1
    split = p.tp if r.partition_activations else 1
    fwd: tuple[Op, ...] = ()
    bwd: tuple[Op, ...] = ()
    if r.checkpoint_in_cpu:
        fwd, bwd = (_host_copy(full / split, "fwd", "d2h"),), (_host_copy(full / split, "bwd", "h2d"),)
    if split > 1:
        bwd += (Op("ds_checkpoint.allgather", "allgather", "bwd", {"bytes": int(full)}, dtype=cfg.precision,
                   collective=place_group("tp", p.tp, p, gpus_per_node)),)
    return fwd, bwd


def _host_copy(nbytes: float, phase: Phase, direction: str) -> Op:
    """A checkpoint copy between GPU and host memory, on the compute stream (the recompute waits for it); priced
    over the GPU's host link (predict/roofline.py host_copy_s)."""
    return Op(f"ds_checkpoint.{direction}_copy", "host_copy", phase, {"bytes": int(nbytes)}, flops=0.0,
              bytes_moved=0.0, dtype="bf16")


QWZ_BYTES_PER_ELEM = 1.0 + 4.0 / 4096
"""qwZ gathers int8 weights plus one fp32 scale per quantization block (partition_parameters.py CUDAQuantizer:
blocks of 4k-8k elements, 'the optimal size is 4k'; _all_gather_coalesced gathers the int8 tensor and the scales;
ZeRO++ paper Sec. 3.1, block-based quantization): 1 + 4/4096 B per element instead of 2."""
QWZ_KERNEL_BYTES_PER_ELEM = 3.0
"""Dequantizing a gathered module on the compute stream: read int8 (1 B), write the 16-bit weight (2 B)."""
QGZ_BYTES_PER_ELEM = 0.5 + 4.0 / 4096
"""qgZ sends int4 gradients plus one fp32 scale per group (coalesced_collectives.py all_to_all_quant_reduce:
swizzle_quant(tensor, max(rows, cols, world) groups, 4 bits), ~h elements a group)."""


def hpz_group(cfg: TrainingConfig, dense: Collective, gpus_per_node: int) -> Collective | None:
    """The hpZ secondary-partition group: min(k, DP) consecutive ranks (deepspeed/utils/groups.py
    _create_zero_param_parallel_group), so k = GPUs per node keeps it inside a node; None when hpZ is off."""
    k = min(cfg.optimizer.zero_hpz_partition_size, dense.group_size)
    if cfg.optimizer.zero_stage < 3 or k <= 1 or k >= dense.group_size:
        return None
    per_node = max(1, min(k, dense.ranks_per_node))
    sharing = max(1, gpus_per_node // per_node) if per_node < k else 1
    return Collective(group="hpz", group_size=k, ranks_per_node=per_node, groups_sharing_node=sharing)


def zero3_fetch_ops(cfg: TrainingConfig, layer_params: int, coll: Collective, phase: Phase, share: float,
                    modules: tuple[int, ...] | None = None) -> tuple[Op, ...]:
    """One phase's parameter fetches of a layer over `coll` (`share` of the micro-batches take this path): one
    prefetched all-gather tagged overlap, or one exposed all-gather per module without prefetching; with qwZ
    (quantize=zero_quantized_weights for every fetch, partitioned_param_coordinator.py __all_gather_params) the
    bytes are int8 + scales and each gathered module is dequantized on the compute stream."""
    o = cfg.optimizer
    per_elem = QWZ_BYTES_PER_ELEM if o.zero_quantized_weights else param_bytes(cfg)
    dtype = "int8" if o.zero_quantized_weights else cfg.precision
    modules = modules or zero3_gather_modules(cfg, layer_params)
    if o.stage3_prefetch_bucket_size_elems == 0:
        ops = tuple(Op("zero3.param_fetch", "allgather", "fwd", {"bytes": int(n * per_elem * share)}, dtype=dtype,
                       collective=coll) for n in modules)
    else:
        ops = (Op("zero3.param_allgather", "allgather", phase, {"bytes": int(layer_params * per_elem * share)},
                  dtype=dtype, collective=coll, tags={"overlap": "param_gather"}),)
    ops += list_gather_overhead_ops(cfg, modules, coll, share)
    if not o.zero_quantized_weights:
        return ops
    elems = int(layer_params * share)
    return ops + (Op("zeropp.qwz_dequantize", "quantize", phase, {"elements": elems}, flops=0.0,
                     bytes_moved=float(elems * QWZ_KERNEL_BYTES_PER_ELEM), dtype=cfg.precision),)


def zero_grad_reduce_ops(cfg: TrainingConfig, layer_params: int, dense: Collective) -> tuple[Op, ...]:
    """A layer's gradient reduction in backward: a reduce-scatter over the DP group in the communication dtype,
    or, with qgZ at stage 3 across nodes, stage3.py __avg_scatter_grads -> all_to_all_quant_reduce (ZeRO++ Sec.
    3.3): int4 all-to-all among the node's r GPUs, a quantized reduction to 1/r of the gradient, an int4
    all-to-all among the n nodes, dequantize. Tensors not divisible by 2 x world and 1-D ones fall back to the
    reduce-scatter there; they are a small share of a layer and priced as quantized."""
    o = cfg.optimizer
    overlap = {"overlap": "grad_reduce"} if o.overlap_grad_reduce else {}
    if o.zero_stage == 3 and o.zero3_per_tensor_grad_reduce and not o.zero_quantized_gradients:
        modules = zero3_gather_modules(cfg, layer_params)
        # That code reduce-scattered param.grad itself, in the parameters' dtype (communication_data_type came later).
        return per_tensor_reduce_ops(cfg, modules, layer_params, dense, param_bytes(cfg), overlap)
    if o.zero_grad_allreduce:  # ZeRO-2, DeepSpeed >= 0.12.4: allreduce_and_scatter of each bucket
        return (comm_op("zero.grad_allreduce", "allreduce", "bwd", layer_params * grad_comm_bytes(cfg), dense,
                      cfg, overlap.get("overlap")),)
    if not (o.zero_stage == 3 and o.zero_quantized_gradients and dense.num_nodes > 1):
        return (comm_op("zero.grad_reduce_scatter", "reducescatter", "bwd", layer_params * grad_comm_bytes(cfg), dense,
                      cfg, overlap.get("overlap")),)
    r, nodes = dense.ranks_per_node, dense.num_nodes
    intra = Collective(group="qgz_intra", group_size=r, ranks_per_node=r)
    inter = Collective(group="qgz_inter", group_size=nodes, ranks_per_node=1, groups_sharing_node=r)
    # Kernel passes per element of the layer's gradient: swizzle_quant reads 16-bit, writes int4 (2.5); the
    # quantized reduction reads the r int4 slices and writes 1/r of them (0.5 + 0.5/r); dequantize reads 1/r int4
    # and writes 1/r 16-bit (2.5/r): 3 + 3/r bytes.
    kernel_bytes = layer_params * (3.0 + 3.0 / r)
    return (Op("zeropp.qgz_intra_alltoall", "alltoall", "bwd", {"bytes": int(layer_params * QGZ_BYTES_PER_ELEM)},
               dtype="int4", collective=intra, tags=overlap),
            Op("zeropp.qgz_inter_alltoall", "alltoall", "bwd", {"bytes": int(layer_params / r * QGZ_BYTES_PER_ELEM)},
               dtype="int4", collective=inter, tags=overlap),
            Op("zeropp.qgz_quantize", "quantize", "bwd", {"elements": layer_params}, flops=0.0,
               bytes_moved=float(kernel_bytes), dtype=cfg.precision))

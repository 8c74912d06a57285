"""ZeRO++ and related ds_config keys as graph ops (graph/step_ops.py, graph/zero_layer_ops.py): hpZ groups, qwZ / qgZ bytes, the gradient
reduction dtype, partial optimizer offload, BF16_Optimizer's all-reduce, DeepSpeed activation checkpointing.

The small job: 4 layers, h = 1024, dense, DeepSpeed ZeRO-3 bf16 over 16 ranks on two 8-GPU nodes (tp = pp = 1).
A layer has 12h^2 + 13h = 12,596,224 parameters (QKV 3h^2 + 3h, proj h^2 + h, MLP 8h^2 + 5h, two LayerNorms 4h).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmperf_hook.frameworks.training_config import (BatchConfig, ModelShape, OptimizerConfig, ParallelLayout,
                                                     RecomputeConfig, TrainingConfig)
from llmperf_hook.hardware.load import load_hardware
from llmperf_hook.predict.roofline import HOST_LINK_EFFICIENCY, compute_time_s
from llmperf_hook.graph.params import layer_params
from llmperf_hook.graph.step_ops import build_step_ops, dp_groups, offloaded_optimizer_share
from llmperf_hook.graph.zero_layer_ops import (QGZ_BYTES_PER_ELEM, QWZ_BYTES_PER_ELEM, ds_checkpoint_ops, zero3_layer_comm,
                                              zero_grad_reduce_ops)

H = 1024
LAYER = 12 * H * H + 13 * H
GPN = 8


def _cfg(world: int = 16, micro: int = 1, **opt: object) -> TrainingConfig:
    model = ModelShape(num_layers=4, hidden_size=H, ffn_hidden_size=4 * H, num_attention_heads=16, num_query_groups=16,
                       kv_channels=64, seq_length=1024, vocab_size=32000, padded_vocab_size=32000)
    # stage3_max_reuse_distance 0 and max_live_parameters 0: every layer is released after use and fetched again
    # before its backward (neither the distance nor the prefetch queue keeps it), as in a model far larger than
    # DeepSpeed's 1e9-element limits (this one fits whole: graph/zero3_trace.py)
    opt = {"stage3_max_reuse_distance": 0, "stage3_max_live_parameters": 0, **opt}
    optimizer = OptimizerConfig(zero_stage=3, overlap_grad_reduce=True, stage3_prefetch_bucket_size_elems=50_000_000,
                                **opt)  # type: ignore[arg-type]
    return TrainingConfig(framework="deepspeed", launcher="deepspeed", world_size=world, nnodes=world // GPN,
                          nproc_per_node=GPN, model=model, parallel=ParallelLayout(dp=world),
                          batch=BatchConfig(1, world * micro, micro), precision="bf16", optimizer=optimizer)


def test_layer_params_of_the_small_model() -> None:
    assert layer_params(_cfg(), moe=False) == LAYER


def test_plain_zero3_gathers_over_dp_and_reduces_in_the_models_dtype() -> None:
    fwd, bwd, reduce = zero3_layer_comm(_cfg(), LAYER, GPN)
    assert [(op.collective.group_size, op.dims["bytes"]) for op in fwd + bwd] == [(16, 2 * LAYER)] * 2
    (rs,) = reduce
    # no communication_data_type: DeepSpeed reduces in the model's dtype (engine.communication_data_type), bf16
    assert (rs.op_class, rs.dims["bytes"]) == ("reducescatter", 2 * LAYER)


def test_communication_data_type_sets_the_reduction_bytes() -> None:
    (rs,) = zero3_layer_comm(_cfg(grad_comm_dtype="bf16"), LAYER, GPN)[2]
    assert rs.dims["bytes"] == 2 * LAYER
    (rs,) = zero3_layer_comm(_cfg(grad_comm_dtype="fp32"), LAYER, GPN)[2]
    assert rs.dims["bytes"] == 4 * LAYER


@pytest.mark.parametrize(("precision", "per_elem"), [("fp16", 2), ("bf16", 2), ("fp32", 4)])
def test_default_reduction_dtype_is_the_models_at_every_stage(precision: str, per_elem: int) -> None:
    """engine.communication_data_type without the key: fp16 -> fp16, bf16 -> bf16, else fp32, whatever
    fp32_main_grads says (ZeRO-1/2 and ZeRO-3 allocate their reduction buckets in it)."""
    base = replace(_cfg(world=8), precision=precision)
    zero1 = replace(base, optimizer=replace(base.optimizer, zero_stage=1))
    (step_reduce,) = [op for op in build_step_ops(zero1, 0, LAYER, 0, GPN, 1) if op.name.startswith("dp.grad_")]
    assert step_reduce.dims["bytes"] == per_elem * LAYER
    for stage in (2, 3):
        cfg = replace(base, optimizer=replace(base.optimizer, zero_stage=stage))
        (layer_reduce,) = zero_grad_reduce_ops(cfg, LAYER, dp_groups(cfg, GPN)[0])
        assert layer_reduce.dims["bytes"] == per_elem * LAYER, stage


def test_bf16_optimizer_all_reduces_its_fp32_gradients_in_bf16() -> None:
    """ZeRO-1 + bf16 + grad_accum_dtype fp32 runs BF16_Optimizer, whose fp32 gradients engine.allreduce_bucket casts
    to communication_data_type (bf16 by default) before the all-reduce; the key set to fp32 keeps 4 bytes."""
    base = _cfg(world=8)
    accum = replace(base, optimizer=replace(base.optimizer, zero_stage=1, grad_accum_dtype="fp32"))
    fp32 = replace(accum, optimizer=replace(accum.optimizer, grad_comm_dtype="fp32"))
    for cfg, per_elem in ((accum, 2), (fp32, 4)):
        (ar,) = [op for op in build_step_ops(cfg, 0, 4 * LAYER, 0, GPN, 4) if op.op_class == "allreduce"]
        assert ar.dims["bytes"] == per_elem * 4 * LAYER


def test_other_frameworks_keep_their_main_gradient_bytes() -> None:
    base = _cfg(world=8)
    megatron = replace(base, framework="megatron", optimizer=replace(base.optimizer, zero_stage=0,
                                                                     distributed_optimizer=True))
    (rs,) = [op for op in build_step_ops(megatron, 0, LAYER, 0, GPN, 1) if op.op_class == "reducescatter"]
    assert rs.dims["bytes"] == 4 * LAYER  # Megatron's fp32 main gradients (fp32_main_grads)


def test_hpz_moves_backward_and_later_forward_gathers_into_the_node() -> None:
    """4 micro-batches: micro-batch 1's forward gathers over all 16 ranks (no secondary copy yet), micro-batches
    2-4 and every backward over the 8-rank hpZ group inside the node."""
    fwd, bwd, _ = zero3_layer_comm(_cfg(micro=4, zero_hpz_partition_size=8), LAYER, GPN)
    assert [(op.collective.group_size, op.collective.ranks_per_node, op.dims["bytes"]) for op in fwd] == \
        [(16, 8, int(2 * LAYER / 4)), (8, 8, int(2 * LAYER * 3 / 4))]
    (gather,) = bwd
    assert (gather.collective.group, gather.collective.intra_node, gather.dims["bytes"]) == ("hpz", True, 2 * LAYER)


def test_hpz_with_full_recompute_gathers_twice_in_the_node() -> None:
    """Reuse distance 0: the recompute's gather is released before the backward, which fetches again (zero3_trace)."""
    _, bwd, _ = zero3_layer_comm(_cfg(zero_hpz_partition_size=8), LAYER, GPN, recomputed=True)
    assert [(op.collective.group_size, op.dims["bytes"]) for op in bwd] == [(8, 2 * LAYER), (8, 2 * LAYER)]


def test_hpz_of_the_whole_dp_group_changes_no_group() -> None:
    fwd, bwd, _ = zero3_layer_comm(_cfg(zero_hpz_partition_size=16), LAYER, GPN)
    assert {op.collective.group_size for op in fwd + bwd} == {16}


def test_qwz_gathers_int8_plus_scales_and_dequantizes() -> None:
    fwd, bwd, _ = zero3_layer_comm(_cfg(zero_quantized_weights=True), LAYER, GPN)
    for ops in (fwd, bwd):
        gather, dequant = ops
        assert gather.dims["bytes"] == int(LAYER * (1 + 4 / 4096)) == int(LAYER * QWZ_BYTES_PER_ELEM)
        assert gather.dims["bytes"] < 0.51 * 2 * LAYER  # about half of the bf16 gather
        assert (dequant.op_class, dequant.bytes_moved) == ("quantize", 3.0 * LAYER)


def test_qgz_is_a_two_hop_int4_all_to_all() -> None:
    """16 ranks on 2 nodes: int4 all-to-all of the whole gradient among the node's 8 GPUs, then of its 1/8 among
    the 2 nodes; kernels read and write 3 + 3/8 B per element."""
    (intra, inter, kernel) = zero3_layer_comm(_cfg(zero_quantized_gradients=True), LAYER, GPN)[2]
    assert (intra.op_class, intra.collective.group_size, intra.collective.intra_node) == ("alltoall", 8, True)
    assert intra.dims["bytes"] == int(LAYER * (0.5 + 4 / 4096))
    assert (inter.collective.group_size, inter.collective.ranks_per_node) == (2, 1)
    assert inter.dims["bytes"] == int(LAYER / 8 * QGZ_BYTES_PER_ELEM)
    assert intra.dims["bytes"] + inter.dims["bytes"] < 4 * LAYER / 7  # vs the 4 B reduce-scatter: > 7x fewer bytes
    assert kernel.bytes_moved == pytest.approx(LAYER * (3 + 3 / 8))
    assert intra.tags["overlap"] == inter.tags["overlap"] == "grad_reduce"


def test_qgz_inside_one_node_keeps_the_reduce_scatter() -> None:
    """stage3.py __avg_scatter_grads uses all_to_all_quant_reduce only when num_nodes > 1."""
    (rs,) = zero3_layer_comm(_cfg(world=8, zero_quantized_gradients=True), LAYER, GPN)[2]
    assert rs.op_class == "reducescatter"


@pytest.mark.parametrize("local, sub_group, ratio, share", [
    (200_000_000, 1_000_000_000, 0.5, 1.0),  # one sub-group: int((1 - 0.5) * 1) = 0 on the GPU, all offloaded
    (200_000_000, 50_000_000, 0.5, 0.5),     # 4 sub-groups: 2 on the GPU
    (200_000_000, 50_000_000, 0.3, 0.5),     # int(0.7 * 4) = 2 on the GPU
    (200_000_000, 50_000_000, 0.0, 0.0),
])
def test_partial_offload_assigns_whole_sub_groups(local: int, sub_group: int, ratio: float, share: float) -> None:
    cfg = _cfg(offload_optimizer="cpu", offload_optimizer_ratio=ratio, sub_group_size_elems=sub_group)
    assert offloaded_optimizer_share(cfg, local) == share


def test_partial_offload_splits_the_optimizer_step() -> None:
    cfg = _cfg(offload_optimizer="cpu", offload_optimizer_ratio=0.5, sub_group_size_elems=1_000_000)
    total = 4 * LAYER
    steps = [op for op in build_step_ops(cfg, 0, total, 0, GPN, 4) if op.op_class == "optimizer"]
    local = total // 16
    gpu, host = steps
    assert gpu.dims["params"] + host.dims["params"] == local
    assert (gpu.tags.get("offload"), host.tags["offload"]) == (None, "cpu")
    n = -(-local // 1_000_000)
    assert gpu.dims["params"] == local - round(local * (n - int(0.5 * n)) / n)


def test_bf16_optimizer_all_reduces_at_zero1() -> None:
    base = _cfg(world=8)
    zero1 = replace(base, optimizer=replace(base.optimizer, zero_stage=1))
    accum = replace(base, optimizer=replace(base.optimizer, zero_stage=1, grad_accum_dtype="fp32"))
    classes = lambda cfg: {op.op_class for op in build_step_ops(cfg, 0, 4 * LAYER, 0, GPN, 4)  # noqa: E731
                           if op.name != "zero.gradient_norm_allreduce"}  # the ZeRO-1/2 optimizer's 4-byte norm
    assert "reducescatter" in classes(zero1) and "allreduce" not in classes(zero1)
    assert "allreduce" in classes(accum) and "allgather" in classes(accum)


def _checkpointing(tp: int, **flags: bool) -> TrainingConfig:
    base = _cfg(world=8)
    return replace(base, framework="megatron-deepspeed", parallel=ParallelLayout(tp=tp, dp=8 // tp),
                   recompute=RecomputeConfig("full", "uniform", 1, **flags))


def test_partition_activations_gathers_the_checkpoint_over_tp() -> None:
    """s b h = 1024 x 1 x 1024 bf16 = 2 MiB per checkpoint; stored 1/4 per rank, all-gathered before the recompute."""
    fwd, bwd = ds_checkpoint_ops(_checkpointing(4, partition_activations=True), GPN, recomputed=True)
    (gather,) = bwd
    assert fwd == () and (gather.op_class, gather.collective.group_size, gather.dims["bytes"]) == ("allgather", 4, 2 * 2**20)
    assert ds_checkpoint_ops(_checkpointing(4, partition_activations=True), GPN, recomputed=False) == ((), ())


def test_checkpoint_in_cpu_copies_the_stored_share_over_pcie() -> None:
    fwd, bwd = ds_checkpoint_ops(_checkpointing(4, partition_activations=True, checkpoint_in_cpu=True), GPN, True)
    (d2h,), (h2d, gather) = fwd, bwd
    assert d2h.dims["bytes"] == h2d.dims["bytes"] == 2**19  # 2 MiB / TP 4
    a100 = load_hardware("a100-sxm4-80gb")  # PCIe Gen4 x16: 31.5 GB/s per direction at HOST_LINK_EFFICIENCY
    assert compute_time_s(d2h, a100) == pytest.approx(2**19 / (31.5e9 * HOST_LINK_EFFICIENCY) + a100.kernel_launch_s)
    assert gather.op_class == "allgather"

"""ZeRO-3 as DeepSpeed < v0.5.5 / v0.6.0 ran it (graph/zero3_legacy.py): per-tensor list collectives with a host
loop and one copy per rank, switched on only by the era fields of OptimizerConfig.

The job: GPT-3 175B shape (96 layers, h = 12288), fp16, TP 1 PP 1, ZeRO-3 with the synchronous fetch
(stage3_prefetch_bucket_size 0, overlap_comm false) on 384 or 1,536 GPUs of 8-GPU nodes, full recompute.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmperf_hook.frameworks.training_config import (BatchConfig, ModelShape, OptimizerConfig, ParallelLayout,
                                                     RecomputeConfig, TrainingConfig)
from llmperf_hook.graph.param_tensors import tensors_per_layer
from llmperf_hook.graph.params import layer_params
from llmperf_hook.graph.zero_layer_ops import zero3_gather_modules, zero3_layer_comm
from llmperf_hook.graph.zero3_legacy import (COPY_S_PER_RANK, GATHER_EXTRA_BYTES_PER_ELEM, GATHER_LOOP_S_PER_RANK,
                                             REDUCE_LOOP_S_PER_RANK)

H = 12288
GPN = 8
ERA = {"zero3_list_param_gather": True, "zero3_per_tensor_grad_reduce": True}


def _cfg(world: int = 384, **opt: object) -> TrainingConfig:
    model = ModelShape(num_layers=96, hidden_size=H, ffn_hidden_size=4 * H, num_attention_heads=96, num_query_groups=96,
                       kv_channels=128, seq_length=2048, vocab_size=51200, padded_vocab_size=51200)
    optimizer = OptimizerConfig(zero_stage=3, overlap_grad_reduce=False, stage3_prefetch_bucket_size_elems=0,
                                fp32_main_grads=False, **opt)  # type: ignore[arg-type]
    return TrainingConfig(framework="megatron-deepspeed", launcher="torchrun", world_size=world, nnodes=world // GPN,
                          nproc_per_node=GPN, model=model, parallel=ParallelLayout(dp=world),
                          batch=BatchConfig(1, world, 1), precision="fp16", optimizer=optimizer,
                          recompute=RecomputeConfig(granularity="full", method="uniform", num_layers=1))


def _legacy(ops: tuple) -> list:
    return [op for op in ops if op.name.startswith("zero3_legacy.")]


def test_todays_zero3_has_no_legacy_ops() -> None:
    cfg = _cfg()
    fwd, bwd, reduce = zero3_layer_comm(cfg, layer_params(cfg, moe=False), GPN, recomputed=True)
    assert not _legacy(fwd + bwd + reduce)
    assert [op.op_class for op in reduce] == ["reducescatter"]


def test_list_gather_costs_each_rank_of_each_gather() -> None:
    """Per fetch phase: the four module weights, each a loop over the 384 ranks plus 384 copies."""
    cfg = _cfg(zero3_list_param_gather=True)
    params = layer_params(cfg, moe=False)
    fwd, bwd, _ = zero3_layer_comm(cfg, params, GPN, recomputed=True)
    modules = zero3_gather_modules(cfg, params)
    (extra,) = _legacy(fwd)
    assert float(extra.tags["host_s"]) == pytest.approx(len(modules) * 384 * (GATHER_LOOP_S_PER_RANK + COPY_S_PER_RANK))
    assert extra.bytes_moved == pytest.approx(sum(modules) * GATHER_EXTRA_BYTES_PER_ELEM, rel=1e-6)
    # the recomputed forward's fetch and the backward's: a 175B layer (1.8e9 elements) passes the 1e9 reuse
    # distance, so only MLP down (used again right after its recompute) stays gathered: (2 x 8 + 4) / 12 of a layer
    recompute, backward = _legacy(bwd)
    assert recompute.dims["elements"] == sum(modules)
    assert backward.dims["elements"] == pytest.approx(sum(modules) * 8 / 12, rel=0.01)


def test_list_costs_grow_with_the_data_parallel_size() -> None:
    small, large = _cfg(384, **ERA), _cfg(1536, **ERA)
    params = layer_params(small, moe=False)
    host = [sum(float(op.tags.get("host_s", 0.0)) for part in zero3_layer_comm(c, params, GPN, True) for op in _legacy(part))
            for c in (small, large)]
    assert host[1] == pytest.approx(4 * host[0], rel=1e-5)  # tags keep 6 significant digits


def test_per_tensor_reduce_scatters_every_parameter_tensor() -> None:
    """Twelve tensors per layer (four weights, four biases, two LayerNorms' weight and bias), the layer's bytes in
    the parameters' dtype, and the loop + flatten copies per tensor and rank."""
    cfg = _cfg(zero3_per_tensor_grad_reduce=True)
    params = layer_params(cfg, moe=False)
    reduce = zero3_layer_comm(cfg, params, GPN, True)[2]
    scatters = [op for op in reduce if op.op_class == "reducescatter"]
    assert len(scatters) == tensors_per_layer(cfg) == 12
    assert sum(op.dims["bytes"] for op in scatters) == pytest.approx(2 * params, abs=2 * 12)
    (extra,) = _legacy(tuple(op for op in reduce if op.op_class != "reducescatter"))
    assert float(extra.tags["host_s"]) == pytest.approx(12 * 384 * (REDUCE_LOOP_S_PER_RANK + COPY_S_PER_RANK))


def test_qgz_keeps_its_own_reduction() -> None:
    """ZeRO++ is a DeepSpeed of 2023: the era field does not turn its reduction into per-tensor scatters."""
    cfg = _cfg(zero3_per_tensor_grad_reduce=True, zero_quantized_gradients=True)
    reduce = zero3_layer_comm(cfg, layer_params(cfg, moe=False), GPN, True)[2]
    assert not _legacy(reduce) and {op.op_class for op in reduce} >= {"alltoall"}


def test_era_makes_the_step_slower_and_more_so_at_larger_dp() -> None:
    from llmperf_hook.api import predict_config
    from llmperf_hook.hardware.load import load_cluster

    cluster = load_cluster("dgx-a100")
    ratios = []
    for world in (384, 1536):
        today = predict_config(_cfg(world), cluster).step_time_s
        legacy = predict_config(replace(_cfg(world), optimizer=replace(_cfg(world).optimizer, **ERA)), cluster)
        ratios.append(legacy.step_time_s / today)
    assert 1.0 < ratios[0] < ratios[1]


def test_rank_copies_follow_the_padded_partitions() -> None:
    """_allgather_params copies one slice per rank whose padded partition starts inside the parameter: a 12,288-
    element bias over 1,536 ranks is 8 elements a rank, all 1,536; 20,480 over 2,240 ranks pads to 10 a rank,
    so only 2,048 ranks hold any of it; a parameter smaller than the world is one element a rank."""
    from llmperf_hook.graph.zero3_legacy import rank_copies

    assert rank_copies(12288, 1536) == 1536
    assert rank_copies(20480, 2240) == 2048
    assert rank_copies(100, 384) == 100


def test_step_regathers_the_persistent_parameters_with_a_copy_per_parameter_and_rank() -> None:
    """DeepSpeed < v0.5.5 _post_step: eight persistent tensors per layer (four biases, two LayerNorms' weight and
    bias) plus the final LayerNorm, every one under the 1e5 threshold, re-gathered with one copy per rank each;
    on the critical path after the optimizer (it is neither overlapped nor part of the gradient sync)."""
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.graph.zero3_legacy import PERSISTENT_COPY_LOOP_S, persistent_tensor_sizes
    from llmperf_hook.hardware.load import load_cluster

    cfg = _cfg(1536, **ERA)
    sizes = persistent_tensor_sizes(cfg, 96, last_stage=True)
    assert len(sizes) == 8 * 96 + 2 and max(sizes) == 4 * H  # the MLP-up bias, 49,152 elements
    step_ops = build_graph(cfg, load_cluster("dgx-a100")).stages[0].step_ops
    (copies,) = [op for op in step_ops if op.name == "zero3_legacy.persistent_param_allgather_copies"]
    per_copy = PERSISTENT_COPY_LOOP_S + COPY_S_PER_RANK
    expected = len(sizes) * 1536 * per_copy + 1536 * (REDUCE_LOOP_S_PER_RANK + COPY_S_PER_RANK)
    assert float(copies.tags["host_s"]) == pytest.approx(expected, rel=1e-5)
    assert not any(op.tags.get("overlap") for op in step_ops if "persistent" in op.name)


def test_no_persistent_regather_from_v055_or_without_era_fields() -> None:
    """v0.5.5 gathers in place (_allgather_params_coalesced): only zero3_list_param_gather turns the loop on."""
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.hardware.load import load_cluster

    cluster = load_cluster("dgx-a100")
    for cfg in (_cfg(1536), _cfg(1536, zero3_per_tensor_grad_reduce=True)):
        assert not [op for op in build_graph(cfg, cluster).stages[0].step_ops if "persistent" in op.name]


def test_persistent_regather_is_reported_as_the_parameter_gather() -> None:
    from llmperf_hook.api import predict_config
    from llmperf_hook.hardware.load import load_cluster

    cluster = load_cluster("dgx-a100")
    small, large = (predict_config(_cfg(world, **ERA), cluster).breakdown["comm_param_gather"] for world in (384, 1536))
    assert 0.0 < small and large == pytest.approx(4 * small, rel=0.02)  # the loop is per rank

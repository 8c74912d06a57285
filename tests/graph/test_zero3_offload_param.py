"""DeepSpeed ZeRO-3 offload_param: each fetch copies the rank's partition host-to-device before its all-gather, on the
all-gather stream (graph/zero_layer_ops.offload_param_copy_ops), priced over the GPU's host link (HardwareSpec
host_link_bytes_per_s, predict/roofline.host_copy_s).

The job: Llama-2-13B's shape, bf16, ZeRO-3 on one 8-GPU node (or one GPU), micro-batch 1, seq 4096.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmperf_hook.api import predict_config
from llmperf_hook.frameworks.training_config import (BatchConfig, ModelShape, OptimizerConfig, ParallelLayout,
                                                     RecomputeConfig, TrainingConfig)
from llmperf_hook.graph.params import layer_params
from llmperf_hook.graph.zero3_trace import layer_bwd_fetch_share
from llmperf_hook.graph.zero_layer_ops import zero3_gather_modules, zero3_layer_comm
from llmperf_hook.hardware.load import load_cluster, load_hardware
from llmperf_hook.predict.roofline import HOST_LINK_EFFICIENCY, compute_time_s

GPN = 8


def _cfg(world: int = 8, prefetch: int | None = None, offload: str = "cpu", recompute: bool = False) -> TrainingConfig:
    model = ModelShape(num_layers=40, hidden_size=5120, ffn_hidden_size=13824, num_attention_heads=40,
                       num_query_groups=40, kv_channels=128, seq_length=4096, vocab_size=32000, padded_vocab_size=32000,
                       swiglu=True, normalization="RMSNorm", position_embedding="rope", untie_embeddings=True,
                       add_bias_linear=False)
    optimizer = OptimizerConfig(zero_stage=3, overlap_grad_reduce=True, offload_optimizer=offload,  # type: ignore[arg-type]
                                offload_param=offload, stage3_prefetch_bucket_size_elems=prefetch,  # type: ignore[arg-type]
                                fp32_main_grads=False)
    full = RecomputeConfig(granularity="full", method="uniform", num_layers=1) if recompute else RecomputeConfig()
    return TrainingConfig(framework="deepspeed", launcher="deepspeed", world_size=world, nnodes=1, nproc_per_node=world,
                          model=model, parallel=ParallelLayout(dp=world), batch=BatchConfig(1, world, 1),
                          precision="bf16", optimizer=optimizer, recompute=full)


def _copies(ops: tuple) -> list:
    return [op for op in ops if op.op_class == "host_copy"]


def test_each_fetch_copies_the_partition_before_gathering() -> None:
    cfg = _cfg()
    params = layer_params(cfg, moe=False)
    fwd, bwd, _ = zero3_layer_comm(cfg, params, GPN)
    (copy_fwd,), (copy_bwd,) = _copies(fwd), _copies(bwd)
    assert copy_fwd.dims["bytes"] == int(params * 2 / 8)  # bf16 partition, 1/8 per rank
    # the last 2 of the 40 layers stay gathered into their backward (reuse distance): no fetch, so no copy
    assert layer_bwd_fetch_share(cfg, 0) == pytest.approx(38 / 40)
    assert copy_bwd.dims["bytes"] == int(copy_fwd.dims["bytes"] * 38 / 40)
    assert "overlap" not in copy_fwd.tags  # a blocking .to(device): the issuing thread waits, prefetch or not
    assert fwd.index(copy_fwd) < [op.op_class for op in fwd].index("allgather")


def test_no_copies_without_offload_param() -> None:
    cfg = _cfg(offload="none")
    fwd, bwd, _ = zero3_layer_comm(cfg, layer_params(cfg, moe=False), GPN)
    assert not _copies(fwd + bwd)


def test_a_recomputed_layer_copies_again_before_its_recompute() -> None:
    """The recompute copies the partition in; its gather stays for the backward (a 13B layer is well under the 1e9
    reuse distance), so the backward copies nothing more; with reuse distance 0 it copies again."""
    cfg = _cfg(recompute=True)
    fwd, bwd, _ = zero3_layer_comm(cfg, layer_params(cfg, moe=False), GPN, recomputed=True)
    one = sum(op.dims["bytes"] for op in _copies(fwd))
    assert sum(op.dims["bytes"] for op in _copies(bwd)) == pytest.approx(one, rel=0.05)
    far = replace(cfg, optimizer=replace(cfg.optimizer, stage3_max_reuse_distance=0, stage3_max_live_parameters=0))
    _, bwd, _ = zero3_layer_comm(far, layer_params(far, moe=False), GPN, recomputed=True)
    assert sum(op.dims["bytes"] for op in _copies(bwd)) == pytest.approx(2 * one, rel=1e-6)


def test_one_gpu_still_copies_the_whole_layer() -> None:
    """One rank: _no_gather_coalesced moves ds_tensor to the GPU (no all-gather at all), non_blocking, so a prefetch
    hides it."""
    cfg = _cfg(world=1)
    params = layer_params(cfg, moe=False)
    fwd, bwd, _ = zero3_layer_comm(cfg, params, 1)
    assert [op.op_class for op in fwd] == ["host_copy"] and fwd[0].dims["bytes"] == params * 2
    assert fwd[0].tags["overlap"] == "param_gather"


def test_without_prefetch_each_module_copy_is_exposed() -> None:
    cfg = _cfg(prefetch=0)
    params = layer_params(cfg, moe=False)
    fwd, _, _ = zero3_layer_comm(cfg, params, GPN)
    copies = _copies(fwd)
    assert len(copies) == len(zero3_gather_modules(cfg, params)) and all("overlap" not in op.tags for op in copies)


def test_copy_time_follows_the_host_link_of_each_gpu() -> None:
    cfg = _cfg()
    (copy,) = _copies(zero3_layer_comm(cfg, layer_params(cfg, moe=False), GPN)[0])
    a100, h100, gh200 = (load_hardware(n) for n in ("a100-sxm4-80gb", "h100-sxm5-80gb", "gh200-96gb"))
    assert compute_time_s(copy, a100) == pytest.approx(copy.dims["bytes"] / (31.5e9 * HOST_LINK_EFFICIENCY) + 4e-6)
    assert compute_time_s(copy, a100) / compute_time_s(copy, h100) == pytest.approx(2.0, rel=0.01)  # Gen4 vs Gen5
    assert compute_time_s(copy, gh200) < compute_time_s(copy, h100) / 5  # NVLink-C2C


def test_copies_lengthen_the_step_by_their_time() -> None:
    """Every fetch's copy is on the critical path (2 fetches per layer: forward and recompute, whose gather the
    reuse distance keeps for the backward), with or without prefetching; on one GPU a prefetch hides part of it
    behind the layer's compute."""
    cluster = load_cluster("dgx-h100")
    rate = cluster.gpu.host_link_bytes_per_s * HOST_LINK_EFFICIENCY

    def step_s(offload: str, prefetch: int | None, world: int = 8) -> float:
        cfg = _cfg(world=world, prefetch=prefetch, recompute=True)
        cfg = replace(cfg, optimizer=replace(cfg.optimizer, offload_param=offload))
        return predict_config(cfg, cluster).step_time_s

    copies_s = 2 * 40 * layer_params(_cfg(), moe=False) * 2 / 8 / rate
    for prefetch in (0, None):
        assert step_s("cpu", prefetch) - step_s("none", prefetch) == pytest.approx(copies_s, rel=0.05)
    one_gpu = step_s("cpu", None, 1) - step_s("none", None, 1)
    assert 0.0 <= one_gpu < 8 * copies_s

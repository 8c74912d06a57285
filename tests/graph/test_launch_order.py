"""Megatron's async TP collectives on Blackwell: Megatron-LM asserts CUDA_DEVICE_MAX_CONNECTIONS=1 for TP or CP > 1
only where get_device_arch_version() < 10 (50d847514d, 0db0e8328b), so on a GPU of compute capability 10 or more the
overlap is priced whatever the setting (graph/launch_order.py), and older GPUs keep the serialized pricing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmperf_hook import api
from llmperf_hook.graph.launch_order import ORDER_FREE_COMPUTE_CAPABILITY, launch_order_warnings, tp_launch_ordered
from llmperf_hook.hardware.load import load_cluster

ARGV = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 4 --hidden-size 4096 --num-attention-heads 32 "
        "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 8 "
        "--vocab-size 51200 --bf16 --tensor-model-parallel-size 8").split()


def _bwd_tp_comm(connections: int, cluster: str, *extra: str):
    from llmperf_hook.graph.build import build_graph

    pred = api.predict_command([f"CUDA_DEVICE_MAX_CONNECTIONS={connections}", *ARGV, *extra], {}, cluster=cluster)
    blocks = build_graph(pred.config, load_cluster(cluster)).stages[0].chunks[0].blocks
    layer = next(b for b in blocks if b.name.startswith("dense_layer"))
    return pred, [op for op in layer.bwd if op.collective is not None and op.collective.group == "tp"]


@pytest.mark.parametrize("extra", [(), ("--sequence-parallel",)])
def test_blackwell_overlaps_without_one_queue(extra: tuple[str, ...]) -> None:
    b200, comm = _bwd_tp_comm(32, "dgx-b200", *extra)
    assert load_cluster("dgx-b200").gpu.compute_capability >= ORDER_FREE_COMPUTE_CAPABILITY
    one, ordered = _bwd_tp_comm(1, "dgx-b200", *extra)
    assert [(op.name, dict(op.tags)) for op in comm] == [(op.name, dict(op.tags)) for op in ordered]
    assert sum(op.tags.get("overlap") in ("dgrad", "wgrad") for op in comm) == (4 if extra else 2)
    assert b200.estimate.step_time_s == pytest.approx(one.estimate.step_time_s)
    assert not any("CUDA_DEVICE_MAX_CONNECTIONS" in w for w in b200.estimate.warnings)


@pytest.mark.parametrize("extra", [(), ("--sequence-parallel",)])
def test_hopper_serializes_without_one_queue(extra: tuple[str, ...]) -> None:
    h100, comm = _bwd_tp_comm(32, "dgx-h100", *extra)
    assert comm and not any("overlap" in op.tags for op in comm)
    one, _ = _bwd_tp_comm(1, "dgx-h100", *extra)
    assert h100.estimate.step_time_s > one.estimate.step_time_s
    assert sum("CUDA_DEVICE_MAX_CONNECTIONS=32" in w for w in h100.estimate.warnings) == 1


def test_unknown_compute_capability_counts_as_older() -> None:
    cfg = api.predict_command(["CUDA_DEVICE_MAX_CONNECTIONS=8", *ARGV], {}, cluster="dgx-b200").config
    gpu = load_cluster("dgx-b200").gpu
    assert tp_launch_ordered(cfg, gpu) and not tp_launch_ordered(cfg, replace(gpu, compute_capability=0.0))
    assert tp_launch_ordered(replace(cfg, cuda_device_max_connections=1), replace(gpu, compute_capability=9.0))
    (warning,) = launch_order_warnings(cfg, replace(gpu, compute_capability=0.0))
    assert "compute capability not stated" in warning and "compute capability 0" not in warning

"""Sequence parallelism's backward re-gather and reduce-scatter when kernels may reach the GPU out of launch order
(CUDA_DEVICE_MAX_CONNECTIONS != 1): serialized with their GEMMs, the whole collective on the critical path."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmperf_hook.graph.backward import SP_REGATHER_SUFFIX
from llmperf_hook.graph.op import Op


def _cfg(connections: int, sequence_parallel: bool = True):
    from llmperf_hook.graph.sample_configs import make_config

    cfg = make_config(num_layers=2, hidden_size=2048, num_attention_heads=16, seq_length=2048, tp=8,
                      sequence_parallel=sequence_parallel, micro_batch_size=2)
    return replace(cfg, cuda_device_max_connections=connections)


def _layer_bwd(connections: int) -> list[Op]:
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.hardware.load import load_cluster

    blocks = build_graph(_cfg(connections), load_cluster("dgx-a100")).stages[0].chunks[0].blocks
    return list(next(b for b in blocks if b.name.startswith("dense_layer")).bwd)


def test_unordered_backward_has_the_same_ops_untagged() -> None:
    ordered, unordered = _layer_bwd(1), _layer_bwd(8)
    assert [(op.name, op.op_class, op.dims) for op in ordered] == [(op.name, op.op_class, op.dims) for op in unordered]
    sp = [op for op in unordered if op.name.endswith(SP_REGATHER_SUFFIX) or
          (op.name.endswith("tp_allgather") and op.op_class == "reducescatter")]
    assert len(sp) == 4  # qkv and fc1: one re-gather and one reduce-scatter each
    for op in sp:
        assert "overlap" not in op.tags and "window" not in op.tags and "sm_share" not in op.tags
        assert op.tags["launch"] == "unordered"
    assert any(op.tags.get("overlap") == "dgrad" for op in ordered)


def _step(connections: int, cluster: str = "dgx-a100"):
    from llmperf_hook import api

    argv = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 4 --hidden-size 4096 --num-attention-heads 32 "
            "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 8 "
            "--vocab-size 51200 --bf16 --tensor-model-parallel-size 8 --sequence-parallel").split()
    return api.predict_command([f"CUDA_DEVICE_MAX_CONNECTIONS={connections}", *argv], {}, cluster=cluster).estimate


@pytest.mark.parametrize("cluster", ["dgx-a100", "dgx-h100"])
def test_serialized_costs_the_whole_collectives(cluster: str) -> None:
    """Serialized, the SP backward collectives are exposed TP communication instead of overlapping their GEMM halves:
    more exposed TP time, the same compute; the in-order host queue now waits on them too (host_overhead)."""
    ordered, serialized = _step(1, cluster), _step(8, cluster)
    extra_s = serialized.step_time_s - ordered.step_time_s
    tp_extra_s = serialized.breakdown.get("comm_tp", 0.0) - ordered.breakdown.get("comm_tp", 0.0)
    assert 0.0 < tp_extra_s <= extra_s
    host_extra_s = serialized.breakdown.get("host_overhead", 0.0) - ordered.breakdown.get("host_overhead", 0.0)
    assert tp_extra_s + host_extra_s == pytest.approx(extra_s, rel=1e-6)
    assert serialized.breakdown["compute"] == pytest.approx(ordered.breakdown["compute"], rel=1e-9)


def test_without_sequence_parallelism_the_setting_changes_nothing() -> None:
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.hardware.load import load_cluster

    cluster = load_cluster("dgx-a100")
    one = build_graph(_cfg(1, sequence_parallel=False), cluster)
    eight = build_graph(_cfg(8, sequence_parallel=False), cluster)
    assert one.stages[0].chunks == eight.stages[0].chunks

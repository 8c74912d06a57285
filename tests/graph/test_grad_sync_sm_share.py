"""The data-parallel gradient reduction that overlaps the last backward holds SMs the backward's GEMMs lose
(graph/step_ops.inter_node_ring_sm_share, schedule/compose.step_ops_cost)."""

from __future__ import annotations

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.graph.backward import nccl_sm_share
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.step_ops import inter_node_ring_sm_share
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict.dispatch import op_id, predict_op_times
from llmperf_hook.schedule.compose import _bucket_fraction, step_ops_cost

SHAPE = ["--num-layers", "24", "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "1024",
         "--max-position-embeddings", "1024", "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16"]


def _predict(nodes: int, *extra: str):  # type: ignore[no-untyped-def]
    argv = ["torchrun", "--nnodes", str(nodes), "--nproc-per-node", "8", "pretrain_gpt.py", *SHAPE, *extra]
    return predict_command(argv, {}, cluster="dgx-a100")


def _grad_ops(graph):  # type: ignore[no-untyped-def]
    return [op for op in graph.stages[0].step_ops if op.name.startswith("dp.grad_")]


def test_ring_across_nodes_holds_two_thread_blocks_per_nic() -> None:
    """NCCL: one channel per NIC (search.cc speedArrayInter), doubled by ncclTopoPostset: DGX A100 16 of 108 SMs."""
    assert inter_node_ring_sm_share(load_cluster("dgx-a100")) == pytest.approx(16 / 108)
    assert inter_node_ring_sm_share(load_cluster("dgx-h100")) == pytest.approx(16 / 132)


def test_ring_across_nvlink_domains_is_capped_at_nccls_64_channels() -> None:
    """GB200 NVL72: the node is the rack's 72 GPUs and 72 NICs, but the ring search keeps at most MAXCHANNELS / 2
    = 32 channels (init.cc), doubled to 64 thread blocks: 64 of 148 SMs, not 144."""
    assert inter_node_ring_sm_share(load_cluster("gb200-nvl72")) == pytest.approx(64 / 148)


@pytest.mark.parametrize("nodes", [1, 2])
def test_overlapped_reduction_is_tagged_with_its_ring_share(nodes: int) -> None:
    pred = _predict(nodes, "--use-distributed-optimizer", "--overlap-grad-reduce")
    ops = _grad_ops(build_graph(pred.config, pred.cluster))
    expected = nccl_sm_share(pred.cluster.gpu) if nodes == 1 else inter_node_ring_sm_share(pred.cluster)
    assert ops and all(float(op.tags["sm_share"]) == pytest.approx(expected, abs=1e-4) for op in ops)


def test_unoverlapped_reduction_carries_no_share() -> None:
    pred = _predict(2, "--use-distributed-optimizer")
    ops = _grad_ops(build_graph(pred.config, pred.cluster))
    assert ops and not any("sm_share" in op.tags for op in ops)


def test_a_reduction_hidden_by_the_backward_still_costs_its_share() -> None:
    pred = _predict(2, "--use-distributed-optimizer", "--overlap-grad-reduce")
    graph = build_graph(pred.config, pred.cluster)
    seconds = dict(predict_op_times(graph, pred.cluster, "bf16").seconds)
    grad_s = sum(seconds[op_id(op)] for op in _grad_ops(graph))
    share = inter_node_ring_sm_share(pred.cluster)
    cost = step_ops_cost(graph.stages[0], seconds, pred.config, bwd_window_s=1e3, fwd_window_s=1e3)
    # a 5B model in Megatron's 40M-parameter buckets: the last bucket is ~1 % of the reduction; the others slow the
    # backward's GEMMs by their share, and the last runs after it with no GEMM left beside it
    last = _bucket_fraction(pred.config, graph.stages[0])
    assert 0.005 < last < share
    expected = last * grad_s + share * (1 - last) * grad_s
    assert cost.grad_exposed_s == pytest.approx(expected, rel=1e-3)  # the tag holds 4 decimals

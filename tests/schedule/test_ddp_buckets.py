"""Megatron DDP gradient buckets: how many reductions the overlapped sync launches and what stays exposed
(graph/step_ops.py grad_bucket_elems / _bucket_params, schedule/compose.py step_ops_cost)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmperf_hook.api import predict_config
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import llama3_8b
from llmperf_hook.graph.step_ops import MEGATRON_DEFAULT_BUCKET_ELEMS, grad_bucket_elems
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict.dispatch import op_id, predict_op_times

CLUSTER = load_cluster("dgx-h100")


def _cfg(overlap: bool = True, num_buckets: int | None = None, **kw):
    cfg = llama3_8b(tp=2, pp=1, dp=8, micro_batch_size=1, global_batch_size=64, seq_length=4096, **kw)
    optimizer = replace(cfg.optimizer, overlap_grad_reduce=overlap, grad_num_buckets=num_buckets)
    return replace(cfg, optimizer=optimizer)


def _grad_ops(cfg):
    graph = build_graph(cfg, CLUSTER)
    return graph, [op for op in graph.stages[0].step_ops if op.name.startswith("dp.grad_")]


@pytest.mark.parametrize("n", [1, 3, 16])
def test_num_buckets_splits_the_rank_parameters(n: int) -> None:
    """--ddp-num-buckets N: N reductions of params // N elements, the remainder in the last; bytes conserved."""
    graph, ops = _grad_ops(_cfg(num_buckets=n))
    params = graph.stages[0].num_params
    assert len(ops) == n
    per_elem = ops[0].dims["bytes"] / (params // n)
    assert sum(op.dims["bytes"] for op in ops) == pytest.approx(params * per_elem, rel=1e-6)
    assert grad_bucket_elems(_cfg(num_buckets=n), params) == params // n


def test_default_bucket_is_megatrons_rule_and_unoverlapped_is_one_reduction() -> None:
    cfg = _cfg()
    graph, ops = _grad_ops(cfg)
    params = graph.stages[0].num_params
    assert grad_bucket_elems(cfg, params) == max(MEGATRON_DEFAULT_BUCKET_ELEMS, 1_000_000 * 8)
    assert len(ops) == -(-params // MEGATRON_DEFAULT_BUCKET_ELEMS)
    assert len(_grad_ops(_cfg(overlap=False))[1]) == 1
    assert len(_grad_ops(_cfg(overlap=False, num_buckets=8))[1]) == 1  # no overlap: one bucket (bucket_size None)


def test_more_buckets_pay_more_latency_but_expose_a_smaller_tail() -> None:
    """Each bucket is a collective with its own latency; only the last bucket is sure to stay exposed."""
    one, many = _cfg(num_buckets=1), _cfg(num_buckets=64)
    totals = []
    for cfg in (one, many):
        graph, ops = _grad_ops(cfg)
        sec = predict_op_times(graph, CLUSTER, cfg.precision).seconds
        totals.append(sum(sec[op_id(op)] for op in ops))
    assert totals[1] > totals[0]
    exposed = [predict_config(cfg, CLUSTER).breakdown.get("comm_dp_grad", 0.0) for cfg in (one, many)]
    assert exposed[0] == pytest.approx(totals[0])  # one bucket: nothing to overlap with
    assert exposed[1] < exposed[0]


def test_only_pipeline_rank_zero_buckets_its_first_chunk() -> None:
    """Megatron-LM 5d745a79cd (Sep 2023): no bucketing on pipeline ranks > 0 nor on model chunks after the first."""
    cfg = _cfg(num_buckets=8)
    cfg = replace(cfg, parallel=replace(cfg.parallel, pp=4, dp=2), pipeline_schedule="1f1b")
    graph = build_graph(cfg, CLUSTER)
    counts = [sum(op.name.startswith("dp.grad_") for op in s.step_ops) for s in graph.stages]
    assert counts == [8, 1, 1, 1]
    interleaved = replace(cfg, parallel=replace(cfg.parallel, vpp=2), pipeline_schedule="interleaved")
    graph = build_graph(interleaved, CLUSTER)
    first = [op for op in graph.stages[0].step_ops if op.name.startswith("dp.grad_")]
    later = [op for op in graph.stages[1].step_ops if op.name.startswith("dp.grad_")]
    # params // 8 per bucket (num_parameters counts every chunk) fills chunk 0 (half the params) with 4 buckets;
    # chunk 1 is one reduction; a later pipeline rank reduces each chunk whole
    assert len(first) == 4 + 1 and len(later) == 2
    params = graph.stages[0].num_params
    assert grad_bucket_elems(interleaved, params) == params // 8


@pytest.mark.parametrize("num_buckets, bucket_elems", [(100_000, None), (None, 1_000)])
def test_buckets_close_at_whole_tensors_so_never_more_than_the_stage_has(num_buckets, bucket_elems) -> None:
    """param_and_grad_buffer.py adds whole parameter tensors to a bucket until it holds bucket_size elements: a
    bucket size below every tensor gives one bucket per tensor (7B: 32 x 9 + 3 tensors), never params / size."""
    from llmperf_hook.graph.param_tensors import model_param_tensors

    cfg = _cfg(num_buckets=num_buckets)
    cfg = replace(cfg, optimizer=replace(cfg.optimizer, grad_bucket_size_elems=bucket_elems))
    graph, ops = _grad_ops(cfg)
    tensors = model_param_tensors(cfg, 0, graph.stages[0].num_layers)
    assert 100 < len(ops) <= tensors
    assert sum(op.dims["bytes"] for op in ops) == pytest.approx(sum(op.dims["bytes"] for op in _grad_ops(_cfg())[1]))

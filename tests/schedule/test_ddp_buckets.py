"""Megatron DDP gradient buckets: how many reductions the overlapped sync launches and what stays exposed
(graph/ddp_buckets.py, used by graph/step_ops.py and schedule/compose.py step_ops_cost)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.api import predict_config
from llmperf_hook.graph import params as pc
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.ddp_buckets import (MEGATRON_DEFAULT_BUCKET_ELEMS, chunk_tensors, grad_bucket_elems,
                                            last_bucket_elems, megatron_buckets)
from llmperf_hook.graph.sample_configs import llama3_8b, make_config
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict.dispatch import op_id, predict_op_times

CLUSTER = load_cluster("dgx-h100")


def _cfg(overlap: bool = True, num_buckets: int | None = None, **kw):
    cfg = llama3_8b(tp=2, pp=1, dp=8, micro_batch_size=1, global_batch_size=64, seq_length=4096, **kw)
    optimizer = replace(cfg.optimizer, overlap_grad_reduce=overlap, grad_num_buckets=num_buckets)
    return replace(cfg, optimizer=optimizer)


def _grad_ops(cfg, prefix: str = "dp.grad_"):
    graph = build_graph(cfg, CLUSTER)
    return graph, [op for op in graph.stages[0].step_ops if op.name.startswith(prefix)]


def _elems(ops, cfg) -> list[int]:
    per_elem = 4 if cfg.optimizer.fp32_main_grads else 2
    return [op.dims["bytes"] // per_elem for op in ops]


def test_buckets_close_after_the_tensor_that_fills_them() -> None:
    """param_and_grad_buffer.py: tensors in reverse order, a bucket closed once it holds >= bucket_size."""
    assert megatron_buckets([5, 5, 5], 7) == [10, 5]
    assert megatron_buckets([5, 5, 5], None) == [15]
    assert megatron_buckets([1, 2, 30], 10) == [30, 3]
    assert megatron_buckets([30, 2, 1], 10) == [33]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 1000), min_size=1, max_size=40), st.integers(1, 3000))
def test_bucket_layout_conserves_elements_and_fills_every_bucket_but_the_last(sizes, bucket) -> None:
    buckets = megatron_buckets(sizes, bucket)
    assert sum(buckets) == sum(sizes)
    assert all(b >= bucket for b in buckets[:-1])
    assert len(buckets) <= len(sizes)


@pytest.mark.parametrize("n", [1, 3, 16])
def test_num_buckets_sizes_buckets_from_the_rank_parameters(n: int) -> None:
    """--ddp-num-buckets N: bucket_size = the rank's parameters // N, buckets closed at whole tensors (so at most N
    of them, each but the last at least that size); bytes conserved."""
    cfg = _cfg(num_buckets=n)
    graph, ops = _grad_ops(cfg)
    params = graph.stages[0].num_params
    size = grad_bucket_elems(cfg, params)
    assert size == params // n
    elems = _elems(ops, cfg)
    assert sum(elems) == pytest.approx(params, rel=1e-6)
    assert 1 <= len(ops) <= n and all(e >= size for e in elems[:-1])
    assert elems == megatron_buckets(chunk_tensors(cfg, graph.stages[0].chunks[0])[0], size)


def test_default_bucket_is_megatrons_rule_and_unoverlapped_is_one_reduction() -> None:
    cfg = _cfg()
    graph, ops = _grad_ops(cfg)
    params = graph.stages[0].num_params
    assert grad_bucket_elems(cfg, params) == max(MEGATRON_DEFAULT_BUCKET_ELEMS, 1_000_000 * 8)
    # Llama-3 8B TP 2: a layer is ~109M parameters in tensors of 8-59M, so 40M buckets close after 1-2 tensors:
    # fewer buckets than params / 40M
    assert 1 < len(ops) < params / MEGATRON_DEFAULT_BUCKET_ELEMS
    assert all(e >= MEGATRON_DEFAULT_BUCKET_ELEMS for e in _elems(ops, cfg)[:-1])
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


def test_the_exposed_last_bucket_holds_the_embedding() -> None:
    """The last bucket launched holds the first parameters (reverse order): on pipeline rank 0 the word embedding,
    whatever the bucket size, so a smaller bucket size cannot shrink the tail below it."""
    for n in (8, 64, 10_000):
        cfg = _cfg(num_buckets=n)
        graph, ops = _grad_ops(cfg)
        last = last_bucket_elems(cfg, 0, graph.stages[0].chunks)
        assert last == _elems(ops, cfg)[-1] >= pc.embedding_params(cfg)


def test_only_pipeline_rank_zero_buckets_its_first_chunk() -> None:
    """Megatron-LM 5d745a79cd (Sep 2023): no bucketing on pipeline ranks > 0 nor on model chunks after the first."""
    cfg = _cfg(num_buckets=8)
    cfg = replace(cfg, parallel=replace(cfg.parallel, pp=4, dp=2), pipeline_schedule="1f1b")
    graph = build_graph(cfg, CLUSTER)
    counts = [sum(op.name.startswith("dp.grad_") for op in s.step_ops) for s in graph.stages]
    assert 1 < counts[0] <= 8 and counts[1:] == [1, 1, 1]
    interleaved = replace(cfg, parallel=replace(cfg.parallel, vpp=2), pipeline_schedule="interleaved")
    graph = build_graph(interleaved, CLUSTER)
    first = [op for op in graph.stages[0].step_ops if op.name.startswith("dp.grad_")]
    later = [op for op in graph.stages[1].step_ops if op.name.startswith("dp.grad_")]
    params = graph.stages[0].num_params
    size = grad_bucket_elems(interleaved, params)
    assert size == params // 8  # num_parameters counts every chunk of the rank
    chunk0 = megatron_buckets(chunk_tensors(interleaved, graph.stages[0].chunks[0])[0], size)
    assert len(first) == len(chunk0) + 1 and len(later) == 2  # chunk 1 whole; a later rank: each chunk whole


def test_overlap_param_gather_with_optimizer_step_disables_bucketing() -> None:
    """training.py: disable_bucketing = (model_chunk_idx > 0) or args.overlap_param_gather_with_optimizer_step."""
    cfg = _cfg(num_buckets=8)
    cfg = replace(cfg, parallel=replace(cfg.parallel, pp=2, vpp=2, dp=4), pipeline_schedule="interleaved")
    assert len(_grad_ops(cfg)[1]) > 2
    optimizer = replace(cfg.optimizer, overlap_param_gather_with_optimizer_step=True)
    assert len(_grad_ops(replace(cfg, optimizer=optimizer))[1]) == 2  # one per chunk


def test_expert_and_dense_buffers_share_the_bucket_size_of_all_the_rank_parameters() -> None:
    """With experts, num_parameters // N counts dense and expert parameters together; each buffer is bucketed
    with that size (not its own count // N)."""
    cfg = make_config(num_layers=4, hidden_size=1024, num_attention_heads=16, tp=1, dp=8, ep=4,
                      global_batch_size=8, model_kw=dict(num_experts=8, moe_router_topk=2, swiglu=True),
                      optimizer_kw=dict(overlap_grad_reduce=True, grad_num_buckets=4))
    graph = build_graph(cfg, CLUSTER)
    stage = graph.stages[0]
    size = grad_bucket_elems(cfg, stage.num_params)
    assert size == stage.num_params // 4
    dense = [op for op in stage.step_ops if op.name.startswith("dp.grad_")]
    expert = [op for op in stage.step_ops if op.name.startswith("edp.grad_")]
    dense_tensors, expert_tensors = chunk_tensors(cfg, stage.chunks[0])
    assert _elems(dense, cfg) == megatron_buckets(dense_tensors, size)
    assert _elems(expert, cfg) == megatron_buckets(expert_tensors, size)
    assert sum(_elems(dense, cfg)) + sum(_elems(expert, cfg)) == pytest.approx(stage.num_params, rel=1e-6)


def test_under_fsdp_only_the_embedding_and_head_are_reduced_per_step() -> None:
    """Megatron FSDP (priced as ZeRO-3 with the distributed optimizer) reduce-scatters each layer's gradients inside
    backward; the step's own reduction is the embedding and head alone, however the DDP buckets would lay out."""
    cfg = _cfg(num_buckets=8)
    cfg = replace(cfg, optimizer=replace(cfg.optimizer, zero_stage=3, distributed_optimizer=True, fsdp="megatron_fsdp"))
    graph, ops = _grad_ops(cfg)
    non_layer = pc.embedding_params(cfg) + pc.head_params(cfg)
    assert sum(_elems(ops, cfg)) == pytest.approx(non_layer, rel=1e-6)

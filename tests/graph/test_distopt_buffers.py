"""Megatron's DDP buffers under the distributed optimizer and --fp8-param-gather (graph/ddp_buckets.py): padded
bucket layout (distrib_optimizer.py _compute_per_buffer_param_layout: 64-element parameter starts, bucket ends to
lcm(DP, 128)), its memory (schedule/memory.py distopt_bucket_padding), and the fp8 weights' uint8 buffer bucketed and
all-gathered apart from the 16-bit one (param_and_grad_buffer.py group_params_for_buffers)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from llmperf_hook import api
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.ddp_buckets import (chunk_buffers, chunk_tensors, distopt_buckets, distopt_padding_elems,
                                            fp8_weight_tensors, rank_grad_buckets)
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.schedule.memory import estimate_memory

CASE = Path(__file__).parents[1] / "frameworks/real_scripts/cases/mlm_llama3_8b_fp8.json"
H, LAYERS = 4096, 32
LINEAR_WEIGHTS = LAYERS * (H * 6144 + H * H + 3 * H * 14336)


def test_padded_bucket_layout() -> None:
    assert distopt_buckets([100, 10], None, 8) == [256]  # 10, then 64 + 100 = 164, padded to 128 x 2
    assert distopt_buckets([30, 30, 30], 50, 3) == [384, 384]  # lcm(3, 128) = 384; the span counts the 64-alignment
    assert distopt_buckets([128 * 4], None, 4) == [512]  # already aligned: no padding


@pytest.fixture(scope="module")
def example():
    argv = json.loads(CASE.read_text())["argv"]
    cfg = api.resolve_command(argv, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, cluster="dgx-h100")[1]
    cluster = load_cluster("dgx-h100")
    return cfg, cluster, build_graph(cfg, cluster)


def test_fp8_weights_have_their_own_buffer(example) -> None:
    cfg, _, graph = example
    chunk = graph.stages[0].chunks[0]
    buffers = dict(chunk_buffers(cfg, chunk))
    assert set(buffers) == {"dense", "dense_fp8"}
    assert sum(buffers["dense_fp8"]) == LINEAR_WEIGHTS == sum(fp8_weight_tensors(cfg, chunk)[0])
    assert sum(buffers["dense"]) + sum(buffers["dense_fp8"]) == sum(chunk_tensors(cfg, chunk)[0])
    plain = replace(cfg, optimizer=replace(cfg.optimizer, fp8_param_gather=False))
    assert [name for name, _ in chunk_buffers(plain, chunk)] == ["dense"]


def test_gradient_buckets_and_param_gathers_per_buffer(example) -> None:
    cfg, cluster, graph = example
    stage = graph.stages[0]
    buckets = rank_grad_buckets(cfg, 0, stage.chunks, expert=False)
    assert sum(buckets) == stage.num_params
    plain = replace(cfg, optimizer=replace(cfg.optimizer, fp8_param_gather=False))
    assert buckets != rank_grad_buckets(plain, 0, stage.chunks, expert=False)  # the fp8 buffer bucketed apart
    gathers = [op for op in stage.step_ops if op.op_class == "allgather"]
    assert [op.name for op in gathers] == ["dp.param_allgather", "dp.fp8.param_allgather"]


def test_llama3_8b_needs_no_padding(example) -> None:
    """Every tensor of Llama-3-8B is a multiple of 64 elements and every buffer a multiple of 128."""
    cfg, _, graph = example
    assert distopt_padding_elems(cfg, 0, graph.stages[0].chunks, 8, 8) == 0


def test_padding_is_counted_in_weight_and_gradient_bytes() -> None:
    """hidden 1000, vocab 50257: tensors off the 64-element grid, so the buffers grow (by < 64 per tensor plus
    < lcm(8, 128) per bucket), in bf16 weights + fp32 main grads."""
    from llmperf_hook.graph.sample_configs import make_config

    cfg = make_config(num_layers=4, hidden_size=1000, num_attention_heads=8, vocab_size=50257, dp=8,
                      optimizer_kw=dict(distributed_optimizer=True, overlap_grad_reduce=True))
    cluster = load_cluster("dgx-h100")
    graph = build_graph(cfg, cluster)
    stage = graph.stages[0]
    padding = distopt_padding_elems(cfg, 0, stage.chunks, 8, 8)
    tensors = sum(len(t) for t in chunk_tensors(cfg, stage.chunks[0]))
    assert 0 < padding < 64 * tensors + 128
    assert estimate_memory(cfg, graph, cluster).components["distopt_bucket_padding"] == padding * (2 + 4)
    no_distopt = replace(cfg, optimizer=replace(cfg.optimizer, distributed_optimizer=False))
    assert distopt_padding_elems(no_distopt, 0, stage.chunks, 8, 8) == 0

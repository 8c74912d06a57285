"""Megatron-DeepSpeed --use-flash-attn-triton: flash-attention v1.0.4's Triton kernel tiles the head dimension at
max(next_power_of_2(d), 16) (flash_attn/flash_attn_triton.py BLOCK_HEADDIM), so the graph's attention op carries
the padded width and FLOPs, while the model FLOPs (MFU) stay the model's; other flash flags keep the model's width."""

from __future__ import annotations

import json

import pytest

from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.attention_core_ops import flash_head_dim
from llmperf_hook.hardware.load import load_cluster
from tests.frameworks.helpers import megatron

A100 = load_cluster("dgx-a100")
DS = ["--deepspeed", "--zero-stage", "0", "--no-pipeline-parallel"]
# GPT 30B of Megatron-DeepSpeed's long-sequence example: h 6144, 64 heads -> head dim 96 (TP 8 here: 8 heads a rank)
MODEL = ["--num-layers", "2", "--hidden-size", "6144", "--num-attention-heads", "64", "--seq-length", "4096",
         "--max-position-embeddings", "4096", "--vocab-size", "53248", "--micro-batch-size", "1",
         "--global-batch-size", "1", "--tensor-model-parallel-size", "8", "--fp16", *DS]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> list[str]:
    ds_config = tmp_path_factory.mktemp("ds") / "ds_config.json"
    ds_config.write_text(json.dumps({"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1,
                                     "fp16": {"enabled": True}, "zero_optimization": {"stage": 0}}))
    return [*MODEL, "--deepspeed_config", str(ds_config)]


def _attention_ops(flag: str, model: list[str]):
    cfg = megatron(flag, base=model)
    graph = build_graph(cfg, A100)
    ops = [op for op in graph.all_ops() if op.op_class == "attention"]
    return cfg, graph, ops


def test_triton_kernel_pads_head_dim_96_to_128(model):
    _, graph_tri, tri = _attention_ops("--use-flash-attn-triton", model)
    _, graph_v2, fa2 = _attention_ops("--use-flash-attn-v2", model)
    assert {op.dims["head_dim"] for op in tri} == {128}
    assert {op.dims["head_dim"] for op in fa2} == {96}
    fwd_tri = next(op for op in tri if op.phase == "fwd")
    fwd_fa2 = next(op for op in fa2 if op.phase == "fwd")
    assert fwd_tri.flops == pytest.approx(fwd_fa2.flops * 128 / 96)
    assert fwd_tri.tags["model_head_dim"] == "96"
    # the step's model FLOPs count the model's head dimension, not the kernel's padding
    assert graph_tri.model_flops_per_step == pytest.approx(graph_v2.model_flops_per_step)


@pytest.mark.parametrize("d, tile", [(96, 128), (128, 128), (64, 64), (80, 128), (8, 16), (40, 64)])
def test_block_headdim_rule(d: int, tile: int, model):
    cfg = megatron("--use-flash-attn-triton", base=model)
    assert flash_head_dim(cfg, d)[0] == tile


def test_other_flash_kernels_keep_the_model_head_dim(model):
    for flag in ("--use-flash-attn-v2", "--use-flash-attn"):
        cfg = megatron(flag, base=model)
        assert flash_head_dim(cfg, 96) == (96, {})

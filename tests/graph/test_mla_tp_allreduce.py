"""MLA under TP without sequence parallelism: the grad-input all-reduces are the up projections' own, T x q_lora_rank
and T x kv_lora_rank (megatron/core/transformer/multi_latent_attention.py: TE's down projections are TELinear
'duplicated', no TP collective; linear_q_up_proj / linear_kv_up_proj are column-parallel, allreduce_dgrad), each
beside its own weight-grad GEMM, not one T x h all-reduce paired with the duplicated q_down."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmperf_hook.graph.build import build_graph
from llmperf_hook.hardware.load import load_cluster
from tests.frameworks.helpers import megatron

A100 = load_cluster("dgx-a100")
H, SEQ, TP = 7168, 4096, 8
BASE = ["--num-layers", "4", "--hidden-size", str(H), "--num-attention-heads", "128", "--seq-length", str(SEQ),
        "--max-position-embeddings", str(SEQ), "--vocab-size", "129280", "--micro-batch-size", "1", "--bf16",
        "--swiglu", "--normalization", "RMSNorm", "--disable-bias-linear", "--position-embedding-type", "rope",
        "--ffn-hidden-size", "18432"]
MLA = ["--multi-latent-attention", "--kv-lora-rank", "512", "--qk-head-dim", "128", "--qk-pos-emb-head-dim", "64",
       "--v-head-dim", "128"]


def _layer(*extra: str):
    cfg = megatron(*MLA, "--tensor-model-parallel-size", str(TP), "--global-batch-size", "8", *extra, gpus=8, base=BASE)
    return next(b for b in build_graph(cfg, A100).stages[0].chunks[0].blocks if b.name.startswith("dense_layer"))


def _attn_reduces(block) -> list:
    return [op for op in block.bwd if op.op_class == "allreduce" and op.phase == "bwd" and op.name.startswith("attn.")]


def test_deepseek_like_tp8_all_reduces_the_latent_gradients_beside_their_up_projections() -> None:
    block = _layer("--q-lora-rank", "1536")
    reduces = _attn_reduces(block)
    assert [(op.name, op.dims["bytes"]) for op in reduces] == [  # backward order: kv_up runs after q_up in forward
        ("attn.kv_up.dgrad_allreduce", SEQ * 512 * 2), ("attn.q_up.dgrad_allreduce", SEQ * 1536 * 2)]
    assert sum(op.dims["bytes"] for op in reduces) == 16_777_216  # 16.8 MB, not T x h = 58.7 MB
    for op in reduces:
        assert op.tags["overlap"] == "wgrad" and op.tags["window"] == op.name.removesuffix(".dgrad_allreduce")
        assert float(op.tags["sm_share"]) == pytest.approx(24 / 108, abs=1e-4)
    names = [op.name for op in block.bwd]
    for gemm in ("attn.q_up", "attn.kv_up"):  # each follows its own GEMM's backward
        assert names[names.index(gemm) + 1] == gemm + ".dgrad_allreduce"
    mlp = [op for op in block.bwd if op.op_class == "allreduce" and op.name.startswith("mlp.")]
    assert [(op.name, op.dims["bytes"], op.tags["window"]) for op in mlp] == [("mlp.tp_reduce", SEQ * H * 2, "mlp.fc1")]


def test_without_q_latent_the_q_projection_all_reduces_the_hidden_gradient() -> None:
    reduces = _attn_reduces(_layer())
    assert {op.name: op.dims["bytes"] for op in reduces} == {"attn.q_proj.dgrad_allreduce": SEQ * H * 2,
                                                            "attn.kv_up.dgrad_allreduce": SEQ * 512 * 2}


def test_serialized_where_kernels_run_out_of_launch_order() -> None:
    cfg = megatron(*MLA, "--q-lora-rank", "1536", "--tensor-model-parallel-size", str(TP), "--global-batch-size", "8",
                   gpus=8, base=BASE)
    graph = build_graph(replace(cfg, cuda_device_max_connections=8), A100)
    block = next(b for b in graph.stages[0].chunks[0].blocks if b.name.startswith("dense_layer"))
    reduces = _attn_reduces(block)
    assert len(reduces) == 2 and all("overlap" not in op.tags for op in reduces)


def test_local_spec_down_projections_are_column_parallel_and_all_reduce_the_hidden_gradient() -> None:
    # a --spec of the local layout: Megatron's own local spec cannot build MLA's core (_check_mla_local_core)
    reduces = _attn_reduces(_layer("--q-lora-rank", "1536", "--transformer-impl", "local", "--spec", "mla_specs",
                                   "local_layer_spec"))
    assert {op.name: op.dims["bytes"] for op in reduces} == {
        "attn.q_down.dgrad_allreduce": SEQ * H * 2, "attn.q_up.dgrad_allreduce": SEQ * 1536 * 2,
        "attn.kv_down.dgrad_allreduce": SEQ * H * 2, "attn.kv_up.dgrad_allreduce": SEQ * 512 * 2}


def test_sequence_parallel_keeps_its_gathers() -> None:
    block = _layer("--q-lora-rank", "1536", "--sequence-parallel")
    assert not [op for op in block.bwd if op.name.endswith(".dgrad_allreduce") or op.op_class == "allreduce"
                and op.name.startswith("attn.")]

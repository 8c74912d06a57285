"""Invariant: a compute op's FLOPs are what its dims describe.

A fitted profile prices an op from its dims alone (profile/features.py derives FLOPs, bytes and tiles from them);
the roofline prices it from `op.flops`. When the two disagree the profile prices different work than the graph
means (context-parallel attention was priced at 1/cp of its FLOPs that way), so every GEMM, batched GEMM and
fused attention of real layouts must carry dims whose FLOPs equal its own."""

from __future__ import annotations

import pytest

from llmperf_hook.graph.backward import BWD_FLOP_FACTOR
from llmperf_hook.graph.build import build_graph
from llmperf_hook.hardware.load import load_cluster
from tests.frameworks.helpers import megatron

H100 = load_cluster("dgx-h100")
LLAMA = ["--num-layers", "4", "--hidden-size", "4096", "--num-attention-heads", "32", "--group-query-attention",
         "--num-query-groups", "8", "--ffn-hidden-size", "14336", "--swiglu", "--normalization", "RMSNorm",
         "--position-embedding-type", "rope", "--disable-bias-linear", "--seq-length", "16384",
         "--max-position-embeddings", "16384", "--vocab-size", "128256", "--micro-batch-size", "2", "--bf16",
         "--use-mcore-models"]
LLAMA_MHA = [a for i, a in enumerate(LLAMA) if i not in (6, 7, 8)]  # without --group-query-attention ... 8
MLA = ["--multi-latent-attention", "--q-lora-rank", "1536", "--kv-lora-rank", "512", "--qk-head-dim", "128",
       "--qk-pos-emb-head-dim", "64", "--v-head-dim", "128"]
MOE = ["--num-experts", "8", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "2048", "--expert-model-parallel-size", "2"]
LAYOUTS = {
    "tp2 sp": ["--tensor-model-parallel-size", "2", "--sequence-parallel", "--global-batch-size", "8"],
    "cp4": ["--context-parallel-size", "4", "--global-batch-size", "4"],
    "tp2 cp2 pp2": ["--tensor-model-parallel-size", "2", "--context-parallel-size", "2",
                    "--pipeline-model-parallel-size", "2", "--global-batch-size", "8"],
    "unfused tp2": ["--tensor-model-parallel-size", "2", "--transformer-impl", "local", "--global-batch-size", "8"],
    "moe ep2": [*MOE, "--global-batch-size", "16"],
    "mla cp2": [*MLA, "--context-parallel-size", "2", "--global-batch-size", "8"],
}


def dims_flops(op) -> float | None:
    """Forward FLOPs implied by an op's dims, for the classes whose work the dims fix; None for the others."""
    d = op.dims
    if op.op_class == "gemm":
        return 2.0 * d["m"] * d["n"] * d["k"]
    if op.op_class == "bmm":
        return 2.0 * d["batch"] * d["m"] * d["n"] * d["k"]
    if op.op_class == "attention":  # FlashAttention-2 forward 4 b h s^2 d, halved under the causal mask
        return 4.0 * d["b"] * d["heads"] * d["s"] ** 2 * d["head_dim"] * (0.5 if d["causal"] else 1.0)
    return None


def _layer_ops(argv: list[str]):
    base = LLAMA_MHA if MLA[0] in argv else LLAMA  # Megatron refuses MLA with query groups
    graph = build_graph(megatron(*argv, base=base), H100)
    for stage in graph.stages:
        for chunk in stage.chunks:
            for block in chunk.blocks:
                yield from block.fwd
                yield from block.bwd


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_compute_op_does_the_flops_its_dims_describe(layout: str) -> None:
    checked = 0
    for op in _layer_ops(LAYOUTS[layout]):
        expected = dims_flops(op)
        if expected is None or op.flops == 0:
            continue
        factor = BWD_FLOP_FACTOR.get(op.op_class, 1.0) if op.phase == "bwd" else 1.0
        assert op.flops == pytest.approx(factor * expected, rel=1e-9), (layout, op.name, op.phase, dict(op.dims))
        checked += 1
    assert checked > 10

"""Fused kernels of the framework vs torch-composite regressors of a profile (dispatch.choose_predictor)."""

from __future__ import annotations

from types import SimpleNamespace

from llmperf_hook.graph.op import Op
from llmperf_hook.predict.dispatch import ROOFLINE, choose_predictor


class _Profile:
    name = "lightgbm:test"

    def __init__(self, unfused: str) -> None:
        self.meta = SimpleNamespace(provenance={"unfused_classes": unfused} if unfused else {})

    def supports(self, op_class: str, phase: str, dtype: str) -> bool:
        return True


def _rope(**tags: str) -> Op:
    return Op("attn.rope", "rope", "fwd", {"tokens": 8192, "heads": 40, "head_dim": 128}, bytes_moved=1e8, tags=tags)


def test_fused_op_skips_a_composite_regressor() -> None:
    composite = _Profile("rope,swiglu")
    assert choose_predictor(_rope(kernel="fused"), composite, None) is ROOFLINE
    assert choose_predictor(_rope(), composite, None) is composite  # a plain-torch script runs the composite


def test_fused_op_keeps_a_regressor_of_the_fused_kernel() -> None:
    public = _Profile("")  # e.g. the shipped A100 profile: samples of the framework's own kernels
    assert choose_predictor(_rope(kernel="fused"), public, None) is public


def test_megatron_tags_rope_and_swiglu_fused() -> None:
    from llmperf_hook.api import predict_command
    from llmperf_hook.graph.build import build_graph

    llama = ("--num-layers 2 --hidden-size 1024 --ffn-hidden-size 2816 --num-attention-heads 8 --seq-length 1024 "
             "--max-position-embeddings 1024 --swiglu --normalization RMSNorm --position-embedding-type rope "
             "--micro-batch-size 1 --global-batch-size 8 --bf16 --vocab-size 32000").split()
    pred = predict_command(["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *llama], {}, cluster="dgx-h100")
    graph = build_graph(pred.config, pred.cluster)
    classes = ("rope", "swiglu", "rmsnorm")
    tags = {op.op_class: op.tags.get("kernel") for op in graph.all_ops() if op.op_class in classes}
    assert tags == {"rope": "fused", "swiglu": "fused", "rmsnorm": None}

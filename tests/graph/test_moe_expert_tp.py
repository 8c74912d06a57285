"""Expert tensor parallelism: the TP group's routed tokens split over TP / ETP expert replicas."""

from __future__ import annotations

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.graph.build import build_graph

MOE = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 --hidden-size 1024 --ffn-hidden-size 4096 "
       "--num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --vocab-size 32000 "
       "--num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 2 --tensor-model-parallel-size 4 "
       "--sequence-parallel --micro-batch-size 1 --global-batch-size 8 --bf16").split()


def _fc1(*extra: str):
    pred = predict_command([*MOE, *extra], {}, cluster="dgx-h100")
    return next(op for op in build_graph(pred.config, pred.cluster).all_ops() if op.name == "moe.expert_fc1")


def test_expert_tp_below_tp_gives_each_rank_fewer_tokens_and_the_whole_ffn() -> None:
    full, one = _fc1(), _fc1("--expert-tensor-parallel-size", "1")
    assert one.dims["m"] * 4 == full.dims["m"]  # ETP 1 of TP 4: a quarter of the routed tokens per rank
    assert one.dims["n"] == full.dims["n"] * 4  # ... through the whole expert FFN instead of a quarter
    assert one.flops == pytest.approx(full.flops)  # the same work per rank

"""Megatron-DeepSpeed's per-micro-batch gradient accumulation (autograd's AccumulateGrad into param.grad: its wgrad
GEMMs return the gradient) is priced once: in the step's DeepSpeed bookkeeping, (m - 1) x
DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM, and not again as a backward main_grad add (the Megatron-DDP op)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.step_ops import DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM, DEEPSPEED_FP16_ZERO0_BYTES_PER_PARAM

SHAPE = ["--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "2048",
         "--max-position-embeddings", "2048", "--tensor-model-parallel-size", "2", "--micro-batch-size", "1",
         "--global-batch-size", "16", "--fp16", "--no-pipeline-parallel"]


def test_accumulation_is_in_the_step_bookkeeping_and_not_in_backward(tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1,
                              "fp16": {"enabled": True}, "zero_optimization": {"stage": 0}}))
    argv = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *SHAPE, "--deepspeed", "--deepspeed_config", str(ds)]
    pred = predict_command(argv, {}, cluster="dgx-a100")
    cfg = pred.config
    assert cfg.framework == "megatron-deepspeed" and cfg.batch.num_microbatches == 4
    graph = build_graph(cfg, pred.cluster)
    ops = [op for c in graph.stages[0].chunks for b in c.blocks for op in b.bwd]
    assert not any(op.op_class == "grad_accumulate" for op in ops)
    (book,) = [op for op in graph.stages[0].step_ops if op.op_class == "deepspeed_bookkeeping"]
    per_param = DEEPSPEED_FP16_ZERO0_BYTES_PER_PARAM + 3 * DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM
    assert book.bytes_moved == pytest.approx(book.dims["params"] * per_param)

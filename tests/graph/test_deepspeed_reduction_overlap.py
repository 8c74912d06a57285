"""DeepSpeed's gradient reduction hides behind the last backward only under the ZeRO optimizer's hooks
(stage_1_and_2.py): ZeRO-0 and BF16_Optimizer reduce after the backward (engine._backward_epilogue ->
allreduce_gradients -> buffered_allreduce_fallback), the PipelineEngine in its ReduceGrads instruction after every
backward, whatever overlap_comm says (graph/step_ops.reduces_in_backward)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.graph.build import build_graph

SHAPE = ["--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "2048",
         "--max-position-embeddings", "2048", "--tensor-model-parallel-size", "2", "--micro-batch-size", "1",
         "--global-batch-size", "16"]


def _dp_grad_ops(tmp_path: Path, zero: int, precision: str, extra_ds: dict | None = None,
                 engine: tuple[str, ...] = ("--no-pipeline-parallel",)) -> list:
    """TP 2 x DP 4 on 8 GPUs with overlap_comm true: the stage's data-parallel gradient reductions."""
    ds = tmp_path / f"ds{zero}{precision}.json"
    ds.write_text(json.dumps({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1,
                              precision: {"enabled": True},
                              "zero_optimization": {"stage": zero, "overlap_comm": True}, **(extra_ds or {})}))
    argv = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *SHAPE, *engine, f"--{precision}", "--deepspeed",
            "--deepspeed_config", str(ds)]
    pred = predict_command(argv, {}, cluster="dgx-a100")
    assert pred.config.parallel.dp == 4 and pred.config.optimizer.overlap_grad_reduce
    assert pred.config.deepspeed_pipeline_engine == (not engine)
    ops = [op for op in build_graph(pred.config, pred.cluster).stages[0].step_ops if op.name.startswith("dp.grad_")]
    assert ops
    return ops


@pytest.mark.parametrize("zero, precision, extra_ds", [
    (0, "fp16", None),  # FP16_Optimizer: the engine's all-reduce after the backward
    (1, "bf16", {"data_types": {"grad_accum_dtype": "fp32"}}),  # BF16_Optimizer: no reduction hooks
])
def test_reduction_after_the_backward_is_not_overlapped(tmp_path: Path, zero: int, precision: str,
                                                        extra_ds: dict | None) -> None:
    ops = _dp_grad_ops(tmp_path, zero, precision, extra_ds)
    assert not any(op.tags.get("overlap") or "sm_share" in op.tags for op in ops)


def test_zero_optimizer_hooks_overlap_the_reduction(tmp_path: Path) -> None:
    ops = _dp_grad_ops(tmp_path, 1, "bf16")  # bf16 accumulation: the ZeRO optimizer, not BF16_Optimizer
    assert all(op.tags.get("overlap") == "grad_reduce" and "sm_share" in op.tags for op in ops)


def test_pipeline_engine_reduces_after_every_backward(tmp_path: Path) -> None:
    ops = _dp_grad_ops(tmp_path, 1, "bf16", engine=())  # Megatron-DeepSpeed without --no-pipeline-parallel
    assert not any(op.tags.get("overlap") or "sm_share" in op.tags for op in ops)

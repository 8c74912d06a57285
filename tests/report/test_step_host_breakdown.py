"""The host time DeepSpeed's step makes the GPU wait for (its per-tensor syncs, graph/step_ops.py
DEEPSPEED_HOST_S_PER_TENSOR; ZeRO-1/2's step-loop issue beyond its kernels) has its own breakdown line,
host_optimizer_step, not the optimizer step's; the step time is unchanged by the split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.api import predict_command, prediction_json
from llmperf_hook.graph.param_tensors import model_param_tensors
from llmperf_hook.graph.step_ops import DEEPSPEED_HOST_S_PER_TENSOR
from llmperf_hook.report.table import BREAKDOWN_LABELS, render_prediction_table

TRAIN = str(Path(__file__).resolve().parents[2] / "examples" / "cpu-testbed" / "train_gpt.py")
SHAPE = ["--no-pipeline-parallel", "--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16",
         "--seq-length", "1024", "--max-position-embeddings", "1024", "--vocab-size", "32000", "--bf16",
         "--micro-batch-size", "2", "--global-batch-size", "2"]


def _predict(tmp_path: Path, zero: int):
    ds = tmp_path / f"ds{zero}.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": zero}, "train_micro_batch_size_per_gpu": 2,
                              "train_batch_size": 2, "bf16": {"enabled": True}}))
    return predict_command(["deepspeed", "--num_gpus", "1", TRAIN, "--deepspeed_config", str(ds), *SHAPE], {},
                           cluster="dgx-h100")


def test_zero0_syncs_are_their_own_line(tmp_path: Path) -> None:
    """ZeRO-0 bf16 (BF16_Optimizer): 83 us per parameter tensor the GPU waits for, split off the optimizer line."""
    pred = _predict(tmp_path, 0)
    b = pred.estimate.breakdown
    tensors = model_param_tensors(pred.config, 0, 4)
    assert b["host_optimizer_step"] == pytest.approx(tensors * DEEPSPEED_HOST_S_PER_TENSOR[0], rel=1e-6)
    assert sum(b.values()) == pytest.approx(pred.estimate.step_time_s, rel=1e-6)
    assert all(s.optimizer_s == pytest.approx(b["optimizer"]) for s in pred.estimate.stages)
    assert BREAKDOWN_LABELS["host_optimizer_step"] in render_prediction_table(pred)
    out = prediction_json(pred)
    assert out["breakdown"]["host_optimizer_step"] > 0


def test_zero1_line_holds_its_loop_beyond_the_kernels(tmp_path: Path) -> None:
    """ZeRO-1: the per-tensor host time (30 us) at least; the loop's issue beyond its kernels may add to it."""
    pred = _predict(tmp_path, 1)
    b = pred.estimate.breakdown
    tensors = model_param_tensors(pred.config, 0, 4)
    assert b["host_optimizer_step"] >= tensors * DEEPSPEED_HOST_S_PER_TENSOR[1] * (1 - 1e-6)
    assert b["optimizer"] > 0
    assert sum(b.values()) == pytest.approx(pred.estimate.step_time_s, rel=1e-6)

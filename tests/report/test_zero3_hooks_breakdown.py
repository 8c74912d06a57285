"""ZeRO-3's hook time has its own breakdown line (table and JSON), not the optimizer step's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.api import predict_command, prediction_json
from llmperf_hook.graph.zero3_hooks import ZERO3_HOOK_S_PER_TENSOR
from llmperf_hook.report.table import BREAKDOWN_LABELS, render_prediction_table

TRAIN = str(Path(__file__).resolve().parents[2] / "examples" / "cpu-testbed" / "train_gpt.py")
SHAPE = ["--no-pipeline-parallel", "--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16",
         "--seq-length", "1024", "--max-position-embeddings", "1024", "--vocab-size", "32000", "--bf16",
         "--micro-batch-size", "2", "--global-batch-size", "6"]


def _predict(tmp_path: Path, zero: int):
    ds = tmp_path / f"ds{zero}.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": zero}, "train_micro_batch_size_per_gpu": 2,
                              "train_batch_size": 6}))
    return predict_command(["deepspeed", "--num_gpus", "1", TRAIN, "--deepspeed_config", str(ds), *SHAPE], {},
                           cluster="dgx-h100")


def test_hooks_leave_the_optimizer_line(tmp_path: Path) -> None:
    """4 layers x 12 + 4 = 52 tensors, 3 micro-batches: the hooks' host time is its own component, the step still
    the sum of its components, and the optimizer line holds the step's own work only."""
    pred = _predict(tmp_path, 3)
    b = pred.estimate.breakdown
    hooks_s = 3 * 52 * ZERO3_HOOK_S_PER_TENSOR
    assert b["host_zero3_hooks"] == pytest.approx(hooks_s, rel=0.02)
    assert b["optimizer"] < hooks_s
    assert sum(b.values()) == pytest.approx(pred.estimate.step_time_s, rel=1e-6)
    assert all(s.optimizer_s == pytest.approx(b["optimizer"]) for s in pred.estimate.stages)


def test_table_and_json_name_it(tmp_path: Path) -> None:
    pred = _predict(tmp_path, 3)
    table = render_prediction_table(pred)
    assert BREAKDOWN_LABELS["host_zero3_hooks"] in table
    out = prediction_json(pred)
    assert out["breakdown"]["host_zero3_hooks"] > 0
    assert sum(out["breakdown"].values()) == pytest.approx(out["step_time_s"], rel=1e-4)


def test_zero2_has_no_hook_line(tmp_path: Path) -> None:
    assert "host_zero3_hooks" not in _predict(tmp_path, 2).estimate.breakdown

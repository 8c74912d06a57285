"""DeepSpeed without ZeRO runs BF16_Optimizer where its engine picks it (graph/step_ops.runs_bf16_optimizer on
OptimizerConfig.zero0_bf16_accum_dtype): the PipelineEngine's bf16 accumulation from v0.12.5
(ce6070800) to today, fp32 accumulation (the default for bf16 without ZeRO before 0.17.6) under either engine. Its
step is ZeRO-1's (bf16_optimizer.py): the fp32 master and the optimizer state partitioned over DP, the gradient
buffer (in grad_acc_dtype) all-reduced, the bf16 weights all-gathered after the step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.frameworks.deepspeed_engine_rules import zero0_bf16_accum_dtype
from llmperf_hook.frameworks.deepspeed_release import JobRelease
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.step_ops import runs_bf16_optimizer
from llmperf_hook.schedule.memory import state_bytes

SHAPE = ["--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "2048",
         "--max-position-embeddings", "2048", "--pipeline-model-parallel-size", "2", "--micro-batch-size", "1",
         "--global-batch-size", "16", "--bf16"]


def _job(tmp_path: Path, release: str, accum: str | None, *extra: str):
    ds = tmp_path / "ds.json"
    types = {"data_types": {"grad_accum_dtype": accum}} if accum else {}
    ds.write_text(json.dumps({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": 0}, **types}))
    argv = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *SHAPE, *extra, "--deepspeed", "--deepspeed_config",
            str(ds)]
    return predict_command(argv, {"LLMPERF_DEEPSPEED_VERSION": release}, cluster="dgx-a100")


def _release(version: tuple[int, int, int] | None) -> JobRelease:
    return JobRelease(version)


def test_fp32_accumulation_runs_it_outside_the_pipeline_too(tmp_path: Path) -> None:
    """0.14.4 without the key: fp32 accumulation, BF16_Optimizer under the plain engine as well."""
    pred = _job(tmp_path, "0.14.4", None, "--pipeline-model-parallel-size", "1", "--no-pipeline-parallel")
    assert pred.config.optimizer.zero0_bf16_accum_dtype == "fp32" and runs_bf16_optimizer(pred.config)
    stage = build_graph(pred.config, pred.cluster).stages[0]
    assert state_bytes(pred.config, stage, 8)["gradients"] == pytest.approx(stage.num_params * (2 + 4), rel=0.01)


@pytest.mark.parametrize("version, accum, dtype", [
    ((0, 6, 1), None, None), ((0, 6, 2), None, "fp32"), ((0, 7, 5), "bf16", "fp32"), ((0, 12, 5), "bf16", "bf16"),
    ((0, 14, 4), None, "fp32"), ((0, 17, 5), "bf16", "bf16"), ((0, 17, 6), None, "bf16"), ((0, 18, 4), "fp32", "fp32"),
    (None, None, "bf16")])
def test_the_engine_accumulates_by_release(version, accum, dtype) -> None:
    """0.7.5 ignores the key (no data_types); before 0.17.6 fp32 is the default for bf16 without ZeRO."""
    assert zero0_bf16_accum_dtype(accum, "bf16", _release(version)) == dtype
    assert zero0_bf16_accum_dtype(accum, "fp16", _release(version)) is None


def test_pipeline_bf16_accumulation_steps_a_partition_and_gathers(tmp_path: Path) -> None:
    """0.14.4 under Megatron-DeepSpeed's PipelineEngine with grad_accum_dtype bf16: BF16_Optimizer, Adam over 1/DP
    of the stage, a bf16 all-gather, the optimizer state 1/DP, a bf16 gradient buffer beside the bf16 gradients."""
    pred = _job(tmp_path, "0.14.4", "bf16")
    o = pred.config.optimizer
    assert o.zero_stage == 0 and o.zero0_bf16_accum_dtype == "bf16" and pred.config.deepspeed_pipeline_engine
    assert runs_bf16_optimizer(pred.config) and "PipelineEngine" in pred.config.sources["zero0_bf16_accum_dtype"].detail
    stage = build_graph(pred.config, pred.cluster).stages[0]
    dp = pred.config.parallel.dp
    adam = next(op for op in stage.step_ops if op.op_class == "optimizer")
    assert adam.dims["params"] == stage.num_params // dp
    assert any(op.op_class == "allgather" for op in stage.step_ops)
    assert any(op.op_class == "allreduce" for op in stage.step_ops)
    memory = state_bytes(pred.config, stage, 8)
    assert memory["optimizer_states"] == pytest.approx(stage.num_params / dp * 12, rel=0.01)
    assert memory["gradients"] == pytest.approx(stage.num_params * (2 + 2), rel=0.01)


def test_the_plain_wrapper_outside_the_pipeline_is_unchanged(tmp_path: Path) -> None:
    """0.17.6 and later without the pipeline engine: DDP_BFLOAT16, the optimizer over the whole stage."""
    pred = _job(tmp_path, "0.19.2", None, "--pipeline-model-parallel-size", "1", "--no-pipeline-parallel")
    assert pred.config.optimizer.zero0_bf16_accum_dtype == "bf16" and not runs_bf16_optimizer(pred.config)
    stage = build_graph(pred.config, pred.cluster).stages[0]
    adam = next(op for op in stage.step_ops if op.op_class == "optimizer")
    assert adam.dims["params"] == stage.num_params
    assert not any(op.op_class == "allgather" for op in stage.step_ops)

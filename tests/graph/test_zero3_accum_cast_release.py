"""ZeRO-3 with data_types.grad_accum_dtype fp32 on a bf16 model: the first micro-batch's partition copy as the job's
DeepSpeed release runs it (OptimizerConfig.zero3_accum_cast_on_reduce). stage3.py v0.10.1-v0.19.1: the reduce-scattered
partition stays bf16 and partition_grads' copy_ widens it into the fp32 buffer (+2 B a local parameter over bf16
accumulation); v0.19.2 on (56e7e0c55): __avg_scatter_grads casts it to fp32 first, then an fp32 copy (+10). The
further micro-batches add +12 B under both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.step_ops import ZERO3_FP32_ACCUM_BYTES_PER_PARAM, ZERO3_FP32_ACCUM_FIRST_BYTES_UNCAST

SHAPE = ["--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "2048",
         "--max-position-embeddings", "2048", "--tensor-model-parallel-size", "2", "--micro-batch-size", "1",
         "--global-batch-size", "16", "--bf16", "--no-pipeline-parallel"]


def _bookkeeping(tmp_path: Path, release: str, accum: str | None):
    ds = tmp_path / "ds.json"
    types = {"data_types": {"grad_accum_dtype": accum}} if accum else {}
    ds.write_text(json.dumps({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": 3}, **types}))
    argv = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *SHAPE, "--deepspeed", "--deepspeed_config", str(ds)]
    pred = predict_command(argv, {"LLMPERF_DEEPSPEED_VERSION": release}, cluster="dgx-a100")
    assert pred.config.batch.num_microbatches == 4
    stage = build_graph(pred.config, pred.cluster).stages[0]
    (book,) = [op for op in stage.step_ops if op.name == "optimizer.deepspeed_mixed_precision"]
    return pred.config, book


@pytest.mark.parametrize("release, first", [("0.10.1", ZERO3_FP32_ACCUM_FIRST_BYTES_UNCAST),
                                            ("0.19.1", ZERO3_FP32_ACCUM_FIRST_BYTES_UNCAST),
                                            ("0.19.2", ZERO3_FP32_ACCUM_BYTES_PER_PARAM[0])])
def test_the_first_micro_batch_as_the_release_casts(tmp_path: Path, release: str, first: float) -> None:
    cfg, fp32 = _bookkeeping(tmp_path, release, "fp32")
    _, plain = _bookkeeping(tmp_path, release, None)
    assert cfg.optimizer.zero3_accum_cast_on_reduce == (release == "0.19.2")
    further = ZERO3_FP32_ACCUM_BYTES_PER_PARAM[1]
    assert fp32.bytes_moved - plain.bytes_moved == pytest.approx(plain.dims["params"] * (first + 3 * further))
    assert (ZERO3_FP32_ACCUM_FIRST_BYTES_UNCAST, ZERO3_FP32_ACCUM_BYTES_PER_PARAM) == (2.0, (10.0, 12.0))

"""ZeRO-3 with communication_data_type fp32 on a bf16 model (graph/zero3_grad_dtypes.py): the fp32 ipg bucket, its
torch.cat and div_ over every gradient of the rank, and the reduced partition's casts as the job's release does
them (stage3.py __avg_scatter_grads: before v0.19.2 back to the model's dtype, from 56e7e0c55 on to
gradient_accumulation_dtype)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.step_ops import ZERO3_FP32_ACCUM_BYTES_PER_PARAM, ZERO3_FP32_ACCUM_FIRST_BYTES_UNCAST
from llmperf_hook.graph.zero3_grad_dtypes import partition_bytes_per_local_param

SHAPE = ["--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "2048",
         "--max-position-embeddings", "2048", "--tensor-model-parallel-size", "2", "--micro-batch-size", "1",
         "--global-batch-size", "16", "--bf16", "--no-pipeline-parallel"]


def _step(tmp_path: Path, release: str, comm: str | None, accum: str | None = None):
    ds = tmp_path / "ds.json"
    extra = {"data_types": {"grad_accum_dtype": accum}} if accum else {}
    extra.update({"communication_data_type": comm} if comm else {})
    ds.write_text(json.dumps({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": 3}, **extra}))
    argv = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *SHAPE, "--deepspeed", "--deepspeed_config", str(ds)]
    pred = predict_command(argv, {"LLMPERF_DEEPSPEED_VERSION": release}, cluster="dgx-a100")
    stage = build_graph(pred.config, pred.cluster).stages[0]
    (book,) = [op for op in stage.step_ops if op.name == "optimizer.deepspeed_mixed_precision"]
    scatter = sum(op.dims["bytes"] for block in stage.chunks[0].blocks for op in block.bwd
                  if op.name == "zero.grad_reduce_scatter")
    return pred.config, stage, book, scatter


def test_the_general_flow_gives_the_bf16_reduction_constants() -> None:
    """With the reduction in the model's dtype the flow reproduces step_ops' fp32-accumulation constants."""
    assert partition_bytes_per_local_param("bf16", "bf16", "fp32", True, 1) == ZERO3_FP32_ACCUM_BYTES_PER_PARAM[0]
    assert partition_bytes_per_local_param("bf16", "bf16", "fp32", True, 2) == sum(ZERO3_FP32_ACCUM_BYTES_PER_PARAM)
    assert partition_bytes_per_local_param("bf16", "bf16", "fp32", False, 1) == ZERO3_FP32_ACCUM_FIRST_BYTES_UNCAST
    assert partition_bytes_per_local_param("bf16", "bf16", "bf16", True, 4) == 0


def test_fp32_reduction_casts_by_release() -> None:
    """fp32 reduction with fp32 accumulation: before v0.19.2 cast down (4 + 2) and widened again in the copy
    (2 + 4: first 6 + 6 - 4 = 8) and in every add (6 + 6 + 12 - 6 = 18); from v0.19.2 no cast (first 8 - 4, then
    12 - 6). With the accumulation in bf16 both releases cast down: first 6 + 4 - 4, then 6 + 6 - 6."""
    assert partition_bytes_per_local_param("bf16", "fp32", "fp32", False, 4) == 8 + 3 * 18
    assert partition_bytes_per_local_param("bf16", "fp32", "fp32", True, 4) == 4 + 3 * 6
    for cast_to_accum in (False, True):
        assert partition_bytes_per_local_param("bf16", "fp32", "bf16", cast_to_accum, 4) == 6 + 3 * 6


@pytest.mark.parametrize("release, per_rank, per_local", [("0.17.1", 14, 8 + 3 * 18), ("0.19.1", 10, 8 + 3 * 18),
                                                          ("0.19.2", 10, 4 + 3 * 6)])
def test_the_step_prices_the_bucket_and_the_partition(tmp_path: Path, release: str, per_rank: float,
                                                       per_local: float) -> None:
    """The bucket per gradient of the rank and micro-batch: cat and div_ 2 x (2 + 2) wider, and from v0.17.2 the
    fp32 bucket written 2 wider (10); before, the bf16 bucket cast whole to fp32 (2 + 4: 14)."""
    cfg, stage, fp32, scatter32 = _step(tmp_path, release, "fp32", "fp32")
    _, _, plain, scatter16 = _step(tmp_path, release, None, "fp32")
    assert cfg.optimizer.grad_comm_dtype == "fp32" and cfg.batch.num_microbatches == 4
    assert scatter32 == pytest.approx(2 * scatter16, rel=1e-6)  # the reduce-scatter itself in fp32
    local, rank = fp32.dims["params"], stage.num_params
    # the bucket over every gradient of the rank, 4 micro-batches; the bf16-comm run's own fp32-accumulation
    # constants replaced by the fp32-comm flow
    bf16_comm = ZERO3_FP32_ACCUM_BYTES_PER_PARAM[0] if release == "0.19.2" else ZERO3_FP32_ACCUM_FIRST_BYTES_UNCAST
    expected = per_rank * rank * 4 + local * (per_local - bf16_comm - 3 * ZERO3_FP32_ACCUM_BYTES_PER_PARAM[1])
    assert fp32.bytes_moved - plain.bytes_moved == pytest.approx(expected, rel=1e-6)


def test_default_accumulation_casts_alike_in_both_releases(tmp_path: Path) -> None:
    """bf16 accumulation (no data_types): both releases cast the fp32 partition down to bf16, the same bytes."""
    _, stage, old, _ = _step(tmp_path, "0.19.1", "fp32")
    _, _, new, _ = _step(tmp_path, "0.19.2", "fp32")
    _, _, plain, _ = _step(tmp_path, "0.19.2", None)
    assert old.bytes_moved == new.bytes_moved
    local = plain.dims["params"]
    assert new.bytes_moved - plain.bytes_moved == pytest.approx(10 * stage.num_params * 4 + local * (6 + 3 * 6))


def test_the_bucket_memory_is_in_the_communication_dtype_from_0_17_2(tmp_path: Path) -> None:
    from llmperf_hook.schedule.memory import zero_reduce_bucket_bytes

    new, old = _step(tmp_path, "0.19.2", "fp32")[0], _step(tmp_path, "0.17.1", "fp32")[0]
    assert new.optimizer.zero3_comm_dtype_bucket and not old.optimizer.zero3_comm_dtype_bucket
    assert zero_reduce_bucket_bytes(new) == 2 * zero_reduce_bucket_bytes(old)

"""Megatron-DeepSpeed's per-micro-batch gradient accumulation (autograd's AccumulateGrad into param.grad: its wgrad
GEMMs return the gradient) is priced once: in the step's DeepSpeed bookkeeping, (m - 1) x
DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM, and not again as a backward main_grad add (the Megatron-DDP op)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.step_ops import (DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM, DEEPSPEED_FP16_ZERO0_BYTES_PER_PARAM,
                                         DEEPSPEED_MP_BYTES_PER_PARAM, DEEPSPEED_REDUCE_BYTES_PER_MICROBATCH,
                                         ZERO3_FP32_ACCUM_BYTES_PER_PARAM)

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


def _bookkeeping_at(tmp_path: Path, zero: int, precision: str, extra_ds: dict | None = None):
    """TP 2 x DP 4 on 8 GPUs, 4 micro-batches: the rank's parameters and its DeepSpeed bookkeeping op."""
    ds = tmp_path / f"ds{zero}{precision}.json"
    ds.write_text(json.dumps({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1,
                              precision: {"enabled": True}, "zero_optimization": {"stage": zero}, **(extra_ds or {})}))
    shape = [f"--{precision}" if a == "--fp16" else a for a in SHAPE]
    argv = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *shape, "--deepspeed", "--deepspeed_config", str(ds)]
    pred = predict_command(argv, {}, cluster="dgx-a100")
    assert pred.config.parallel.dp == 4 and pred.config.batch.num_microbatches == 4
    stage = build_graph(pred.config, pred.cluster).stages[0]
    (book,) = [op for op in stage.step_ops if op.name == "optimizer.deepspeed_mixed_precision"]  # not ZeRO-3's hooks
    assert book.dims["params"] == stage.num_params // 4  # the step's own work runs on the ZeRO partition
    return stage.num_params, book


@pytest.mark.parametrize("precision, extra_ds, kind", [
    ("fp16", None, 1),  # the ZeRO optimizer: autograd adds every micro-batch into each param.grad
    ("bf16", {"data_types": {"grad_accum_dtype": "fp32"}}, 0),  # BF16_Optimizer: fp32 buffer of the whole group
])
def test_zero1_accumulates_every_gradient_of_the_rank(tmp_path: Path, precision: str, extra_ds: dict | None,
                                                      kind: int) -> None:
    """ZeRO-1 shards the optimizer step over DP, not the gradients: DeepSpeed reduces them only at the accumulation
    boundary, so the 3 accumulations after the first micro-batch touch all the rank's parameters (4x the partition)."""
    rank_params, book = _bookkeeping_at(tmp_path, 1, precision, extra_ds)
    expected = (book.dims["params"] * DEEPSPEED_MP_BYTES_PER_PARAM[kind]
                + rank_params * 3 * DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM)
    assert book.bytes_moved == pytest.approx(expected)


@pytest.mark.parametrize("zero", [2, 3])
def test_zero2_3_accumulate_their_partition_and_bucket_every_gradient(tmp_path: Path, zero: int) -> None:
    """ZeRO-2/3 reduce each bucket in the backward and keep only their partition of the gradients (accumulation and
    ZeRO-2's copy out of the bucket: per local parameter), but every gradient the rank computes is copied into the
    ipg bucket and divided by the DP size each micro-batch (stage_1_and_2.py average_tensor, stage3.py
    reduce_scatter_coalesced): per rank parameter, 4x the partition at DP 4."""
    rank_params, book = _bookkeeping_at(tmp_path, zero, "fp16")
    bucket_b, partition_b = DEEPSPEED_REDUCE_BYTES_PER_MICROBATCH[zero]
    local_b = DEEPSPEED_MP_BYTES_PER_PARAM[zero] + 3 * (DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM + partition_b)
    assert book.bytes_moved == pytest.approx(book.dims["params"] * local_b + rank_params * 3 * bucket_b)


def test_zero3_fp32_accumulation_casts_and_adds_its_partition_in_fp32(tmp_path: Path) -> None:
    """data_types.grad_accum_dtype fp32 under ZeRO-3 (bf16 model): each reduce-scattered partition is cast to fp32
    and copied (first micro-batch: +10 B a local parameter) or added (each of the 3 further: +12 B) in fp32
    (stage3.py partition_grads into grad_partitions_flat_buffer); bf16 accumulation, the default, adds nothing."""
    _, plain = _bookkeeping_at(tmp_path, 3, "bf16")
    _, fp32 = _bookkeeping_at(tmp_path, 3, "bf16", {"data_types": {"grad_accum_dtype": "fp32"}})
    first, further = ZERO3_FP32_ACCUM_BYTES_PER_PARAM
    assert (first, further) == (10.0, 12.0)
    assert fp32.bytes_moved - plain.bytes_moved == pytest.approx(plain.dims["params"] * (first + 3 * further))
    _, bf16 = _bookkeeping_at(tmp_path, 3, "bf16", {"data_types": {"grad_accum_dtype": "bf16"}})
    assert bf16.bytes_moved == plain.bytes_moved

"""ZeRO-3's memory-efficient linear splits the bias add out of the GEMM (graph/zero_layer_ops.zero3_bias_add_ops)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.api import resolve_command
from llmperf_hook.graph.build import build_graph

ROOT = Path(__file__).resolve().parents[2]
TRAIN = str(ROOT / "examples" / "cpu-testbed" / "train_gpt.py")
KERNELS = ROOT / "measurements" / "h200-sxm-141gb-2026-11-27-b" / "kernels"
PLAIN = ROOT / "measurements" / "h200-sxm-141gb-2026-11-27" / "kernels" / "plain_bf16.txt"
H200_COPY_BYTES_PER_S = 4.22e12
"""The H200's measured copy bandwidth, at which the kernel tables were read (benchmarks/deepspeed_step_cost.py)."""
SHAPE = ["--no-pipeline-parallel", "--num-layers", "12", "--hidden-size", "2048", "--num-attention-heads", "16",
         "--seq-length", "2048", "--max-position-embeddings", "2048", "--vocab-size", "50304", "--bf16"]


def _graph(tmp_path: Path, zero: int, micro: int, micro_batches: int = 1, *extra: str):
    ds = tmp_path / f"ds{zero}.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": zero}, "train_micro_batch_size_per_gpu": micro,
                              "train_batch_size": micro * micro_batches}))
    argv = ["deepspeed", "--num_gpus", "1", TRAIN, "--deepspeed_config", str(ds), *SHAPE, "--micro-batch-size",
            str(micro), "--global-batch-size", str(micro * micro_batches), *extra]
    _, cfg, cluster, _ = resolve_command(argv, {}, cluster="dgx-h200")
    return cfg, build_graph(cfg, cluster)


def _bias_adds(graph) -> list:
    return [(op, block.count) for chunk in graph.stages[0].chunks for block in chunk.blocks for op in block.fwd
            if op.name == "zero3.linear_bias_add"]


def _add_us(path: Path) -> float:
    """aten::add_'s microseconds per step in a kernel_breakdown table."""
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == "aten::add_":
            return float(parts[0])
    raise AssertionError(f"no aten::add_ in {path}")


def _priced_s(graph) -> float:
    return sum(op.bytes_moved * count for op, count in _bias_adds(graph)) / H200_COPY_BYTES_PER_S


def test_every_layer_adds_its_biases_once_per_micro_batch(tmp_path: Path) -> None:
    """QKV (3h), projection (h), fc1 (4h) and fc2 (h) outputs over the micro-batch's tokens; ZeRO-2 keeps addmm."""
    cfg, graph = _graph(tmp_path, 3, 4)
    adds = _bias_adds(graph)
    assert sum(count for _, count in adds) == 12
    assert {op.dims["elements"] for op, _ in adds} == {4 * 2048 * 9 * 2048}
    assert not _bias_adds(_graph(tmp_path, 2, 4)[1])


def test_priced_as_the_h200_kernel_table_measured(tmp_path: Path) -> None:
    """ZeRO-3's aten::add_ less plain torch's (the model's own gradient sums) on the same shape and machine type."""
    measured_s = (_add_us(KERNELS / "ds_bf16_zero3.txt") - _add_us(PLAIN)) * 1e-6
    priced = _priced_s(_graph(tmp_path, 3, 4)[1])
    assert priced == pytest.approx(measured_s, rel=0.05)


def test_explains_the_four_micro_batch_add(tmp_path: Path) -> None:
    """The 'unpriced 18.4 B per parameter and further micro-batch' of ZeRO-3's accumulation run (micro-batch 2, 4
    micro-batches, against micro-batch 4 once): its aten::add_ is the bias adds over twice the tokens, the model's
    own sums over twice the tokens and three bf16 partition adds per parameter (stage3.py partition_grads, 6 B)."""
    cfg, graph = _graph(tmp_path, 3, 2, 4)
    assert cfg.batch.num_microbatches == 4
    params = graph.stages[0].num_params
    predicted_s = (4 * _priced_s(graph) + 2 * _add_us(PLAIN) * 1e-6
                   + 3 * params * 6.0 / H200_COPY_BYTES_PER_S)
    measured_s = _add_us(KERNELS / "ds_bf16_zero3_accum4.txt") * 1e-6
    assert predicted_s == pytest.approx(measured_s, rel=0.08)


def test_only_where_transformers_style_linears_have_biases(tmp_path: Path) -> None:
    """Megatron-DeepSpeed's layers call their own autograd functions (no F.linear), and a model without linear
    biases (Llama) has nothing to add."""
    assert not _bias_adds(_graph(tmp_path, 3, 4, 1, "--disable-bias-linear")[1])
    ds = tmp_path / "ds3.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True},
                              "train_micro_batch_size_per_gpu": 1, "train_batch_size": 8}))
    argv = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "1024",
            "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
            "--micro-batch-size", "1", "--global-batch-size", "8", "--vocab-size", "32000", "--bf16", "--deepspeed",
            "--deepspeed_config", str(ds), "--zero-stage", "3", "--no-pipeline-parallel"]
    _, cfg, cluster, _ = resolve_command(argv, {}, cluster="dgx-h100")
    assert cfg.framework == "megatron-deepspeed" and cfg.optimizer.zero_stage == 3
    assert not _bias_adds(build_graph(cfg, cluster))


def test_a_recomputed_layer_adds_them_again(tmp_path: Path) -> None:
    from llmperf_hook.graph.zero_layer_ops import zero3_layer_comm

    cfg, _ = _graph(tmp_path, 3, 4)
    fwd, bwd, _ = zero3_layer_comm(cfg, 1000, 8, recomputed=True)
    assert [op.phase for op in bwd if op.name == "zero3.linear_bias_add"] == ["recompute"]
    assert [op.phase for op in fwd if op.name == "zero3.linear_bias_add"] == ["fwd"]

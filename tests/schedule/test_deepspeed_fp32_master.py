"""DeepSpeed ZeRO-1/2 in fp32 keeps the same fp32 master partition and step copies as in bf16 (installed
deepspeed 0.19.8, runtime/zero/stage_1_and_2.py): __init__ clones the rank's partition into
single_partition_of_fp32_groups (`.detach().clone().to(dtype=master_weights_and_grads_dtype)`, a copy even when the
weights are fp32), and step() flattens the partition's gradients (flatten_dense_tensors_aligned) beside the gradient
partition, `.to(fp32)` then being the same tensor. ZeRO-3 keeps no copy of fp32 weights (stage3.py
_create_fp32_partitions appends fp16_partitioned_groups_flat itself when the dtypes match)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.api import build_graph, predict_command
from llmperf_hook.schedule.memory import optimizer_step_bytes, partition_params, state_bytes, step_flat_buffers

TRAIN_GPT = Path(__file__).resolve().parents[2] / "examples" / "cpu-testbed" / "train_gpt.py"
RANKS = 2


def _deepspeed(tmp_path: Path, zero: int, bf16: bool):
    ds = tmp_path / f"ds{zero}{bf16}.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "train_batch_size": 2 * RANKS,
                              "zero_optimization": {"stage": zero}, **({"bf16": {"enabled": True}} if bf16 else {})}))
    argv = ["deepspeed", "--num_gpus", str(RANKS), str(TRAIN_GPT), "--deepspeed_config", str(ds), "--num-layers", "2",
            "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "128",
            "--max-position-embeddings", "128", "--micro-batch-size", "2", "--global-batch-size", str(2 * RANKS),
            "--vocab-size", "1024", "--no-pipeline-parallel"]
    pred = predict_command(argv, {}, cluster="dgx-h100")
    stage = build_graph(pred.config, pred.cluster).stages[0]
    return pred.config, stage, partition_params(pred.config, stage, 8)


@pytest.mark.parametrize("zero", [1, 2])
def test_fp32_zero_keeps_an_fp32_master_partition(tmp_path: Path, zero: int) -> None:
    cfg, stage, sharded = _deepspeed(tmp_path, zero, bf16=False)
    assert cfg.precision == "fp32"
    # master 4 + Adam's two moments 8, as in bf16
    assert state_bytes(cfg, stage, 8)["optimizer_states"] == pytest.approx(12 * sharded)
    bf16_cfg, bf16_stage, _ = _deepspeed(tmp_path, zero, bf16=True)
    assert state_bytes(bf16_cfg, bf16_stage, 8)["optimizer_states"] == pytest.approx(12 * sharded)


@pytest.mark.parametrize("zero", [1, 2])
def test_fp32_zero_step_flattens_the_gradient_partition(tmp_path: Path, zero: int) -> None:
    cfg, stage, sharded = _deepspeed(tmp_path, zero, bf16=False)
    # the gradient partition (4) and its flattened copy (4); .to(fp32) copies nothing
    assert optimizer_step_bytes(cfg, stage, 8) == pytest.approx(8 * sharded)
    partition, flats = step_flat_buffers(cfg, stage, 8)
    assert (partition, *flats) == pytest.approx((4 * sharded, 4 * sharded))


def test_fp32_zero3_shares_its_weights_as_master(tmp_path: Path) -> None:
    cfg, stage, sharded = _deepspeed(tmp_path, 3, bf16=False)
    assert state_bytes(cfg, stage, 8)["optimizer_states"] == pytest.approx(8 * sharded)


def test_cpu_zero2_step_holds_the_single_tensor_adam_temporaries(tmp_path: Path) -> None:
    """On a CPU the client torch AdamW steps the flat fp32 partition with its single-tensor loop (two temporaries, 8 B):
    at the step a one-rank ZeRO-2 job holds weights 4 + master 4 + moments 8 + gradient partition 4 + its flattened
    copy 4 + 8 = 32 B per parameter beside its process (H194's h768 run: 845 MiB at the end of step 0)."""
    from llmperf_hook.hardware.load import parse_cluster

    ds = tmp_path / "z2.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "train_batch_size": 1,
                              "zero_optimization": {"stage": 2}}))
    argv = ["deepspeed", "--num_gpus", "1", str(TRAIN_GPT), "--deepspeed_config", str(ds), "--num-layers", "2",
            "--hidden-size", "768", "--num-attention-heads", "4", "--seq-length", "16", "--max-position-embeddings",
            "16", "--micro-batch-size", "1", "--global-batch-size", "1", "--vocab-size", "1024",
            "--no-pipeline-parallel"]
    hw = {"name": "cpu-t", "peak_TFLOPs": {"fp32": 0.09}, "memory_bandwidth_GBps": 16, "memory_capacity_GiB": 64,
          "device": "cpu"}
    cluster = parse_cluster({"name": "c", "gpu": hw, "gpus_per_node": 1, "intra_node_bandwidth_GBps": 2,
                             "inter_node_bandwidth_GBps": 1}, "test")
    pred = predict_command(argv, {}, cluster=cluster)
    mem, params = pred.estimate.memory, build_graph(pred.config, pred.cluster).stages[0].num_params
    assert mem.peak_bytes_per_gpu - mem.components["process_resident"] == pytest.approx(32 * params, rel=1e-3)

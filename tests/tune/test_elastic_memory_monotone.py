"""The assumption tune/elastic.py rests on: a layout's peak memory per GPU does not grow with the node count of an
elastic range (DP grows: shards of 1/DP, at a fixed global batch fewer micro-batches per rank), so checking memory at
the range's minimum covers every count (H188). Checked with the memory model on jobs of each framework family."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook import api
from llmperf_hook.commands.tune import memory_only
from llmperf_hook.frameworks.resolve import JobOverrides
from llmperf_hook.tune.elastic import at_node_count

MEGATRON = ["torchrun", "--nnodes", "4", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "40",
            "--hidden-size", "5120", "--num-attention-heads", "40", "--seq-length", "4096",
            "--max-position-embeddings", "4096", "--micro-batch-size", "1", "--global-batch-size", "768",
            "--vocab-size", "32000", "--bf16"]
JOBS = {
    "megatron distopt tp1 pp2": [*MEGATRON, "--pipeline-model-parallel-size", "2", "--use-distributed-optimizer"],
    "megatron tp2 pp4 vpp selective": [*MEGATRON, "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size",
                                       "4", "--num-layers-per-virtual-pipeline-stage", "5", "--sequence-parallel",
                                       "--recompute-granularity", "selective", "--use-distributed-optimizer"],
    "megatron no distopt": [*MEGATRON, "--tensor-model-parallel-size", "4"],
}


@pytest.mark.parametrize("name", sorted(JOBS))
def test_peak_does_not_grow_with_the_node_count(name: str) -> None:
    job, cfg, spec, _ = api.resolve_command(JOBS[name], {}, cluster="dgx-h100")
    peaks = [float(memory_only(at_node_count(cfg, nodes), spec).peak_bytes_per_gpu) for nodes in (1, 2, 3, 4)]
    assert all(a >= b for a, b in zip(peaks, peaks[1:])), [round(p / 2**30, 2) for p in peaks]
    assert peaks[0] > peaks[-1] or "no distopt" in name, peaks  # the shards shrink with DP


def test_zero3_trainer_job_with_a_derived_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Hugging Face Trainer job under ZeRO-3: its global batch follows the world (per-device x accumulation x
    world), the shards 1/DP."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
        "zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}}))
    (tmp_path / "train.py").write_text("from transformers import Trainer\n")
    argv = ["torchrun", "--nnodes", "4", "--nproc-per-node", "8", "train.py", "--deepspeed", "ds.json",
            "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "2", "--bf16"]
    _, cfg, spec, _ = api.resolve_command(argv, {}, cluster="dgx-h100", overrides=JobOverrides(model="llama2-13b"))
    peaks = [float(memory_only(at_node_count(cfg, nodes), spec).peak_bytes_per_gpu) for nodes in (1, 2, 3, 4)]
    assert all(a >= b for a, b in zip(peaks, peaks[1:])) and peaks[0] > peaks[-1], peaks

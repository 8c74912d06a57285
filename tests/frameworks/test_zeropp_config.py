"""ZeRO++ and related ds_config keys reach the TrainingConfig priced (frameworks/deepspeed_config.py,
deepspeed_schema.py, deepspeed_job.py), with their sources, and without an 'accepted, not modelled' warning."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import script

DS = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config"]
MEGATRON = ["--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
            "--max-position-embeddings", "2048", "--vocab-size", "50257", "--micro-batch-size", "2",
            "--global-batch-size", "64", "--bf16", "--deepspeed", "--no-pipeline-parallel"]


def _ds(tmp_path: Path, **extra: Any) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True}, **extra}))
    return str(path)


def test_zeropp_keys_are_priced_at_stage3(tmp_path: Path) -> None:
    path = _ds(tmp_path, zero_optimization={"stage": 3, "zero_hpz_partition_size": 8, "zero_quantized_weights": True,
                                            "zero_quantized_gradients": "true", "sub_group_size": 1e8,
                                            "offload_optimizer": {"device": "cpu", "ratio": "0.25"}},
               communication_data_type="BF16", data_types={"grad_accum_dtype": "torch.float32"})
    cfg = script([*DS, path], model="llama2-7b")
    o = cfg.optimizer
    assert (o.zero_hpz_partition_size, o.zero_quantized_weights, o.zero_quantized_gradients) == (8, True, True)
    assert (o.grad_comm_dtype, o.grad_accum_dtype, o.offload_optimizer_ratio, o.sub_group_size_elems) == \
        ("bf16", "fp32", 0.25, 100_000_000)
    assert not any("not modelled" in w and ("zero_" in w or "ratio" in w or "data_type" in w) for w in cfg.warnings)
    assert "zero_optimization.zero_hpz_partition_size" in str(cfg.sources["zero_hpz_partition_size"])
    assert "communication_data_type" in str(cfg.sources["grad_comm_dtype"])
    assert "offload_optimizer.ratio" in str(cfg.sources["offload_optimizer_ratio"])
    from llmperf_hook.frameworks.explain_data import explain_json

    shown = explain_json(cfg)  # explain names what it prices, with where each value came from
    assert (shown["zero_hpz_partition_size"], shown["grad_comm_dtype"], shown["offload_optimizer_ratio"]) == \
        (8, "bf16", 0.25)
    assert "zero_optimization.zero_quantized_weights" in shown["sources"]["zero_quantized_weights"]
    assert not {"zero_hpz_partition_size", "grad_accum_dtype", "partition_activations"} & set(
        explain_json(script([*DS, _ds(tmp_path)], model="llama2-7b")))  # defaults: the keys stay out


def test_zeropp_below_stage3_is_ignored_as_deepspeed_does(tmp_path: Path) -> None:
    path = _ds(tmp_path, zero_optimization={"stage": 2, "zero_hpz_partition_size": 8, "zero_quantized_weights": True})
    cfg = script([*DS, path], model="llama2-7b")
    assert (cfg.optimizer.zero_hpz_partition_size, cfg.optimizer.zero_quantized_weights) == (1, False)
    assert any("ZeRO++ works at ZeRO stage 3 only" in w for w in cfg.warnings)


def test_defaults_leave_everything_as_before(tmp_path: Path) -> None:
    cfg = script([*DS, _ds(tmp_path, zero_optimization={"stage": 3, "offload_optimizer": {"device": "cpu"}})],
                 model="llama2-7b")
    o = cfg.optimizer
    assert (o.zero_hpz_partition_size, o.zero_quantized_weights, o.zero_quantized_gradients) == (1, False, False)
    assert (o.grad_comm_dtype, o.grad_accum_dtype, o.offload_optimizer_ratio) == (None, None, 1.0)


def test_megatron_deepspeed_partition_activations(tmp_path: Path) -> None:
    path = _ds(tmp_path, train_batch_size=64, zero_optimization={"stage": 1})
    run = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *MEGATRON, "--tensor-model-parallel-size", "2",
           "--deepspeed_config", path, "--checkpoint-activations", "--partition-activations"]
    assert not script(run).recompute.partition_activations  # deepspeed.checkpointing only with the switch below
    cfg = script([*run, "--deepspeed-activation-checkpointing"])
    assert cfg.recompute.partition_activations and cfg.recompute.granularity == "full"
    assert "--partition-activations" in str(cfg.sources["partition_activations"])


def test_qgz_needs_reduce_scatter(tmp_path: Path) -> None:
    path = _ds(tmp_path, zero_optimization={"stage": 3, "zero_quantized_gradients": True, "reduce_scatter": False})
    with pytest.raises(ConfigError, match="reduce_scatter should also be enabled"):
        script([*DS, path], model="llama2-7b")

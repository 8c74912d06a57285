"""The ds_config optimizer section (frameworks/deepspeed_optimizer.py): its type sets the optimizer states priced
(two fp32 states for Adam-like, one for SGD / Adagrad / Lion), ZeRO refuses an untested optimizer unless the config
allows it (engine.py _do_optimizer_sanity_check), and Megatron-DeepSpeed's own optimizer makes the section moot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import script

DS = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config"]
MEGATRON_DS = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048",
               "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
               "--vocab-size", "50257", "--micro-batch-size", "2", "--global-batch-size", "16", "--bf16",
               "--deepspeed", "--no-pipeline-parallel", "--deepspeed_config"]


def _ds(tmp_path: Path, optimizer: str, stage: int, **top: Any) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
                                "optimizer": {"type": optimizer, "params": {"lr": 1e-4}},
                                "zero_optimization": {"stage": stage}, **top}))
    return str(path)


def test_one_state_optimizers_are_priced_with_one_state(tmp_path: Path) -> None:
    assert script([*DS, _ds(tmp_path, "SGD", 0)], model="llama2-7b").optimizer.name == "sgd"
    assert script([*DS, _ds(tmp_path, "Lion", 2)], model="llama2-7b").optimizer.name == "sgd"
    adamw = script([*DS, _ds(tmp_path, "AdamW", 2)], model="llama2-7b")
    assert adamw.optimizer.name == "adam" and "optimizer.type" in str(adamw.sources["optimizer_name"])


def test_zero_refuses_an_untested_optimizer_unless_allowed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="untested ZeRO Optimizer"):
        script([*DS, _ds(tmp_path, "Lamb", 2)], model="llama2-7b")
    allowed = script([*DS, _ds(tmp_path, "Lamb", 2, zero_allow_untested_optimizer=True)], model="llama2-7b")
    assert allowed.optimizer.name == "adam"
    assert not any("zero_allow_untested_optimizer" in w for w in allowed.warnings)
    onebit = script([*DS, _ds(tmp_path, "OneBitAdam", 0)], model="llama2-7b")
    assert sum("1-bit" in w for w in onebit.warnings) == 1


def test_megatron_deepspeed_passes_its_own_optimizer(tmp_path: Path) -> None:
    cfg = script([*MEGATRON_DS, _ds(tmp_path, "Lamb", 1)])
    assert cfg.framework == "megatron-deepspeed" and cfg.optimizer.name == "adam"


def test_explain_shows_the_optimizer_and_reuse_distance_with_their_sources(tmp_path: Path) -> None:
    from llmperf_hook.frameworks.explain_data import explain_json

    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "Adagrad"},
                                "zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 0}}))
    shown = explain_json(script([*DS, str(path)], model="llama2-7b"))
    assert (shown["optimizer_name"], shown["stage3_max_reuse_distance"]) == ("sgd", 0)
    assert "optimizer.type" in shown["sources"]["optimizer_name"]
    assert "stage3_max_reuse_distance" in shown["sources"]["stage3_max_reuse_distance"]
    assert "optimizer_name" not in explain_json(script([*DS, _ds(tmp_path, "AdamW", 0)], model="llama2-7b"))

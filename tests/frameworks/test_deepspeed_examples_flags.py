"""DeepSpeedExamples training/DeepSpeed-SuperOffload/finetune_zero3.py's own flags (45b4b71): --model_name (a Hub name:
the refusal names the preset), --max_length (every sample padded to it: the sequence length; it was taken from the
preset, 8192 for Llama 3 8B instead of 4096), --activation_checkpointing (model.gradient_checkpointing_enable()),
and the ds_config's offload_optimizer.super_offload (accepted silently before) warned as not modelled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job

DS = {"train_batch_size": 4, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
      "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True, "ratio": 0.8,
                                                              "super_offload": True}}}


def _argv(tmp_path: Path, *extra: str) -> list[str]:
    (tmp_path / "ds.json").write_text(json.dumps(DS))
    return ["deepspeed", "--num_gpus=1", "finetune_zero3.py", f"--deepspeed_config={tmp_path / 'ds.json'}",
            "--model_name", "meta-llama/Llama-3.1-8B", "--batch_size", "4", "--max_length", "4096", *extra]


def test_the_hub_name_is_answered_with_its_preset(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--model_name meta-llama/Llama-3.1-8B is not a local directory.*"
                                          r"llmperf --model llama3-8b"):
        resolve_job(_argv(tmp_path), {})


def test_max_length_checkpointing_and_super_offload(tmp_path: Path) -> None:
    _, cfg = resolve_job(_argv(tmp_path, "--activation_checkpointing"), {}, JobOverrides(model="llama3-8b"))
    assert (cfg.model.seq_length, cfg.recompute.granularity, cfg.batch.global_batch_size) == (4096, "full", 4)
    assert any("super_offload: SuperOffload's ZeRO-3 optimizer" in w for w in cfg.warnings)
    _, plain = resolve_job(_argv(tmp_path), {}, JobOverrides(model="llama3-8b"))
    assert plain.recompute.granularity != "full"

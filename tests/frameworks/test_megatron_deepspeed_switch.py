"""Megatron-DeepSpeed runs DeepSpeed only under --deepspeed: megatron/training.py builds args.deepspeed_config_dict and
calls deepspeed.initialize only `if args.deepspeed:`, else it trains with Megatron's own optimizer and reads no
ds_config. A script of the user's may still hand --deepspeed_config to deepspeed.initialize itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import megatron, script

ARGS = ["--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "128",
        "--max-position-embeddings", "128", "--vocab-size", "1000", "--micro-batch-size", "1",
        "--global-batch-size", "16", "--bf16"]


def _ds(tmp_path: Path) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1,
                                "zero_optimization": {"stage": 1}, "bf16": {"enabled": True}}))
    return str(path)


def test_an_entry_point_without_deepspeed_reads_no_ds_config(tmp_path: Path) -> None:
    cfg = megatron("--deepspeed_config", _ds(tmp_path), "--zero-stage", "1", base=ARGS)
    assert (cfg.framework, cfg.optimizer.zero_stage) == ("megatron", 0)
    assert any("without --deepspeed" in w and "--deepspeed_config" in w and "--zero-stage" in w for w in cfg.warnings)


def test_with_deepspeed_the_ds_config_is_read(tmp_path: Path) -> None:
    cfg = megatron("--deepspeed", "--deepspeed_config", _ds(tmp_path), base=ARGS)
    assert (cfg.framework, cfg.optimizer.zero_stage) == ("megatron-deepspeed", 1)
    assert not any("without --deepspeed" in w for w in cfg.warnings)


def test_deepscale_enables_nothing(tmp_path: Path) -> None:
    """--deepscale is DeepSpeed's deprecated helper flag ('no impact on DeepSpeed backend'); Megatron-DeepSpeed tests
    args.deepspeed alone."""
    cfg = megatron("--deepscale", "--deepscale_config", _ds(tmp_path), base=ARGS)
    assert (cfg.framework, cfg.optimizer.zero_stage) == ("megatron", 0)


def test_deepscale_config_beside_deepspeed_config_is_refused(tmp_path: Path) -> None:
    """deepspeed.initialize: 'Not sure how to proceed, we were given both a deepscale_config and deepspeed_config'."""
    with pytest.raises(ConfigError, match="both a deepscale_config and deepspeed_config"):
        script(["deepspeed", "--num_gpus", "8", "train.py", *ARGS, "--deepspeed_config", _ds(tmp_path), "--deepscale_config",
                _ds(tmp_path)])
    with pytest.raises(ConfigError, match="deepspeed configs in the deepspeed arguments and deepspeed.initialize"):
        megatron("--deepspeed", "--deepspeed_config", _ds(tmp_path), "--deepscale_config", _ds(tmp_path), base=ARGS)


def test_a_custom_script_keeps_its_ds_config(tmp_path: Path) -> None:
    cfg = script(["torchrun", "--nproc-per-node", "8", "train.py", *ARGS, "--deepspeed_config", _ds(tmp_path)])
    assert (cfg.framework, cfg.optimizer.zero_stage) == ("megatron-deepspeed", 1)

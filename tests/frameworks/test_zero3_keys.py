"""ZeRO-3's fetch keys as DeepSpeedZeroConfig reads them (frameworks/deepspeed_config.py, deepspeed_schema.py):
either spelling of an aliased field (stage3_prefetch_bucket_size or prefetch_bucket_size, populate_by_name), both at
once refused as pydantic refuses it, stage3_max_reuse_distance priced."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import script

DS = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config"]


def _ds(tmp_path: Path, zero: dict[str, Any]) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
                                "zero_optimization": {"stage": 3, **zero}}))
    return str(path)


def test_field_names_and_stage3_aliases_both_set_the_field(tmp_path: Path) -> None:
    short = script([*DS, _ds(tmp_path, {"prefetch_bucket_size": 0, "max_live_parameters": 3e8,
                                        "max_reuse_distance": 5e8})], model="llama2-7b")
    o = short.optimizer
    assert (o.stage3_prefetch_bucket_size_elems, o.stage3_max_live_parameters, o.stage3_max_reuse_distance) == \
        (0, 300_000_000, 500_000_000)
    assert "zero_optimization.max_reuse_distance" in str(short.sources["stage3_max_reuse_distance"])
    long = script([*DS, _ds(tmp_path, {"stage3_max_reuse_distance": 0})], model="llama2-7b")
    assert long.optimizer.stage3_max_reuse_distance == 0
    default = script([*DS, _ds(tmp_path, {})], model="llama2-7b")
    assert default.optimizer.stage3_max_reuse_distance == 1_000_000_000  # zero/config.py pp_int(1e9)


def test_both_spellings_of_one_field_are_refused(tmp_path: Path) -> None:
    path = _ds(tmp_path, {"prefetch_bucket_size": 1, "stage3_prefetch_bucket_size": 2})
    with pytest.raises(ConfigError, match="both prefetch_bucket_size and stage3_prefetch_bucket_size"):
        script([*DS, path], model="llama2-7b")


def test_reuse_distance_is_validated_as_an_integer(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="stage3_max_reuse_distance"):
        script([*DS, _ds(tmp_path, {"stage3_max_reuse_distance": -1})], model="llama2-7b")


def test_reuse_distance_is_priced_not_warned_and_auto_spellings_pass(tmp_path: Path) -> None:
    cfg = script([*DS, _ds(tmp_path, {"stage3_max_reuse_distance": 0})], model="llama2-7b")
    assert not any("reuse_distance" in w for w in cfg.warnings)
    # "auto" is dropped before pydantic sees it: the other spelling alone sets the field
    both = script([*DS, _ds(tmp_path, {"stage3_param_persistence_threshold": "auto", "param_persistence_threshold": 1e5,
                                       "prefetch_bucket_size": "auto", "stage3_prefetch_bucket_size": 0})],
                  model="llama2-7b")
    assert both.optimizer.stage3_prefetch_bucket_size_elems == 0

"""DeepSpeed 0.7.6 alone refuses bf16 under ZeRO when data_types.grad_accum_dtype is absent
(deepspeed_engine_rules.check_zero_bf16_default_accumulation). Its engine.get_data_types (21c280296) picks fp32
accumulation for any bf16 model without the key, and _do_optimizer_sanity_check then raises 'Model data type and
gradient accumulation data type must be equal to use ZeRO'; v0.7.7 (06938835e) picks fp32 only without ZeRO, and
v0.7.5 has no data_types at all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import script

REFUSAL = "Model data type and gradient accumulation data type must be equal to use ZeRO"


def _job(tmp_path: Path, release: str, stage: int, **extra: Any):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                "zero_optimization": {"stage": stage}, **extra}))
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", str(path)]
    return script(argv, model="llama2-7b", env={"LLMPERF_DEEPSPEED_VERSION": release})


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_0_7_6_refuses_bf16_zero_without_the_key(tmp_path: Path, stage: int) -> None:
    with pytest.raises(ConfigError) as err:
        _job(tmp_path, "0.7.6", stage)
    message = str(err.value)
    assert err.value.exit_code == 2
    assert REFUSAL in message and "DeepSpeed 0.7.6 (LLMPERF_DEEPSPEED_VERSION)" in message
    assert f"ZeRO stage {stage}" in message and '"grad_accum_dtype": "bf16"' in message and "0.7.7" in message


def test_the_neighbouring_releases_and_the_key_pass(tmp_path: Path) -> None:
    """0.7.5 and 0.7.7 accumulate bf16 under ZeRO without the key; on 0.7.6 a key of bf16 makes the dtypes equal;
    without ZeRO 0.7.6 runs BF16_Optimizer (fp32 accumulation), no refusal."""
    for release in ("0.7.5", "0.7.7"):
        assert _job(tmp_path, release, 2).optimizer.zero_stage == 2
    assert _job(tmp_path, "0.7.6", 2, data_types={"grad_accum_dtype": "bf16"}).optimizer.grad_accum_dtype == "bf16"
    assert _job(tmp_path, "0.7.6", 0).optimizer.zero_stage == 0

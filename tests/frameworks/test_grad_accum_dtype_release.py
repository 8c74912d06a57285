"""data_types.grad_accum_dtype as each DeepSpeed release's engine reads it (frameworks/deepspeed_engine_rules.py).
Boundaries from the DeepSpeed git history: the key added in 21c280296 (first tag v0.7.6); ZeRO with a dtype other than
the model's refused until 8afcda2ac (v0.10.1), except bf16 + fp32 at stage 1 from v0.8.1 (BF16_Optimizer); bf16 + fp32
without ZeRO ran BF16_Optimizer until 09885efef (v0.18.5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import script

DS = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config"]


def _run(tmp_path: Path, release: str, stage: int, accum: str, precision: str = "bf16"):
    path = tmp_path / "ds.json"
    raw: dict[str, Any] = {"train_micro_batch_size_per_gpu": 2, precision: {"enabled": True},
                           "zero_optimization": {"stage": stage}, "data_types": {"grad_accum_dtype": accum}}
    path.write_text(json.dumps(raw))
    return script([*DS, str(path)], model="llama2-7b", env={"LLMPERF_DEEPSPEED_VERSION": release})


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_refuses_a_wider_accumulation_before_0_10_1(tmp_path: Path, stage: int) -> None:
    with pytest.raises(ConfigError, match=r"runs DeepSpeed 0.10.0 \(LLMPERF_DEEPSPEED_VERSION\), whose engine raises "
                                          r"'Model data type and gradient accumulation data type must be equal") as err:
        _run(tmp_path, "0.10.0", stage, "fp32")
    assert err.value.exit_code == 2
    assert _run(tmp_path, "0.10.1", stage, "fp32").optimizer.grad_accum_dtype == "fp32"


def test_bf16_optimizer_at_stage_1_from_0_8_1(tmp_path: Path) -> None:
    assert _run(tmp_path, "0.8.1", 1, "fp32").optimizer.grad_accum_dtype == "fp32"
    with pytest.raises(ConfigError, match="must be equal to use ZeRO"):
        _run(tmp_path, "0.8.0", 1, "fp32")
    with pytest.raises(ConfigError, match="must be equal to use ZeRO"):
        _run(tmp_path, "0.9.5", 1, "fp32", precision="fp16")


def test_the_models_own_dtype_is_accepted_by_every_release(tmp_path: Path) -> None:
    assert _run(tmp_path, "0.9.0", 3, "bf16").optimizer.grad_accum_dtype == "bf16"


def test_before_0_7_6_the_key_is_ignored(tmp_path: Path) -> None:
    job = _run(tmp_path, "0.7.5", 3, "fp32")
    assert job.optimizer.grad_accum_dtype is None
    assert any("grad_accum_dtype 'fp32' ignored: DeepSpeed 0.7.5" in w for w in job.warnings)


def test_bf16_fp32_without_zero_ran_bf16_optimizer_until_0_18_5(tmp_path: Path) -> None:
    job = _run(tmp_path, "0.18.4", 0, "fp32")  # BF16_Optimizer, priced (tests/graph/test_zero0_bf16_optimizer.py)
    assert job.optimizer.zero0_bf16_accum_dtype == "fp32" and not any("not modelled" in w for w in job.warnings)
    with pytest.raises(ConfigError, match="unsupported mix of model_dtype and grad_accum_dtype") as err:
        _run(tmp_path, "0.18.5", 0, "fp32")
    assert err.value.exit_code == 2
    assert "from 0.18.5 on, 09885efef" in str(err.value) and "runs DeepSpeed 0.18.5" in str(err.value)
    with pytest.raises(ConfigError, match="unsupported mix"):
        _run(tmp_path, "0.18.4", 0, "fp32", precision="fp16")  # only bf16 + fp32 had the BF16_Optimizer branch

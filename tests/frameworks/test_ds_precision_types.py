"""fp16 / bf16 section values typed as DeepSpeed's pydantic models type them (deepspeed_schema._precision_types):
what DeepSpeedFP16Config / DeepSpeedBF16Config refuse exits 2 here, what they accept passes."""

from __future__ import annotations

from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.deepspeed_config import parse_ds_config

CASES = [("loss_scale", v) for v in (0, 128, "128", " 1e3 ", 0.5, "dynamic", None, True, "inf", [1])] + \
    [("initial_scale_power", v) for v in (16, "16", 16.0, 16.5, "x")] + \
    [("hysteresis", v) for v in (2, "2", 2.5)] + [("consecutive_hysteresis", v) for v in (True, "yes", "maybe", 2)]


def _deepspeed_accepts(field: str, value: Any) -> bool:
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config

    try:
        DeepSpeedFP16Config(**{field: value})
    except Exception:  # noqa: BLE001 - pydantic's ValidationError
        return False
    return True


@pytest.mark.parametrize("field, value", CASES)
def test_fp16_values_accepted_exactly_as_deepspeed_accepts_them(field: str, value: Any) -> None:
    raw = {"train_batch_size": 8, "fp16": {"enabled": True, field: value}}
    if _deepspeed_accepts(field, value):
        parse_ds_config(raw, "ds.json")
    else:
        with pytest.raises(ConfigError, match=f"fp16.{field}"):
            parse_ds_config(raw, "ds.json")


def test_bf16_booleans_are_checked() -> None:
    with pytest.raises(ConfigError, match="bf16.check_grad_overflow"):
        parse_ds_config({"train_batch_size": 8, "bf16": {"enabled": True, "check_grad_overflow": "sometimes"}}, "ds.json")

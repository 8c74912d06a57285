"""ds_config keys that change the step without being priced warn once each, and only away from DeepSpeed's default
(frameworks/deepspeed_step_keys.py; defaults from DeepSpeed 0.19.8)."""

from __future__ import annotations

from typing import Any

import pytest

from llmperf_hook.frameworks.deepspeed_config import parse_ds_config


def _warnings(raw: dict[str, Any]) -> list[str]:
    return list(parse_ds_config({"train_batch_size": 8, **raw}, "ds.json").warnings)


@pytest.mark.parametrize("raw, expected", [
    ({"zero_optimization": {"stage": 2, "reduce_scatter": False}}, "ds.json zero_optimization.reduce_scatter = False: "
                                                                   "gradients all-reduced instead of reduce-scattered"),
    ({"zero_optimization": {"stage": 3, "memory_efficient_linear": False}}, "ds.json zero_optimization.memory_efficient_linear = False"),
    ({"zero_optimization": {"stage": 1, "legacy_stage1": True}}, "ds.json zero_optimization.legacy_stage1 = True"),
    ({"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 1e6}},
     "ds.json zero_optimization.stage3_param_persistence_threshold = 1000000.0: ZeRO-3 keeps parameters"),
    ({"zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 0}}, "ds.json zero_optimization.stage3_max_reuse_distance = 0"),
    ({"zero_optimization": {"stage": 3, "model_persistence_threshold": 10**9}}, "ds.json zero_optimization.model_persistence_threshold"),
    ({"zero_optimization": {"stage": 1, "allgather_partitions": False}}, "ds.json zero_optimization.allgather_partitions = False"),
    ({"gradient_predivide_factor": 8.0}, "ds.json gradient_predivide_factor = 8.0: an extra scaling pass"),
    ({"comms_logger": {"enabled": True}}, "ds.json comms_logger enabled: DeepSpeed synchronizes the device after every"),
    ({"memory_breakdown": True}, "ds.json memory_breakdown: gc.collect()"),
    ({"timers": {"throughput": {"enabled": True, "synchronized": False}}}, "ds.json timers.throughput without a synchronized"),
    ({"timers": {"throughput": {"enabled": False}}}, "ds.json timers.throughput without a synchronized"),
    ({"bf16": {"enabled": True, "immediate_grad_update": True}}, "ds.json bf16.immediate_grad_update"),
])
def test_step_key_warns(raw: dict[str, Any], expected: str) -> None:
    assert any(w.startswith(expected) for w in _warnings(raw)), _warnings(raw)


@pytest.mark.parametrize("raw", [
    {"zero_optimization": {"stage": 2, "reduce_scatter": True, "use_multi_rank_bucket_allreduce": True}},
    {"zero_optimization": {"stage": 2, "reduce_scatter": "auto"}},
    {"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": "auto", "stage3_max_reuse_distance": 1e9,
                           "param_persistence_threshold": 100000}},
    {"gradient_predivide_factor": 1.0, "prescale_gradients": True},  # one scaling pass either way (engine.py)
    {"comms_logger": {"enabled": False}},
    {"memory_breakdown": False},
    {"timers": {"throughput": {"enabled": True, "synchronized": True}}},
    {"bf16": {"enabled": True, "immediate_grad_update": False}},
])
def test_defaults_are_silent(raw: dict[str, Any]) -> None:
    assert _warnings(raw) == []

"""ds_config keys that change the step without being priced warn once each, and only away from DeepSpeed's default
(frameworks/deepspeed_step_keys.py; defaults from DeepSpeed 0.19.8)."""

from __future__ import annotations

from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.deepspeed_config import parse_ds_config


def _warnings(raw: dict[str, Any]) -> list[str]:
    return list(parse_ds_config({"train_batch_size": 8, **raw}, "ds.json").warnings)


@pytest.mark.parametrize("raw, expected", [
    ({"zero_optimization": {"stage": 3, "memory_efficient_linear": False}}, "ds.json zero_optimization.memory_efficient_linear = False"),
    ({"zero_optimization": {"stage": 1, "legacy_stage1": True}}, "ds.json zero_optimization.legacy_stage1 = True"),
    ({"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 1e6}},
     "ds.json zero_optimization.stage3_param_persistence_threshold = 1000000.0: ZeRO-3 keeps parameters"),
    ({"zero_optimization": {"stage": 3, "model_persistence_threshold": 10**9}}, "ds.json zero_optimization.model_persistence_threshold"),
    ({"zero_optimization": {"stage": 1, "allgather_partitions": False}}, "ds.json zero_optimization.allgather_partitions = False"),
    ({"gradient_predivide_factor": 8.0}, "ds.json gradient_predivide_factor = 8.0: an extra scaling pass"),
    ({"comms_logger": {"enabled": True}}, "ds.json comms_logger present: DeepSpeed turns its comms logger on"),
    ({"memory_breakdown": True}, "ds.json memory_breakdown = True (read raw: true): gc.collect()"),
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
    {"memory_breakdown": False},
    {"timers": {"throughput": {"enabled": True, "synchronized": True}}},
    {"bf16": {"enabled": True, "immediate_grad_update": False}},
])
def test_defaults_are_silent(raw: dict[str, Any]) -> None:
    assert _warnings(raw) == []


# Item: values as DeepSpeed reads them, key by key (pydantic lax coercion for the model sections, raw for the rest).
_BOOL_VALUES = [True, False, 1, 0, 1.0, "true", "false", "True", "FALSE", "1", "0", "yes", "no", "on", "off", "t", "f"]
_REFUSED_BOOLS = ["maybe", " true", 2, "1.0"]
_INT_VALUES = [100000, 100000.0, "100000", " 100000 ", "100000.0", "+100000", 1e6, "1000000", True, "100_000",
               "1_000_000"]


def _zero_field(key: str, value: Any) -> Any:
    """What DeepSpeed 0.19.8's own DeepSpeedZeroConfig makes of the value (the test reads the real pydantic model)."""
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    model = DeepSpeedZeroConfig(**{key: value})
    name = {"stage3_param_persistence_threshold": "param_persistence_threshold",
            "stage3_max_reuse_distance": "max_reuse_distance", "stage3_prefetch_bucket_size": "prefetch_bucket_size",
            "stage3_max_live_parameters": "max_live_parameters"}.get(key, key)
    return getattr(model, name)


@pytest.mark.parametrize("key", ["allgather_partitions", "memory_efficient_linear", "legacy_stage1"])
@pytest.mark.parametrize("value", _BOOL_VALUES)
def test_zero_bool_keys_warn_exactly_when_deepspeed_reads_a_non_default(key: str, value: Any) -> None:
    from llmperf_hook.frameworks.deepspeed_step_keys import ZERO_KEYS

    warned = any(f"zero_optimization.{key} =" in w for w in _warnings({"zero_optimization": {"stage": 1, key: value}}))
    assert warned == (_zero_field(key, value) != ZERO_KEYS[key][0])


@pytest.mark.parametrize("value", _REFUSED_BOOLS)
def test_zero_bool_values_deepspeed_refuses_exit_2(value: Any) -> None:
    with pytest.raises(ConfigError, match="must be true or false"):
        _warnings({"zero_optimization": {"stage": 1, "reduce_scatter": value}})


@pytest.mark.parametrize("key", ["stage3_param_persistence_threshold"])
@pytest.mark.parametrize("value", _INT_VALUES)
def test_zero_int_keys_read_as_pydantic_ints(key: str, value: Any) -> None:
    from llmperf_hook.frameworks.deepspeed_step_keys import ZERO_KEYS

    warned = any(f"zero_optimization.{key} =" in w for w in _warnings({"zero_optimization": {"stage": 3, key: value}}))
    assert warned == (_zero_field(key, value) != ZERO_KEYS[key][0])


@pytest.mark.parametrize("key", ["reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
                                 "stage3_max_live_parameters", "stage3_max_reuse_distance", "stage"])
@pytest.mark.parametrize("value", ["3", " 3 ", "+3", "3.0", 3.0, True])
def test_priced_zero_ints_read_as_deepspeed_reads_them(key: str, value: Any) -> None:
    # the priced keys go through the same lax int as the step keys: DeepSpeedZeroConfig takes every one of these
    expected = _zero_field(key, value)
    settings = parse_ds_config({"train_batch_size": 8, "zero_optimization": {"stage": 3, key: value}}, "ds.json")
    assert (settings.zero_stage if key == "stage" else getattr(settings, key)) == expected


def test_int_fields_take_underscored_digits_as_pydantic_does() -> None:
    # pydantic 2 lax int: "500_000_000" is 500000000 (DeepSpeedZeroConfig accepts it), "5__00" is refused
    assert _zero_field("reduce_bucket_size", "500_000_000") == 500_000_000
    assert parse_ds_config({"train_batch_size": 8, "zero_optimization": {"stage": 2, "reduce_bucket_size": "500_000_000"}},
                           "ds.json").reduce_bucket_size == 500_000_000
    with pytest.raises(ConfigError, match="must be an integer"):
        _warnings({"zero_optimization": {"stage": 2, "reduce_bucket_size": "5__00"}})


@pytest.mark.parametrize("value", ["1e5", 1.5, "100000.5", "1__000", "_1000", "1000_"])
def test_zero_int_values_pydantic_refuses_exit_2(value: Any) -> None:
    with pytest.raises(ConfigError, match="must be an integer"):
        _warnings({"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": value}})


@pytest.mark.parametrize("value", _BOOL_VALUES)
def test_model_section_bools_coerced(value: Any) -> None:
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config
    from deepspeed.utils.config import DeepSpeedThroughputTimerConfig

    timers = _warnings({"timers": {"throughput": {"synchronized": value}}})
    assert bool(timers) == (not DeepSpeedThroughputTimerConfig(synchronized=value).synchronized)
    bf16 = _warnings({"bf16": {"enabled": True, "immediate_grad_update": value}})
    assert bool(bf16) == DeepSpeedBF16Config(enabled=True, immediate_grad_update=value).immediate_grad_update


@pytest.mark.parametrize("value", [True, False, "false", 0])
def test_comms_logger_is_on_whenever_the_section_is_present(value: Any) -> None:
    # comm/config.py: comms_logger_enabled = 'comms_logger' in ds_config; `enabled` is validated, never read
    assert any(w.startswith("ds.json comms_logger present") for w in _warnings({"comms_logger": {"enabled": value}}))
    with pytest.raises(ConfigError, match="must be true or false"):
        _warnings({"comms_logger": {"enabled": "maybe"}})


@pytest.mark.parametrize(("value", "on"), [(True, True), ("false", True), ("0", True), (1, True), (False, False),
                                           (0, False), ("", False)])
def test_memory_breakdown_is_read_raw(value: Any, on: bool) -> None:
    # config.py get_memory_breakdown -> engine see_memory_usage(force=value): Python truth, "false" is true
    assert any("memory_breakdown" in w for w in _warnings({"memory_breakdown": value})) == on


def test_gradient_predivide_factor_read_raw() -> None:
    assert _warnings({"gradient_predivide_factor": True}) == []  # True != 1.0 is false in engine.py
    assert _warnings({"gradient_predivide_factor": "8", "prescale_gradients": True}) == []  # never divided by
    for bad in ("8", "1.0", False):
        with pytest.raises(ConfigError, match="divides the gradients by it"):
            _warnings({"gradient_predivide_factor": bad})


@pytest.mark.parametrize("raw", [{"gradient_predivide_factor": 8.0}, {"prescale_gradients": "false"},
                                 {"prescale_gradients": True, "zero_optimization": {"stage": 2, "reduce_scatter": "yes"}}])
def test_zero2_reduce_scatter_asserts_post_scaling(raw: dict[str, Any]) -> None:
    zero = {"stage": 2, **raw.pop("zero_optimization", {})}
    with pytest.raises(ConfigError, match="ZeRO stage 2 with reduce_scatter on"):
        _warnings({**raw, "zero_optimization": zero})
    _warnings({**raw, "zero_optimization": {**zero, "reduce_scatter": "false"}})  # reduce_scatter off: no assert


@pytest.mark.parametrize("stage", [3, "3", "+2", 2.0, " 2 "])
def test_zero3_and_lax_stage_values_assert_post_scaling_too(stage: Any) -> None:
    """stage3.py asserts the same as stage_1_and_2.py with reduce_scatter on; the stage is read as pydantic reads it."""
    expected = 3 if str(stage).strip() == "3" else 2
    with pytest.raises(ConfigError, match=f"ZeRO stage {expected} with reduce_scatter on"):
        _warnings({"gradient_predivide_factor": 8.0, "zero_optimization": {"stage": stage}})
    assert _warnings({"gradient_predivide_factor": 8.0, "zero_optimization": {"stage": 1}})  # warned, not refused


@pytest.mark.parametrize("key, field", [("reduce_scatter", "reduce_scatter"),
                                        ("use_multi_rank_bucket_allreduce", "multi_rank_bucket_allreduce")])
@pytest.mark.parametrize("value", _BOOL_VALUES)
def test_priced_zero_reduction_keys_read_as_deepspeed_reads_them(key: str, field: str, value: Any) -> None:
    """Both are priced (OptimizerConfig.zero_grad_allreduce), so they never warn and read exactly as pydantic does."""
    settings = parse_ds_config({"train_batch_size": 8, "zero_optimization": {"stage": 1, key: value}}, "ds.json")
    assert getattr(settings, field) == _zero_field(key, value)
    assert not any(key in w for w in settings.warnings)

"""ds_config keys that change a DeepSpeed step's time or memory and that llmperf does not price: one warning each
when set to something other than DeepSpeed's default (0.19.8: runtime/config.py, runtime/constants.py,
runtime/zero/config.py, utils/config.py, comm/config.py). The keys llmperf prices (ZeRO stage, buckets, overlap_comm,
contiguous_gradients, the stage3_ fetch keys, communication_data_type, grad_accum_dtype, offload, ZeRO++) and those it
warns about elsewhere
(wall_clock_breakdown, flops_profiler, removed sections, sub_group_size, round_robin_gradients) are read by
deepspeed_config.py / deepspeed_schema.py, the activation_checkpointing section by ds_checkpointing.py; the table of
decisions is tests/frameworks/real_scripts/FLAGS.md.

Each key is read as DeepSpeed reads it. The sections that are pydantic models (DeepSpeedZeroConfig, CommsLoggerConfig,
DeepSpeedThroughputTimerConfig, DeepSpeedBF16Config) coerce in lax mode: "true"/"false", "yes"/"no", 1/0 are
booleans, "100000" and 1e5 are integers, anything else is refused at deepspeed.initialize. The top-level keys
gradient_predivide_factor, prescale_gradients and memory_breakdown are read raw (config.py get_scalar_param) and
tested by Python truth or arithmetic: the string "false" is true there, and a string factor fails at the first
all-reduce.
"""

from __future__ import annotations

import difflib
from typing import Any

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.deepspeed_schema import AUTO, ds_bool, precision_section, pydantic_int

ZERO_KEYS: dict[str, tuple[Any, str]] = {
    "memory_efficient_linear": (True, "ZeRO-3 leaves torch.nn.functional.linear in place (zero.Init does not "
                                      "install zero3_linear_wrap): nn.Linear keeps its fused bias GEMM, as priced, but "
                                      "autograd holds each gathered weight until its backward (DeepSpeed #8189), "
                                      "memory not modelled"),
    "legacy_stage1": (False, "DeepSpeed's legacy ZeRO-1 partitioning not modelled"),
    "allgather_partitions": (True, "ZeRO-1/2 parameters gathered by one broadcast per rank instead of an all-gather: "
                                   "timed as the all-gather"),
    "stage3_param_persistence_threshold": (100_000, "ZeRO-3 keeps parameters under this many elements resident: "
                                                    "priced at DeepSpeed's 1e5"),
    "param_persistence_threshold": (100_000, "ZeRO-3 keeps parameters under this many elements resident: priced at "
                                             "DeepSpeed's 1e5"),
    "stage3_model_persistence_threshold": (None, "a cap on ZeRO-3's resident parameters not modelled"),
    "model_persistence_threshold": (None, "a cap on ZeRO-3's resident parameters not modelled"),
}
"""zero_optimization key -> (DeepSpeed's default, what a different value changes); None: any value warns (the
default is sys.maxsize). HF's "auto" fills (10 x hidden for the persistence threshold) are left alone."""

def _read(value: Any, default: Any, key: str, origin: str) -> Any:
    """A DeepSpeedZeroConfig field as pydantic reads it: a bool field (bool default) with lax bool coercion, an int
    field (int or sys.maxsize default) with lax int coercion (check_zero_section has refused what pydantic refuses)."""
    if isinstance(default, bool):
        return ds_bool(value, key, origin)
    number = pydantic_int(value)
    return value if number is None else number


def memory_efficient_linear(raw: dict[str, Any], origin: str) -> bool:
    """zero_optimization.memory_efficient_linear (DeepSpeedZeroConfig, default True; "auto" dropped to it): whether
    ZeRO-3's zero.Init replaces F.linear by zero3_linear_wrap (partition_parameters.py Init.__init__ reads it as
    mem_efficient_linear; patch_init_and_builtins / _enable_mem_efficient_linear act only when it is true)."""
    zero = raw.get("zero_optimization")
    if not isinstance(zero, dict) or zero.get("memory_efficient_linear") in (None, AUTO):
        return True
    return bool(_read(zero["memory_efficient_linear"], True, "zero_optimization.memory_efficient_linear", origin))


def _zero_warnings(raw: dict[str, Any], origin: str) -> list[str]:
    zero = raw.get("zero_optimization")
    if not isinstance(zero, dict):
        return []
    out: list[str] = []
    for key, (default, effect) in ZERO_KEYS.items():
        if zero.get(key) in (None, AUTO):  # DeepSpeedConfigModel drops "auto": the default
            continue
        value = _read(zero[key], default, f"zero_optimization.{key}", origin)
        if default is None or value != default:
            out.append(f"{origin} zero_optimization.{key} = {zero[key]!r}: {effect}")
    return out


def _predivide_warnings(raw: dict[str, Any], origin: str) -> list[str]:
    """gradient_predivide_factor, read raw: engine.py allreduce_bucket (postscale, i.e. prescale_gradients false by
    Python truth) scales by 1 / factor before the all-reduce and by factor / DP after it (one pass each, against one
    pass by 1/DP otherwise), and stage_1_and_2.py / stage3.py assert factor == 1.0 and postscale at ZeRO-2 and
    ZeRO-3 with reduce_scatter (the default). True counts as 1.0, as `True != 1.0` is false in the engine."""
    factor, prescale = raw.get("gradient_predivide_factor", 1.0), bool(raw.get("prescale_gradients", False))
    numeric = isinstance(factor, (int, float))
    zero = raw.get("zero_optimization") if isinstance(raw.get("zero_optimization"), dict) else {}
    scatter = zero.get("reduce_scatter", True)
    stage = pydantic_int(zero.get("stage"))
    partitioned_scatter = stage in (2, 3) and (scatter == AUTO or ds_bool(scatter, "zero_optimization.reduce_scatter",
                                                                          origin))
    if partitioned_scatter and (prescale or not numeric or factor != 1.0):
        what = (f"prescale_gradients = {raw['prescale_gradients']!r} (read raw: true)" if prescale
                else f"gradient_predivide_factor = {factor!r}")
        raise ConfigError(f"{origin} {what} at ZeRO stage {stage} with reduce_scatter on: DeepSpeed's ZeRO-{stage} "
                          "optimizer asserts gradient_predivide_factor == 1.0 and post-scaled gradients there "
                          f"(stage_1_and_2.py, stage3.py: 'not yet supported with ZeRO-{stage} with reduce scatter "
                          "enabled'). Remove the key, or set zero_optimization.reduce_scatter to false.")
    if prescale or (numeric and factor == 1.0):
        return []
    if not numeric or factor == 0:
        raise ConfigError(f"{origin} gradient_predivide_factor = {factor!r}: DeepSpeed reads it raw (config.py "
                          "get_gradient_predivide_factor) and divides the gradients by it before every all-reduce "
                          "(engine.py allreduce_bucket: 1.0 / factor), which fails at the first step (TypeError or "
                          "ZeroDivisionError). Write a positive JSON number such as 1.0.")
    return [f"{origin} gradient_predivide_factor = {factor!r}: an extra scaling pass over the gradients per step not "
            "timed"]


def _top_level_warnings(raw: dict[str, Any], origin: str) -> list[str]:
    """comms_logger: DeepSpeed turns the logger on whenever the section is present (comm/config.py DeepSpeedCommsConfig:
    comms_logger_enabled = 'comms_logger' in ds_config; utils/comms_logging.py configure takes that, not the section's
    pydantic-validated `enabled`), and the logger synchronizes the device after every collective (comm/comm.py
    timed_op: 'Need to make op blocking for accurate logging'). memory_breakdown, read raw and tested by truth, calls
    see_memory_usage around every forward and backward, which runs gc.collect() on rank 0 (runtime/utils.py) while
    the other ranks wait at the next collective."""
    out = _predivide_warnings(raw, origin)
    logger = raw.get("comms_logger")
    if isinstance(logger, dict):
        if logger.get("enabled", AUTO) != AUTO:
            ds_bool(logger["enabled"], "comms_logger.enabled", origin)  # CommsLoggerConfig validates it all the same
        out.append(f"{origin} comms_logger present: DeepSpeed turns its comms logger on whenever the section exists "
                   f"(its enabled = {logger.get('enabled', False)!r} is validated but not read) and synchronizes the "
                   "device after every collective, which serializes communication with compute; not modelled")
    out.extend(_auto_parallel_warnings(raw, origin) + _near_miss_warnings(raw, origin))
    if raw.get("memory_breakdown", False):
        out.append(f"{origin} memory_breakdown = {raw['memory_breakdown']!r} (read raw: true): gc.collect() and memory "
                   "reports on rank 0 around every forward and backward not timed")
    return out


_PRICED_TOP_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                    "zero_optimization", "gradient_clipping")


def _near_miss_warnings(raw: dict[str, Any], origin: str) -> list[str]:
    """DeepSpeedConfig reads top-level keys by name and ignores the rest, so a misspelt batch or ZeRO key (DeepSpeed's
    own tests/unit/runtime/pipe/test_pipe.py has 'grandient_accumulation_steps') silently keeps the default."""
    return [f"{origin} {key!r} is not a DeepSpeed key (did you mean {close[0]}?): DeepSpeed ignores it, and so does "
            "llmperf" for key in raw
            if not any(name in key for name in _PRICED_TOP_KEYS)  # max_train_batch_size and the like are no typos
            and (close := difflib.get_close_matches(key, _PRICED_TOP_KEYS, 1, 0.85))]


def _auto_parallel_warnings(raw: dict[str, Any], origin: str) -> list[str]:
    """AutoTP / AutoEP from the ds_config alone (DeepSpeed 0.19.8 engine.py __init__: _configure_expert_parallel when
    expert_parallel.enabled, _configure_tensor_parallel when tensor_parallel.autotp_size > 1) re-shard the client's
    model; llmperf prices the model unsharded. DeepSpeedConfig still checks the batch triad against every rank."""
    out: list[str] = []
    tp = raw.get("tensor_parallel")
    size = pydantic_int(tp.get("autotp_size", 0)) if isinstance(tp, dict) else 0
    if size and size > 1:
        out.append(f"{origin} tensor_parallel.autotp_size = {size}: DeepSpeed AutoTP shards the model's linear layers "
                   f"over {size} ranks; not modelled: priced as TP 1, every rank holding the whole model")
    ep = raw.get("expert_parallel")
    if isinstance(ep, dict) and ep.get("enabled", False):  # auto_ep_config.parse_autoep_config reads it raw
        out.append(f"{origin} expert_parallel enabled (autoep_size = {ep.get('autoep_size', 1)!r}): DeepSpeed AutoEP "
                   "replaces the MoE layers with expert-parallel ones; not modelled: priced with the model's experts "
                   "unsharded (EP 1)")
    return out


def _timer_and_precision_warnings(raw: dict[str, Any], origin: str) -> list[str]:
    """utils/config.py DeepSpeedThroughputTimerConfig (enabled and synchronized, pydantic bools, default true): the
    synchronized throughput timer drains the device at every micro-batch's start, which predict/host_issue.py prices
    as the micro-batch prologue. bf16.immediate_grad_update (pydantic bool, default false in 0.19.8): BF16_Optimizer
    accumulates each micro-batch's gradients into fp32 from backward hooks instead of in 16 bit."""
    out: list[str] = []
    timers = raw.get("timers")
    throughput = timers.get("throughput") if isinstance(timers, dict) else None
    if isinstance(throughput, dict) and not all(
            ds_bool(throughput[key], f"timers.throughput.{key}", origin) for key in ("enabled", "synchronized")
            if throughput.get(key, AUTO) != AUTO):
        out.append(f"{origin} timers.throughput without a synchronized timer: the device sync at each micro-batch's "
                   "start, priced as a stall of the launch queue, does not happen")
    bf16 = precision_section(raw, "bf16")
    update = bf16.get("immediate_grad_update", AUTO) if isinstance(bf16, dict) else AUTO
    if update != AUTO and ds_bool(update, "bf16.immediate_grad_update", origin):
        out.append(f"{origin} bf16.immediate_grad_update: fp32 gradient accumulation from backward hooks timed as the "
                   "16-bit accumulation")
    return out


def step_key_warnings(raw: dict[str, Any], origin: str) -> list[str]:
    """One line per ds_config key set away from its default that changes the step and is not priced; ConfigError for
    a value DeepSpeed refuses or fails on."""
    return _zero_warnings(raw, origin) + _top_level_warnings(raw, origin) + _timer_and_precision_warnings(raw, origin)


_MASTER_KEYS = (("fp16", "fp16_master_weights_and_grads", "Fp16_master_weights_and_grads"),
                ("bf16", "bf16_master_weights_and_grads", "Bf16_master_weights_and_grads"),
                ("bf16", "bf16_optimizer_states", "bf16_optimizer_states"))


def master_weight_rules(raw: dict[str, Any], zero_stage: Any, origin: str) -> list[str]:
    """16-bit master weights, gradients and optimizer states (precision_config.py pydantic bools, default false):
    DeepSpeedConfig._do_error_check asserts each '... is only supported with ZeRO Stage 1, 2, or 3.' and that
    bf16_optimizer_states 'requires bf16_master_weights_and_grads to be enabled.'; accepted ones get one warning
    (the ZeRO optimizer keeps 2-byte copies where llmperf prices 4-byte master weights, gradients and Adam states)."""
    set_keys: list[str] = []
    for section, key, name in _MASTER_KEYS:
        node = precision_section(raw, section)
        value = node.get(key, AUTO) if isinstance(node, dict) else AUTO
        if value == AUTO or not ds_bool(value, f"{section}.{key}", origin):
            continue
        if not isinstance(zero_stage, int) or zero_stage not in (1, 2, 3):
            raise ConfigError(f"{origin} {section}.{key} is true at zero_optimization.stage {zero_stage}; DeepSpeed "
                              f"asserts '{name} is only supported with ZeRO Stage 1, 2, or 3.' Set the stage to 1-3 or "
                              f"drop {key}.")
        set_keys.append(f"{section}.{key}")
    if "bf16.bf16_optimizer_states" in set_keys and "bf16.bf16_master_weights_and_grads" not in set_keys:
        raise ConfigError(f"{origin} sets bf16.bf16_optimizer_states without bf16.bf16_master_weights_and_grads; "
                          "DeepSpeed asserts 'bf16_optimizer_states requires bf16_master_weights_and_grads to be "
                          "enabled.' Set both, or drop bf16_optimizer_states.")
    if not set_keys:
        return []
    return [f"{origin} {' and '.join(set_keys)}: the optimizer's 16-bit master weights / gradients / states are "
            "priced as fp32 ones (memory and step overestimated)"]

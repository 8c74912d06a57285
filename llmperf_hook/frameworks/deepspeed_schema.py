"""What DeepSpeed's config models refuse in a ds_config, checked before anything is priced.

DeepSpeed builds its config sections as pydantic models with `extra="forbid"` (deepspeed/runtime/config_utils.py
DeepSpeedConfigModel): an unknown or misspelt key in zero_optimization, offload_param / offload_optimizer, fp16 /
bf16 or a monitor section (tensorboard, wandb, csv_monitor, comet) stops deepspeed.initialize with "Extra inputs are
not permitted". Numeric fields carry pydantic bounds (zero/config.py: reduce_bucket_size gt=0, the other sizes ge=0)
and integer fields refuse fractions and text ("5e8" as a string). "auto" values are dropped before validation
(DeepSpeedConfigModel non-strict), so they always pass. Key lists: the union of DeepSpeed 0.19.6's and 0.19.8's
models, less the keys the job's release (deepspeed_release.schema_release) does not know yet (NEWER_ZERO_KEYS); the
fp16 dynamic loss-scale bounds also follow the release that added them. Values are read as pydantic reads them
(deepspeed_values.py); the rules that join sections once the ZeRO stage is known are in deepspeed_engine_rules.py.
"""

from __future__ import annotations

import difflib
from typing import Any

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.deepspeed_release import (DYNAMIC_SCALE_CHECK_VERSION, LOSS_SCALE_CHECK_VERSION,
                                                        TODAYS_RELEASE, JobRelease, Version)
# Value readers used here and by the other ds_config modules (deepspeed_nvme, deepspeed_step_keys, deepspeed_optimizer
# import them through this module).
from llmperf_hook.frameworks.deepspeed_values import AUTO, ds_bool, pydantic_float, pydantic_int
from llmperf_hook.launch.sizing import DEEPSPEED_VERSION_ENV

ZERO_KEYS = frozenset("""
allgather_bucket_size allgather_partitions allgather_sequential compute_grad_norm contiguous_gradients cpu_offload
cpu_offload_param cpu_offload_use_pin_memory elastic_checkpoint enable_sanity_checks
gather_16bit_weights_on_model_save ignore_unused_parameters leaf_module legacy_stage1 load_from_fp32_weights
log_trace_cache_warnings max_live_parameters max_reuse_distance memory_efficient_linear mics_hierarchical_params_gather
mics_shard_size model_persistence_threshold module_granularity_threshold offload_optimizer offload_param overlap_comm
override_module_apply param_persistence_threshold parameter_alignment pipeline_loading_checkpoint prefetch_bucket_size
reduce_bucket_size reduce_scatter round_robin_gradients save_muon_momentum_buffer_in_memory stage
stage3_allgather_sequential stage3_gather_16bit_weights_on_model_save stage3_gather_fp16_weights_on_model_save
stage3_max_live_parameters stage3_max_reuse_distance stage3_model_persistence_threshold
stage3_module_granularity_threshold stage3_param_persistence_threshold stage3_prefetch_bucket_size
stage3_use_all_reduce_for_fetch_params sub_group_size use_all_reduce_for_fetch_params use_multi_rank_bucket_allreduce
zenflow zero_hpz_partition_size zero_quantized_gradients zero_quantized_nontrainable_weights zero_quantized_weights
zeropp_loco_param
""".split())
"""zero/config.py DeepSpeedZeroConfig fields and aliases (0.19.6 and 0.19.8)."""

NEWER_ZERO_KEYS: dict[str, Version] = {"compute_grad_norm": (0, 19, 7), "parameter_alignment": (0, 19, 7)}
"""DeepSpeedZeroConfig fields of the installed 0.19.8 that the mirror's 0.19.6 (edaa72212, 2026-08-22) lacks, so
older releases refuse them as extra keys; 0.19.7 is not available here and gets the benefit of the doubt."""

# zero/config.py Field(..., gt=0 / ge=0) on integer fields; the value is the lower bound and whether it is strict.
ZERO_INT_BOUNDS: dict[str, tuple[int, bool]] = {
    "reduce_bucket_size": (0, True), "allgather_bucket_size": (0, False), "sub_group_size": (0, False),
    "prefetch_bucket_size": (0, False), "stage3_prefetch_bucket_size": (0, False),
    "param_persistence_threshold": (0, False), "stage3_param_persistence_threshold": (0, False),
    "model_persistence_threshold": (0, False), "stage3_model_persistence_threshold": (0, False),
    "max_live_parameters": (0, False), "stage3_max_live_parameters": (0, False),
    "max_reuse_distance": (0, False), "stage3_max_reuse_distance": (0, False),
    "zero_hpz_partition_size": (0, False),
}

STAGE3_ALIASES = {"stage3_prefetch_bucket_size": "prefetch_bucket_size",
                  "stage3_max_live_parameters": "max_live_parameters",
                  "stage3_max_reuse_distance": "max_reuse_distance"}
"""The stage3_ keys llmperf prices and DeepSpeedZeroConfig's field names for them (zero/config.py Field(...,
alias="stage3_...") with populate_by_name=True in config_utils.py: either spelling sets the field)."""
_ALIASED_FIELDS = ("prefetch_bucket_size", "param_persistence_threshold", "model_persistence_threshold",
                   "max_live_parameters", "max_reuse_distance", "gather_16bit_weights_on_model_save",
                   "module_granularity_threshold", "use_all_reduce_for_fetch_params", "allgather_sequential")
"""DeepSpeedZeroConfig fields whose alias is "stage3_" + the name (zero/config.py)."""

OFFLOAD_PARAM_KEYS = frozenset("device nvme_path buffer_count buffer_size max_in_cpu pin_memory".split())
OFFLOAD_OPTIMIZER_KEYS = frozenset("""device nvme_path buffer_count pin_memory pipeline_read pipeline_write fast_init
ratio super_offload cpuadam_cores_perc pipeline""".split())
"""zero/offload_config.py; `pipeline` is the optimizer offload's pre-0.6 switch (set_pipeline reads it)."""
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
"""OffloadDeviceEnum values: pydantic matches them exactly (lower case)."""

PRECISION_KEYS = {
    "bf16": frozenset("enabled immediate_grad_update check_grad_overflow bf16_master_weights_and_grads "
                      "bf16_optimizer_states".split()),
    "fp16": frozenset("enabled auto_cast loss_scale initial_scale_power loss_scale_window hysteresis "
                      "consecutive_hysteresis min_loss_scale fp16_master_weights_and_grads".split()),
}
"""precision_config.py DeepSpeedBF16Config / DeepSpeedFP16Config."""
PRECISION_TYPES = {"loss_scale": float, "initial_scale_power": int, "loss_scale_window": int, "hysteresis": int,
                   "min_loss_scale": int}
"""The non-boolean fields of those models (every other field is a bool)."""

MONITOR_KEYS = {
    "tensorboard": frozenset("enabled output_path job_name".split()),
    "csv_monitor": frozenset("enabled output_path job_name".split()),
    "wandb": frozenset("enabled group team project".split()),
    "comet": frozenset("enabled samples_log_interval project workspace api_key experiment_name experiment_key online "
                       "mode".split()),
}
"""deepspeed/monitor/config.py TensorBoardConfig, CSVConfig, WandbConfig, CometConfig."""

OTHER_SECTION_KEYS: dict[tuple[str, ...], tuple[str, Version, frozenset[str]]] = {
    ("compile",): ("CompileConfig", (0, 16, 6), frozenset("""autoep_non_moe debug_log deepcompile double_buffer
        free_activation free_activation_threshold keep_all_input_tensors keep_int_input_tensors offload_activation
        offload_activation_pin_memory offload_opt_states offload_parameters passes symmetric_memory sync_after_allgather
        sync_after_reduce sync_before_allgather sync_before_reduce""".split())),
    ("comms_logger",): ("CommsLoggerConfig", (0, 0, 0), frozenset("debug enabled prof_all prof_ops verbose".split())),
    ("timers", "throughput"): ("DeepSpeedThroughputTimerConfig", (0, 14, 3), frozenset({"enabled", "synchronized"})),
    ("hybrid_engine",): ("HybridEngineConfig", (0, 0, 0), frozenset("""enable_cuda_graph enabled inference_tp_size
        max_out_tokens pin_parameters release_inference_cache tp_gather_partition_size""".split())),
    ("weight_quantization",): ("WeightQuantConfig", (0, 0, 0), frozenset(
        "enabled num_bits post_init_quant q_groups q_type quantized_initialization".split())),
    ("tensor_parallel",): ("TPTrainingConfig", (0, 16, 4), frozenset("""autotp_size dtype injection_policy_tuple
        keep_module_on_host kernel_inject partition_config preset_model replace_with_kernel_inject tensor_parallel tp
        tp_overlap_comm vocab_parallel_ce_backend vocab_parallel_lm_head""".split())),
}
"""The other top-level sections DeepSpeedConfig builds as pydantic models with extra keys forbidden (compile/config.py,
comm/config.py, utils/config.py get_timers_config, runtime/config.py HybridEngineConfig, inference/config.py,
runtime/tensor_parallel/config.py): the model, the first release whose model has these fields, and their fields in
0.19.6 and 0.19.8 together (the mirror's and the venv's; every field of 0.14-0.19.5 is among them). Before that release
DeepSpeedConfig ignores the section (compile in 0.14.4-0.16.5; timers before #5363, v0.14.3; tensor_parallel before
AutoTP training, #7004, v0.16.4) or reads other fields (0.13.2-0.14.3's CompileConfig: enabled, backend, kwargs)."""
KNOWN_MODELS_VERSION: Version = (0, 19, 8)
"""The newest release whose models OTHER_SECTION_KEYS lists: a later one may know more fields."""

COMM_DTYPES = ("fp16", "bf16", "fp32")
"""config.py get_communication_data_type: the value, lower-cased, must be one of these."""


def _unknown(section: dict[str, Any], known: frozenset[str]) -> list[str]:
    """Keys the model lacks; an "auto" value is dropped before validation (DeepSpeedConfigModel.__init__), so its key
    never reaches pydantic's extra-key check."""
    return sorted(key for key, value in section.items() if key not in known and value != AUTO)


def _unknown_keys(section: dict[str, Any], known: frozenset[str], where: str, origin: str, model: str) -> None:
    unknown = _unknown(section, known)
    if not unknown:
        return
    hints = [f"{key!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(key, known, 1, 0.75))
             else repr(key) for key in unknown]
    raise ConfigError(f"{origin} {where} has key(s) DeepSpeed does not know: {', '.join(hints)}. DeepSpeed validates "
                      f"the section with pydantic ({model}, extra keys forbidden) and stops at deepspeed.initialize "
                      "('Extra inputs are not permitted'). Fix the spelling or remove the key.")


def _int_field(value: Any, key: str, origin: str, bound: tuple[int, bool] | None) -> None:
    if value == AUTO or value is None:
        return
    number = pydantic_int(value)  # pydantic's lax mode reads "500000000" as an integer, not "5e8"
    if number is None:
        raise ConfigError(f"{origin} {key} must be an integer (5e8 as a JSON number is fine), got {value!r}; DeepSpeed's "
                          "pydantic model refuses text and fractions ('Input should be a valid integer').")
    if bound is not None and (number <= bound[0] if bound[1] else number < bound[0]):
        rule = f"> {bound[0]}" if bound[1] else f">= {bound[0]}"
        raise ConfigError(f"{origin} {key} is {value!r}; DeepSpeed requires {rule} (zero/config.py Field constraint). "
                          "Give a value in range or leave the key out for DeepSpeed's default.")


def offload_ratio(section: Any) -> Any:
    """offload_optimizer.ratio as DeepSpeed reads it: pydantic's lax float takes "0.5" as 0.5; "auto" (dropped) and a
    missing key are the default 1.0. Anything else is returned as given, for the caller to refuse."""
    value = section.get("ratio", 1.0) if isinstance(section, dict) else 1.0
    if value == AUTO:
        return 1.0
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _offload(section: Any, key: str, origin: str) -> None:
    if section is None or section == AUTO:  # DeepSpeedConfigModel drops "auto" values: the default (no offload)
        return
    if not isinstance(section, dict):
        raise ConfigError(f"{origin} zero_optimization.{key} must be an object such as {{\"device\": \"cpu\"}}, got "
                          f"{section!r}; DeepSpeed's pydantic model refuses it.")
    known = OFFLOAD_PARAM_KEYS if key == "offload_param" else OFFLOAD_OPTIMIZER_KEYS
    _unknown_keys(section, known, f"zero_optimization.{key}", origin, "DeepSpeedZeroOffload*Config")
    device = section.get("device", "none")
    if device != AUTO and device not in OFFLOAD_DEVICES:
        raise ConfigError(f"{origin} zero_optimization.{key}.device is {device!r}; DeepSpeed's OffloadDeviceEnum accepts "
                          "exactly \"none\", \"cpu\" or \"nvme\" (lower case). Use one of them.")
    ratio = offload_ratio(section)
    if key == "offload_optimizer" and (not isinstance(ratio, (int, float)) or isinstance(ratio, bool)
                                       or not 0.0 <= ratio <= 1.0):
        raise ConfigError(f"{origin} zero_optimization.offload_optimizer.ratio is {section['ratio']!r}; DeepSpeed requires "
                          "a number from 0.0 to 1.0 (the share of the optimizer offloaded).")
    for name in ("buffer_count", "buffer_size", "max_in_cpu"):
        if name in section:
            _int_field(section[name], f"zero_optimization.{key}.{name}", origin, (0, False))


DEPRECATED_ZERO_KEYS: dict[str, tuple[str, ...]] = {
    "cpu_offload": ("offload_optimizer",), "cpu_offload_param": ("offload_param",),
    "stage3_gather_fp16_weights_on_model_save": ("gather_16bit_weights_on_model_save",
                                                 "stage3_gather_16bit_weights_on_model_save")}
"""zero/config.py's deprecated fields and the field each sets (json_schema_extra new_param; the replacing field by its
name or its stage3_ alias)."""


def _deprecated_zero_keys(zero: dict[str, Any], origin: str) -> None:
    """config_utils.py DeepSpeedConfigModel._process_deprecated_field: a deprecated key set together with the field it
    replaces fails the assert 'Cannot provide deprecated parameter ... and replacing parameter ... together' (any
    value, false or null too; "auto" values were dropped first). Each deprecated key is a pydantic Optional[bool]."""
    given = {key for key, value in zero.items() if value != AUTO}
    for old, new in DEPRECATED_ZERO_KEYS.items():
        clash = next((key for key in new if key in given), None)
        if old in given and clash:
            raise ConfigError(f"{origin} zero_optimization gives the deprecated {old} together with {clash}; DeepSpeed "
                              f"asserts 'Cannot provide deprecated parameter '{old}' and replacing parameter "
                              f"'{new[0]}' together' (config_utils.py _process_deprecated_field). Keep {clash} and "
                              f"drop {old}.")
        if old in given and zero[old] is not None:
            ds_bool(zero[old], f"zero_optimization.{old}", origin)


def check_zero_section(zero: dict[str, Any], origin: str, release: JobRelease = TODAYS_RELEASE) -> list[str]:
    """DeepSpeedZeroConfig of the job's `release`: known keys, deprecated keys, integer bounds, offload sub-models.
    Returns warnings (keys a release newer than the known models may accept)."""
    warnings = _release_keys(zero, ZERO_KEYS, "zero_optimization", origin, "DeepSpeedZeroConfig", release)
    _deprecated_zero_keys(zero, origin)
    newer = sorted(key for key, since in NEWER_ZERO_KEYS.items() if key in zero and not release.has(since))
    if newer:
        raise ConfigError(f"{origin} zero_optimization has {', '.join(newer)}, which DeepSpeedZeroConfig knows from "
                          f"0.19.7 or 0.19.8 on; the job runs {release.named()}, whose model forbids extra keys and "
                          "stops at deepspeed.initialize ('Extra inputs are not permitted'). Remove the key, upgrade "
                          f"DeepSpeed, or set {DEEPSPEED_VERSION_ENV} to the release the job really runs.")
    for name in _ALIASED_FIELDS:
        if AUTO not in (zero.get(name, AUTO), zero.get(f"stage3_{name}", AUTO)):  # "auto" is dropped first
            raise ConfigError(f"{origin} zero_optimization gives both {name} and stage3_{name}, two spellings of one "
                              "DeepSpeedZeroConfig field; pydantic takes the alias and refuses the other ('Extra "
                              f"inputs are not permitted'). Keep one (stage3_{name} is the documented key).")
    for key, bound in ZERO_INT_BOUNDS.items():
        if key in zero:
            _int_field(zero[key], f"zero_optimization.{key}", origin, bound)
    for key in ("offload_param", "offload_optimizer"):
        _offload(zero.get(key), key, origin)
    return warnings


def _fp16_validators(field: str, value: Any, origin: str, release: JobRelease) -> None:
    """DeepSpeedFP16Config's field validators, which run whether fp16 is enabled or not (precision_config.py
    _validate_loss_scale from LOSS_SCALE_CHECK_VERSION, _reject_non_integer_scale_params from
    DYNAMIC_SCALE_CHECK_VERSION); "auto" was dropped first."""
    number = pydantic_float(value)
    if field == "loss_scale" and number is not None and number < 0 and release.has(LOSS_SCALE_CHECK_VERSION):
        raise ConfigError(f"{origin} fp16.loss_scale is {value!r}; DeepSpeedFP16Config raises 'fp16.loss_scale must "
                          f"be >= 0 (0 enables dynamic loss scaling)' from v0.18.8 on (63eeb114b), and the job runs "
                          f"{release.named()}. Give 0 (dynamic) or a positive static scale such as 128.")
    if field in ("loss_scale_window", "min_loss_scale") and isinstance(value, bool) and release.has(
            DYNAMIC_SCALE_CHECK_VERSION):
        raise ConfigError(f"{origin} fp16.{field} is {value!r} (fp16 enabled or not): DeepSpeedFP16Config raises "
                          f"'fp16.{field} must be an integer, not bool' from v0.19.3 on (ded23491c), and the job runs "
                          f"{release.named()}. Give an integer or drop the key.")


def _precision_types(section: dict[str, Any], key: str, origin: str, model: str, release: JobRelease) -> None:
    """fp16 / bf16 values of the type their pydantic model declares ("auto" is dropped first)."""
    for field, value in section.items():
        if value == AUTO:
            continue
        if key == "fp16":
            _fp16_validators(field, value, origin, release)
        kind = PRECISION_TYPES.get(field, bool)
        if kind is bool:
            ds_bool(value, f"{key}.{field}", origin)
        elif (pydantic_int(value) if kind is int else pydantic_float(value)) is None:
            what = "an integer" if kind is int else "a number (0 = dynamic loss scaling)"
            raise ConfigError(f"{origin} {key}.{field} is {value!r}; {model} reads it as "
                              f"{what} and deepspeed.initialize fails otherwise. Fix the value or drop the key.")


def _dynamic_loss_scale(section: dict[str, Any], origin: str, release: JobRelease) -> None:
    """Dynamic loss scaling (fp16 enabled, loss_scale 0, the default) as the job's release checks it. From v0.19.3
    (DYNAMIC_SCALE_CHECK_VERSION) DeepSpeedFP16Config refuses a loss_scale_window or min_loss_scale that is not an
    integer > 0 (booleans too). Earlier releases take any integer (a bool as 0 / 1): a floor <= 0 lets the scale
    collapse, a negative window works as its absolute value (Python's %), and only a window of 0 stops the job,
    with a ZeroDivisionError in DynamicLossScaler.update_scale (`% self.scale_window`) at the first step that does
    not overflow."""
    enabled, scale = section.get("enabled", False), section.get("loss_scale", 0)
    if AUTO in (enabled, scale) or not ds_bool(enabled, "fp16.enabled", origin) or pydantic_float(scale) != 0:
        return  # "auto" enabled: the Trainer's --fp16 decides; type errors are _precision_types'
    checked = release.has(DYNAMIC_SCALE_CHECK_VERSION)
    for field, default in (("loss_scale_window", 1000), ("min_loss_scale", 1)):
        value = section.get(field, default)
        if value == AUTO:
            continue
        number = pydantic_int(value) or 0
        where = f"{origin} fp16.{field} is {value!r} under dynamic loss scaling (fp16 enabled, loss_scale 0)"
        if checked and (isinstance(value, bool) or number <= 0):
            raise ConfigError(f"{where}: DeepSpeedFP16Config raises 'fp16.{field} must be > 0 when dynamic loss "
                              f"scaling is enabled' from v0.19.3 on (ded23491c), and the job runs {release.named()}. "
                              f"Give a positive integer (DeepSpeed's default: {default}) or drop the key; on an older "
                              f"DeepSpeed set {DEEPSPEED_VERSION_ENV} to the release the job runs.")
        if field == "loss_scale_window" and number == 0:
            raise ConfigError(f"{where}: {release.named()} accepts it, then DynamicLossScaler.update_scale computes "
                              "`% scale_window` and stops with a ZeroDivisionError at the first step without an "
                              "overflow. Give a positive integer (DeepSpeed's default: 1000) or drop the key.")


def precision_key(raw: dict[str, Any], name: str) -> str | None:
    """The key DeepSpeed builds the fp16 / bf16 section from (precision_config.py get_float16_config /
    get_bfloat16_config): "fp16"; "bf16" unless it is absent or null, then "bfloat16". None: no such key, the
    section's defaults."""
    if name == "bf16" and raw.get("bf16") is None:
        return "bfloat16" if "bfloat16" in raw else None
    return name if name in raw else None


def precision_section(raw: dict[str, Any], name: str) -> Any:
    """That section's value as DeepSpeed reads it ({} when absent)."""
    key = precision_key(raw, name)
    return {} if key is None else raw[key]


def check_sections(raw: dict[str, Any], origin: str, release: JobRelease = TODAYS_RELEASE) -> list[str]:
    """fp16/bf16, monitor and the other pydantic sections as DeepSpeed's models (of the job's `release`) read them;
    communication_data_type's choices. Returns warnings (keys a release newer than the known models may accept)."""
    for name, known in PRECISION_KEYS.items():
        key = precision_key(raw, name)
        if key is None:
            continue
        section = raw[key]
        if not isinstance(section, dict):
            raise ConfigError(f"{origin} {key} is {section!r}; DeepSpeed builds the section with "
                              f"DeepSpeed{name.upper()}Config(**{key}) and fails on anything but an object. Write "
                              f"\"{key}\": {{\"enabled\": true}}.")
        _unknown_keys(section, known, key, origin, f"DeepSpeed{name.upper()}Config")
        _precision_types(section, key, origin, f"DeepSpeed{name.upper()}Config", release)
        if name == "fp16":
            _dynamic_loss_scale(section, origin, release)
    for name, known in MONITOR_KEYS.items():
        section = raw.get(name)
        if isinstance(section, dict):
            _unknown_keys(section, known, name, origin, "DeepSpeedMonitorConfig")
    warnings = _other_sections(raw, origin, release)
    _checkpoint_section(raw, origin, release)
    for key in ("communication_data_type", "seq_parallel_communication_data_type"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, str) or value.lower() not in COMM_DTYPES):
            raise ConfigError(f"{origin} {key} is {value!r}; DeepSpeed accepts \"fp16\", \"bf16\" or \"fp32\" ('Invalid "
                              "communication_data_type'). Use one of them or leave the key out.")
    return warnings


def _other_sections(raw: dict[str, Any], origin: str, release: JobRelease) -> list[str]:
    """OTHER_SECTION_KEYS' unknown keys: refused for the releases whose model is listed, a warning for a later one."""
    warnings: list[str] = []
    for path, (model, since, known) in OTHER_SECTION_KEYS.items():
        parent = raw.get(path[0]) if len(path) > 1 else raw
        if not isinstance(parent, dict) or path[-1] not in parent or not release.has(since):
            continue
        section, where = parent[path[-1]], ".".join(path)
        if not isinstance(section, dict):
            raise ConfigError(f"{origin} {where} is {section!r}; DeepSpeedConfig builds the section with "
                              f"{model}(**{where}) and fails (TypeError) on anything but an object. Write an object "
                              "such as {} or drop the key.")
        warnings.extend(_release_keys(section, known, where, origin, model, release))
    return warnings


def _release_keys(section: dict[str, Any], known: frozenset[str], where: str, origin: str, model: str,
                  release: JobRelease) -> list[str]:
    """_unknown_keys for the job's release; a release past KNOWN_MODELS_VERSION may know more fields: one warning
    per key the lists lack, no refusal."""
    if release.version is None or release.version <= KNOWN_MODELS_VERSION:
        _unknown_keys(section, known, where, origin, f"{model} of {release.named()}")
        return []
    return [f"{origin} {where}.{key} is not a {model} field of DeepSpeed 0.19.8 or earlier; the job runs "
            f"{release.named()}, which may know it (if not, deepspeed.initialize stops with 'Extra inputs are not "
            "permitted')" for key in _unknown(section, known)]


TAG_VALIDATION_MODES = ("WARN", "IGNORE", "FAIL")
"""runtime/config.py get_checkpoint_tag_validation_mode: checkpoint.tag_validation, upper-cased, is one of these."""
KEEP_IN_FP32_VERSION: Version = (0, 19, 7)
"""data_types.keep_in_fp32_modules: read (and its type checked) by the installed 0.19.8, unknown to the mirror's 0.19.6;
0.19.7 is not available here and is taken as reading it (as NEWER_ZERO_KEYS)."""


def _checkpoint_section(raw: dict[str, Any], origin: str, release: JobRelease) -> None:
    """The raw-read checks DeepSpeedConfig._initialize_params makes on checkpoint and data_types."""
    checkpoint = raw.get("checkpoint")
    mode = checkpoint.get("tag_validation", "WARN") if isinstance(checkpoint, dict) else "WARN"
    if not isinstance(mode, str) or mode.upper() not in TAG_VALIDATION_MODES:
        raise ConfigError(f"{origin} checkpoint.tag_validation is {mode!r}; DeepSpeedConfig raises 'Checkpoint "
                          "config contains invalid tag_validation value of ..., expecting one of "
                          f"{list(TAG_VALIDATION_MODES)}' "
                          "(an AttributeError for a non-string). Use \"Warn\", \"Ignore\" or \"Fail\".")
    types = raw.get("data_types")
    keep = types.get("keep_in_fp32_modules", AUTO) if isinstance(types, dict) else AUTO
    if keep != AUTO and release.has(KEEP_IN_FP32_VERSION) and not (
            isinstance(keep, list) and all(isinstance(name, str) for name in keep)):
        raise ConfigError(f"{origin} data_types.keep_in_fp32_modules is {keep!r}; DeepSpeedConfig raises "
                          "'data_types.keep_in_fp32_modules must be \"auto\" or a list of name patterns' (0.19.7 or "
                          f"later; the job runs {release.named()}). Write a list such as [\"norm\"].")

"""What DeepSpeed's config models refuse in a ds_config, checked before anything is priced.

DeepSpeed builds its config sections as pydantic models with `extra="forbid"` (deepspeed/runtime/config_utils.py
DeepSpeedConfigModel): an unknown or misspelt key in zero_optimization, offload_param / offload_optimizer, fp16 /
bf16 or a monitor section (tensorboard, wandb, csv_monitor, comet) stops deepspeed.initialize with "Extra inputs are
not permitted". Numeric fields carry pydantic bounds (zero/config.py: reduce_bucket_size gt=0, the other sizes ge=0)
and integer fields refuse fractions and text ("5e8" as a string). "auto" values are dropped before validation
(DeepSpeedConfigModel non-strict), so they always pass. Key lists: the union of DeepSpeed 0.19.6's and 0.19.8's
models, so a key either release accepts is accepted.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from llmperf_hook.errors import ConfigError
from llmperf_hook.provenance import Source, SourceKind

AUTO = "auto"

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

# Strings pydantic's lax mode reads as booleans (DeepSpeed's config sections are pydantic models).
_BOOL_TEXT = {"true": True, "t": True, "yes": True, "y": True, "on": True, "1": True,
              "false": False, "f": False, "no": False, "n": False, "off": False, "0": False}


def ds_bool(value: Any, key: str, origin: str) -> bool:
    """A boolean as DeepSpeed's pydantic config models accept it: true/false, 0/1, or their usual spellings in any
    case (" true" with a space is refused, as pydantic 2 refuses it)."""
    if isinstance(value, bool) or (isinstance(value, (int, float)) and value in (0, 1)):
        return bool(value)
    if isinstance(value, str) and value.lower() in _BOOL_TEXT:
        return _BOOL_TEXT[value.lower()]
    raise ConfigError(f"{origin} key {key} must be true or false, got {value!r} (DeepSpeed's config validation rejects it).")


_INT_TEXT = re.compile(r"[+-]?(?:0[0_]*(?<=0)|0[0_]*[1-9][0-9]*(?:_[0-9]+)*|[1-9][0-9]*(?:_[0-9]+)*)(?:\.0+)?", re.ASCII)
"""pydantic-core's str -> int (lax): ASCII digits only ("٣" and "１２" are refused), single underscores between
digits, and a ".0" tail with at least one zero ("100000." and ".0" are refused). Leading zeros are stripped first,
underscores among them included ("0__0" and "00__5" are read, "1__000" and "0_1__0" are not). Not modelled: the
sign pydantic-core also accepts right after leading zeros ("0-5" reads as -5), which nobody writes."""
_RUST_SPACE = "".join(chr(c) for c in (*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028,
                                       0x2029, 0x202F, 0x205F, 0x3000))
"""The blanks pydantic-core trims around a number (Rust's str::trim, Unicode White_Space). Python's str.strip also
trims U+001C..U+001F, which pydantic keeps and refuses."""
_I64_BOUND = 2.0 ** 63
"""pydantic-core converts a float to an int through i64: -2**63 and 2**63 and beyond are refused (1e20 too)."""


def pydantic_int(value: Any) -> int | None:
    """An integer exactly as pydantic 2's lax mode reads it (DeepSpeed 0.19.8's config models, pydantic 2.14 /
    pydantic-core 2.50): an int or bool; a finite float without a fraction inside the i64 range; a string of ASCII
    digits with an optional sign, single underscores between digits, a ".0..." tail and surrounding Unicode blanks
    ("100000", " 7 ", "100_000", "100000.0"). None for anything pydantic refuses ("1e5", 1.5, "auto", "1__000",
    "100000.", non-ASCII digits, 1e20). tests/frameworks/test_pydantic_int.py checks it against pydantic itself."""
    if isinstance(value, (bool, int)):
        return int(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() and -_I64_BOUND < value < _I64_BOUND else None
    if isinstance(value, str) and _INT_TEXT.fullmatch(text := value.strip(_RUST_SPACE)):
        return int(text.split(".")[0].replace("_", ""))
    return None


COMM_DTYPES = ("fp16", "bf16", "fp32")
"""config.py get_communication_data_type: the value, lower-cased, must be one of these."""


def _unknown_keys(section: dict[str, Any], known: frozenset[str], where: str, origin: str, model: str) -> None:
    unknown = sorted(key for key in section if key not in known)
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


def check_zero_section(zero: dict[str, Any], origin: str) -> None:
    """DeepSpeedZeroConfig: known keys, integer bounds, offload sub-models."""
    _unknown_keys(zero, ZERO_KEYS, "zero_optimization", origin, "DeepSpeedZeroConfig")
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


def _pydantic_float(value: Any) -> float | None:
    """A float as DeepSpeed's config models read one: a number or numeric text ("128", " 1e3 "), finite; not a
    bool, None or "dynamic" (checked against DeepSpeedFP16Config itself)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value.strip(_RUST_SPACE) if isinstance(value, str) else value)
    except (TypeError, ValueError):
        return None
    return number if abs(number) != float("inf") and number == number else None


def _precision_types(section: dict[str, Any], key: str, origin: str, model: str) -> None:
    """fp16 / bf16 values of the type their pydantic model declares ("auto" is dropped first)."""
    for field, value in section.items():
        if value == AUTO:
            continue
        kind = PRECISION_TYPES.get(field, bool)
        if kind is bool:
            ds_bool(value, f"{key}.{field}", origin)
        elif (pydantic_int(value) if kind is int else _pydantic_float(value)) is None:
            what = "an integer" if kind is int else "a number (0 = dynamic loss scaling)"
            raise ConfigError(f"{origin} {key}.{field} is {value!r}; {model} reads it as "
                              f"{what} and deepspeed.initialize fails otherwise. Fix the value or drop the key.")


def check_sections(raw: dict[str, Any], origin: str) -> None:
    """fp16/bf16 and monitor sections as DeepSpeed's models read them; communication_data_type's choices."""
    for name, known in PRECISION_KEYS.items():
        key = "bfloat16" if name == "bf16" and "bf16" not in raw and "bfloat16" in raw else name
        section = raw.get(key)
        if section is None:
            continue
        if not isinstance(section, dict):
            raise ConfigError(f"{origin} {key} is {section!r}; DeepSpeed builds the section with "
                              f"DeepSpeed{name.upper()}Config(**{key}) and fails on anything but an object. Write "
                              f"\"{key}\": {{\"enabled\": true}}.")
        _unknown_keys(section, known, key, origin, f"DeepSpeed{name.upper()}Config")
        _precision_types(section, key, origin, f"DeepSpeed{name.upper()}Config")
    for name, known in MONITOR_KEYS.items():
        section = raw.get(name)
        if isinstance(section, dict):
            _unknown_keys(section, known, name, origin, "DeepSpeedMonitorConfig")
    for key in ("communication_data_type", "seq_parallel_communication_data_type"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, str) or value.lower() not in COMM_DTYPES):
            raise ConfigError(f"{origin} {key} is {value!r}; DeepSpeed accepts \"fp16\", \"bf16\" or \"fp32\" ('Invalid "
                              "communication_data_type'). Use one of them or leave the key out.")


REMOVED_KEYS = ("nebula", "compression_training", "amp", "quantize_training", "sparse_gradients", "eigenvalue",
                "sparse_attention", "elasticity", "graph_harvesting", "curriculum_learning", "progressive_layer_drop")
"""Top-level sections DeepSpeed 0.19.8 refuses (config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS, deepspeedai/DeepSpeed#8489);
0.19.6 and earlier accept them. The release the job runs is not known here, so they warn."""
REMOVED_ZERO_KEYS = ("mics_shard_size", "mics_hierarchical_params_gather", "zeropp_loco_param")

# config.py DtypeEnum spellings (matched exactly); int8 is a member but no training dtype pairs with it.
_DTYPES = {"fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16", "fp32": "fp32",
           "float32": "fp32", "float": "fp32", "torch.float32": "fp32", "bf16": "bf16", "bfloat16": "bf16",
           "torch.bfloat16": "bf16", "int8": "int8", "torch.int8": "int8"}


def _removed(raw: dict[str, Any], origin: str, warnings: list[str]) -> None:
    zero = raw.get("zero_optimization") if isinstance(raw.get("zero_optimization"), dict) else {}
    gone = [key for key in REMOVED_KEYS if key in raw] + [f"zero_optimization.{key}" for key in REMOVED_ZERO_KEYS
                                                         if key in zero]
    for key in gone:
        warnings.append(f"{origin} {key} accepted, not modelled; DeepSpeed 0.19.8 and later refuse the config (feature "
                        "removed, deepspeedai/DeepSpeed#8489), earlier releases accept it")


def _grad_accum_dtype(raw: dict[str, Any], origin: str, fields: dict[str, Any]) -> dict[str, Any]:
    """engine.py get_data_types / _do_optimizer_sanity_check: without ZeRO the gradient-accumulation dtype must be
    the model's ('unsupported mix of model_dtype and grad_accum_dtype'); ZeRO-1 with bf16 and fp32 accumulation runs
    BF16_Optimizer, which keeps an fp32 gradient per parameter (priced in schedule/memory.py)."""
    types = raw.get("data_types")
    value = types.get("grad_accum_dtype") if isinstance(types, dict) else None
    if value is None:
        return {}
    if value not in _DTYPES:  # "auto" too: neither the Hugging Face Trainer nor Accelerate fills this key
        raise ConfigError(f"{origin} data_types.grad_accum_dtype is {value!r}; DeepSpeed's DtypeEnum knows \"fp32\", "
                          "\"bf16\" and \"fp16\" (and their torch spellings) and fails at deepspeed.initialize otherwise.")
    if AUTO in (fields["fp16"], fields["bf16"]):
        return {"grad_accum_dtype": _DTYPES[value]}
    model = "fp16" if fields["fp16"] else "bf16" if fields["bf16"] else "fp32"
    if fields["zero_stage"] == 0 and _DTYPES[value] != model:
        raise ConfigError(f"{origin} data_types.grad_accum_dtype {value!r} with {model} training and ZeRO stage 0: "
                          "DeepSpeed's engine accumulates gradients in the model's dtype without ZeRO and raises "
                          f"'unsupported mix of model_dtype and grad_accum_dtype'. Use {model!r}, drop the key, or enable "
                          "ZeRO (stage 1 with bf16 accumulates in fp32).")
    return {"grad_accum_dtype": _DTYPES[value]}


def _sequence_parallel(raw: dict[str, Any], origin: str, src: dict[str, Source]) -> dict[str, Any]:
    value = raw.get("sequence_parallel_size")
    if value is None:
        return {}
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{origin} sequence_parallel_size is {value!r}; DeepSpeed divides the world size by it "
                          "(DeepSpeedConfig) and Ulysses groups need a whole number >= 1. Give a positive integer.")
    src["sequence_parallel_size"] = Source(SourceKind.CONFIG_FILE, f"{origin} sequence_parallel_size")
    return {"sequence_parallel_size": value}


def _instrumentation(raw: dict[str, Any], origin: str, warnings: list[str]) -> None:
    """engine.py: wall_clock_breakdown (or an enabled flops_profiler, which turns it on) times every forward, backward
    and step with synchronizing timers; the flops profiler also profiles one whole step (profile_step)."""
    profiler = raw.get("flops_profiler") if isinstance(raw.get("flops_profiler"), dict) else {}
    if profiler.get("enabled") is True:
        warnings.append(f"{origin} flops_profiler enabled accepted, not modelled (its profile step, default 1, runs "
                        "slower; it also turns on wall_clock_breakdown)")
    elif raw.get("wall_clock_breakdown") is True:
        warnings.append(f"{origin} wall_clock_breakdown accepted, not modelled (its timers synchronize the device "
                        "around every forward, backward and optimizer step)")


def check_top_level(raw: dict[str, Any], origin: str, fields: dict[str, Any], src: dict[str, Source],
                    warnings: list[str]) -> dict[str, Any]:
    """Removed sections (warned), data_types.grad_accum_dtype against the engine's rule, sequence_parallel_size."""
    _removed(raw, origin, warnings)
    _instrumentation(raw, origin, warnings)
    accum = _grad_accum_dtype(raw, origin, fields)
    if accum:
        src["grad_accum_dtype"] = Source(SourceKind.CONFIG_FILE, f"{origin} data_types.grad_accum_dtype")
    return {**accum, **_sequence_parallel(raw, origin, src)}


def offload_rules(raw: dict[str, Any], fields: dict[str, Any], origin: str, warnings: list[str]) -> None:
    """What the ZeRO optimizers do with an offload section once the stage is known: NVMe at stage 3 needs nvme_path
    (stage3.py / partitioned_param_swapper.py join it into the swap folder, a TypeError when missing); ZeRO-1/2
    keep an offloaded optimizer in CPU memory whatever the device (stage_1_and_2.py cpu_offload); a ratio below 1
    (partial offload) leaves part of the optimizer on the GPU."""
    zero = raw.get("zero_optimization") if isinstance(raw.get("zero_optimization"), dict) else {}
    for key in ("offload_optimizer", "offload_param"):
        section = zero.get(key) if isinstance(zero.get(key), dict) else {}
        if fields[key] == "nvme" and fields["zero_stage"] == 3 and not section.get("nvme_path"):
            raise ConfigError(f"{origin} zero_optimization.{key} offloads to nvme without nvme_path; DeepSpeed's ZeRO-3 "
                              "builds its swap folder from nvme_path and fails at deepspeed.initialize. Add \"nvme_path\": "
                              "\"/local_nvme\" (a fast local disk) or use \"device\": \"cpu\".")
    if fields["offload_optimizer"] == "nvme" and fields["zero_stage"] in (1, 2):
        warnings.append(f"{origin} offload_optimizer device nvme at ZeRO stage {fields['zero_stage']}: DeepSpeed's ZeRO-1/2 "
                        "optimizer offloads to CPU memory (stage_1_and_2.py), priced as cpu")
        fields["offload_optimizer"] = "cpu"
    optimizer = zero.get("offload_optimizer") if isinstance(zero.get("offload_optimizer"), dict) else {}
    if "super_offload" in optimizer and ds_bool(optimizer["super_offload"], "offload_optimizer.super_offload", origin) \
            and fields["zero_stage"] == 3:  # engine.py: SuperOffloadOptimizer_Stage3 replaces the ZeRO-3 optimizer
        warnings.append(f"{origin} offload_optimizer.super_offload: SuperOffload's ZeRO-3 optimizer (the CPU Adam step "
                        "overlapped with the backward, built for Grace Hopper superchips) is not modelled; priced as "
                        "ZeRO-Offload's CPU optimizer step after the backward")
    ratio = offload_ratio(zero.get("offload_optimizer"))
    if ratio < 1.0 and fields["zero_stage"] != 3:
        raise ConfigError(f"{origin} zero_optimization.offload_optimizer.ratio {ratio} at ZeRO stage {fields['zero_stage']}: "
                          "DeepSpeedZeroConfig asserts 'Partial offloading only supported for ZeRO Stage 3.' Use stage 3 or "
                          "drop the ratio.")


def grad_norm_rules(raw: dict[str, Any], fields: dict[str, Any], origin: str) -> None:
    """zero_optimization.compute_grad_norm false (DeepSpeed 0.19.8): DeepSpeedZeroConfig allows it at stage 1 or 2
    only (compute_grad_norm_valid), stage_1_and_2.py needs no optimizer offload, no ZenFlow and gradient_clipping 0
    (a Trainer's "auto" is filled from --max_grad_norm later and not checked here), and engine.py
    _do_optimizer_sanity_check refuses the ZeRO-1 BF16 optimizer (bf16 with fp32 accumulation, no CPU offload)."""
    zero = raw.get("zero_optimization") if isinstance(raw.get("zero_optimization"), dict) else {}
    if "compute_grad_norm" not in zero or ds_bool(zero["compute_grad_norm"], "zero_optimization.compute_grad_norm", origin):
        return
    stage, clip = fields["zero_stage"], fields.get("gradient_clipping", 0.0)
    where = f"{origin} zero_optimization.compute_grad_norm false"
    if stage not in (1, 2):
        raise ConfigError(f"{where} at ZeRO stage {stage}: DeepSpeedZeroConfig raises 'compute_grad_norm=false is "
                          "supported only with ZeRO Stage 1 or 2'. Use stage 1 or 2, or drop the key.")
    broken = [(fields["offload_optimizer"] != "none", "offload_optimizer", "does not support optimizer offload"),
              (zero.get("zenflow") is not None, "zenflow", "does not support ZenFlow")]
    for bad, key, why in broken:
        if bad:
            raise ConfigError(f"{where} with zero_optimization.{key}: DeepSpeed's ZeRO-1/2 optimizer raises "
                              f"'zero_optimization.compute_grad_norm=false {why}'. Drop one of them.")
    if isinstance(clip, (int, float)) and clip > 0:
        raise ConfigError(f"{where} with gradient_clipping {clip}: DeepSpeed's ZeRO-1/2 optimizer raises "
                          "'zero_optimization.compute_grad_norm=false requires gradient_clipping=0'. Set gradient_clipping "
                          "to 0 or drop the key.")
    if stage == 1 and fields["bf16"] is True and fields.get("grad_accum_dtype") == "fp32" and fields["offload_optimizer"] == "none":
        raise ConfigError(f"{where} with bf16, ZeRO stage 1 and data_types.grad_accum_dtype fp32 (the BF16 optimizer): "
                          "DeepSpeed's engine raises 'zero_optimization.compute_grad_norm=false does not support ZeRO Stage "
                          "1 with BF16 parameters and FP32 gradient accumulation'. Drop one of them.")


ZEROPP_KEYS = ("zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients")
"""ZeRO++ (Wang et al. 2023, arXiv:2306.10209): read by stage3.py / partition_parameters.py only."""


def zeropp_rules(fields: dict[str, Any], origin: str, warnings: list[str]) -> None:
    """ZeRO++ lives in DeepSpeed's stage-3 code (stage3.py, partition_parameters.py): stages 0-2 ignore it."""
    given = [key for key in ZEROPP_KEYS if fields.get(key) is True or (key == "zero_hpz_partition_size"
                                                                         and fields.get(key, 1) > 1)]
    if given and fields["zero_stage"] != 3:
        warnings.append(f"{origin} zero_optimization.{', '.join(given)}: ZeRO++ works at ZeRO stage 3 only; DeepSpeed "
                        f"ignores it at stage {fields['zero_stage']} (not priced)")
        for key in given:
            fields[key] = 1 if key == "zero_hpz_partition_size" else False


def zeropp_settings(zero: dict[str, Any], stage: Any, origin: str, src: dict[str, Source]) -> dict[str, Any]:
    """ZeRO++ switches, sub_group_size and offload_optimizer.ratio as DeepSpeedZeroConfig reads them ("auto" is
    dropped: the default); check_zero_section has already refused malformed values."""
    out: dict[str, Any] = {}
    hpz = zero.get("zero_hpz_partition_size")
    if isinstance(hpz, (int, float, str)) and not isinstance(hpz, bool) and hpz != AUTO:
        out["zero_hpz_partition_size"] = max(1, int(hpz))
    for key in ("zero_quantized_weights", "zero_quantized_gradients"):
        if zero.get(key, AUTO) != AUTO:
            out[key] = ds_bool(zero[key], f"zero_optimization.{key}", origin)
    size = zero.get("sub_group_size")
    if isinstance(size, (int, float, str)) and not isinstance(size, bool) and size != AUTO:
        out["sub_group_size"] = max(1, int(size))
    section = zero.get("offload_optimizer")
    if isinstance(section, dict) and "ratio" in section:
        ratio = offload_ratio(section)
        if isinstance(ratio, (int, float)) and not isinstance(ratio, bool):
            out["offload_optimizer_ratio"] = float(ratio)
    scatter = zero.get("reduce_scatter", True)
    if out.get("zero_quantized_gradients") and stage == 3 and scatter != AUTO and \
            not ds_bool(scatter, "zero_optimization.reduce_scatter", origin):
        raise ConfigError(f"{origin} zero_optimization.zero_quantized_gradients with reduce_scatter false: DeepSpeed's "
                          "ZeRO-3 asserts 'when enable all_to_all_reduce, reduce_scatter should also be enabled' "
                          "(stage3.py). Drop reduce_scatter: false or zero_quantized_gradients.")
    for key in (*ZEROPP_KEYS, "sub_group_size"):
        if key in out:
            src[key] = Source(SourceKind.CONFIG_FILE, f"{origin} zero_optimization.{key}")
    if "offload_optimizer_ratio" in out:
        src["offload_optimizer_ratio"] = Source(SourceKind.CONFIG_FILE, f"{origin} zero_optimization.offload_optimizer.ratio")
    return out

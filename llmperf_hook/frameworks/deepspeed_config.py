"""DeepSpeed config JSON -> DsSettings, and DeepSpeed's batch triad.

Read at the edge (`read_ds_config(path) -> dict`, deepspeed_config_file.py), parse separately
(`parse_ds_config(raw, origin)`).
Defaults and rules from deepspeed/runtime/config.py and zero/config.py: ZeRO stage 0, contiguous_gradients
True, overlap_comm True only at stage 3, reduce/allgather bucket 5e8, stage3_prefetch_bucket_size 5e7,
stage3_max_live_parameters 1e9, gradient_clipping 0; fp16 and bf16 cannot both be enabled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from llmperf_hook.errors import ConfigError
# read at the edge (deepspeed_config_file.py), re-exported here: callers read and parse through this module
from llmperf_hook.frameworks.deepspeed_config_file import (encode_inline_ds_config, inline_ds_config_form,  # noqa: F401
                                                          read_ds_config, strip_json_comments)
from llmperf_hook.frameworks.deepspeed_engine_rules import (check_top_level, grad_norm_rules, offload_rules,
                                                           zeropp_rules, zeropp_settings)
from llmperf_hook.frameworks.deepspeed_nvme import (nvme_warnings, optimizer_buffer_count, param_buffer_count,
                                                  param_buffer_elems, param_max_in_cpu_elems)
from llmperf_hook.frameworks.deepspeed_optimizer import client_optimizer_settings, optimizer_settings
from llmperf_hook.frameworks.deepspeed_release import TODAYS_RELEASE, JobRelease
from llmperf_hook.frameworks.deepspeed_schema import (STAGE3_ALIASES, check_sections, check_zero_section,
                                                       precision_section)
from llmperf_hook.frameworks.deepspeed_step_keys import master_weight_rules, memory_efficient_linear, step_key_warnings
from llmperf_hook.frameworks.deepspeed_values import ds_bool, pydantic_int
from llmperf_hook.frameworks.ds_checkpointing import section_keys_set, section_warnings
from llmperf_hook.provenance import Source, SourceKind

AUTO = "auto"
# ZeRO keys that change memory or communication but that llmperf does not model, with DeepSpeed's defaults
# (sub_group_size only sets how a partial offload splits the optimizer; its step-time buffers are not modelled).
_ZERO_NOT_MODELLED: dict[str, Any] = {"sub_group_size": 1e9, "round_robin_gradients": False}


@dataclass(frozen=True)
class DsSettings:
    """What a ds_config says, before HF 'auto' values and the batch triad are resolved."""

    path: str
    train_batch_size: int | str | None = None
    micro_batch_size: int | str | None = None
    gradient_accumulation_steps: int | str | None = None
    zero_stage: int = 0
    offload_optimizer: str = "none"
    offload_param: str = "none"
    overlap_comm: bool | None = None
    """None = DeepSpeed's default (True at stage 3, else False)."""
    contiguous_gradients: bool = True
    reduce_scatter: bool = True
    """zero_optimization.reduce_scatter (false: ZeRO-1/2 all-reduce the whole gradient bucket)."""
    multi_rank_bucket_allreduce: bool = True
    """zero_optimization.use_multi_rank_bucket_allreduce (DeepSpeed >= 0.12.4; true: the reduce-scatter path also
    all-reduces each bucket, allreduce_and_scatter)."""
    reduce_bucket_size: int | str | None = None
    allgather_bucket_size: int | str | None = None
    stage3_prefetch_bucket_size: int | str | None = None
    stage3_max_live_parameters: int | str | None = None
    stage3_max_reuse_distance: int | str | None = None
    """stage3_max_reuse_distance (or its field name max_reuse_distance, as for the other stage3_ keys); None =
    DeepSpeed's 1e9."""
    fp16: bool | str = False
    bf16: bool | str = False
    gradient_clipping: float | str = 0.0
    torch_autocast: str | None = None
    """ds_config torch_autocast (DeepSpeed >= 0.17) or apex `amp`: the autocast compute dtype ("bf16" | "fp16"),
    None = off."""
    pipeline_stages: int | None = None
    pipeline_checkpoint_interval: int = 0
    """DeepSpeed pipeline engine's activation_checkpoint_interval (layers per checkpoint; 0 = none)."""
    pipe_partitioned: bool | None = None
    """pipeline.pipe_partitioned as the file gives it (truthiness, as Megatron-DeepSpeed reads it); None: absent, which
    DeepSpeed takes as true (runtime/config.py get_pipeline_config) and Megatron-DeepSpeed's MoE check as false. At
    TP > 1 the PipelineEngine then sends each stage's activation in 1/TP slices (pipe/engine.py is_pipe_partitioned)."""
    grad_partitioned: bool | None = None
    """pipeline.grad_partitioned alike: the gradients sent back in 1/TP slices (is_grad_partitioned)."""
    zero_hpz_partition_size: int = 1
    """ZeRO++ hierarchical partitioning (hpZ): ranks holding a secondary copy of the ZeRO-3 weights; 1 = off."""
    zero_quantized_weights: bool = False
    """ZeRO++ qwZ: int8 parameter all-gathers (stage 3)."""
    zero_quantized_gradients: bool = False
    """ZeRO++ qgZ: int4 hierarchical all-to-all gradient reduction (stage 3)."""
    sub_group_size: int = 1_000_000_000
    """zero_optimization.sub_group_size (elements per optimizer sub-group; DeepSpeed default 1e9)."""
    offload_optimizer_ratio: float = 1.0
    """offload_optimizer.ratio: share of the ZeRO-3 optimizer offloaded (1.0 = all; partial offload below)."""
    communication_data_type: str | None = None
    """Top-level communication_data_type ("fp16" | "bf16" | "fp32"); None = DeepSpeed's default (the model's)."""
    grad_accum_dtype: str | None = None
    """data_types.grad_accum_dtype, canonical ("fp32" | "bf16" | "fp16"); None = the model's dtype."""
    optimizer_name: str | None = None
    """"adam" | "sgd" (two or one fp32 states) from the optimizer section DeepSpeed builds; None = no section."""
    torch_optimizer_impl: str = ""
    """"foreach" when the Adam that steps the fp32 partition is torch.optim's (a client torch.optim.Adam / AdamW, or
    the section's torch_adam: true), "" for DeepSpeed's FusedAdam (deepspeed_optimizer.py)."""
    torch_weight_decay: str = "decoupled"
    """That torch Adam's weight-decay pass ("decoupled" | "l2" | "none", frameworks/torch_weight_decay.py)."""
    nvme_param_buffer_elems: int = 100_000_000
    """offload_param.buffer_size: elements of each pinned NVMe swap buffer (DeepSpeed's 1e8)."""
    nvme_param_max_in_cpu_elems: int = 1_000_000_000
    """offload_param.max_in_cpu: partition elements kept in host memory under an NVMe offload (DeepSpeed's 1e9)."""
    nvme_param_buffer_count: int = 5
    """offload_param.buffer_count: pinned NVMe swap buffers (DeepSpeed's 5)."""
    nvme_optimizer_buffer_count: int = 4
    """offload_optimizer.buffer_count: pinned fp32 optimizer swap buffers (DeepSpeed's 4)."""
    offload_optimizer_pin_memory: bool | None = None
    """offload_optimizer.pin_memory; None = the release's default (True since v0.19.5, 7dfa67aea; False before)."""
    offload_param_pin_memory: bool | None = None
    """offload_param.pin_memory; None = the release's default, likewise."""
    sequence_parallel_size: int = 1
    """Top-level sequence_parallel_size (DeepSpeed-Ulysses for Hugging Face / plain scripts): DeepSpeedConfig divides
    the batch triad's world by it; 1 = off."""
    memory_efficient_linear: bool = True
    """zero_optimization.memory_efficient_linear: ZeRO-3 replaces F.linear by zero3_linear_wrap (deepspeed_release.
    zero3_splits_bias)."""
    sources: Mapping[str, Source] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    checkpointing_keys: tuple[str, ...] = ()
    """activation_checkpointing keys DeepSpeed reads as set away from its default (ds_checkpointing.section_keys_set)."""
    checkpointing_warnings: tuple[str, ...] = ()
    """Warnings about that section for a script that configures deepspeed.checkpointing from this file itself; not
    in `warnings`, because Megatron-DeepSpeed's flags override the whole section (ds_checkpointing.py)."""


def _num(value: Any, key: str, origin: str) -> int | str | None:
    if value is None or value == AUTO:
        return value
    if key.startswith("zero_optimization.") and (number := pydantic_int(value)) is not None:
        return number  # DeepSpeedZeroConfig's lax int ("2", "+2", "2.0"); the batch keys are read raw and are not
    # NaN / Infinity (json.load and hjson both read them) have no int(): DeepSpeed fails on them at initialize.
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or int(value) != value):
        raise ConfigError(f"{origin} key {key} must be an integer or \"auto\", got {value!r}.")
    return int(value)


def _device(section: Any) -> str:
    if isinstance(section, dict):
        device = str(section.get("device", "none")).lower()
        return device if device in ("cpu", "nvme") else "none"
    return "none"


_bool = ds_bool


def _offload_pin_memory(raw: dict[str, Any], section: str, origin: str) -> bool | None:
    """zero_optimization.<section>.pin_memory (DeepSpeedZeroOffload*Config); None where the ds_config leaves it to
    the release's default (deepspeed_release.pinned_offload_release)."""
    zero = raw.get("zero_optimization") if isinstance(raw.get("zero_optimization"), dict) else {}
    offload = zero.get(section) if isinstance(zero.get(section), dict) else {}
    if "pin_memory" not in offload:
        return None
    return _bool(offload["pin_memory"], f"zero_optimization.{section}.pin_memory", origin)


def _deprecated_on(zero: dict[str, Any], key: str) -> bool:
    return zero.get(key) not in (None, AUTO) and ds_bool(zero[key], f"zero_optimization.{key}", "")


def _enabled(section: Any, key: str, origin: str) -> bool | str:
    if isinstance(section, dict):
        value = section.get("enabled", False)
        return value if value == AUTO else _bool(value, f"{key}.enabled", origin)
    return False


def _zero(raw: dict[str, Any], origin: str, src: dict[str, Source], warnings: list[str],
          release: JobRelease) -> dict[str, Any]:
    zero = raw.get("zero_optimization", {})
    if isinstance(zero, bool):  # very old configs: "zero_optimization": true means stage 1
        zero = {"stage": 1} if zero else {}
    if not isinstance(zero, dict):
        hint = " (a YAML-style nested section reads as a string in DeepSpeed's hjson; write the config as JSON)" \
            if isinstance(zero, str) and ":" in zero else ""
        raise ConfigError(f"{origin} zero_optimization must be an object, got {zero!r}{hint}; DeepSpeed's get_zero_config "
                          "builds DeepSpeedZeroConfig(**zero_optimization) and fails on anything else. Write "
                          "\"zero_optimization\": {\"stage\": N} (false or true, DeepSpeed's old spellings, also work).")
    warnings.extend(check_zero_section(zero, origin, release))
    stage = zero.get("stage", 0)  # pydantic's lax ZeroStageEnum reads true / false as 1 / 0
    out: dict[str, Any] = {"zero_stage": _num(int(stage) if isinstance(stage, bool) else stage, "zero_optimization.stage", origin)}
    if out["zero_stage"] not in (0, 1, 2, 3, AUTO):
        raise ConfigError(f"{origin} zero_optimization.stage is {out['zero_stage']}; DeepSpeed's ZeroStageEnum accepts 0, 1, 2 "
                          "or 3. Pick one of them.")
    # the deprecated cpu_offload / cpu_offload_param (pydantic bools, checked above; "auto" dropped) set a CPU offload
    out["offload_optimizer"] = "cpu" if _deprecated_on(zero, "cpu_offload") else _device(zero.get("offload_optimizer"))
    out["offload_param"] = "cpu" if _deprecated_on(zero, "cpu_offload_param") else _device(zero.get("offload_param"))
    # DeepSpeedConfigModel drops "auto" values before validation: the key takes DeepSpeed's default.
    if zero.get("overlap_comm", AUTO) != AUTO:
        out["overlap_comm"] = _bool(zero["overlap_comm"], "zero_optimization.overlap_comm", origin)
    scatter, multi_rank = (zero.get(key, True) for key in ("reduce_scatter", "use_multi_rank_bucket_allreduce"))
    out["reduce_scatter"] = _bool(True if scatter == AUTO else scatter, "zero_optimization.reduce_scatter", origin)
    out["multi_rank_bucket_allreduce"] = _bool(True if multi_rank == AUTO else multi_rank,
                                               "zero_optimization.use_multi_rank_bucket_allreduce", origin)
    contiguous = zero.get("contiguous_gradients", True)
    out["contiguous_gradients"] = _bool(True if contiguous == AUTO else contiguous, "zero_optimization.contiguous_gradients", origin)
    for key in ("zero_stage", "offload_optimizer", "offload_param", *(k for k in out if k in zero)):
        src[key] = Source(SourceKind.CONFIG_FILE, f"{origin} zero_optimization.{'stage' if key == 'zero_stage' else key}")
    for key in ("reduce_bucket_size", "allgather_bucket_size", *STAGE3_ALIASES):
        name = key if key in zero else STAGE3_ALIASES.get(key, key)  # either spelling (check_zero_section refused both)
        if name in zero:
            out[key] = _num(zero[name], f"zero_optimization.{name}", origin)
            src[key] = Source(SourceKind.CONFIG_FILE, f"{origin} zero_optimization.{name}")
    out.update(zeropp_settings(zero, out["zero_stage"], origin, src))
    out["memory_efficient_linear"] = memory_efficient_linear(raw, origin)
    for key, default in _ZERO_NOT_MODELLED.items():
        if key in zero and zero[key] not in (AUTO, default):
            what = ("only its split of a partial offload (offload_optimizer.ratio) is modelled, not its step buffers"
                    if key == "sub_group_size" else "accepted, not modelled")
            warnings.append(f"{origin} zero_optimization.{key} = {zero[key]} {what}")
    return out


def _batch_and_precision(raw: dict[str, Any], origin: str, src: dict[str, Source]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, dest in (("train_batch_size", "train_batch_size"), ("train_micro_batch_size_per_gpu", "micro_batch_size"),
                      ("gradient_accumulation_steps", "gradient_accumulation_steps")):
        if key in raw:
            out[dest] = _num(raw[key], key, origin)
            src[dest] = Source(SourceKind.CONFIG_FILE, f"{origin} {key}")
    out["fp16"] = _enabled(raw.get("fp16"), "fp16", origin)
    out["bf16"] = _enabled(precision_section(raw, "bf16"), "bf16", origin)
    if out["fp16"] is True and out["bf16"] is True:
        raise ConfigError(f"{origin} enables both fp16 and bf16; DeepSpeed rejects it ('bfloat16 and fp16 modes cannot be "
                          "simultaneously enabled'). Keep one.")
    for key in ("fp16", "bf16"):  # an explicit "enabled": false too: the Trainer's fill_match holds it to --fp16/--bf16
        if out[key] or (isinstance(raw.get(key), dict) and "enabled" in raw[key]):
            src[key] = Source(SourceKind.CONFIG_FILE, f"{origin} {key}.enabled")
    out["torch_autocast"] = _autocast(raw.get("torch_autocast"), origin)
    if out["torch_autocast"]:
        src["torch_autocast"] = Source(SourceKind.CONFIG_FILE, f"{origin} torch_autocast")
    elif isinstance(raw.get("amp"), dict) and _bool(raw["amp"].get("enabled", False), "amp.enabled", origin):
        out["torch_autocast"] = "fp16"  # NVIDIA apex amp (deepspeed/runtime/engine.py amp.initialize): fp16 compute
        src["torch_autocast"] = Source(SourceKind.CONFIG_FILE, f"{origin} amp.enabled")
    if "gradient_clipping" in raw:
        out["gradient_clipping"] = _clip(raw["gradient_clipping"], origin)
        src["gradient_clipping"] = Source(SourceKind.CONFIG_FILE, f"{origin} gradient_clipping")
    return out


# deepspeed/runtime/config.py get_torch_autocast_dtype -> DtypeEnum(value), matched exactly (case-sensitive); the
# engine passes the dtype to torch.autocast, which disables itself for any dtype but bf16 / fp16 on CUDA ('In CUDA
# autocast, but the target dtype is not supported. Disabling autocast.', torch/amp/autocast_mode.py): fp32 and int8
# run in fp32. torch.autocast's CUDA default (no dtype) is fp16.
_AUTOCAST_DTYPES = {"bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16", "fp16": "fp16", "float16": "fp16",
                    "half": "fp16", "torch.float16": "fp16", "fp32": "fp32", "float32": "fp32", "float": "fp32",
                    "torch.float32": "fp32", "int8": "fp32", "torch.int8": "fp32"}


def _autocast(section: Any, origin: str) -> str | None:
    if not isinstance(section, dict) or not _bool(section.get("enabled", False), "torch_autocast.enabled", origin):
        return None
    dtype = section.get("dtype")
    if dtype is None:
        return "fp16"
    if not isinstance(dtype, str) or dtype not in _AUTOCAST_DTYPES:
        raise ConfigError(f"{origin} torch_autocast.dtype {dtype!r} is not a dtype DeepSpeed knows (DtypeEnum raises "
                          f"\"{dtype!r} is not a valid DtypeEnum\"; the names are case-sensitive); use \"bfloat16\" or "
                          "\"float16\".")
    return _AUTOCAST_DTYPES[dtype]


def _clip(value: Any, origin: str) -> float | str:
    if value == AUTO:
        return value
    if value is None:
        return 0.0
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ConfigError(f"{origin} gradient_clipping must be a number, got {value!r}; DeepSpeed keeps the raw value and its "
                      "engine fails comparing it with 0.0 at the first step (TypeError). Write it as a JSON number, e.g. 1.0.")


def _other_sections(raw: dict[str, Any], origin: str, src: dict[str, Source], warnings: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pipe = raw.get("pipeline")
    if isinstance(pipe, dict) and isinstance(pipe.get("stages"), int) and not isinstance(pipe.get("stages"), bool):
        out["pipeline_stages"] = pipe["stages"]
        src["pipeline_stages"] = Source(SourceKind.CONFIG_FILE, f"{origin} pipeline.stages")
    if isinstance(pipe, dict) and isinstance(pipe.get("activation_checkpoint_interval"), int) and pipe["activation_checkpoint_interval"] > 0:
        out["pipeline_checkpoint_interval"] = pipe["activation_checkpoint_interval"]
        src["recompute"] = Source(SourceKind.CONFIG_FILE, f"{origin} pipeline.activation_checkpoint_interval")
    for key in ("pipe_partitioned", "grad_partitioned"):
        if isinstance(pipe, dict) and key in pipe:
            out[key] = bool(pipe[key])
    for key in ("data_efficiency",):
        if raw.get(key) not in (None, False, {}):
            warnings.append(f"{origin} {key} accepted, not modelled")
    if isinstance(raw.get("communication_data_type"), str):  # check_sections refused anything but fp16/bf16/fp32
        out["communication_data_type"] = raw["communication_data_type"].lower()
        src["communication_data_type"] = Source(SourceKind.CONFIG_FILE, f"{origin} communication_data_type")
    return out


def parse_ds_config(raw: dict[str, Any], origin: str, client_optimizer: tuple[str, ...] | None = None,
                    release: JobRelease = TODAYS_RELEASE) -> DsSettings:
    """Typed settings from a ds_config dict; `origin` names the file in messages and sources. `client_optimizer`:
    (class name or "", where) of the optimizer the script passes to deepspeed.initialize (Megatron-DeepSpeed's own,
    deepspeed_optimizer.script_client_optimizer), so the optimizer section is not built. `release`: the job's
    DeepSpeed (deepspeed_release.schema_release), for the checks that came or went with a release."""
    src: dict[str, Source] = {}
    warnings = check_sections(raw, origin, release)
    fields = {**_zero(raw, origin, src, warnings, release), **_batch_and_precision(raw, origin, src),
              **_other_sections(raw, origin, src, warnings)}
    fields.update(check_top_level(raw, origin, fields, src, warnings, release))
    warnings.extend(step_key_warnings(raw, origin))
    if fields["torch_autocast"] in ("bf16", "fp16") and fields["fp16"] is not True and fields["bf16"] is not True:
        warnings.append(f"{origin} {'torch_autocast' if 'torch_autocast' in raw else 'amp'} computes in "
                        f"{fields['torch_autocast']} on fp32 parameters and gradients: "
                        f"priced as {fields['torch_autocast']} mixed precision (2-byte weights)")
    if fields["zero_stage"] == AUTO:  # dropped by DeepSpeedZeroConfig: stage 0 (the HF Trainer / Accelerate fill it first)
        warnings.append(f"{origin} zero_optimization.stage \"auto\": DeepSpeed drops \"auto\" values, so ZeRO is off "
                        "(stage 0); only the Hugging Face Trainer / Accelerate fill it (stage 2 by default)")
        fields["zero_stage"] = 0
    if fields["offload_optimizer"] != "none" and fields["zero_stage"] == 0:
        # engine.py builds the ZeRO optimizer (the only one that offloads) only when zero_optimization_stage > 0.
        warnings.append(f"{origin} offload_optimizer needs ZeRO stage 1-3; DeepSpeed ignores it at stage 0")
        fields["offload_optimizer"] = "none"
    offload_rules(raw, fields, origin, warnings)
    if client_optimizer is None:
        fields.update(optimizer_settings(raw, fields["zero_stage"], origin, src, warnings))
    else:
        fields.update(client_optimizer_settings(client_optimizer, raw, fields, origin, src, warnings))
    warnings.extend(nvme_warnings(raw, fields, origin))
    fields["nvme_param_buffer_elems"] = param_buffer_elems(raw)
    fields["nvme_param_max_in_cpu_elems"] = param_max_in_cpu_elems(raw)
    fields["nvme_param_buffer_count"] = param_buffer_count(raw)
    fields["nvme_optimizer_buffer_count"] = optimizer_buffer_count(raw)
    for section in ("offload_optimizer", "offload_param"):
        fields[f"{section}_pin_memory"] = _offload_pin_memory(raw, section, origin)
    warnings.extend(master_weight_rules(raw, fields["zero_stage"], origin))
    grad_norm_rules(raw, fields, origin)
    zeropp_rules(fields, origin, warnings)
    if fields["offload_param"] != "none" and fields["zero_stage"] != 3:
        warnings.append(f"{origin} offload_param needs ZeRO stage 3; DeepSpeed ignores it at stage {fields['zero_stage']}")
        fields["offload_param"] = "none"
    return DsSettings(path=origin, sources=src, warnings=tuple(warnings), checkpointing_keys=section_keys_set(raw),
                      checkpointing_warnings=tuple(section_warnings(raw, origin)), **fields)


def resolve_ds_batch(train: int | None, micro: int | None, gas: int | None, dp: int, origin: str) -> tuple[int, int, int]:
    """DeepSpeedConfig._set_batch_related_parameters then _batch_assertion; dp = DeepSpeed's data-parallel world."""
    given_micro, given_gas = micro is not None, gas is not None
    for name, value in (("train_batch_size", train), ("train_micro_batch_size_per_gpu", micro), ("gradient_accumulation_steps", gas)):
        if value is not None and value <= 0:
            raise ConfigError(f"{origin}: {name} is {value}; DeepSpeed requires it > 0 (it divides by it, then asserts). "
                              "Give a positive value or leave the key out.")
    if train is not None and micro is not None and gas is None:
        gas = train // micro // dp
    elif train is not None and gas is not None and micro is None:
        micro = train // dp // gas
    elif micro is not None and gas is not None and train is None:
        train = micro * gas * dp
    elif train is not None and micro is None and gas is None:
        micro, gas = train // dp, 1
    elif micro is not None and train is None and gas is None:
        train, gas = micro * dp, 1
    elif train is None or micro is None or gas is None:
        raise ConfigError(f"{origin}: either train_batch_size or train_micro_batch_size_per_gpu needs to be provided "
                          "(DeepSpeed); add one of them to the config.")
    assert train is not None and micro is not None and gas is not None
    for name, value in (("train_batch_size", train), ("train_micro_batch_size_per_gpu", micro), ("gradient_accumulation_steps", gas)):
        if value <= 0:
            raise ConfigError(f"{origin}: {name} resolves to {value} with data-parallel size {dp}; DeepSpeed requires it > 0 "
                              f"(train_batch_size must be at least micro x accumulation x DP = {max(micro, 1)} x {max(gas, 1)} x {dp}).")
    if train != micro * gas * dp:
        # The quantum train_batch_size must be a multiple of: the given per-step keys times DP.
        step = (micro if given_micro else 1) * (gas if given_gas else 1) * dp
        raise ConfigError(
            f"{origin}: train_batch_size {train} != train_micro_batch_size_per_gpu {micro} x gradient_accumulation_steps "
            f"{gas} x data-parallel size {dp} = {micro * gas * dp} (DeepSpeed _batch_assertion; the keys not given are "
            f"derived from the others). Make train_batch_size a multiple of {step} or fix the micro batch / accumulation "
            "steps.")
    return train, micro, gas

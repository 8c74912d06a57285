"""What DeepSpeed's engine and ZeRO optimizers refuse, ignore or warn about once the ZeRO stage is known.

deepspeed_schema.py checks each section as its pydantic model does; the rules here join sections: removed top-level
sections, the gradient-accumulation dtype against the model's (engine.py), offload against the stage
(stage3.py, stage_1_and_2.py), compute_grad_norm false (DeepSpeed 0.19.8), and ZeRO++ switches that only stage 3
reads. They run after deepspeed_config.py has resolved the stage and precision into `fields`.
"""

from __future__ import annotations

from typing import Any

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.deepspeed_release import (ALLREDUCE_OP_VERSION, REMOVED_FEATURES_VERSION, TODAYS_RELEASE,
                                                       JobRelease, Version)
from llmperf_hook.frameworks.deepspeed_elasticity import refuse_elasticity
from llmperf_hook.frameworks.deepspeed_schema import offload_ratio
from llmperf_hook.frameworks.deepspeed_values import AUTO, ds_bool
from llmperf_hook.launch.sizing import DEEPSPEED_VERSION_ENV
from llmperf_hook.provenance import Source, SourceKind

REMOVED_KEYS = ("nebula", "compression_training", "amp", "quantize_training", "sparse_gradients", "eigenvalue",
                "sparse_attention", "elasticity", "graph_harvesting", "curriculum_learning", "progressive_layer_drop")
"""Top-level sections DeepSpeed 0.19.8 refuses (config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS, deepspeedai/DeepSpeed#8489);
0.19.6 and earlier accept them (deepspeed_release.REMOVED_FEATURES_VERSION)."""
REMOVED_ZERO_KEYS = ("mics_shard_size", "mics_hierarchical_params_gather", "zeropp_loco_param")

# config.py DtypeEnum spellings (matched exactly); int8 is a member but no training dtype pairs with it.
_DTYPES = {"fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16", "fp32": "fp32",
           "float32": "fp32", "float": "fp32", "torch.float32": "fp32", "bf16": "bf16", "bfloat16": "bf16",
           "torch.bfloat16": "bf16", "int8": "int8", "torch.int8": "int8"}


def _removed(raw: dict[str, Any], origin: str, warnings: list[str], release: JobRelease) -> None:
    """Removed feature sections: refused from REMOVED_FEATURES_VERSION on (_reject_removed_config_keys raises a
    DeepSpeedConfigError naming the feature), accepted and unmodelled before. Refused only for a release the user
    states: years of public scripts carry these sections (Megatron-DeepSpeed's examples_deepspeed write
    curriculum_learning), and the DeepSpeed installed beside llmperf is a guess at the one the job runs."""
    zero = raw.get("zero_optimization") if isinstance(raw.get("zero_optimization"), dict) else {}
    gone = [key for key in REMOVED_KEYS if key in raw] + [f"zero_optimization.{key}" for key in REMOVED_ZERO_KEYS
                                                         if key in zero]
    if gone and release.stated and release.has(REMOVED_FEATURES_VERSION):
        raise ConfigError(f"{origin} has {', '.join(gone)}: the feature was removed (deepspeedai/DeepSpeed#8489) and "
                          "DeepSpeedConfig refuses the section from 0.19.8 on (_reject_removed_config_keys, "
                          f"DeepSpeedConfigError); the job runs {release.named()}. Remove the section, or set "
                          f"{DEEPSPEED_VERSION_ENV} to the older release the job really runs.")
    for key in gone:
        warnings.append(f"{origin} {key} accepted, not modelled; DeepSpeed 0.19.8 and later refuse the config (feature "
                        f"removed, deepspeedai/DeepSpeed#8489), earlier releases accept it (this job: {release.named()}; "
                        f"set {DEEPSPEED_VERSION_ENV} to have it checked)")


GRAD_ACCUM_DTYPE_VERSION = (0, 7, 6)
"""First release that reads data_types.grad_accum_dtype (21c280296, #2512); older ones ignore the section."""
ZERO_ACCUM_MIX_VERSION = (0, 10, 1)
"""First release whose ZeRO optimizers accumulate in a dtype other than the model's (8afcda2ac, #2847: stage3.py /
stage_1_and_2.py gradient_accumulation_dtype). v0.7.6-v0.10.0's _do_optimizer_sanity_check raises 'Model data type and
gradient accumulation data type must be equal to use ZeRO', except bf16 + fp32 at stage 1 from v0.8.1 (BF16_Optimizer)."""
BF16_ZERO1_VERSION = (0, 8, 1)
"""First release whose _do_optimizer_sanity_check returns BFLOAT16 (BF16_Optimizer) for bf16 + fp32 accumulation at
ZeRO stage 1 instead of raising (8d87c89e4, #2706)."""
NO_ZERO_BF16_OPTIMIZER_END = (0, 18, 5)
"""First release that refuses bf16 + fp32 accumulation without ZeRO (09885efef, #7790: the BF16_Optimizer branch
removed; 'unsupported mix of model_dtype and grad_accum_dtype'); v0.7.6-v0.18.4 run BF16_Optimizer."""


def _grad_accum_dtype(raw: dict[str, Any], origin: str, fields: dict[str, Any], warnings: list[str],
                      release: JobRelease) -> dict[str, Any]:
    """engine.py get_data_types / _do_optimizer_sanity_check as the job's `release` reads the key: ignored before
    GRAD_ACCUM_DTYPE_VERSION; under ZeRO a dtype other than the model's refused before ZERO_ACCUM_MIX_VERSION (but
    bf16 + fp32 at stage 1); without ZeRO one other than the model's refused (bf16 + fp32 only from
    NO_ZERO_BF16_OPTIMIZER_END on: older releases run BF16_Optimizer, zero0_bf16_accum_dtype). ZeRO-1 with bf16
    and fp32 accumulation runs BF16_Optimizer, which keeps an fp32 gradient per parameter (priced in schedule/memory.py);
    ZeRO-2/3 accumulate their partition in it (memory.py grad_accum_extra_bytes, graph/step_ops.py). The model's own
    dtype is refused only for bf16 without ZeRO, once the engine is known (check_no_zero_bf16_accumulation)."""
    types = raw.get("data_types")
    value = types.get("grad_accum_dtype") if isinstance(types, dict) else None
    if value is None:
        return {}
    if not release.has(GRAD_ACCUM_DTYPE_VERSION):
        warnings.append(f"{origin} data_types.grad_accum_dtype {value!r} ignored: {release.named()} does not read it "
                        "(added in 0.7.6) and accumulates gradients in the model's dtype")
        return {}
    if value not in _DTYPES:  # "auto" too: neither the Hugging Face Trainer nor Accelerate fills this key
        raise ConfigError(f"{origin} data_types.grad_accum_dtype is {value!r}; DeepSpeed's DtypeEnum knows \"fp32\", "
                          "\"bf16\" and \"fp16\" (and their torch spellings) and fails at deepspeed.initialize otherwise.")
    if AUTO in (fields["fp16"], fields["bf16"]):
        return {"grad_accum_dtype": _DTYPES[value]}
    model = "fp16" if fields["fp16"] else "bf16" if fields["bf16"] else "fp32"
    accum, stage = _DTYPES[value], fields["zero_stage"]
    if accum == model:
        return {"grad_accum_dtype": accum}
    if stage == 0:
        _no_zero_mix(origin, value, model, accum, release)
    elif not release.has(ZERO_ACCUM_MIX_VERSION) and not (
            (model, accum, stage) == ("bf16", "fp32", 1) and release.has(BF16_ZERO1_VERSION)):
        raise ConfigError(f"{origin} data_types.grad_accum_dtype {value!r} with {model} training at ZeRO stage {stage}: "
                          f"the job runs {release.named()}, whose engine raises 'Model data type and gradient "
                          "accumulation data type must be equal to use ZeRO' (DeepSpeed 0.10.1 lifted it, 8afcda2ac). "
                          f"Use {model!r}, drop the key, or run DeepSpeed 0.10.1 or later.")
    return {"grad_accum_dtype": accum}


def _no_zero_mix(origin: str, value: str, model: str, accum: str, release: JobRelease) -> None:
    """Without ZeRO: bf16 + fp32 runs BF16_Optimizer before NO_ZERO_BF16_OPTIMIZER_END (priced:
    zero0_bf16_accum_dtype); any other mix is refused."""
    if (model, accum) == ("bf16", "fp32") and not release.has(NO_ZERO_BF16_OPTIMIZER_END):
        return
    mix = (model, accum) == ("bf16", "fp32")
    since = " (for bf16 + fp32 from 0.18.5 on, 09885efef; earlier releases ran BF16_Optimizer)" if mix else ""
    raise ConfigError(f"{origin} data_types.grad_accum_dtype {value!r} with {model} training and ZeRO stage 0: "
                      "DeepSpeed's engine accumulates gradients in the model's dtype without ZeRO and raises "
                      f"'unsupported mix of model_dtype and grad_accum_dtype'{since}; the job runs {release.named()}. "
                      f"Use {model!r}, drop the key, or enable ZeRO (stage 1 with bf16 accumulates in fp32).")


BF16_ACCUM_NO_ZERO_VERSION = (0, 17, 6)
"""First release whose engine accumulates a bf16 model's gradients in bf16 without ZeRO (889f0ead2, #7515 "Enable
non-ZeRO mode": _do_optimizer_sanity_check returns DDP_BFLOAT16). From GRAD_ACCUM_DTYPE_VERSION to 0.17.5 it raises
NotImplementedError('Bfloat16 wrapper must use a gradient accumulation type of fp32, enable ZeRO to use Bfloat16
gradient accumulation') for data_types.grad_accum_dtype bf16 with a bf16 model and ZeRO off (engine.py; without the
key get_data_types picks fp32 for bf16 without ZeRO)."""
BF16_PIPELINE_ACCUM_VERSION = (0, 12, 5)
"""First release whose PipelineEngine takes that combination (ce6070800, #4713: `if self.pipeline_parallelism:` warn
'BF16 gradient accumulation is not safe numerically ...' and return BFLOAT16); other engines still raise."""


ZERO_BF16_DEFAULT_FP32_RELEASES: tuple[Version, Version] = ((0, 7, 6), (0, 7, 7))
"""[first, end) releases whose engine.get_data_types picks fp32 accumulation for every bf16 model when
data_types.grad_accum_dtype is absent (21c280296, #2512), ZeRO or not, so that _do_optimizer_sanity_check raises
NotImplementedError('Model data type and gradient accumulation data type must be equal to use ZeRO') for bf16 under
ZeRO. v0.7.7 (06938835e, #2566 "Support fp32 gradaccum for bf16 model") picks fp32 only without ZeRO."""


def check_bf16_accumulation(accum: str | None, origin: str, zero_stage: int, precision: str, pipeline_engine: bool,
                            release: JobRelease) -> None:
    """The engine's gradient-accumulation dtype checks that need the final stage, precision and engine: bf16 under
    ZeRO without the key (check_zero_bf16_default_accumulation), bf16 without ZeRO (check_no_zero_bf16_accumulation)."""
    check_zero_bf16_default_accumulation(accum, origin, zero_stage, precision, release)
    check_no_zero_bf16_accumulation(accum, origin, zero_stage, precision, pipeline_engine, release)


def check_zero_bf16_default_accumulation(accum: str | None, origin: str, zero_stage: int, precision: str,
                                         release: JobRelease) -> None:
    """bf16 at ZeRO stage 1-3 without data_types.grad_accum_dtype on a release of ZERO_BF16_DEFAULT_FP32_RELEASES:
    refused as its engine refuses it (a key of "bf16" makes both dtypes bf16 and passes)."""
    first, end = ZERO_BF16_DEFAULT_FP32_RELEASES
    if accum is not None or precision != "bf16" or zero_stage == 0 or release.version is None:
        return
    if not first <= release.version < end:
        return
    raise ConfigError(f"{origin} enables bf16 at ZeRO stage {zero_stage} without data_types.grad_accum_dtype: the job "
                      f"runs {release.named()}, whose engine.get_data_types then accumulates a bf16 model's gradients in "
                      "fp32, and _do_optimizer_sanity_check raises NotImplementedError('Model data type and gradient "
                      "accumulation data type must be equal to use ZeRO') (DeepSpeed 0.7.6 only; 0.7.7 keeps bf16 under "
                      "ZeRO, 06938835e). Add \"data_types\": {\"grad_accum_dtype\": \"bf16\"}, or run DeepSpeed "
                      "0.7.7 or later.")


def check_no_zero_bf16_accumulation(accum: str | None, origin: str, zero_stage: int, precision: str,
                                    pipeline_engine: bool, release: JobRelease) -> None:
    """bf16 gradient accumulation of a bf16 model without ZeRO as the job's `release` takes it
    (BF16_ACCUM_NO_ZERO_VERSION, BF16_PIPELINE_ACCUM_VERSION). Checked once the stage, the precision and the engine
    are final (a Megatron-DeepSpeed --zero-stage fills a silent ds_config, its --no-pipeline-parallel picks the
    engine): `accum` is the ds_config's data_types.grad_accum_dtype, `origin` the file."""
    if accum != "bf16" or precision != "bf16" or zero_stage != 0:
        return
    if not release.has(GRAD_ACCUM_DTYPE_VERSION) or release.has(BF16_ACCUM_NO_ZERO_VERSION):
        return
    if pipeline_engine and release.has(BF16_PIPELINE_ACCUM_VERSION):
        return
    engine = "engine (outside its PipelineEngine)" if release.has(BF16_PIPELINE_ACCUM_VERSION) else "engine"
    raise ConfigError(f"{origin} data_types.grad_accum_dtype 'bf16' with bf16 training and ZeRO stage 0: the job runs "
                      f"{release.named()}, whose {engine} raises 'Bfloat16 wrapper must use a gradient accumulation "
                      "type of fp32, enable ZeRO to use Bfloat16 gradient accumulation' (engine.py "
                      "_do_optimizer_sanity_check, 0.7.6-0.17.5; 0.17.6 accepts it, 889f0ead2). Drop the key (bf16 then "
                      "accumulates in fp32), enable ZeRO (stage 1-3), or run DeepSpeed 0.17.6 or later.")


BF16_OPTIMIZER_VERSION: Version = (0, 6, 2)
"""First release with BF16_Optimizer, which every bf16 job without ZeRO runs (56c522386, #1801 "bf16+pipeline
parallelism", engine._configure_optimizer: `elif self.bfloat16_enabled(): _configure_bf16_optimizer`), with fp32
gradients until data_types came (GRAD_ACCUM_DTYPE_VERSION)."""


def zero0_bf16_accum_dtype(accum: str | None, precision: str, release: JobRelease) -> str | None:
    """OptimizerConfig.zero0_bf16_accum_dtype: the gradient-accumulation dtype of a bf16 model without ZeRO as the
    job's release sets it, None where no BF16_Optimizer can run; at any stage (tune moves jobs to stage 0).
    engine.py get_data_types: data_types.grad_accum_dtype, else fp32 for bf16 without ZeRO before 0.17.6 (889f0ead2
    made it the model's); _do_optimizer_sanity_check then picks BFLOAT16 for bf16 + fp32 (0.7.6-0.18.4) and, under
    the PipelineEngine, for bf16 + bf16 (ce6070800, 0.12.5 on, today included: `if model_dtype == torch.bfloat16
    and self.pipeline_parallelism: return BFLOAT16`); bf16_optimizer.py allocates its gradients in that dtype.
    Before data_types (0.6.2-0.7.5) every bf16 job without ZeRO ran it, with fp32 gradients. Combinations the
    release refuses were refused before (check_bf16_accumulation, _grad_accum_dtype)."""
    if precision != "bf16" or not release.has(BF16_OPTIMIZER_VERSION):
        return None
    if not release.has(GRAD_ACCUM_DTYPE_VERSION):
        return "fp32"
    effective = accum or ("bf16" if release.has(BF16_ACCUM_NO_ZERO_VERSION) else "fp32")
    return effective if effective in ("fp32", "bf16") else None


def check_bf16_accumulation_engine(accum: str | None, origin: str, zero_stage: int, precision: str,
                                   pipeline_engine: bool, release: JobRelease, src: dict[str, Source]) -> str | None:
    """check_bf16_accumulation, then OptimizerConfig.zero0_bf16_accum_dtype (zero0_bf16_accum_dtype), its source
    recorded."""
    check_bf16_accumulation(accum, origin, zero_stage, precision, pipeline_engine, release)
    dtype = zero0_bf16_accum_dtype(accum, precision, release)
    if dtype is not None:
        runs = "BF16_Optimizer" if dtype == "fp32" else "BF16_Optimizer under its PipelineEngine, else DDP_BFLOAT16"
        src["zero0_bf16_accum_dtype"] = Source(SourceKind.DERIVED, f"{origin}: bf16 without ZeRO accumulates in {dtype} "
                                               f"on {release.named()}: {runs}")
    return dtype


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
    clock = raw.get("wall_clock_breakdown", False)
    if not isinstance(clock, int):  # bool is an int; config.py:533 ORs it with the profiler's bool
        raise ConfigError(f"{origin} wall_clock_breakdown is {clock!r}; DeepSpeedConfig computes wall_clock_breakdown | "
                          "flops_profiler.enabled (runtime/config.py) and fails with a TypeError on anything but true / "
                          "false. Write true or false without quotes.")
    if profiler.get("enabled") is True:
        warnings.append(f"{origin} flops_profiler enabled accepted, not modelled (its profile step, default 1, runs "
                        "slower; it also turns on wall_clock_breakdown)")
    elif raw.get("wall_clock_breakdown") is True:
        warnings.append(f"{origin} wall_clock_breakdown accepted, not modelled (its timers synchronize the device "
                        "around every forward, backward and optimizer step)")


def _allreduce_op(raw: dict[str, Any], origin: str, fields: dict[str, Any], warnings: list[str],
                  release: JobRelease) -> None:
    """gradient_allreduce_op (1cae4920e, 2026-08-15, with its checks, from ALLREDUCE_OP_VERSION on; installed 0.19.8
    runtime/config.py get_gradient_allreduce_op and _do_error_check): "mean" (the default) or "sum",
    case-insensitive; "sum" not at ZeRO stage 3, with ZenFlow or with DeepCompile. Older releases never read the key
    (gradients averaged). Sum or mean reduce the same bytes: nothing to price."""
    if "gradient_allreduce_op" not in raw:
        return
    value = raw["gradient_allreduce_op"]
    op = value.lower() if isinstance(value, str) else value
    if not release.has(ALLREDUCE_OP_VERSION):
        if op != "mean":
            warnings.append(f"{origin} gradient_allreduce_op {value!r} ignored: {release.named()} does not read the key "
                            "(added in 0.19.6, 1cae4920e) and averages the gradients")
        return
    if op not in ("mean", "sum"):
        raise ConfigError(f"{origin} gradient_allreduce_op is {value!r}; DeepSpeedConfig raises 'Invalid "
                          "gradient_allreduce_op. Supported operations: [mean, sum]' (0.19.6 and later; the job runs "
                          f"{release.named()}). Use \"mean\" or \"sum\".")
    zero = raw.get("zero_optimization") if isinstance(raw.get("zero_optimization"), dict) else {}
    compile_section = raw.get("compile") if isinstance(raw.get("compile"), dict) else {}
    clash = next((what for bad, what in ((fields["zero_stage"] == 3, "ZeRO stage 3"),
                                         (zero.get("zenflow") is not None, "ZenFlow"),
                                         (compile_section.get("deepcompile") is True, "DeepCompile")) if bad), None)
    if op == "sum" and clash:
        raise ConfigError(f"{origin} gradient_allreduce_op \"sum\" with {clash}: DeepSpeedConfig raises "
                          f"\"gradient_allreduce_op='sum' is not supported with {clash}\" (_do_error_check, 0.19.6 and "
                          f"later; the job runs {release.named()}). Use \"mean\" (the default) or drop the key.")


def check_top_level(raw: dict[str, Any], origin: str, fields: dict[str, Any], src: dict[str, Source],
                    warnings: list[str], release: JobRelease = TODAYS_RELEASE) -> dict[str, Any]:
    """Removed sections and gradient_allreduce_op as the job's `release` reads them, data_types.grad_accum_dtype
    against the engine's rule, sequence_parallel_size."""
    _removed(raw, origin, warnings, release)
    refuse_elasticity(raw, origin)  # accepted by the releases _removed lets through, and not modelled
    _allreduce_op(raw, origin, fields, warnings, release)
    _instrumentation(raw, origin, warnings)
    accum = _grad_accum_dtype(raw, origin, fields, warnings, release)
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

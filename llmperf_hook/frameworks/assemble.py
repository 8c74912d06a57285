"""Build the TrainingConfig of a Megatron(-DeepSpeed) job or of a DeepSpeed / Hugging Face / torch script."""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Mapping

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.accelerate_plugin import accelerator_env_accumulation, accelerator_script
from llmperf_hook.frameworks.deepspeed_chat import deepspeed_chat_warnings, is_deepspeed_chat
from llmperf_hook.frameworks.deepspeed_config import DsSettings
from llmperf_hook.frameworks.deepspeed_engine_rules import check_bf16_accumulation_engine
from llmperf_hook.frameworks.openrlhf import openrlhf_trainer, openrlhf_warnings
from llmperf_hook.frameworks.deepspeed_release import (as_released, moe_dense_dispatch_release,
                                                       multi_rank_bucket_release, native_pinned_memory,
                                                       pinned_offload_release, schema_release,
                                                       zero1_noncontiguous_release, zero3_splits_bias)
from llmperf_hook.frameworks.code_ds_config import code_config_warnings
from llmperf_hook.frameworks.ds_checkpointing import megatron_deepspeed_warnings
from llmperf_hook.frameworks.deepspeed_job import (ACCELERATOR_FILLS, MEGATRON_SCRIPT_FILLS, check_hpz,
                                                    check_moe_pipe_partitioning, check_plain_deepspeed,
                                                    ds_auto_batch_warnings, ds_batch, ds_optimizer,
                                                    ds_precision, hf_batch, megatron_ds_precision, merge_megatron_batch,
                                                    pipe_sends_partitioned, unfilled_batch_key_warnings)
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.fsdp_sharding import FsdpSharding, fsdp_sharding
from llmperf_hook.frameworks.hf_config import no_sdpa_attention
from llmperf_hook.frameworks.megatron_entry_points import megatron_entry_point
from llmperf_hook.frameworks.megatron_rules import check_megatron_flags
from llmperf_hook.frameworks.megatron_unknown_args import check_megatron_options
from llmperf_hook.frameworks.megatron_validate_args import check_validate_args
from llmperf_hook.frameworks.megatron import flag_precision, resolve_megatron, world_divisibility_error
from llmperf_hook.frameworks.resolve import JobOverrides, has_megatron_shape, ignored_deepspeed_flags
from llmperf_hook.frameworks.script_dropout import apply_script_dropout
from llmperf_hook.frameworks.script_gelu import apply_script_gelu, hf_gelu
from llmperf_hook.frameworks.script_shape import resolve_script_shape, script_hidden_act, script_model_type
from llmperf_hook.frameworks.script_tree import script_tree
from llmperf_hook.frameworks.step_flags import step_fusions
from llmperf_hook.frameworks.trainer_flags import (check_trainer_args, ddp_bucket_elems, optim_warnings,
                                                    trainer_warnings)
from llmperf_hook.frameworks.trainer_optimizer import is_trainer_job, trainer_optimizer_fields
from llmperf_hook.frameworks.training_config import (BatchConfig, OptimizerConfig, ParallelLayout, RecomputeConfig,
                                                     TrainingConfig)
from llmperf_hook.launch.parsed_job import ParsedJob
from llmperf_hook.launch.sizing import MAX_CONNECTIONS_ENV
from llmperf_hook.provenance import Source, SourceKind


DDP_BUCKET_ELEMS = 25 * 2**20 // 4
"""torch DistributedDataParallel bucket_cap_mb 25 of fp32 gradients (autocast keeps the parameters, so the
gradients, in fp32)."""


def _world_source(job: ParsedJob) -> Source:
    return job.sources.get("world_size", Source(SourceKind.LAUNCHER, job.launcher))


def _megatron_deepspeed_zero(flags: FlagValues, ds: DsSettings, warnings: list[str]) -> DsSettings:
    """DeepSpeed reads ZeRO from the ds_config; --zero-stage only fills it when the config is silent."""
    if not flags.has("zero_stage"):
        return ds
    if "zero_stage" in ds.sources:
        if flags.get("zero_stage") != ds.zero_stage:
            warnings.append(f"--zero-stage {flags.get('zero_stage')} differs from {ds.path} zero_optimization.stage "
                            f"{ds.zero_stage}: DeepSpeed uses the config's stage")
        return ds
    return replace(ds, zero_stage=flags.get("zero_stage"), sources={**ds.sources, "zero_stage": flags.source("zero_stage")})


def _megatron_deepspeed_sizes(flags: FlagValues, world: int, warnings: list[str]) -> FlagValues:
    """Megatron-DeepSpeed's validate_args lowers the model-parallel sizes to what the world holds before any check:
    TP = min(TP, world), PP = min(PP, world // TP) (megatron/arguments.py; Megatron-LM did the same until 8af3dae72a,
    2024-08, and now refuses)."""
    tp, pp = flags.get("tensor_model_parallel_size", 1), flags.get("pipeline_model_parallel_size", 1)
    if tp < 1 or pp < 1 or (tp <= world and pp <= world // tp):
        return flags
    new_tp = min(tp, world)
    new_pp = min(pp, world // new_tp)
    warnings.append(f"tensor-model-parallel-size {tp} and pipeline-model-parallel-size {pp} exceed the {world} ranks: "
                    f"Megatron-DeepSpeed's validate_args runs TP {new_tp}, PP {new_pp} (min(TP, world), "
                    "min(PP, world // TP))")
    values, sources = dict(flags.values), dict(flags.sources)
    for dest, value in (("tensor_model_parallel_size", new_tp), ("pipeline_model_parallel_size", new_pp)):
        if flags.has(dest) and value != flags.get(dest):
            values[dest] = value
            sources[dest] = Source(SourceKind.DERIVED, f"{flags.seen_flags[dest]} {flags.get(dest)} lowered to the "
                                                       f"{world} ranks (Megatron-DeepSpeed validate_args)")
    return replace(flags, values=values, sources=sources)


def assemble_megatron(job: ParsedJob, flags: FlagValues, framework: str, ds: DsSettings | None,
                      overrides: JobOverrides, src: dict[str, Source]) -> TrainingConfig:
    warnings: list[str] = list(job.warnings) + check_megatron_options(job.script, job.script_args) + \
        ignored_deepspeed_flags(flags, job.script)
    if framework == "megatron-deepspeed":
        flags = _megatron_deepspeed_sizes(flags, job.world_size, warnings)
    shape_model = None if has_megatron_shape(flags, job.script) else overrides.model
    if overrides.model and shape_model is None:
        warnings.append(f"llmperf --model {overrides.model} ignored: the Megatron flags state the model shape")
    parts = resolve_megatron(flags, job.world_size, _world_source(job), src, warnings, framework == "megatron-deepspeed",
                             shape_model, job.script)
    warnings += check_megatron_flags(flags, job.script_args, parts.model, parts.parallel, framework == "megatron-deepspeed")
    warnings += check_validate_args(flags, job.script_args, parts.parallel, framework == "megatron-deepspeed")
    optimizer, precision, pipeline_engine, recompute = parts.optimizer, parts.precision, False, parts.recompute
    partitioned = True
    if framework == "megatron-deepspeed" and ds is not None:
        ds = _megatron_deepspeed_zero(flags, ds, warnings)
        check_plain_deepspeed(ds, job.world_size)
        if flags.get("no_pipeline_parallel") and parts.parallel.pp > 1:
            raise ConfigError(f"--no-pipeline-parallel with pipeline-model-parallel-size {parts.parallel.pp} ({src['pp']}): "
                              "Megatron-DeepSpeed requires PP = 1 when the pipeline engine is disabled.")
        pipeline_engine = not flags.get("no_pipeline_parallel", False) and _builds_pipeline_module(job.script,
                                                                                               parts.parallel.pp)
        if pipeline_engine:
            check_moe_pipe_partitioning(ds, parts.model.num_experts, parts.parallel)
            partitioned = pipe_sends_partitioned(ds, warnings if parts.parallel.tp > 1 else [])
        if pipeline_engine and ds.pipeline_checkpoint_interval > 0:
            # pipe/engine.py: the ds_config's interval replaces GPTModelPipe's (--checkpoint-num-layers or 0)
            recompute = replace(recompute, granularity="full", method="uniform", num_layers=ds.pipeline_checkpoint_interval)
            for key in ("recompute", "recompute_method", "recompute_num_layers"):
                src[key] = ds.sources["recompute"]
        elif pipeline_engine and recompute.method == "block":
            # GPTModelPipe's activation_checkpoint_interval comes from --checkpoint-activations or full *uniform*
            # recompute only ('deepspeed's pipeline doesn't support the block recompute method', else 0:
            # Megatron-DeepSpeed megatron/model/gpt_model.py), and its layers never reach _checkpointed_forward
            warnings.append("--recompute-method block under DeepSpeed's PipelineEngine recomputes nothing: "
                            "Megatron-DeepSpeed's GPTModelPipe checkpoints layers only for --recompute-method uniform "
                            "(or --checkpoint-activations); priced as no recompute. Use --recompute-method uniform, or "
                            "--no-pipeline-parallel at PP 1.")
            recompute = replace(recompute, granularity="none", method=None, num_layers=None)
            src["recompute"] = Source(SourceKind.DERIVED, "GPTModelPipe ignores --recompute-method block")
        entry_point = megatron_entry_point(job.script)
        merge_megatron_batch(ds, parts.batch, parts.parallel.dp, src, entry_point)
        warnings += [] if entry_point else unfilled_batch_key_warnings(ds, parts.batch, MEGATRON_SCRIPT_FILLS)
        warnings += ds_auto_batch_warnings(ds)
        optimizer = ds_optimizer(ds, optimizer, parts.model.hidden_size, optimizer.gradient_clipping, src, hf_fill=False,
                                 multi_rank_release=_multi_rank_release(ds, job.env),
                                 pinned_release=pinned_offload_release(job.env),
                                 native_pinning=native_pinned_memory(job.env),
                                 zero1_noncontiguous=zero1_noncontiguous_release(job.env, parts.model.num_experts > 0))
        optimizer = as_released(optimizer, job.env, src, warnings)
        precision = megatron_ds_precision(precision, ds, flags, src, warnings)
        optimizer = replace(optimizer, zero0_bf16_accum_dtype=check_bf16_accumulation_engine(
            ds.grad_accum_dtype, ds.path, optimizer.zero_stage, precision, pipeline_engine, schema_release(job.env), src))
        warnings.extend(ds.warnings)
    else:
        src.setdefault("zero_stage", Source(SourceKind.DEFAULT, "Megatron: no ZeRO (distributed optimizer is separate)"))
    warnings += megatron_deepspeed_warnings(flags, recompute.granularity, framework == "megatron-deepspeed",
                                            ds.path if ds else "", ds.checkpointing_keys if ds else ())
    if framework == "megatron-deepspeed":
        _check_mds_connections(job, parts.parallel.sequence_parallel)
    connections = device_connections(job, src, warnings, optimizer.fsdp)
    splits_bias = not megatron_entry_point(job.script) and zero3_splits_bias(
        "", ds is None or ds.memory_efficient_linear, False, job.script, job.env, _zero3_warnings(ds, warnings))
    fusions = apply_script_dropout(step_fusions(flags, framework, optimizer, src, job.env, warnings), job.script,
                                   flags, src)
    fusions = apply_script_gelu(fusions, job.script, flags, framework, src)
    return TrainingConfig(
        framework=framework, launcher=job.launcher, world_size=job.world_size, nnodes=job.nnodes,
        nproc_per_node=job.nproc_per_node, model=parts.model, parallel=parts.parallel, batch=parts.batch,
        precision=precision, recompute=recompute, optimizer=optimizer,  # type: ignore[arg-type]
        attention_backend=parts.attention_backend, pipeline_schedule=parts.pipeline_schedule,  # type: ignore[arg-type]
        **fusions,
        softmax_in_fp32=flags.get("attention_softmax_in_fp32"), query_key_layer_scaling=flags.get("apply_query_key_layer_scaling"),
        sources=src, warnings=tuple(dict.fromkeys(warnings)), deepspeed_pipeline_engine=pipeline_engine,
        deepspeed_pipe_partitioned=partitioned,
        transformer_impl=str(flags.get("transformer_impl", "local" if framework == "megatron-deepspeed" else "transformer_engine")),
        cuda_device_max_connections=connections, torch_linear_layers=splits_bias,
        deepspeed_moe_dense_dispatch=framework == "megatron-deepspeed" and parts.model.num_experts > 0
        and moe_dense_dispatch_release(job.env),
    )


def _builds_pipeline_module(script: str, pp: int) -> bool:
    """Whether deepspeed.initialize gets a PipelineModule and so returns a PipelineEngine (deepspeed/__init__.py:
    DeepSpeedEngine unless `isinstance(model, PipelineModule)`): Megatron-DeepSpeed's entry points build GPTModelPipe
    without --no-pipeline-parallel, at PP 1 too; another script taking their flags (examples/cpu-testbed/train_gpt.py)
    only if its code uses one (_script_uses_pipeline_module), and at PP > 1 it must."""
    return pp > 1 or megatron_entry_point(script) or _script_uses_pipeline_module(script)


PIPELINE_MODULE_CLASSES = frozenset({"PipelineModule", "GPTModelPipe"})
"""deepspeed.pipe.PipelineModule and Megatron-DeepSpeed's subclass of it (megatron/model/gpt_model.py
`class GPTModelPipe(PipelineModule, MegatronModule)`)."""


def _script_uses_pipeline_module(script: str) -> bool:
    """Whether the script's code (parsed, never run) imports a PIPELINE_MODULE_CLASSES class and uses the name (a
    call, a base class), or reaches one as an attribute (deepspeed.pipe.PipelineModule(...)); a comment or a string
    naming it builds nothing. Unreadable or unparsable: True, the entry points' default."""
    tree = script_tree(script)
    if tree is None:
        return True
    bound = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             for alias in node.names if alias.name in PIPELINE_MODULE_CLASSES}
    return any((isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in bound)
               or (isinstance(node, ast.Attribute) and node.attr in PIPELINE_MODULE_CLASSES) for node in ast.walk(tree))


def _check_mds_connections(job: ParsedJob, sequence_parallel: bool) -> None:
    """Megatron-DeepSpeed's validate_args raises RuntimeError('Using sequence parallelism requires setting the
    environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1') on CUDA whatever the GPU (megatron/arguments.py; the
    sequence parallelism kept at TP > 1). Only a value the job states is checked: unset is taken as the 1 the
    launch will export, as device_connections does."""
    given = job.env.get(MAX_CONNECTIONS_ENV)
    if sequence_parallel and given not in (None, "1"):
        raise ConfigError(f"--sequence-parallel with {MAX_CONNECTIONS_ENV}={given} in the job's environment: "
                          "Megatron-DeepSpeed's validate_args raises 'Using sequence parallelism requires setting the "
                          f"environment variable {MAX_CONNECTIONS_ENV} to 1'. Export {MAX_CONNECTIONS_ENV}=1.")


CUDA_DEFAULT_CONNECTIONS = 8
"""CUDA's work queues per context when CUDA_DEVICE_MAX_CONNECTIONS is unset or unusable (CUDA Programming Guide,
CUDA Environment Variables: 1 to 32, default 8)."""


def device_connections(job: ParsedJob, src: dict[str, Source], warnings: list[str], fsdp: str = "none") -> int:
    """TrainingConfig.cuda_device_max_connections of a Megatron job, its origin in `src`. Not stated: 1, what Megatron-LM
    requires. Anything but "1" is accepted: today's megatron/training/arguments.py asserts CUDA_DEVICE_MAX_CONNECTIONS
    == "1" for TP or CP > 1 only before Blackwell (get_device_arch_version() < 10, 0db0e83) and not with Megatron-FSDP
    / torch FSDP2 or --overlap-moe-expert-parallel-comm (a warning there); the releases before bdd9731 (2022-10-14)
    never checked it. The GPU is not known here: the graph prices and warns (graph/launch_order.py). The
    value is the job's environment as the launch parser read it (ParsedJob.env, launch/sizing.PRICED_ENV: the
    launching environment, `NAME=value` / `env NAME=value` words in front of the command, a wrapper script's
    exports). Megatron-FSDP and torch FSDP2 are the other way round: validate_args asserts the variable is not "1"
    (FSDP2 since 7ef4f90386, 2025-03; Megatron-FSDP since ab43d43f0b, 2026-04), so unset is CUDA's default there and
    "1" warns as a rule only recent releases enforce."""
    given = job.env.get(MAX_CONNECTIONS_ENV)
    if fsdp != "none":
        return _fsdp_connections(given, fsdp, src, warnings)
    if given is None:
        src["cuda_device_max_connections"] = Source(SourceKind.DEFAULT, "Megatron-LM requires 1 for TP or CP > 1")
        return 1
    src["cuda_device_max_connections"] = Source(SourceKind.ENV, MAX_CONNECTIONS_ENV)
    value = _queues(given)
    return value  # what it changes depends on the GPU: warned with the graph (graph/launch_order.py)


def _fsdp_connections(given: str | None, fsdp: str, src: dict[str, Source], warnings: list[str]) -> int:
    """device_connections of a Megatron-FSDP / torch FSDP2 job: FSDP overlaps its own gathers through several
    hardware queues, so Megatron refuses "1" and the queues are CUDA's default unless set."""
    if given is None:
        src["cuda_device_max_connections"] = Source(SourceKind.DEFAULT, f"CUDA's default ({fsdp}: Megatron-LM refuses 1)")
        return CUDA_DEFAULT_CONNECTIONS
    src["cuda_device_max_connections"] = Source(SourceKind.ENV, MAX_CONNECTIONS_ENV)
    if given.strip() == "1":
        warnings.append(f"{MAX_CONNECTIONS_ENV}=1 with {fsdp}: Megatron-LM 2025-03 (torch FSDP2) / 2026-04 (Megatron-"
                        "FSDP) and later refuse this at start-up (validate_args: 'FSDP requires CUDA_DEVICE_MAX_CONNECTIONS "
                        "> 1 or unset'); older releases accept it. Unset it for FSDP")
        return 1
    return _queues(given)


def _queues(given: str) -> int:
    """The hardware queues CUDA opens for a CUDA_DEVICE_MAX_CONNECTIONS value: 1 to 32 as given, else its default."""
    return int(given) if given.strip().isdigit() and 1 <= int(given) <= 32 else CUDA_DEFAULT_CONNECTIONS


def _script_pp(flags: FlagValues, ds: DsSettings | None, framework: str, src: dict[str, Source], warnings: list[str]) -> int:
    """A pipeline script's PP; the Hugging Face Trainer never builds DeepSpeed's PipelineModule, so its ds_config
    pipeline section does nothing there."""
    if flags.has("pipeline_parallel_size"):
        pp, src["pp"] = flags.get("pipeline_parallel_size"), flags.source("pipeline_parallel_size")
    elif ds is not None and ds.pipeline_stages and framework != "hf-deepspeed":
        pp, src["pp"] = ds.pipeline_stages, ds.sources["pipeline_stages"]
    else:
        pp, src["pp"] = 1, Source(SourceKind.DEFAULT, "no pipeline stages")
    if framework == "hf-deepspeed" and ds is not None and (ds.pipeline_stages or ds.pipeline_checkpoint_interval):
        warnings.append(f"{ds.path} pipeline section ignored: the Hugging Face Trainer trains without DeepSpeed's "
                        "PipelineModule, so every rank holds the whole model (no pipeline stages)")
    for key in ("tp", "cp", "vpp", "ep"):
        src[key] = Source(SourceKind.DEFAULT, "DeepSpeed/torch script: 1")
    return pp


def _script_layout(pp: int, ds: DsSettings | None, world: int, head_counts: tuple[int, int], src: dict[str, Source],
                   warnings: list[str]) -> ParallelLayout:
    """PP x Ulysses sequence parallelism (ds_config sequence_parallel_size) x DP. DeepSpeedConfig divides the
    batch's world by the SP size; deepspeed/runtime/sequence_parallel/parallel_state_sp.py requires world % SP == 0
    and UlyssesSPAttentionHF (ulysses_sp.py) heads % SP == 0 and, for the key/value heads (`head_counts` = query
    heads, key/value heads), kv % SP == 0 or SP % kv == 0 (it replicates them). Ulysses' all-to-all is priced as
    context parallelism."""
    heads, kv_heads = head_counts
    sp = ds.sequence_parallel_size if ds is not None else 1
    if sp > 1:
        src["cp"] = ds.sources["sequence_parallel_size"]  # type: ignore[union-attr]
        warnings.append(f"{src['cp']} {sp}: DeepSpeed-Ulysses all-to-all modelled as context parallelism (the script "
                        "must shard the sequence, e.g. UlyssesSPAttentionHF)")
        if heads % sp:
            raise ConfigError(f"{src['cp']} {sp} does not divide the model's {heads} attention heads ({src.get('num_attention_heads')}); "
                              f"DeepSpeed-Ulysses splits heads across the sequence-parallel group and raises 'Attention head "
                              f"count {heads} is not divisible by SP size {sp}'. Use an SP size dividing {heads}.")
        if kv_heads % sp and sp % kv_heads:
            raise ConfigError(f"{src['cp']} {sp} and the model's {kv_heads} key/value heads "
                              f"({src.get('num_query_groups')}) neither divide each other: DeepSpeed-Ulysses "
                              f"(UlyssesSPAttentionHF) splits the key/value heads across the sequence-parallel group, or "
                              f"replicates them when there are fewer, and raises 'KV attention head count {kv_heads} is "
                              f"not divisible by SP size {sp} or vice versa'. Use an SP size that divides {kv_heads} or "
                              f"is a multiple of it.")
    if pp < 1 or world % (pp * sp):
        raise world_divisibility_error(world, src["world_size"], 1, max(pp, 1), sp, src)
    src["dp"] = Source(SourceKind.DERIVED, f"world / (PP * SP) = {world}/({pp}*{sp})" if sp > 1 else f"world / PP = {world}/{pp}")
    return ParallelLayout(pp=pp, cp=sp, dp=world // (pp * sp))


def _script_recompute(flags: FlagValues, ds: DsSettings | None, src: dict[str, Source],
                      fsdp: FsdpSharding | None = None, pipeline_engine: bool = True) -> RecomputeConfig:
    if ds is not None and ds.pipeline_checkpoint_interval > 0 and pipeline_engine:  # PipelineModule: every N layers
        src["recompute"] = ds.sources["recompute"]
        return RecomputeConfig("full", "uniform", ds.pipeline_checkpoint_interval)
    if fsdp is not None and fsdp.activation_checkpointing:  # accelerate's, or the Trainer's --fsdp_config's
        src["recompute"] = fsdp.checkpointing_source or fsdp.source
        return RecomputeConfig("full", "uniform", 1)
    for dest in ("gradient_checkpointing", "activation_checkpointing"):  # the script's own switch (DeepSpeed-Chat,
        if flags.get(dest):  # DeepSpeedExamples' finetune_zero3.py: model.gradient_checkpointing_enable())
            src["recompute"] = flags.source(dest)
            return RecomputeConfig("full", "uniform", 1)
    src["recompute"] = Source(SourceKind.DEFAULT, "no activation checkpointing")
    return RecomputeConfig()


TRAINER_MICRO_BATCH_DEFAULT = "script default 8"
"""The micro-batch source of a Hugging Face Trainer job without --per_device_train_batch_size (TrainingArguments'
default 8); tune/candidate.hf_batch_flags tells such a job by it."""


def _script_batch(flags: FlagValues, framework: str, ds: DsSettings | None, dp: int, world: int, src: dict[str, Source],
                  trainer: bool = True, env: Mapping[str, str] | None = None) -> BatchConfig:
    if ds is None:  # Hugging Face Trainer's per_device_train_batch_size defaults to 8; other scripts: 1
        trainer_default = flags.has("model_name_or_path")
        mbs = flags.get("per_device_train_batch_size", 8 if trainer_default else 1)
        src["micro_batch_size"] = flags.source("per_device_train_batch_size",
                                               TRAINER_MICRO_BATCH_DEFAULT if trainer_default else "script default 1")
        gas, src["num_microbatches"] = (None if trainer else accelerator_env_accumulation(env or {})) or \
            (flags.get("gradient_accumulation_steps", 1), flags.source("gradient_accumulation_steps", "default 1"))
        src["global_batch_size"] = Source(SourceKind.DERIVED, "micro * accumulation * DP")
        return BatchConfig(micro_batch_size=mbs, global_batch_size=mbs * gas * dp, num_microbatches=gas)
    return hf_batch(ds, flags, dp, world, src, trainer) if framework == "hf-deepspeed" else ds_batch(ds, dp, src)


def _script_precision(flags: FlagValues, ds: DsSettings | None, src: dict[str, Source]) -> str:
    if ds is not None:
        return ds_precision(ds, flags, src)
    return flag_precision(flags, src, "fp32")


_HF_ATTENTION = {"flash_attention_2": "flash", "flash_attention_3": "flash", "sdpa": "fused", "eager": "unfused"}


def _script_attention(flags: FlagValues, src: dict[str, Source], model_type: str = "") -> str:
    """Hugging Face --attn_implementation (flash_attention_2 | sdpa | eager); otherwise the model's default (eager for
    a model class without SDPA: hf_config.no_sdpa_attention)."""
    value = flags.get("attn_implementation")
    if no_sdpa_attention(model_type, value, flags.source("attn_implementation", "script default")) == "eager":
        src["attention_backend"] = Source(SourceKind.DERIVED, f"transformers: {model_type} has no SDPA attention "
                                          "(assumed for the job's release: none through 5.18 has), the default falls "
                                          "back to eager (get_correct_attn_implementation)")
        return "unfused"
    if value in _HF_ATTENTION:
        src["attention_backend"] = flags.source("attn_implementation")
        return _HF_ATTENTION[value]
    src["attention_backend"] = Source(SourceKind.DEFAULT, "script default")
    return "auto"


def assemble_deepspeed(job: ParsedJob, flags: FlagValues, framework: str, ds: DsSettings | None,
                       overrides: JobOverrides, src: dict[str, Source]) -> TrainingConfig:
    warnings: list[str] = list(job.warnings) + (list(ds.warnings) + list(ds.checkpointing_warnings) if ds else [])
    if is_deepspeed_chat(flags):
        warnings += deepspeed_chat_warnings(job.script_args)
    warnings += openrlhf_warnings(job.script, job.script_args)
    model = resolve_script_shape(flags, overrides.model, src, warnings)
    pp = _script_pp(flags, ds, framework, src, warnings)
    layout = _script_layout(pp, ds, job.world_size, (model.num_attention_heads, model.num_query_groups), src, warnings)
    dp = layout.dp
    src["sequence_parallel"] = Source(SourceKind.DEFAULT, "no tensor parallelism")
    trainer = not accelerator_script(job.script, job.script_args)
    batch = _script_batch(flags, framework, ds, dp, job.world_size // layout.cp, src, trainer, job.env)
    if ds is not None and framework != "hf-deepspeed":
        warnings += ds_auto_batch_warnings(ds)
    elif ds is not None and not trainer:
        warnings += unfilled_batch_key_warnings(ds, batch, ACCELERATOR_FILLS)
    if is_trainer_job(flags, framework, not trainer):
        check_trainer_args(flags, ds is not None)
    precision = _script_precision(flags, ds, src)
    base = OptimizerConfig(gradient_clipping=float(flags.get("max_grad_norm", 1.0)))
    # the Trainer's own optimizer (--optim), unless DeepSpeed builds a ds_config section's (frameworks/trainer_optimizer.py)
    trainer_steps = is_trainer_job(flags, framework, not trainer) and (ds is None or ds.optimizer_name is None)
    trainer_opt = trainer_optimizer_fields(flags, src) if trainer_steps else {}
    base = replace(base, **trainer_opt)
    fsdp = fsdp_sharding(flags.get("fsdp"), job.env, warnings, job.script_args) if ds is None else None
    # DeepSpeed replaces DDP, and a config's optimizer section --optim
    warnings += trainer_warnings(flags) if ds is None else optim_warnings(flags) if trainer_steps else []
    if ds is not None:
        (check_hpz if framework == "hf-deepspeed" else check_plain_deepspeed)(ds, job.world_size)
        optimizer = ds_optimizer(ds, base, model.hidden_size, float(flags.get("max_grad_norm", 1.0)), src,
                                 hf_fill=framework == "hf-deepspeed",
                                 multi_rank_release=_multi_rank_release(ds, job.env),
                                 pinned_release=pinned_offload_release(job.env),
                                 native_pinning=native_pinned_memory(job.env),
                                 zero1_noncontiguous=zero1_noncontiguous_release(job.env, model.num_experts > 0))
        optimizer = as_released(replace(optimizer, **trainer_opt), job.env, src, warnings)
        optimizer = replace(optimizer, zero0_bf16_accum_dtype=check_bf16_accumulation_engine(
            ds.grad_accum_dtype, ds.path, optimizer.zero_stage, precision, pp > 1, schema_release(job.env), src))
    elif fsdp is not None:
        offload = "cpu" if fsdp.offload else "none"
        optimizer = replace(base, zero_stage=fsdp.zero_stage, offload_optimizer=offload, overlap_grad_reduce=True,
                            offload_param=offload if fsdp.zero_stage == 3 else "none")
        src["zero_stage"] = fsdp.source
    else:  # torch DistributedDataParallel: its Reducer all-reduces 25 MiB gradient buckets during backward
        warnings += code_config_warnings(job.script)
        bucket = ddp_bucket_elems(flags, src) or DDP_BUCKET_ELEMS
        optimizer = replace(base, overlap_grad_reduce=True, grad_bucket_size_elems=bucket)
        src["zero_stage"] = Source(SourceKind.DEFAULT, "no DeepSpeed config: plain data parallel")
        src["overlap_grad_reduce"] = Source(SourceKind.DEFAULT, "torch DDP: bucketed all-reduce in backward")
    splits_bias = _script_splits_bias(job, flags, framework, ds, overrides.model, warnings)
    gelu = hf_gelu(*script_hidden_act(flags, overrides.model), model.swiglu, src, warnings)
    return TrainingConfig(
        framework=framework, launcher=job.launcher, world_size=job.world_size, nnodes=job.nnodes,
        nproc_per_node=job.nproc_per_node, model=model, parallel=layout, batch=batch, precision=precision,
        recompute=_script_recompute(flags, ds, src, fsdp, framework != "hf-deepspeed"), optimizer=optimizer,  # type: ignore[arg-type]
        attention_backend=_script_attention(flags, src, script_model_type(flags, overrides.model)),
        pipeline_schedule="1f1b" if pp > 1 else "none", sources=src,
        warnings=tuple(dict.fromkeys(warnings)), deepspeed_pipeline_engine=pp > 1,
        torch_linear_layers=splits_bias, **gelu,  # type: ignore[arg-type]
    )


def _zero3_warnings(ds: DsSettings | None, warnings: list[str]) -> list[str] | None:
    """Where zero3_splits_bias states its assumption about an unreadable script: only a ZeRO-3 job prices it."""
    return warnings if ds is not None and ds.zero_stage == 3 else None


def _script_splits_bias(job: ParsedJob, flags: FlagValues, framework: str, ds: DsSettings | None,
                        model: str | None, warnings: list[str]) -> bool:
    """TrainingConfig.torch_linear_layers of a transformers-style script (deepspeed_release.zero3_splits_bias): the
    HF Trainer and Accelerator (HfDeepSpeedConfig), DeepSpeed-Chat (create_hf_model) and OpenRLHF build the model
    inside zero.Init; GPT-2's Conv1D keeps its addmm."""
    inits = framework == "hf-deepspeed" or is_deepspeed_chat(flags) or bool(openrlhf_trainer(job.script))
    return zero3_splits_bias(script_model_type(flags, model), ds is None or ds.memory_efficient_linear, inits,
                             job.script, job.env, _zero3_warnings(ds, warnings))


def _multi_rank_release(ds: DsSettings, env: Mapping[str, str]) -> bool:
    """Whether the job's DeepSpeed all-reduces ZeRO-1/2 gradient buckets, read at every stage (OptimizerConfig.
    zero_bucket_allreduce: tune may move the job to ZeRO-1/2); the release is read only where the ds_config leaves it
    to decide (reduce_scatter and use_multi_rank_bucket_allreduce not false)."""
    return not ds.reduce_scatter or not ds.multi_rank_bucket_allreduce or multi_rank_bucket_release(env)

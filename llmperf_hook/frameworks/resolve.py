"""Stages [1]+[2] entry point: launch command -> (ParsedJob, TrainingConfig).

Which framework: Megatron-style model flags (--num-layers, --hidden-size) mean Megatron-LM, plus `--deepspeed`
or `--deepspeed_config` Megatron-DeepSpeed; `--deepspeed FILE` is the Hugging Face Trainer with DeepSpeed;
`--deepspeed_config FILE` alone a DeepSpeed script, as is the bare `--deepspeed` switch with `--zero_stage`
(DeepSpeed-Chat, which builds its config in code: deepspeed_chat.py); anything else a plain torch script (shape from --model).
Precedence of values is stated once, in provenance.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from llmperf_hook.errors import ConfigError, LlmperfError
from llmperf_hook.frameworks.accelerate_plugin import (accelerate_deepspeed, accelerate_ds_settings, accelerator_script,
                                                       mixed_precision_source, mixed_precision_sections,
                                                       plugin_config_file, plugin_mixed_precision,
                                                       trainer_mixed_precision, with_fp8_warning)
from llmperf_hook.frameworks.deepspeed_chat import ORIGIN, deepspeed_chat_config, is_deepspeed_chat
from llmperf_hook.frameworks.deepspeed_config import DsSettings, parse_ds_config, read_ds_config
from llmperf_hook.frameworks.deepspeed_job import hf_accumulation_warnings
from llmperf_hook.frameworks.deepspeed_nvme import check_nvme_param_buffers
from llmperf_hook.frameworks.deepspeed_optimizer import script_client_optimizer
from llmperf_hook.frameworks.script_defaults import own_parser_shape
from llmperf_hook.frameworks.script_tree import script_tree
from llmperf_hook.frameworks.deepspeed_release import schema_release
from llmperf_hook.frameworks.flags import FlagValues, parse_flags
from llmperf_hook.frameworks.megatron_data_source import DATA_SOURCE_FLAGS, check_single_data_source
from llmperf_hook.frameworks.megatron_entry_points import megatron_entry_point
from llmperf_hook.frameworks.megatron_undecided_precision import settle_undecided_precision
from llmperf_hook.frameworks.openrlhf import ORIGIN as OPENRLHF_ORIGIN, check_openrlhf, openrlhf_ds_config, openrlhf_trainer
from llmperf_hook.frameworks.model_family import check_model_family, fill_script_tokenizer
from llmperf_hook.frameworks.provenance_fill import fill_sources
from llmperf_hook.frameworks.script_flags import SCRIPT_FLAGS, ZERO_ALLOWED
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.frameworks.transformers_release import check_trainer_release
from llmperf_hook.frameworks.validation import validate_config
from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.parsed_job import ParsedJob, ScriptFile
from llmperf_hook.provenance import Source, SourceKind


@dataclass(frozen=True)
class JobOverrides:
    """llmperf's own options that override what the command says (highest precedence)."""

    nnodes: int | None = None
    nproc_per_node: int | None = None
    model: str | None = None
    """--model PRESET|FILE: model shape for scripts that do not state it in Megatron-style flags."""
    cluster_gpus_per_node: int | None = None
    """GPUs per node of the --cluster given: what a launch that starts one process per GPU of the node
    (`--nproc-per-node gpu`, deepspeed without --num_gpus) starts, when its environment does not say."""


_MEGATRON_MARKERS = ("num_layers", "encoder_num_layers", "hidden_size", "num_attention_heads")
_MEGATRON_LAYOUT_FLAGS = ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
                          "--expert-model-parallel-size", "--num-layers-per-virtual-pipeline-stage")
"""Megatron's own parallel-layout spellings (arguments.py, dashes only): a script taking them is Megatron-style
even when its model shape comes from llmperf --model rather than --num-layers/--hidden-size."""
_FORK_LAYOUT_FLAGS = tuple("--" + f[2:].replace("-", "_") for f in _MEGATRON_LAYOUT_FLAGS)
"""The same in underscore spelling, as a Megatron fork's parser spells them (epfLLM/Megatron-LLM's finetune.py:
--tensor_model_parallel_size); read only for a Megatron entry point."""
_MEGATRON_BATCH_FLAGS = ("--micro-batch-size", "--global-batch-size")
"""Megatron's batch flags (arguments.py _add_training_args, dashes only): read only for a Megatron entry point, where
they make it Megatron's even with no layout or shape flag (`pretrain_gpt.py --micro-batch-size 4` with llmperf --model
giving the shape); a script merely named finetune*.py (DeepSpeedExamples' finetune_zero3.py) takes other flags."""


def has_megatron_shape(flags: FlagValues, script: str = "") -> bool:
    """Megatron's model-shape flags as Megatron's parser spells them (--num-layers: argparse maps no `_` spelling to
    a dashed option, so a script taking --num_layers / --hidden_size has its own parser, e.g. DeepSpeedExamples'
    bf16_master_weight train.py), or in any spelling for a Megatron entry point (forks such as epfLLM's); or none
    given to a script whose own parser defines --num-layers and --hidden-size with number defaults (the
    cpu-testbed's train_gpt.py run with no shape flags trains its defaults: script_defaults.own_parser_shape)."""
    any_spelling = not script or megatron_entry_point(script)
    return (any(flags.has(d) and (any_spelling or "-" in flags.seen_flags.get(d, "--")[2:]) for d in _MEGATRON_MARKERS)
            or (not any_spelling and own_parser_shape(script)))


def check_counts(flags: FlagValues) -> None:
    """Sizes and counts must be positive (argparse takes any int; the frameworks then divide by them or assert)."""
    for dest, value in flags.values.items():
        if isinstance(value, int) and not isinstance(value, bool) and value < (0 if dest in ZERO_ALLOWED else 1):
            floor = "0 or more" if dest in ZERO_ALLOWED else "at least 1"
            raise ConfigError(f"{flags.seen_flags[dest]} {value} (argv) must be {floor}; fix the training arguments.")


def detect_framework(flags: FlagValues, env: Mapping[str, str], script: str = "") -> str:
    """From the script's flags; `env` (the job's) says whether `accelerate launch` runs it with DeepSpeed. `script`:
    a Megatron entry point (megatron_entry_points) given the layout flags in underscore spelling is a Megatron fork
    whose parser spells them so (epfLLM/Megatron-LLM's finetune.py: --tensor_model_parallel_size), and one given only
    Megatron's batch flags is Megatron's (_MEGATRON_BATCH_FLAGS)."""
    if openrlhf_trainer(script):  # DeepspeedStrategy builds the ds_config in code (frameworks/openrlhf.py)
        return "deepspeed"
    deepspeed = flags.get("deepspeed")
    hf_trainer = isinstance(deepspeed, str) or flags.has("model_name_or_path")
    entry_point = megatron_entry_point(script)
    layout = ((*_MEGATRON_LAYOUT_FLAGS, *_FORK_LAYOUT_FLAGS, *_MEGATRON_BATCH_FLAGS) if entry_point
              else _MEGATRON_LAYOUT_FLAGS)
    megatron = has_megatron_shape(flags, script) or (not hf_trainer and any(f in layout for f in flags.seen_flags.values()))
    ds_path = flags.get("deepspeed_config") or flags.get("deepscale_config")
    if megatron and entry_point:  # Megatron-DeepSpeed starts DeepSpeed only `if args.deepspeed:`
        return "megatron-deepspeed" if deepspeed is True else "megatron"  # (ignored_deepspeed_flags)
    if megatron:  # a script of the user's may hand args.deepspeed_config to deepspeed.initialize without --deepspeed
        return "megatron-deepspeed" if (deepspeed or ds_path or flags.get("deepscale")) else "megatron"
    if isinstance(deepspeed, str) or (not ds_path and accelerate_deepspeed(env)):
        return "hf-deepspeed"
    return "deepspeed" if ds_path or is_deepspeed_chat(flags) else "torch"


def ignored_deepspeed_flags(flags: FlagValues, script: str) -> list[str]:
    """A warning for DeepSpeed flags a Megatron(-DeepSpeed) entry point is given without --deepspeed: Megatron-DeepSpeed
    initializes DeepSpeed only under --deepspeed (megatron/training.py setup_model_and_optimizer, pretrain's
    `if args.deepspeed: args.deepspeed_config_dict = ...`), else it trains with Megatron's own optimizer and mixed
    precision, and never reads the ds_config. --deepscale is DeepSpeed's deprecated helper flag ('no impact on DeepSpeed
    backend', deepspeed/__init__.py _add_core_arguments) and enables nothing."""
    given = [flags.seen_flags[dest] for dest in ("deepspeed_config", "deepscale_config", "deepscale", "zero_stage")
             if flags.has(dest)]
    if not given or flags.get("deepspeed") is True or not megatron_entry_point(script):
        return []
    return [f"{', '.join(given)} given without --deepspeed: Megatron-DeepSpeed then starts no DeepSpeed engine "
            "(megatron/training.py: `if args.deepspeed:`) and reads no ds_config; priced as Megatron's own training "
            "(its optimizer, no ZeRO). Add --deepspeed to train with DeepSpeed"]


def load_ds_settings(flags: FlagValues, framework: str, world_size: int | None, env: Mapping[str, str],
                     script_files: Mapping[str, ScriptFile] | None = None, autotuning: str = "",
                     script: str = "") -> DsSettings | None:
    """The ds_config the job reads; `script_files`: files its batch script writes before launching (read instead);
    `autotuning`: deepspeed --autotuning, whose experiments write the ZeRO section themselves."""
    if framework == "hf-deepspeed" and not isinstance(flags.get("deepspeed"), str) and accelerate_deepspeed(env):
        mixed = plugin_mixed_precision(flags, env, not accelerator_script(script, ()))
        return with_fp8_warning(accelerate_ds_settings(env, schema_release(env), script, mixed), mixed)
    if framework == "deepspeed" and openrlhf_trainer(script):
        return parse_ds_config(openrlhf_ds_config(flags), OPENRLHF_ORIGIN, release=schema_release(env))
    if framework == "deepspeed" and is_deepspeed_chat(flags) and world_size:
        return parse_ds_config(deepspeed_chat_config(flags, world_size), ORIGIN, release=schema_release(env))
    path = flags.get("deepspeed_config") or flags.get("deepscale_config")
    if framework in ("deepspeed", "megatron-deepspeed") and flags.has("deepspeed_config") and flags.has("deepscale_config"):
        # deepspeed.initialize(args=...) copies the deprecated --deepscale_config into args.deepspeed_config
        raise ConfigError(f"{flags.seen_flags['deepscale_config']} and {flags.seen_flags['deepspeed_config']} are both "
                          "given: deepspeed.initialize asserts 'Not sure how to proceed, we were given both a "
                          "deepscale_config and deepspeed_config' (deepspeed/__init__.py; Megatron-DeepSpeed, which "
                          "clears args.deepspeed_config and passes the dict itself, stops on the next assert, 'given "
                          "deepspeed configs in the deepspeed arguments and deepspeed.initialize()'). Keep --deepspeed_config.")
    if isinstance(flags.get("deepspeed"), str) and (framework == "hf-deepspeed" or not path):
        path = flags.get("deepspeed")
    if not path:
        if framework == "megatron-deepspeed":
            raise ConfigError("Megatron-DeepSpeed with --deepspeed needs --deepspeed_config FILE (DeepSpeed requires a "
                              "configuration); add it to the training arguments.")
        return None
    hf_trainer = framework == "hf-deepspeed" and path == flags.get("deepspeed")
    raw = read_ds_config(str(path), hf_trainer, (script_files or {}).get(os.path.normpath(str(path))),
                         megatron_deepspeed=framework == "megatron-deepspeed" and megatron_entry_point(script))
    if autotuning and "zero_optimization" not in raw:  # autotuner.py tune(): the user's stage, else 0, is what
        raw = {**raw, "zero_optimization": {"stage": 0}}  # each experiment's ds_config[ZERO_OPTIMIZATION] holds
    added, mixed = None, "no"
    if hf_trainer:  # TrainingArguments hands the file to accelerate's DeepSpeedPlugin(hf_ds_config=...)
        raw = plugin_config_file(raw, env, str(path))
        # a missing fp16/bf16 section: the Trainer's --fp16/--bf16, else accelerate launch's --mixed_precision
        mixed = trainer_mixed_precision(flags, env)
        added = mixed_precision_sections(raw, mixed, str(path))  # its ValueError comes before the Trainer's mismatches
    # Megatron-DeepSpeed's entry points pass their own optimizer (FusedAdam); a user's script taking Megatron's flags
    # is read for the one it passes (the CPU testbed's torch.optim.AdamW; none: the section's), and one that cannot be
    # read is taken for Megatron-DeepSpeed's
    own = ("", "Megatron-DeepSpeed's own optimizer") if framework == "megatron-deepspeed" else None
    readable = own is not None and not megatron_entry_point(script) and script_tree(script) is not None
    client = own if own and not readable else script_client_optimizer(script)
    ds = parse_ds_config(raw, str(path), client_optimizer=client, release=schema_release(env))
    if added:
        ds.sources[added] = mixed_precision_source(added, env)
    return with_fp8_warning(ds, mixed)


def _job_sources(job: ParsedJob, framework: str, src: dict[str, Source]) -> None:
    src.update({k: v for k, v in job.sources.items()})
    src["launcher"] = Source(SourceKind.ARGV, job.argv[0] if job.argv else job.launcher)
    src["framework"] = Source(SourceKind.DERIVED, "detected from the training script's flags")


def resolve_config(job: ParsedJob, overrides: JobOverrides = JobOverrides()) -> TrainingConfig:
    """Stage [2]: the ParsedJob's script arguments -> a validated TrainingConfig."""
    from llmperf_hook.frameworks.assemble import assemble_deepspeed, assemble_megatron
    from llmperf_hook.frameworks.script_flags import apply_memory_flags
    from llmperf_hook.frameworks.script_shape import apply_script_training

    family_warnings = check_model_family(job.script, job.script_args)
    check_openrlhf(job.script)
    flags = parse_flags(job.script_args, SCRIPT_FLAGS)
    check_counts(flags)
    framework = detect_framework(flags, job.env, job.script)
    check_trainer_release(job.env, flags, framework, job.script, job.script_args)
    if framework in ("megatron", "megatron-deepspeed"):
        job, settled = settle_undecided_precision(job)
        if settled:  # --fp16 or --bf16 dropped: the flags of the run priced
            flags, family_warnings = parse_flags(job.script_args, SCRIPT_FLAGS), family_warnings + settled
        fill_script_tokenizer(flags, job.script)
    if framework == "megatron":  # Megatron-DeepSpeed has no --mock-data and no such assert
        family_warnings += check_single_data_source(job.script_args, job.undecided_setting(DATA_SOURCE_FLAGS))
    ds = load_ds_settings(flags, framework, job.world_size, job.env, job.script_files, job.autotuning, job.script)
    if ds is not None and framework == "hf-deepspeed":  # the accumulation that runs of a file without (or against) it
        family_warnings += hf_accumulation_warnings(ds, flags, not accelerator_script(job.script, job.script_args))
    src: dict[str, Source] = {}
    _job_sources(job, framework, src)
    if framework in ("megatron", "megatron-deepspeed"):
        cfg = assemble_megatron(job, flags, framework, ds, overrides, src)
    else:
        cfg = assemble_deepspeed(job, flags, framework, ds, overrides, src)
    fill_sources(src, flags, ds, framework)  # cfg.sources is this dict
    cfg = apply_memory_flags(apply_script_training(cfg, job.script), flags)
    if family_warnings:
        cfg = replace(cfg, warnings=tuple(dict.fromkeys((*family_warnings, *cfg.warnings))))
    validate_config(cfg)
    check_nvme_param_buffers(cfg)
    return cfg


def resolve_job(
    argv: Sequence[str], env: Mapping[str, str], overrides: JobOverrides = JobOverrides()
) -> tuple[ParsedJob, TrainingConfig]:
    """Parse the launch command (stage [1]) and the training configuration (stage [2]); ConfigError/UsageError on bad input."""
    job = parse_launch(argv, env, overrides.nnodes, overrides.nproc_per_node, overrides.cluster_gpus_per_node)
    try:
        return job, resolve_config(job, overrides)
    except LlmperfError as err:  # a refusal quoting a `$NAME` the launch script computes: say where it does
        from llmperf_hook.launch.shell_positional import missing_arguments_note  # the script reader's: loaded here,
        from llmperf_hook.launch.shell_variables import unknown_value_note  # not on every plain torchrun predict
        note = unknown_value_note(str(err), job.unknown_values) + missing_arguments_note(str(err), job.missing_arguments)
        if not note:
            raise
        from llmperf_hook.launch.argv_words import without_env_hint
        raise type(err)(without_env_hint(str(err), note) + note) from err.__cause__

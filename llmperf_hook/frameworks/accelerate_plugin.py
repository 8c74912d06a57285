"""Hugging Face Accelerate's DeepSpeed plugin: the ds_config a script started by `accelerate launch --use_deepspeed`
runs with (its Trainer or `Accelerator.prepare` builds the engine from it; the script itself passes no --deepspeed).

accelerate/utils/dataclasses.py DeepSpeedPlugin.__post_init__ reads what the launcher exported
(launch/accelerate.py): ACCELERATE_DEEPSPEED_CONFIG_FILE, when given, is the config (json.load; values set there
win, its "auto" values are filled from the plugin: zero_stage, gradient_accumulation_steps, gradient_clipping,
offload devices); without a file the plugin builds one: ZeRO stage ACCELERATE_DEEPSPEED_ZERO_STAGE (default 2),
gradient_accumulation_steps / gradient_clipping from their variables (default "auto"), the batch keys "auto".
`DeepSpeedPlugin.set_mixed_precision` adds the fp16 / bf16 section of the mixed precision when the config lacks it.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Mapping, Sequence

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.accelerator_code import drives_accelerator
from llmperf_hook.frameworks.deepspeed_config import AUTO, DsSettings, parse_ds_config, read_ds_config
from llmperf_hook.frameworks.deepspeed_release import JobRelease
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.provenance import Source, SourceKind

USE_DEEPSPEED = "ACCELERATE_USE_DEEPSPEED"
CONFIG_FILE = "ACCELERATE_DEEPSPEED_CONFIG_FILE"
_PLUGIN_KEYS = {  # variable -> (ds_config path, type)
    "ACCELERATE_DEEPSPEED_ZERO_STAGE": (("zero_optimization", "stage"), int),
    "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": (("gradient_accumulation_steps",), int),
    "ACCELERATE_GRADIENT_CLIPPING": (("gradient_clipping",), float),
    "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": (("zero_optimization", "offload_optimizer", "device"), str),
    "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE": (("zero_optimization", "offload_param", "device"), str),
}


def accelerate_deepspeed(env: Mapping[str, str]) -> bool:
    """The job was started by `accelerate launch` with its DeepSpeed plugin."""
    return env.get(USE_DEEPSPEED, "").lower() == "true"


INSERTED_GAS = Source(SourceKind.DEFAULT, "not in the file: accelerate's DeepSpeedPlugin writes 1 into a "
                      "--deepspeed_config_file without the key, utils/dataclasses.py __post_init__")
"""Where the accumulation of a config file without the key comes from under `accelerate launch`."""


def accelerate_ds_settings(env: Mapping[str, str], release: JobRelease, script: str = "",
                           mixed: str | None = None) -> DsSettings:
    """The ds_config an `accelerate launch --use_deepspeed` job runs with, parsed for its DeepSpeed `release`; an
    accumulation the plugin inserted is sourced to it (INSERTED_GAS), for the Trainer's mismatch refusal to say.
    `script`: the training script, refused where it drives Accelerator itself and the accumulation is no number.
    `mixed`: the mixed precision the plugin is given (plugin_mixed_precision); None: ACCELERATE_MIXED_PRECISION."""
    if accelerator_script(script, ()):
        _check_accelerator_accumulation(env)
    raw, origin, inserted = accelerate_ds_config(env, mixed)
    ds = parse_ds_config(raw, origin, release=release)
    if inserted:
        ds.sources["gradient_accumulation_steps"] = INSERTED_GAS
    return ds


def accelerate_ds_config(env: Mapping[str, str], mixed: str | None = None) -> tuple[dict[str, Any], str, bool]:
    """(ds_config dict, its origin for messages, whether the plugin inserted gradient_accumulation_steps) of an
    `accelerate launch --use_deepspeed` job. A config file without gradient_accumulation_steps gets 1 before anything
    is filled (DeepSpeedPlugin.__post_init__: `if "gradient_accumulation_steps" not in self.hf_ds_config.config: ...
    = 1`, accelerate 16cb6eb8), so neither accelerate's --gradient_accumulation_steps nor the Trainer's reaches it: the
    Trainer then finds 1 against its own --gradient_accumulation_steps (deepspeed_job.hf_mismatches)."""
    if env.get(CONFIG_FILE):
        origin = env[CONFIG_FILE]
        raw = read_ds_config(origin, hf_trainer=True)
        inserted = "gradient_accumulation_steps" not in raw
        raw.setdefault("gradient_accumulation_steps", 1)
        raw = plugin_config_file(raw, env, origin)
    else:
        origin, inserted = "accelerate DeepSpeed plugin (--zero_stage etc.)", False
        raw = {"train_micro_batch_size_per_gpu": AUTO, "train_batch_size": AUTO, "gradient_accumulation_steps": AUTO,
               "gradient_clipping": AUTO, "zero_optimization": {"stage": 2}}
        for var, (path, kind) in _PLUGIN_KEYS.items():  # "auto" (an accelerate config's) stays for the script to fill
            if env.get(var, "none").lower() not in ("none", "", AUTO):
                _fill(raw, path, kind(env[var]) if kind is not str else env[var].lower(), overwrite=True)
    mixed = env.get("ACCELERATE_MIXED_PRECISION", "no").lower() if mixed is None else mixed
    mixed_precision_sections(raw, mixed, origin, fill_auto=True)  # before any Trainer check
    return raw, origin, inserted


def _check_accelerator_accumulation(env: Mapping[str, str]) -> None:
    """Accelerator.__init__ (accelerate 16cb6eb8 accelerator.py) takes its accumulation from the launcher's variable
    over the script's own argument: `int(parse_choice_from_env("ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
    gradient_accumulation_steps))`; an accelerate config's `gradient_accumulation_steps: auto` reaches it as "auto"
    (DeepSpeedPlugin keeps that for the ds_config, the Trainer passes its own GradientAccumulationPlugin and never
    reads it), and int() raises before training starts."""
    value = env.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS")
    if value is None or value.strip().lstrip("+-").isdigit():
        return
    raise ConfigError(f"ACCELERATE_GRADIENT_ACCUMULATION_STEPS={value} (the accelerate config's or the environment's "
                      "gradient_accumulation_steps): a script driving Accelerator itself reads it as "
                      "int(parse_choice_from_env('ACCELERATE_GRADIENT_ACCUMULATION_STEPS', ...)) in "
                      "Accelerator.__init__ and stops with ValueError: invalid literal for int() with base 10: "
                      f"{value!r}. Give a number (or leave it out for the script's own --gradient_accumulation_steps).")


def accelerator_env_accumulation(env: Mapping[str, str]) -> tuple[int, Source] | None:
    """The accumulation a script driving Accelerator itself without DeepSpeed runs with when the environment sets
    ACCELERATE_GRADIENT_ACCUMULATION_STEPS: Accelerator.__init__ (accelerate 16cb6eb8 accelerator.py) builds its
    GradientAccumulationPlugin from `int(parse_choice_from_env("ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
    gradient_accumulation_steps))`, so the variable wins over the constructor's argument (the no_trainer examples
    pass their --gradient_accumulation_steps there). `accelerate launch --gradient_accumulation_steps` exports it only
    for the DeepSpeed plugin (utils/launch.py prepare_deepspeed_cmd_env); set in the environment it reaches the script
    under any launcher. None when it is not set."""
    if "ACCELERATE_GRADIENT_ACCUMULATION_STEPS" not in env:
        return None
    _check_accelerator_accumulation(env)
    value = int(env["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"])
    if value < 1:  # GradientAccumulationPlugin checks nothing (accelerate 16cb6eb8 accelerator.py)
        raise ConfigError(f"ACCELERATE_GRADIENT_ACCUMULATION_STEPS={value}: Accelerator.__init__ takes it over the "
                          "script's gradient_accumulation_steps; 0 divides by zero in accumulate() (step % num_steps) "
                          "and a negative count flips the loss's sign (backward divides the loss by it). Give 1 or "
                          "more, or unset it.")
    return value, Source(SourceKind.ENV, "ACCELERATE_GRADIENT_ACCUMULATION_STEPS (Accelerator.__init__ reads it over "
                         "its gradient_accumulation_steps argument)")


# DeepSpeedPlugin.__post_init__ defaults for what its variables leave unset.
_PLUGIN_DEFAULTS = {"ACCELERATE_DEEPSPEED_ZERO_STAGE": "2", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "none",
                    "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE": "none"}


def plugin_config_file(raw: dict[str, Any], env: Mapping[str, str], origin: str) -> dict[str, Any]:
    """A ds_config file given to DeepSpeedPlugin(hf_ds_config=...), as `accelerate launch --deepspeed_config_file`
    and the Trainer's `--deepspeed FILE` (TrainingArguments builds that plugin) both do: the file must have a
    zero_optimization section ('Please specify the ZeRO optimization config in the DeepSpeed config.'), and its
    "auto" stage / offload devices / accumulation / clipping take the plugin's values (fill_match, must_match=False):
    stage ACCELERATE_DEEPSPEED_ZERO_STAGE or 2, offload devices "none" unless their variables say."""
    if "zero_optimization" not in raw:
        raise ConfigError(f"{origin} has no zero_optimization section; Accelerate's DeepSpeedPlugin (used by `accelerate "
                          "launch` and by the Hugging Face Trainer's --deepspeed) raises 'Please specify the ZeRO "
                          "optimization config in the DeepSpeed config.' Add \"zero_optimization\": {\"stage\": N}.")
    for var, (path, kind) in _PLUGIN_KEYS.items():
        value = env.get(var, _PLUGIN_DEFAULTS.get(var, "auto"))
        if value.lower() not in ("auto", ""):
            _fill(raw, path, kind(value) if kind is not str else value.lower(), overwrite=False)
    return raw


def _fill(raw: dict[str, Any], path: tuple[str, ...], value: Any, overwrite: bool) -> None:
    """Set raw[path] to value where it is missing or "auto" (everywhere when the plugin built the config)."""
    node = raw
    for key in path[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            return
    if overwrite or node.get(path[-1], AUTO) == AUTO:
        node[path[-1]] = value


def mixed_precision_sections(raw: dict[str, Any], mixed: str, origin: str = "", fill_auto: bool = False) -> str | None:
    """DeepSpeedPlugin.set_mixed_precision (accelerate utils/dataclasses.py), run by AcceleratorState for `accelerate
    launch` jobs and the Trainer's --deepspeed FILE alike, adds the section of the Accelerator's mixed precision when
    the config lacks that section ({"bf16": {"enabled": true}} under bf16 or fp8, whatever the fp16 section says):
    `mixed` is ACCELERATE_MIXED_PRECISION, or "no" where the Trainer's --bf16 / --fp16 decide (TrainingArguments
    exports them as ACCELERATE_MIXED_PRECISION, after its fill_match has checked the file). A section still missing is
    left "auto", for frameworks/deepspeed_job.ds_precision to read from the Trainer's flags (fp32 without them).
    Adding a missing section is accelerate >= 0.16.0's (e60f3cab, #941; before, only a config with neither section got
    one) and fp8 -> bf16 >= 0.34.0's (a452327e, #2983); llmperf reads no accelerate version and follows today's.
    Returns the section it added (None: none). `origin` (the config's name) also asks for set_mixed_precision's
    refusal of the other dtype enabled in the file, which under the Trainer comes first: Trainer.__init__ builds the
    Accelerator, while the mismatches its trainer_config_process found are raised at train() (deepspeed_init ->
    trainer_config_finalize, transformers integrations/deepspeed.py).
    `fill_auto`: the plugin is the first to fill the config (`accelerate launch`'s plugin: Accelerator, or
    TrainingArguments.__post_init__ building DeepSpeedPlugin() before the Trainer's trainer_config_process):
    its fill_match(must_match=False) turns an "enabled": "auto" into `mixed == section` (bf16 for fp8 too)."""
    section = {"fp16": "fp16", "bf16": "bf16", "fp8": "bf16"}.get(mixed)
    other = "bf16" if section == "fp16" else "fp16"
    given = raw.get(other)
    if origin and section and isinstance(given, dict) and str(given.get("enabled", "False")).lower() == "true":
        raise ConfigError(f"{origin} enables {other} while accelerate's mixed precision is {mixed} "
                          f"(ACCELERATE_MIXED_PRECISION, accelerate launch --mixed_precision): DeepSpeedPlugin."
                          f"set_mixed_precision raises '`--mixed_precision` arg cannot be set to `{mixed}` when "
                          f"`{other}` is set in the DeepSpeed config file.' Make them agree.")
    added = section if section and section not in raw else None
    if added:
        raw[added] = {"enabled": True}
    for name in ("bf16", "fp16"):
        raw.setdefault(name, {"enabled": AUTO})
        if fill_auto and isinstance(raw[name], dict) and raw[name].get("enabled") == AUTO:
            raw[name] = {**raw[name], "enabled": name == section}
    return added


def plugin_mixed_precision(flags: FlagValues, env: Mapping[str, str], trainer: bool) -> str:
    """The mixed precision accelerate's DeepSpeed plugin of an `accelerate launch` job is given: the launcher's
    ACCELERATE_MIXED_PRECISION, which the Trainer's --fp16 / --bf16 replace first (TrainingArguments.__post_init__,
    transformers training_args.py: `if self.fp16: "fp16" elif self.bf16: "bf16"`) when `trainer`."""
    if trainer and (flags.get("fp16") or flags.get("bf16")):
        return "fp16" if flags.get("fp16") else "bf16"
    return env.get("ACCELERATE_MIXED_PRECISION", "no").lower()


def with_fp8_warning(ds: DsSettings, mixed: str) -> DsSettings:
    """accelerate's --mixed_precision fp8 under DeepSpeed: set_mixed_precision enables the bf16 section ('When training
    in fp8, we still rely on bf16 autocast for the core mixed precision', utils/dataclasses.py) and Accelerator swaps
    the Linear layers for its FP8 backend's (Transformer Engine, torchao or MS-AMP): priced as bf16, warned."""
    if mixed != "fp8":
        return ds
    return replace(ds, warnings=(*ds.warnings, "ACCELERATE_MIXED_PRECISION=fp8 (accelerate launch --mixed_precision "
                                 "fp8): priced as bf16, the DeepSpeed section accelerate enables for it; the FP8 GEMMs "
                                 "of its backend (Transformer Engine, torchao, MS-AMP) are not modelled"))


def trainer_mixed_precision(flags: FlagValues, env: Mapping[str, str]) -> str:
    """The mixed precision AcceleratorState hands set_mixed_precision under the Hugging Face Trainer: "no" where its
    --fp16 / --bf16 decide (ds_precision reads them), else the launcher's ACCELERATE_MIXED_PRECISION (`accelerate
    launch --mixed_precision bf16`), which TrainingArguments.__post_init__ keeps when neither flag is given
    (transformers training_args.py: 'if training args is specified, it will override the one specified in the
    accelerate config': `mixed_precision_dtype = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")`, replaced only
    by self.fp16 / self.bf16)."""
    if flags.get("fp16") or flags.get("bf16"):
        return "no"
    return env.get("ACCELERATE_MIXED_PRECISION", "no").lower()


def mixed_precision_source(section: str, env: Mapping[str, str]) -> Source:
    """Where a section mixed_precision_sections added under the Trainer comes from: not the file, so the Trainer's
    fill_match (which ran before accelerate added it) holds it to nothing (deepspeed_job.hf_mismatches)."""
    return Source(SourceKind.ENV, f"ACCELERATE_MIXED_PRECISION={env.get('ACCELERATE_MIXED_PRECISION')} (accelerate "
                  f"launch --mixed_precision): DeepSpeedPlugin.set_mixed_precision adds {{\"{section}\": {{\"enabled\": "
                  "true}} to a ds_config without that section (accelerate utils/dataclasses.py)")


_ACCELERATOR_EXAMPLES = ("nlp_example.py", "cv_example.py", "complete_nlp_example.py", "complete_cv_example.py")


def accelerator_script(script: str, script_args: Sequence[str]) -> bool:
    """A script that drives `Accelerator` itself rather than the Hugging Face Trainer: transformers' *_no_trainer.py
    examples, accelerate's examples (examples/by_feature/*.py, nlp_example.py ...), one taking their --with_tracking,
    or one whose code builds an Accelerator and no Trainer (frameworks/accelerator_code.py). Accelerator fills the ds_config's "auto" from its dataloader and plugin and checks nothing
    against the script's arguments (DeepSpeedPlugin.fill_match must_match=False), unlike the Trainer's fill_match."""
    name = os.path.basename(script)
    return (name.endswith("_no_trainer.py") or name in _ACCELERATOR_EXAMPLES or "/by_feature/" in script
            or "--with_tracking" in script_args or drives_accelerator(script))

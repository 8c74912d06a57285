"""Hugging Face Accelerate's DeepSpeed plugin: the ds_config a script started by `accelerate launch --use_deepspeed`
runs with (its Trainer or `Accelerator.prepare` builds the engine from it; the script itself passes no --deepspeed).

accelerate/utils/dataclasses.py DeepSpeedPlugin.__post_init__ reads what the launcher exported
(launch/accelerate.py): ACCELERATE_DEEPSPEED_CONFIG_FILE, when given, is the config (json.load; values set there
win, its "auto" values are filled from the plugin: zero_stage, gradient_accumulation_steps, gradient_clipping,
offload devices); without a file the plugin builds one: ZeRO stage ACCELERATE_DEEPSPEED_ZERO_STAGE (default 2),
gradient_accumulation_steps / gradient_clipping from their variables (default "auto"), the batch keys "auto".
`DeepSpeedPlugin.set_mixed_precision` adds the fp16 / bf16 section of the mixed precision when the config has none.
"""

from __future__ import annotations

from typing import Any, Mapping

from llmperf_hook.frameworks.deepspeed_config import AUTO, read_ds_config

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


def accelerate_ds_config(env: Mapping[str, str]) -> tuple[dict[str, Any], str]:
    """(ds_config dict, its origin for messages) of an `accelerate launch --use_deepspeed` job."""
    if env.get(CONFIG_FILE):
        raw, origin = read_ds_config(env[CONFIG_FILE], hf_trainer=True), env[CONFIG_FILE]
    else:
        raw = {"train_micro_batch_size_per_gpu": AUTO, "train_batch_size": AUTO, "gradient_accumulation_steps": AUTO,
               "gradient_clipping": AUTO, "zero_optimization": {"stage": 2}}
        origin = "accelerate DeepSpeed plugin (--zero_stage etc.)"
    for var, (path, kind) in _PLUGIN_KEYS.items():
        if env.get(var, "none").lower() not in ("none", ""):
            _fill(raw, path, kind(env[var]) if kind is not str else env[var].lower(), overwrite=not env.get(CONFIG_FILE))
    _mixed_precision(raw, env.get("ACCELERATE_MIXED_PRECISION", "no").lower())
    return raw, origin


def _fill(raw: dict[str, Any], path: tuple[str, ...], value: Any, overwrite: bool) -> None:
    """Set raw[path] to value where it is missing or "auto" (everywhere when the plugin built the config)."""
    node = raw
    for key in path[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            return
    if overwrite or node.get(path[-1], AUTO) == AUTO:
        node[path[-1]] = value


def _mixed_precision(raw: dict[str, Any], mixed: str) -> None:
    """set_mixed_precision adds the section of the Accelerator's mixed precision when the config has neither:
    accelerate's --mixed_precision, else the Trainer's --bf16 / --fp16 (TrainingArguments exports it as
    ACCELERATE_MIXED_PRECISION), left "auto" here for frameworks/deepspeed_job.ds_precision to read from the
    Trainer's flags; an "auto" `enabled` likewise."""
    if "fp16" in raw or "bf16" in raw:
        return
    if mixed in ("fp16", "bf16"):
        raw[mixed] = {"enabled": True}
    else:
        raw.update({"bf16": {"enabled": AUTO}, "fp16": {"enabled": AUTO}})

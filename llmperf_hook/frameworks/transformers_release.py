"""Which transformers release runs a Hugging Face Trainer job, and the releases whose Trainer llmperf does not model.

The release is LLMPERF_TRANSFORMERS_VERSION when the job's environment (or a `VAR=value` word before the launch
command) gives it, else unknown: the Trainer of transformers 4.30.0 and later, which llmperf models. From 4.30.0 on the
Trainer runs on Accelerate (it requires accelerate >= 0.20.1; DDP, FSDP and DeepSpeed handling moved there:
huggingface/transformers#23151 "accelerate DDP integrate" and #23236 "accelerate deepspeed and gradient accumulation
integrate", opened 2023-05-09 after #23168's FSDP move, released in 4.30.0): TrainingArguments hands a
`--deepspeed FILE` to accelerate's DeepSpeedPlugin, whose __post_init__ writes gradient_accumulation_steps 1 into a
file without the key and refuses one without a zero_optimization section (frameworks/accelerate_plugin.py), and
`accelerate launch --use_deepspeed` / `--use_fsdp` configure the Trainer's engine through ACCELERATE_* variables.
Before 4.30.0 the Trainer set DeepSpeed up itself (transformers.deepspeed.deepspeed_init with HfTrainerDeepSpeedConfig:
no plugin, so neither rule, and DeepSpeed derives an absent accumulation from the batch keys) and read none of
accelerate's variables, so an `accelerate launch --use_deepspeed` run of it trained without DeepSpeed. Such a job is
refused with the release named rather than priced as a later Trainer runs it.
"""

from __future__ import annotations

from typing import Mapping

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.accelerate_plugin import accelerator_script
from llmperf_hook.frameworks.deepspeed_release import Version, parse_version
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.launch.sizing import TRANSFORMERS_VERSION_ENV

ACCELERATE_TRAINER_VERSION: Version = (4, 30, 0)
"""First transformers release whose Trainer runs on Accelerate (the module docstring)."""
_ACCELERATE_PLUGINS = ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP")
"""What `accelerate launch --use_deepspeed` / `--use_fsdp` export for the script (launch/accelerate.py)."""


def trainer_release(env: Mapping[str, str]) -> Version | None:
    """The job's transformers release from LLMPERF_TRANSFORMERS_VERSION; None when it is not given."""
    given = env.get(TRANSFORMERS_VERSION_ENV)
    if given is None:
        return None
    version = parse_version(given)
    if version is None:
        raise ConfigError(f"{TRANSFORMERS_VERSION_ENV}={given!r} (environment) is not a transformers version; give it "
                          "as MAJOR.MINOR.PATCH, e.g. 4.29.2, or unset it.")
    return version


def check_trainer_release(env: Mapping[str, str], flags: FlagValues, framework: str, script: str,
                          script_args: tuple[str, ...]) -> None:
    """Refuse (exit 2) a Trainer job on a transformers release before 4.30.0 whose setup differs there: one with
    DeepSpeed (`--deepspeed FILE`, or accelerate's DeepSpeed plugin) or started with accelerate's FSDP plugin. A
    script driving Accelerator itself has no Trainer; a plain DDP Trainer job runs alike and is not refused."""
    version = trainer_release(env)
    if version is None or version >= ACCELERATE_TRAINER_VERSION or accelerator_script(script, script_args):
        return
    plugins = [name for name in _ACCELERATE_PLUGINS if env.get(name, "").lower() == "true"]
    deepspeed = isinstance(flags.get("deepspeed"), str)
    if not (plugins or (deepspeed and framework == "hf-deepspeed")):
        return
    given = ".".join(map(str, version))
    how = (f"{flags.spelling('deepspeed')} {flags.get('deepspeed')}" if deepspeed else
           f"accelerate launch's plugin ({', '.join(plugins)}=true)")
    raise ConfigError(
        f"{TRANSFORMERS_VERSION_ENV}={env[TRANSFORMERS_VERSION_ENV]} (environment): the Hugging Face Trainer of "
        f"transformers {given} predates its Accelerate-based Trainer (4.30.0), and this job runs it with {how}. "
        "Before 4.30.0 the Trainer set DeepSpeed up itself (transformers.deepspeed.deepspeed_init, "
        "HfTrainerDeepSpeedConfig: no accelerate DeepSpeedPlugin, so no accumulation of 1 is written into a file "
        "without the key and no zero_optimization section is required) and read none of accelerate launch's "
        "ACCELERATE_* settings (an `accelerate launch --use_deepspeed` run trained without DeepSpeed); llmperf models "
        "the Trainer of 4.30.0 and later. Predict the job as run on transformers >= 4.30.0 (set "
        f"{TRANSFORMERS_VERSION_ENV} to that release, or unset it), or launch it with the DeepSpeed launcher and "
        "--deepspeed on the release it uses.")

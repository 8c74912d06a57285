"""Whether tune may switch a Hugging Face Trainer job's activation checkpointing (DDP or FSDP, no ds_config).

The Trainer's `--gradient_checkpointing` (transformers TrainingArguments.gradient_checkpointing, a bool: `True` /
`False` after the flag) calls `model.gradient_checkpointing_enable()`, which recomputes every decoder layer: priced
as full recompute of each layer, as under DeepSpeed (tune/candidates._recompute_modes). It works under the Trainer's
`--fsdp` too, with one exception: FSDP's own activation checkpointing (the Trainer's `--fsdp_config` key
`activation_checkpointing`, or accelerate's FSDP plugin `fsdp_activation_checkpointing`) beside
`--gradient_checkpointing` makes the Trainer stop at start-up ('The activation_checkpointing in FSDP config and the
gradient_checkpointing in training arg can't be set to True simultaneously', transformers trainer.py
create_accelerator_and_postprocess). Such a job keeps its checkpointing as it is, as does a script of the user's own
whose argparse parser defines no --gradient_checkpointing (a *_no_trainer.py script: argparse stops on the flag,
'unrecognized arguments'; tune/script_options.py reads the parser without running it), and a script driving
Accelerator itself with no parser llmperf can read (the flag would not reach its model).
"""

from __future__ import annotations

import ast
from typing import Sequence

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.accelerate_plugin import accelerator_script
from llmperf_hook.frameworks.fsdp_sharding import FSDP_CONFIG_FLAGS, fsdp_checkpointing_on, read_fsdp_config
from llmperf_hook.frameworks.script_tree import script_tree
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.provenance import SourceKind
from llmperf_hook.tune.argv_edit import find_flag, flag_value, option_key
from llmperf_hook.tune.candidate import hf_batch_flags
from llmperf_hook.tune.fsdp_config_apply import switchable_fsdp_config
from llmperf_hook.tune.script_options import script_options

FSDP_CONFIG = FSDP_CONFIG_FLAGS
_TRAINER_SWITCH = "--gradient_checkpointing"


def trainer_switches_checkpointing(cfg: TrainingConfig) -> bool:
    """A plain torch job run by the Trainer's flags (tune/candidate.hf_batch_flags) whose checkpointing is the
    Trainer's switch, its --fsdp_config's (kept by checkpointing_kept, with the reason) or off: not accelerate's FSDP
    plugin (a launcher setting, which the Trainer refuses beside the switch) nor a script's own flag."""
    source = cfg.sources.get("recompute")
    if cfg.framework != "torch" or not hf_batch_flags(cfg) or source is None:
        return False
    return source.kind == SourceKind.DEFAULT or (source.kind == SourceKind.ARGV and (
        option_key(source.detail) == option_key(_TRAINER_SWITCH) or source.detail.startswith(FSDP_CONFIG)))


def checkpointing_kept(script: str, script_args: Sequence[str]) -> str | None:
    """Why a job that trainer_switches_checkpointing keeps its checkpointing after all (None: tune switches it)."""
    own = script_options(script)  # None: HfArgumentParser (every TrainingArguments flag) or no parser of its own
    if own is not None and not {"--gradient_checkpointing", "--gradient-checkpointing"} & own.options:
        return (f"{script} parses its own arguments (argparse) and defines no --gradient_checkpointing, so argparse "
                "would stop the job on it ('unrecognized arguments')")
    if own is None and accelerator_script(script, script_args) and not _builds(script, "HfArgumentParser"):
        return (f"{script} drives Accelerate's Accelerator itself, not the Trainer, and no parser llmperf can read in "
                "it defines --gradient_checkpointing, so the flag may stop the job or never reach its model")
    return _fsdp_config_keeps_checkpointing(script_args)


def _builds(script: str, name: str) -> bool:
    """The script's code calls `name(...)` (bare or as an attribute: transformers.HfArgumentParser(...))."""
    tree = script_tree(script)
    return tree is not None and any(
        isinstance(n, ast.Call) and (getattr(n.func, "id", None) == name or getattr(n.func, "attr", None) == name)
        for n in ast.walk(tree))


def _fsdp_config_keeps_checkpointing(script_args: Sequence[str]) -> str | None:
    """Why the Trainer's `--fsdp_config` keeps the job's checkpointing as it is (None: it does not, or no such
    flag): its `activation_checkpointing` is on, or llmperf cannot read it to tell. Without `--fsdp` the Trainer never
    reads it (transformers training_args.py _process_fsdp_args: `if not self.fsdp: return None`; older releases only
    warn "... is useful only when `--fsdp` is specified"), FSDP is off, and the switch is free (predict prices the job
    without it too: frameworks/fsdp_sharding.py reads the config under --fsdp only)."""
    hits = find_flag(list(script_args), FSDP_CONFIG)
    if not hits or not flag_value(list(script_args), ("--fsdp",)) or switchable_fsdp_config(script_args) is not None:
        return None  # no FSDP, or its config's checkpointing on, which tune switches there (tune/fsdp_config_apply)
    value = flag_value(list(script_args), FSDP_CONFIG) or ""  # argparse keeps the last
    raw = read_fsdp_config(value)
    if raw is None:
        return (f"{hits[-1].name} {value!r} is not a JSON file or JSON object llmperf can read, so whether its "
                "activation_checkpointing is on is unknown")
    try:
        on = fsdp_checkpointing_on(raw, f"{hits[-1].name} {value}")  # as frameworks/fsdp_sharding reads it
    except ConfigError:  # a word the Trainer refuses (under --fsdp, predict refused it already)
        return (f"{hits[-1].name} {value}'s activation_checkpointing is no truth value the Trainer reads, so whether "
                "it is on is unknown")
    if on:
        return (f"{hits[-1].name} {value} turns on FSDP's activation_checkpointing, and the Trainer refuses "
                "--gradient_checkpointing beside it ('can't be set to True simultaneously', transformers trainer.py)")
    return None

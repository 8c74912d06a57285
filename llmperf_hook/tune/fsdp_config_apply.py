"""FSDP's own activation checkpointing as a tuned knob: the Hugging Face Trainer's `--fsdp_config`.

Under the Trainer's `--fsdp`, TrainingArguments loads `--fsdp_config` (a JSON file, or a JSON object in its place),
strips `fsdp_` from its keys and hands accelerate's FSDP plugin `activation_checkpointing` (transformers
training_args.py _process_fsdp_args: `str_to_bool(str(v).lower())`), which wraps each decoder layer in
checkpoint_wrapper: priced as full recompute (frameworks/fsdp_sharding.py). Where that key is on, the Trainer's own
`--gradient_checkpointing` cannot be added beside it (trainer.py: "can't be set to True simultaneously"), so tune
switches the config's key instead: on is the command as it is, off is a copy of the config with the key false
(`fsdp.llmperf-tuned.json` beside it; the user's file is never written: apply.write_planned_files creates
exclusively), or, for a JSON object given in argv, the same object with the key false in its place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.fsdp_sharding import FSDP_CONFIG_FLAGS, fsdp_checkpointing_on, read_fsdp_config
from llmperf_hook.tune import argv_edit as ed
from llmperf_hook.tune.ds_config_rewrite import fresh_path

KEYS = ("activation_checkpointing", "fsdp_activation_checkpointing")
"""The spellings TrainingArguments reads (it strips `fsdp_`; the last one it meets wins, so both are set)."""


@dataclass(frozen=True)
class FsdpConfigRef:
    """The command's --fsdp_config whose activation_checkpointing is on."""

    value: str
    """As argv gives it: a path, or a JSON object."""
    text: dict[str, Any]
    """Its JSON as written (keys not stripped)."""


def switchable_fsdp_config(script_args: Sequence[str], cwd: Path | None = None) -> FsdpConfigRef | None:
    """The command's --fsdp_config when tune can switch its checkpointing: --fsdp given (else the Trainer never
    reads the config), the config readable and its activation_checkpointing on."""
    args = list(script_args)
    value = ed.flag_value(args, FSDP_CONFIG_FLAGS)
    if not value or not ed.flag_value(args, ("--fsdp",)):
        return None
    inline = value.lstrip().startswith("{")
    shown = value if inline or Path(value).is_absolute() or cwd is None else str(cwd / value)
    stripped = read_fsdp_config(shown)
    if stripped is None:
        return None
    try:
        if not fsdp_checkpointing_on(stripped, f"--fsdp_config {value}"):
            return None
    except ConfigError:
        return None
    return FsdpConfigRef(value, json.loads(value if inline else Path(shown).read_text(encoding="utf-8")))


def checkpointing_off(args: list[str], ref: FsdpConfigRef, cwd: Path,
                      notes: list[str]) -> tuple[list[str], dict[str, str]]:
    """`args` pointed at a copy of the config with FSDP's checkpointing off, and the file to create (none for a JSON
    object given in argv, rewritten in place)."""
    tuned = {k: (False if k in KEYS else v) for k, v in ref.text.items()}
    content = json.dumps(tuned, indent=2) + "\n"
    if ref.value.lstrip().startswith("{"):
        notes.append("--fsdp_config's JSON object in argv rewritten with activation_checkpointing false")
        return ed.set_value(args, FSDP_CONFIG_FLAGS, json.dumps(tuned)), {}
    original = Path(ref.value) if Path(ref.value).is_absolute() else cwd / ref.value
    target = fresh_path(original, content)
    shown = str(target) if Path(ref.value).is_absolute() else str(Path(ref.value).parent / target.name)
    out = ed.set_value(args, FSDP_CONFIG_FLAGS, shown)
    if target.exists():
        notes.append(f"FSDP config {shown} (the copy of {ref.value} with activation_checkpointing false an earlier "
                     "run wrote, reused)")
        return out, {}
    notes.append(f"new FSDP config {shown} (copy of {ref.value} with activation_checkpointing false; the original is "
                 "untouched)")
    return out, {str(target): content}

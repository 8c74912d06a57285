"""Options a Megatron-LM entry script would refuse: argparse's "unrecognized arguments" at start-up.

Megatron-LM's pretrain_gpt.py (and the other entry points of Megatron-LM and Megatron-DeepSpeed, as
megatron_entry_points lists them: pretrain_*.py, finetune*.py, tasks/main.py, ...) parse with
`ArgumentParser(allow_abbrev=False).parse_args()`: an option no release defines, a misspelling
(`--tensor-model-paralel-size`) or the underscore spelling of a dashed flag (`--micro_batch_size`) ends the job
before training starts. Those are rejected here with the closest real names. A custom script that takes
Megatron-style flags may add options of its own (extra_args_provider), so for it unknown names only warn.
"""

from __future__ import annotations

import difflib
import os
from typing import Sequence

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.megatron_entry_points import entry_point_options, megatron_entry_point


def unknown_option_names(script_args: Sequence[str], script: str = "") -> list[str]:
    """`--name` words (before any `=value`) that no Megatron-LM or Megatron-DeepSpeed release defines, nor the entry
    point `script` itself (its extra_args_provider), in order."""
    from llmperf_hook.frameworks.megatron_known_flags import MEGATRON_OPTION_NAMES

    extra = entry_point_options(script, script_args)
    unknown: list[str] = []
    for word in script_args:
        if not word.startswith("--") or word == "--":
            continue
        name = word.split("=", 1)[0]
        if name[2:] not in MEGATRON_OPTION_NAMES and name[2:] not in extra and name not in unknown:
            unknown.append(name)
    return unknown


def _suggestion(name: str) -> str:
    from llmperf_hook.frameworks.megatron_known_flags import MEGATRON_OPTION_NAMES

    dashed = name[2:].replace("_", "-")
    if dashed in MEGATRON_OPTION_NAMES:
        return f"--{dashed}"
    close = difflib.get_close_matches(name[2:], MEGATRON_OPTION_NAMES, n=1, cutoff=0.8)
    return f"--{close[0]}" if close else ""


def _respelled(name: str) -> bool:
    """`--under_score` or `--no-X` spellings of a real flag: llmperf reads them as that flag (and warns)."""
    from llmperf_hook.frameworks.megatron_known_flags import MEGATRON_OPTION_NAMES

    dashed = name[2:].replace("_", "-")
    return dashed in MEGATRON_OPTION_NAMES or (dashed.startswith("no-") and dashed[3:] in MEGATRON_OPTION_NAMES)


def _reading(name: str) -> str:
    from llmperf_hook.frameworks.megatron_known_flags import MEGATRON_OPTION_NAMES

    dashed = name[2:].replace("_", "-")
    return f"--{dashed}" if dashed in MEGATRON_OPTION_NAMES else f"--{dashed[3:]} switched off"


_BOOL_TEXT = frozenset({"true", "false", "1", "0", "yes", "no"})


def switch_values(script_args: Sequence[str]) -> list[str]:
    """`--bf16 True` / `--bf16=false` on a Megatron switch (store_true): argparse refuses both ('ignored explicit
    argument', or 'unrecognized arguments: True'), although Hugging Face's parser accepts them."""
    from llmperf_hook.frameworks.script_flags import SCRIPT_FLAGS

    bad: list[str] = []
    for i, word in enumerate(script_args):
        name, eq, value = word.partition("=")
        flag = SCRIPT_FLAGS.get("--" + name.lstrip("-").replace("_", "-")) if word.startswith("--") else None
        if flag is None or flag.kind not in ("true", "false"):
            continue
        nxt = value if eq else (script_args[i + 1] if i + 1 < len(script_args) else "")
        if nxt.lower() in _BOOL_TEXT and (eq or not nxt.startswith("-")):
            bad.append(f"{name}{'=' if eq else ' '}{nxt}")
    return bad


def check_megatron_options(script: str, script_args: Sequence[str]) -> list[str]:
    """ConfigError for an entry script given options Megatron does not define; a warning for a custom script and
    for other spellings of real flags (`--micro_batch_size`, `--no-swiglu`), which llmperf reads as the flag."""
    valued = switch_values(script_args) if megatron_entry_point(script) else []
    if valued:
        raise ConfigError(
            f"{os.path.basename(script)} would stop at start-up: {', '.join(valued)} gives a value to a Megatron switch "
            "(argparse store_true: 'ignored explicit argument' / 'unrecognized arguments'). Write the switch alone to turn "
            "it on, and leave it out to keep it off.")
    unknown = unknown_option_names(script_args, script)
    respelled = [name for name in unknown if _respelled(name)]
    warnings = [f"{name} is read by llmperf as {_reading(name)}, but Megatron's parser defines no such option and would "
                "reject it; use the spelling Megatron defines" for name in respelled]
    unknown = [name for name in unknown if name not in respelled]
    if not unknown:
        return warnings
    hints = [f"{name} (did you mean {hint}?)" if (hint := _suggestion(name)) else name for name in unknown]
    if megatron_entry_point(script):
        raise ConfigError(
            f"{os.path.basename(script)} would stop at start-up: Megatron's argument parser does not know "
            f"{', '.join(hints)} (argparse 'unrecognized arguments'; Megatron parses with allow_abbrev=False, and its "
            "flags are spelled with dashes). Fix or remove these options. (llmperf takes pretrain_*.py, finetune*.py, "
            "train_rl.py and tasks/main.py for Megatron's own entry points; a script of yours that defines these options "
            "itself needs another name.)"
        )
    return warnings + [f"options unknown to Megatron-LM: {', '.join(hints)}; {os.path.basename(script)} must define them "
                       "itself (extra_args_provider), or Megatron's parser stops the job"]

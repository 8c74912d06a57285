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
import re
from typing import Sequence

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.megatron_entry_points import (BIGSCIENCE_MARKS, entry_point_options, fork_parser_options,
                                                            megatron_entry_point)


def _known_options(fork: tuple[str, frozenset[str]] | None) -> frozenset[str]:
    """What the parser running the script defines: a fork's own list where it is known in full (`fork`, from
    megatron_entry_points.fork_parser_options), else every Megatron-LM / Megatron-DeepSpeed release's options."""
    from llmperf_hook.frameworks.megatron_known_flags import MEGATRON_OPTION_NAMES

    return fork[1] if fork is not None else MEGATRON_OPTION_NAMES


def unknown_option_names(script_args: Sequence[str], script: str = "") -> list[str]:
    """`--name` words (before any `=value`) that no Megatron-LM or Megatron-DeepSpeed release defines (or, for a fork
    known in full, the fork does not), nor the entry point `script` itself (its extra_args_provider), in order."""
    return _unknown_names(script_args, script, _known_options(fork_parser_options(script, script_args)))


def _unknown_names(script_args: Sequence[str], script: str, known: frozenset[str]) -> list[str]:
    """unknown_option_names against the options `known` to the job's parser (_known_options)."""
    extra = entry_point_options(script, script_args)
    unknown: list[str] = []
    for word in script_args:
        if not word.startswith("--") or word == "--":
            continue
        name = word.split("=", 1)[0]
        if name[2:] not in known and name[2:] not in extra and name not in unknown:
            unknown.append(name)
    return unknown


def _suggestion(name: str, known: frozenset[str]) -> str:
    dashed = name[2:].replace("_", "-")
    if dashed in known:
        return f"--{dashed}"
    close = difflib.get_close_matches(name[2:], known, n=1, cutoff=0.8)
    return f"--{close[0]}" if close else ""


def _respelled(name: str, known: frozenset[str]) -> bool:
    """`--under_score` or `--no-X` spellings of a real flag: llmperf reads them as that flag (and warns)."""
    dashed = name[2:].replace("_", "-")
    return dashed in known or (dashed.startswith("no-") and dashed[3:] in known)


def _reading(name: str, known: frozenset[str]) -> str:
    dashed = name[2:].replace("_", "-")
    return f"--{dashed}" if dashed in known else f"--{dashed[3:]} switched off"


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


_MULTI_VALUED = frozenset({"--cp-comm-type", "--num-experts", "--recompute-modules", "--hierarchical-context-parallel-sizes",
                           "--rampup-batch-size"})
"""Options read as one value by llmperf whose argparse nargs takes several words: --cp-comm-type nargs='+'
(Megatron-LM arguments.py), --num-experts nargs='+' (Megatron-DeepSpeed megatron/arguments.py, one count per
layer), --rampup-batch-size nargs='*', and the List-typed TransformerConfig fields --recompute-modules and
--hierarchical-context-parallel-sizes (nargs='+' through argument_utils.py)."""


def _words_taken(script_args: Sequence[str], i: int) -> int | None:
    """How many words after script_args[i] (an option) Megatron's argparse gives it, where llmperf knows the option's
    nargs (frameworks/script_flags.py, checked against Megatron-LM's and Megatron-DeepSpeed's arguments.py); None for
    an option whose nargs llmperf does not hold, or that takes a varying number (every word up to the next option)."""
    from llmperf_hook.frameworks.flags import ONE_OR_MORE
    from llmperf_hook.frameworks.megatron_known_flags import MEGATRON_OPTION_NAMES
    from llmperf_hook.frameworks.script_flags import SCRIPT_FLAGS

    name, eq, _ = script_args[i].partition("=")
    if eq and name[2:] in MEGATRON_OPTION_NAMES:  # `--cp-comm-type=p2p a2a`: argparse's consume_optional gives an
        return 0  # explicit `=value` that one value whatever the nargs ('+', '*'), so the next word is positional
    flag = SCRIPT_FLAGS.get(name)
    if flag is None and name.startswith("--no-"):  # the store_false twin of a switch
        switch = SCRIPT_FLAGS.get("--" + name[5:])
        flag = switch if switch is not None and switch.kind == "true" else None
    if flag is None or name in _MULTI_VALUED or flag.nargs == ONE_OR_MORE:
        return None
    if eq or flag.kind in ("true", "false", "path_or_true"):  # --deepspeed: store_true in deepspeed.add_config_arguments
        return 0
    return flag.nargs


def stray_words(script_args: Sequence[str]) -> list[str]:
    """Words argparse would leave over as positionals: Megatron's parser defines none, so parse_args stops with
    'unrecognized arguments: foo' (`pretrain_gpt.py --num-layers 2 foo`). Only where every option before the word
    has a known nargs since the last word that could have been a value."""
    stray: list[str] = []
    free = False  # may the next plain word be a value of the option before it? (none before the first word)
    i = 0
    while i < len(script_args):
        word = script_args[i]
        if word == "--":  # argparse: every word after it is a positional
            return stray + list(script_args[i + 1:])
        if word.startswith("-") and word != "-" and not _NEGATIVE.match(word):
            taken = _words_taken(script_args, i)
            free, i = taken is None, i + 1
            for _ in range(min(taken or 0, len(script_args) - i)):
                i = _placeholder_end(script_args, i)
            continue
        end = _placeholder_end(script_args, i)
        if not free:
            stray.append(" ".join(script_args[i:end]))
        i = end
    return stray


def _placeholder_end(script_args: Sequence[str], i: int) -> int:
    """Past a `<PATH TO CHECKPOINTS DIRECTORY>` placeholder (Megatron-LM's example scripts leave these for the user to
    fill in with one path), split into words by the shell: read as the one value it stands for."""
    if script_args[i].startswith("<") and not script_args[i].endswith(">"):
        for j in range(i + 1, len(script_args)):
            if script_args[j].startswith("-"):
                break
            if script_args[j].endswith(">"):
                return j + 1
    return i + 1


_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")
"""argparse's _negative_number_matcher: '-1' is a value, not an option (Megatron defines no option like it)."""


def _fork_refusal(script: str, script_args: Sequence[str], fork: str, unknown: list[str], hints: list[str]) -> str:
    """The refusal of options BLOOM's fork does not define, naming the option that told the fork and which of the
    unknown ones are Megatron-LM's (the fork predates them)."""
    from llmperf_hook.frameworks.megatron_known_flags import MEGATRON_OPTION_NAMES

    mark = next(w.split("=", 1)[0] for w in script_args if w.split("=", 1)[0] in BIGSCIENCE_MARKS)
    newer = [name for name in unknown if name[2:].replace("_", "-") in MEGATRON_OPTION_NAMES]
    later = (f" {', '.join(newer)} {'is an option' if len(newer) == 1 else 'are options'} of Megatron-LM or "
             "microsoft's Megatron-DeepSpeed that the fork lacks (it has no sequence parallelism, no distributed "
             "optimizer, no --no-pipeline-parallel, no --recompute-granularity: its full recompute is "
             "--checkpoint-activations).") if newer else ""
    return (f"{os.path.basename(script)} would stop at start-up: it runs {fork} (BLOOM's fork, known by {mark}, an "
            f"option only that fork defines), whose argument parser (its megatron/arguments.py, allow_abbrev=False) does "
            f"not know {', '.join(hints)}: argparse 'unrecognized arguments'.{later} Fix or remove these options.")


_UNEXPANDED = re.compile(r"\$(?:[A-Za-z_]\w*|\{[A-Za-z_]\w*\})")
"""A word that is a launch-script variable left as written (`$ARGS`): its value only running the script gives."""


def check_megatron_options(script: str, script_args: Sequence[str]) -> list[str]:
    """ConfigError for an entry script given options Megatron does not define; a warning for a custom script and
    for other spellings of real flags (`--micro_batch_size`, `--no-swiglu`), which llmperf reads as the flag."""
    valued = switch_values(script_args) if megatron_entry_point(script) else []
    if valued:
        raise ConfigError(
            f"{os.path.basename(script)} would stop at start-up: {', '.join(valued)} gives a value to a Megatron switch "
            "(argparse store_true: 'ignored explicit argument' / 'unrecognized arguments'). Write the switch alone to turn "
            "it on, and leave it out to keep it off.")
    yaml_cfg = [w for w in script_args if w.split("=", 1)[0] in ("--yaml-cfg", "--yaml_cfg")]
    if yaml_cfg and megatron_entry_point(script):
        raise ConfigError(
            f"{os.path.basename(script)} is given {yaml_cfg[-1].split('=', 1)[0]}: Megatron-LM then takes every argument "
            "from that YAML file and ignores the command line's ('warning using experimental yaml arguments feature, "
            "argparse arguments will be ignored', megatron/training/yaml_arguments.py load_yaml), and llmperf does not "
            "read the file, so the flags it sees are not the job's. Give the YAML's settings as flags instead.")
    stray = stray_words(script_args) if megatron_entry_point(script) else []
    if stray and all(map(_UNEXPANDED.fullmatch, stray)):  # a launch-script variable llmperf could not give a value
        raise ConfigError(
            f"{', '.join(repr(w) for w in stray)} reach{'es' if len(stray) == 1 else ''} the launch line unexpanded, "
            f"so {os.path.basename(script)} would see {'it' if len(stray) == 1 else 'them'} as a positional argument, "
            "which Megatron's argument parser does not take (argparse parse_args: 'unrecognized arguments'); the job "
            "gets the variable's value instead. Give the launch line after `--` with the value the job takes.")
    if stray:
        raise ConfigError(
            f"{os.path.basename(script)} would stop at start-up: Megatron's argument parser takes no positional "
            f"arguments, and {', '.join(repr(w) for w in stray)} follow{'s' if len(stray) == 1 else ''} no option that "
            f"takes {'it' if len(stray) == 1 else 'them'} (argparse parse_args: 'unrecognized arguments'). Remove "
            f"{'it' if len(stray) == 1 else 'them'}, or give the option whose value it is; a value with blanks (\"0:16 "
            "2.4B:320\") reaches the script as several words when the variable or array holding it is expanded unquoted.")
    fork = fork_parser_options(script, script_args)  # worked out once: it scans every word for the fork's marks
    known = _known_options(fork)
    unknown = _unknown_names(script_args, script, known)
    respelled = [name for name in unknown if _respelled(name, known)]
    warnings = [f"{name} is read by llmperf as {_reading(name, known)}, but Megatron's parser defines no such option and "
                "would reject it; use the spelling Megatron defines" for name in respelled]
    unknown = [name for name in unknown if name not in respelled]
    if not unknown:
        return warnings
    hints = [f"{name} (did you mean {hint}?)" if (hint := _suggestion(name, known)) else name for name in unknown]
    if fork is not None:
        raise ConfigError(_fork_refusal(script, script_args, fork[0], unknown, hints))
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

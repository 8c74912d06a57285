"""Which options of the launch a command run on an undecided condition may have set.

llmperf reads every branch of a condition it cannot decide (`if [ "$(hostname)" = login ]`), so the launch line may
hold what two branches give, which no single run of bash does. A framework rule on a pair of flags (Megatron-LM's
single data source, --fp16 with --bf16) softens only where an undecided command could have given one of them: the
command names the option (`ARGS+=(--mock-data)`, `DATA_ARGS="--data-path /d"`), or it assigns a variable expanded as
the option's value (`DATA_PATH=/d` for `--data-path $DATA_PATH`, on the launch line or in `DATA_ARGS="--data-path
$DATA_PATH"`), or it assigns a value that expands a variable holding options (`ARGS="$MOCK"` after
`MOCK="--mock-data"`). Anything else run on an undecided condition (`mkdir`, `NCCL_DEBUG=INFO`) leaves the rule as it
is.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

_OPTION = re.compile(r"(?<![\w$-])(--?[A-Za-z][\w-]*)")
"""An option word of a command's text (`--data-path`, `--data-path=/d`: its name)."""
_ASSIGNED = re.compile(r"(?:^|[\s;&|(])(?:export\s+|local\s+|declare\s+-\w+\s+)?([A-Za-z_][A-Za-z0-9_]*)\+?=")
_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_UNSET = re.compile(r"(?:^|[\s;&|(])unset\s+(?:-v\s+)?((?:[A-Za-z_]\w*(?:\s+|$))+)")
"""`unset NAME ...` / `unset -v NAME ...`: the options NAME gave are gone (bash manual 4.1, `unset`)."""
_OPTION_BEFORE = re.compile(r"(?<![\w$-])(--?[A-Za-z][\w-]*)(?:=|\s+)[\"']?\$\{?([A-Za-z_][A-Za-z0-9_]*|[0-9]+)"
                            r"(?![A-Za-z0-9_])")
"""An option and the variable or positional parameter expanded as its value (`--data-path $NAME`,
`--data-path="${NAME}"`, `--load $1`)."""


@dataclass(frozen=True)
class OptionIndex:
    """What every line of the script says, read once (each question is then a look-up, so the whole reading stays
    linear in the script's length instead of lines x undecided commands)."""

    options_of_value: Mapping[str, frozenset[str]]
    """Name -> the options before an expansion of it, in any line."""
    options_assigning: Mapping[str, frozenset[str]]
    """Name -> the option words of the lines that assign it."""


def option_index(texts: Sequence[str]) -> OptionIndex:
    """The index of `texts`: every command the script read, the launch line included."""
    before: dict[str, set[str]] = defaultdict(set)
    assigning: dict[str, set[str]] = defaultdict(set)
    for line in texts:
        for option, name in _OPTION_BEFORE.findall(line):
            before[name].add(option)
        names = set(_ASSIGNED.findall(line))
        if names:
            options = _OPTION.findall(line)
            for name in names:
                assigning[name].update(options)
    return OptionIndex({k: frozenset(v) for k, v in before.items()}, {k: frozenset(v) for k, v in assigning.items()})


def _options_before(name: str, text: str) -> list[str]:
    """The options before an expansion of `$name` in `text`."""
    return [option for option, found in _OPTION_BEFORE.findall(text) if found == name]


def argument_options(number: int, text: str, index: OptionIndex) -> frozenset[str]:
    """The options whose value the script's argument $number, read on the line `text`, gives: the option before it
    there (`--load $1`), and the option before each expansion of a variable that line assigns (`CHECKPOINT_PATH=$1`,
    `--save $CHECKPOINT_PATH`)."""
    options = set(_options_before(str(number), text))
    for name in set(_ASSIGNED.findall(text)):
        options.update(index.options_of_value.get(name, ()))
    return frozenset(options)


def undecided_options(undecided: Mapping[str, str], index: OptionIndex) -> dict[str, frozenset[str]]:
    """For each undecided command (where -> its text), the options it may have set: those its text names, and the
    option before each expansion of a variable it assigns, in any command the script read (`index`); for a variable
    it unsets, those and the options its assignments held."""
    out: dict[str, frozenset[str]] = {}
    for where, text in undecided.items():
        options = set(_OPTION.findall(text))
        assigned = set(_ASSIGNED.findall(text))
        for name in assigned:
            options.update(index.options_of_value.get(name, ()))
        for name in set(_REFERENCE.findall(text)) if assigned else ():  # `ARGS="$MOCK"`: the options MOCK holds
            options.update(index.options_assigning.get(name, ()))
        for name in (name for names in _UNSET.findall(text) for name in names.split()):  # what `$NAME` gave
            options.update(index.options_of_value.get(name, ()), index.options_assigning.get(name, ()))
        out[where] = frozenset(options)
    return out

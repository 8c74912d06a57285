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
from typing import Mapping, Sequence

_OPTION = re.compile(r"(?<![\w$-])(--?[A-Za-z][\w-]*)")
"""An option word of a command's text (`--data-path`, `--data-path=/d`: its name)."""
_ASSIGNED = re.compile(r"(?:^|[\s;&|(])(?:export\s+|local\s+|declare\s+-\w+\s+)?([A-Za-z_][A-Za-z0-9_]*)\+?=")
_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def _option_before(name: str) -> re.Pattern[str]:
    """The option whose value a `$NAME` expansion gives (`--data-path $NAME`, `--data-path="${NAME}"`)."""
    return re.compile(r"(?<![\w$-])(--?[A-Za-z][\w-]*)(?:=|\s+)[\"']?\$\{?" + re.escape(name) + r"(?![A-Za-z0-9_])")


def argument_options(number: int, text: str, texts: Sequence[str]) -> frozenset[str]:
    """The options whose value the script's argument $number, read on the line `text`, gives: the option before it
    there (`--load $1`), and the option before each expansion of a variable that line assigns (`CHECKPOINT_PATH=$1`,
    `--save $CHECKPOINT_PATH`)."""
    options = set(_option_before(str(number)).findall(text))
    for name in set(_ASSIGNED.findall(text)):
        options.update(found for line in texts for found in _option_before(name).findall(line))
    return frozenset(options)


def undecided_options(undecided: Mapping[str, str], texts: Sequence[str]) -> dict[str, frozenset[str]]:
    """For each undecided command (where -> its text), the options it may have set: those its text names, and the
    option before each expansion of a variable it assigns, in any command the script read (`texts`, the launch line
    included)."""
    out: dict[str, frozenset[str]] = {}
    for where, text in undecided.items():
        options = set(_OPTION.findall(text))
        assigned = set(_ASSIGNED.findall(text))
        for name in assigned:
            options.update(found for line in texts for found in _option_before(name).findall(line))
        for name in set(_REFERENCE.findall(text)) if assigned else ():  # `ARGS="$MOCK"`: the options MOCK holds
            options.update(found for line in texts if name in _ASSIGNED.findall(line)
                           for found in _OPTION.findall(line))
        out[where] = frozenset(options)
    return out

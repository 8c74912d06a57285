"""What a command run in a subshell leaves behind in the script: nothing of the shell's own state.

bash runs in a subshell (a forked copy of the shell) each command of a pipeline of two or more (bash manual 3.2.3
Pipelines; the last one in the shell itself only under `shopt -s lastpipe`, which a script may turn on since it runs
without job control, 4.3.2), a command ended by `&` (3.2.4 Lists), a `( list )` group (3.2.5.3) and the command of a
`$( )` substitution (3.5.4). What such a command assigns, exports, defines, shifts or `cd`s to is gone when it ends:
`NP=4 | cat` leaves NP as it was, `A=2 && B=3 | x` sets A but not B (bash 5.2 checked, tests/launch/
test_subshells_and_quoting_h173.py). A launch it runs and a file it writes are real and stay.
"""

from __future__ import annotations

import copy
from typing import Any

SHELL_STATE = ("env", "cwd", "cwd_ways", "arrays", "assoc", "unknown_heads", "positional", "frames", "undecidable",
               "exported", "allexport", "errexit", "lastpipe", "monitor", "nounset", "functions", "readonly")
"""The reading's fields that are the shell's own state (batch_script._Reading), which a subshell copies."""


def forked_state(reading: Any) -> dict[str, Any]:
    """A copy of the shell's own state as the subshell starts."""
    return {name: copy.deepcopy(getattr(reading, name)) for name in SHELL_STATE}


def end_subshell(reading: Any, kept: dict[str, Any] | None) -> None:
    """The shell's own state put back as it was before the subshell (`kept`; None: there was none); the containers
    the caller shares (env) are refilled in place."""
    if kept is None:
        return
    for name, value in kept.items():
        current = getattr(reading, name)
        if isinstance(current, (dict, set, list)):
            current.clear()
            (current.extend if isinstance(current, list) else current.update)(value)
        else:
            setattr(reading, name, value)

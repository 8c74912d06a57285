"""A variable set in two branches of an `if` llmperf cannot decide: what both agree on, else undecided.

llmperf reads every branch of an `if` whose condition only running the script tells (`if nvidia-smi | grep -q H100;
then TP=2; else TP=4; fi`), since any may run. Applying their assignments in order left the last branch's value (TP=4)
as if bash always took the `else`. bash runs one branch (bash manual 3.2.5.2 Conditional Constructs), so after `fi`
the variable holds the value of the branch that ran: the same whatever runs when the branches agree (kept), else
one llmperf cannot know. Such a variable is made undecidable, as one set from a command's output is: a test on it is
not decided, and a launch reading it says where the branches set it (batch_script.launch: `unknown`). A variable only
one branch sets keeps the value it reads as (the project's reading of an undecided branch, shell_conditions); the
precision flags that two branches append to one array are settled by frameworks/megatron_undecided_precision.py.
"""

from __future__ import annotations

import re

from llmperf_hook.launch.shell_conditions import Conditions

BRANCHES = "branches of an `if` llmperf cannot decide (bash runs one; which, only running the script tells)"
"""How a variable set apart by such branches is described where it was set (ScriptLaunch.unknown)."""
_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
BRANCH_WORD = re.compile(r"\s*(?:then|elif|else)\b")
"""A command that opens a branch (`else TP=4`): its assignments belong to the branch it opens."""


def note_branch_values(conditions: Conditions, before: dict[str, str], env: dict[str, str], undecidable: set[str],
                       fresh: set[str], where: str) -> None:
    """Each variable a command changed (`before`: the variables before it; `fresh`: those it made undecidable, which
    may have been unset before) kept with the undecided `if` branch it ran in (Conditions.note_assigned); None for a
    value only running the script gives."""
    for name in {name for name in set(before) | set(env) if before.get(name) != env.get(name)} | fresh:
        value = None if name in undecidable else env.get(name)
        if value is not None and set(_REFERENCE.findall(value)) & undecidable:  # `X=$NUM_GPUS`, NUM_GPUS unknown
            value = None
        conditions.note_assigned(name, value, where)


def settle_branches(conditions: Conditions, env: dict[str, str], undecidable: set[str],
                    unknown_at: dict[str, str]) -> None:
    """At the `fi` of each undecided `if` closed since the last call: a variable two branches left different makes
    it undecidable, with where each branch set it (for the message of a launch that reads it)."""
    closed, conditions.closed = conditions.closed, []
    for frame in closed:
        for name, by_branch in frame.assigned.items():
            values = {value for value, _ in by_branch.values()}
            if len(by_branch) < 2 or (len(values) == 1 and None not in values):
                continue  # one branch sets it, or all that set it agree
            env.pop(name, None)
            undecidable.add(name)
            sets = " or ".join(f"{at} ({name}={value!r})" if value is not None else f"{at} (to what only running it gives)"
                               for value, at in by_branch.values())
            unknown_at[name] = f"{sets}, {BRANCHES}"


def branch_warnings(left: dict[str, str]) -> tuple[str, ...]:
    """For the launch line's variables set apart by undecided branches (`left`: name -> where): it reads them
    unexpanded, which is priced as written unless an option needs their value (then the refusal names them)."""
    return tuple(f"${name} reaches the launch line unexpanded: the script sets it at {at}. Priced without its value; "
                 "give the launch line after `--` with the value the job takes." for name, at in left.items()
                 if BRANCHES in at)

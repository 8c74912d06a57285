"""A variable set in two branches of an `if` llmperf cannot decide: what both agree on, else undecided.

llmperf reads every branch of an `if` whose condition only running the script tells (`if nvidia-smi | grep -q H100;
then TP=2; else TP=4; fi`), since any may run. Applying their assignments in order left the last branch's value (TP=4)
as if bash always took the `else`. bash runs one branch (bash manual 3.2.5.2 Conditional Constructs), so after `fi`
the variable holds the value of the branch that ran: the same whatever runs when the branches agree (kept), else
one llmperf cannot know. Such a variable is made undecidable, as one set from a command's output is: a test on it is
not decided, and a launch reading it says where the branches set it (batch_script.launch: `unknown`). A variable only
one branch sets keeps the value it reads as (the project's reading of an undecided branch, shell_conditions); the
precision flags that two branches append to one array are settled by frameworks/megatron_undecided_precision.py: the
flag of the branch read first, with a warning. A variable whose branches give only flags (`PREC=--bf16` / `PREC=--fp16`)
and which the launch line expands as a word of its own takes the same rule (launch_words): left unexpanded, it
priced the job with neither flag (fp32), which no branch runs.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from llmperf_hook.launch.shell_conditions import Conditions
from llmperf_hook.launch.shell_script import ARRAY_ASSIGN

BRANCHES = "branches of an `if` llmperf cannot decide (bash runs one; which, only running the script tells)"
"""How a variable set apart by such branches is described where it was set (ScriptLaunch.unknown)."""
_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_ASSIGNS = re.compile(r"(?:^|[\s;&|(])(?:export\s+|local\s+|declare\s+(?:-\w+\s+)*)?([A-Za-z_][A-Za-z0-9_]*)\+?=")
"""A name a command's text assigns (`NP=8`, `export NP=8`, `then NP=8`)."""
_WHOLE_REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:\[[@*]\])?\}|([A-Za-z_][A-Za-z0-9_]*))")
"""A word that is one variable (`$NAME`, `${NAME}`) or all of an array's elements (`${NAME[@]}`)."""
_FLAG = re.compile(r"--?[A-Za-z][\w-]*")
"""An option word with no value of its own (`--bf16`; not `--lr=1e-4`)."""
Branches = tuple[tuple[str | None, str], ...]
"""Each branch's value of a variable (None: unknown) and where it set it, in reading order."""
BRANCH_WORD = re.compile(r"\s*(?:then|elif|else)\b")
"""A command that opens a branch (`else TP=4`): its assignments belong to the branch it opens."""


def note_branch_values(conditions: Conditions, before: dict[str, str], env: dict[str, str], undecidable: set[str],
                       fresh: set[str], where: str, text: str = "") -> None:
    """Each variable a command changed (`before`: the variables before it; `fresh`: those it made undecidable, which
    may have been unset before), or that its text `text` assigns (`else NP=8` after `then NP=8`), kept with the
    undecided `if` branch it ran in (Conditions.note_assigned); None for a value only running the script gives."""
    written = {name for name in _ASSIGNS.findall(text) if name in env or name in undecidable}
    for name in {name for name in set(before) | set(env) if before.get(name) != env.get(name)} | fresh | written:
        value = None if name in undecidable else env.get(name)
        if value is not None and set(_REFERENCE.findall(value)) & undecidable:  # `X=$NUM_GPUS`, NUM_GPUS unknown
            value = None
        conditions.note_assigned(name, value, where, (before.get(name),))


def note_array_assigned(conditions: Conditions, text: str, arrays: dict[str, list[str]], where: str) -> None:
    """A whole-array assignment `NAME=( ... )` (the line `text`, just applied to `arrays`) in an undecided branch,
    kept as a variable's value is (its elements as shell words). Not an append (`NAME+=( ... )`): the precision flags
    two branches append both stay, for frameworks/megatron_undecided_precision."""
    match = ARRAY_ASSIGN.match(text)
    if match and not match.group(2) and match.group(1) in arrays:
        conditions.note_assigned(match.group(1), shlex.join(arrays[match.group(1)]), where)


def settle_branches(conditions: Conditions, env: dict[str, str], undecidable: set[str],
                    unknown_at: dict[str, str], branch_values: dict[str, Branches],
                    arrays: dict[str, list[str]]) -> None:
    """At the `fi` of each undecided `if` closed since the last call: a variable (or array, note_array_assigned)
    two branches left different makes it undecidable, with where each branch set it (for the message of a launch
    that reads it) and what each set."""
    closed, conditions.closed = conditions.closed, []
    for frame in closed:
        for name, by_branch in frame.assigned.items():
            branches = _ways_through(frame, name, by_branch)
            values = {value for value, _ in branches}
            if len(values) == 1 and None not in values:  # every way past the `fi` gives it the same value
                if name not in arrays:
                    env[name] = next(iter(values))  # type: ignore[assignment]
                    undecidable.discard(name)
                continue
            if len(branches) < 2 or not branches:
                continue  # the way through sets it as read, or none goes on past the `fi`
            env.pop(name, None)
            arrays.pop(name, None)
            undecidable.add(name)
            branch_values[name] = branches
            unknown_at[name] = f"{_branch_sets(name, branch_values[name])}, {BRANCHES}"


def _ways_through(frame: Any, name: str, by_branch: dict[int, tuple[str | None, str]]) -> Branches:
    """What each way through an undecided `if` that goes on past its `fi` leaves in `name`: each branch that does not
    exit (bash manual 4.1 exit), its value where it set it, else the value from before the `if` (Frame.prior); and
    that value too where no `else` runs when every test fails."""
    prior = frame.prior.get(name)
    kept = None if prior is None else (prior[0], _AS_BEFORE if prior[0] is not None else _UNSET)
    out: list[tuple[str | None, str]] = []
    for branch in [*range(frame.branch + 1), *([] if frame.has_else else [-1])]:
        if branch in frame.exits:
            continue
        found = by_branch.get(branch, kept)
        if found is None:  # a value from before the `if` that was not kept (an array)
            return tuple(by_branch[b] for b in sorted(by_branch))
        if found is not kept or kept not in out:
            out.append(found)
    return tuple(out)


_AS_BEFORE = "as before that `if` (where no branch that sets it runs)"
_UNSET = "unset (as before that `if`, where no branch that sets it runs)"


def _branch_sets(name: str, values: Branches) -> str:
    """Where each branch sets `name`, and to what."""
    return " or ".join(at if at == _UNSET else f"{at} ({name}={value!r})" if value is not None else
                       f"{at} (to what only running it gives)" for value, at in values)


def launch_words(words: list[str], unknown_at: dict[str, str], undecidable: set[str],
                 branch_values: dict[str, Branches]) -> tuple[list[str], dict[str, str], tuple[str, ...]]:
    """The launch line's `words` with flag-only branch variables settled (_first_branch_flags); the variables only
    running the script gives that its words still read (name -> where, for a refusal to name); the warnings."""
    unknown = {name: at for name, at in unknown_at.items() if name in undecidable}
    words, warnings = _first_branch_flags(words, branch_values, unknown)
    left = {name: at for name, at in unknown.items() if any(re.search(r"\$\{?" + name + r"\b", w) for w in words)}
    return words, left, warnings + _branch_warnings(left)


def _first_branch_flags(words: list[str], branch_values: dict[str, Branches],
                        unknown: dict[str, str]) -> tuple[list[str], tuple[str, ...]]:
    """The launch `words` with each word `$NAME` / `${NAME}` whose undecided branches (`unknown`: name -> where) give
    it only flags replaced by the flags of the branch read first, and a warning for each; other words as they are."""
    out: list[str] = []
    warnings: list[str] = []
    for word in words:
        reference = _WHOLE_REFERENCE.fullmatch(word)
        name = (reference.group(1) or reference.group(2)) if reference else ""
        values = tuple(("" if at == _UNSET else value, at) for value, at in  # unset, unquoted: no word
                       (branch_values.get(name, ()) if BRANCHES in unknown.get(name, "") else ()))
        if not values or not all(value is not None and all(map(_FLAG.fullmatch, value.split()))
                                 for value, _ in values):
            out.append(word)
            continue
        first, at = values[0]
        out += str(first).split()  # as unquoted `$NAME` splits (a one-flag value is the same word quoted)
        warnings.append(f"${name} is set by branches of an `if` llmperf cannot decide: {_branch_sets(name, values)}. "
                        f"Priced with the branch read first ({at}: {first or 'no flag'}), as for precision flags two "
                        "such branches add; if the job takes another branch, give that launch line after `--`.")
    return out, tuple(dict.fromkeys(warnings))


def _branch_warnings(left: dict[str, str]) -> tuple[str, ...]:
    """For the launch line's variables set apart by undecided branches (`left`: name -> where): it reads them
    unexpanded, which is priced as written unless an option needs their value (then the refusal names them)."""
    return tuple(f"${name} reaches the launch line unexpanded: the script sets it at {at}. Priced without its value; "
                 "give the launch line after `--` with the value the job takes." for name, at in left.items()
                 if BRANCHES in at)

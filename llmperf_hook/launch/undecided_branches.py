"""A variable set in two branches of an `if` llmperf cannot decide: what both agree on, else undecided.

llmperf reads every branch of an `if` whose condition only running the script tells (`if nvidia-smi | grep -q H100;
then TP=2; else TP=4; fi`), since any may run. bash runs one branch (bash manual 3.2.5.2 Conditional Constructs), so
each branch is read from the variables as they were before the `if` (start_branches, end_branch: the `else`, and an
`elif`'s test, never see what the `then` set), and after `fi` a variable holds the value of the way through that ran:
the same whatever runs when every way agrees (kept), else one llmperf cannot know. Such a variable is made
undecidable, as one set from a command's output is: a test on it is not decided, and a launch reading it says where
each way sets it (batch_script.launch: `unknown`); a way is a branch that does not exit, and the value from before
the `if` where no `else` runs. Arrays the branches only append to keep every branch's elements, so the precision flags
that two branches append to one array are settled by frameworks/megatron_undecided_precision.py: the flag of the
branch read first, with a warning. A variable whose branches give only flags (`PREC=--bf16` / `PREC=--fp16`) and which
the launch line expands as a word of its own takes the same rule (launch_words): left unexpanded, it priced the job
with neither flag (fp32), which no branch runs.
"""

from __future__ import annotations

import re
import shlex
from typing import AbstractSet, Any

from llmperf_hook.launch.shell_associative import forget, placed
from llmperf_hook.launch.shell_conditions import Conditions
from llmperf_hook.launch.shell_functions import Definition
from llmperf_hook.launch.shell_script import ARRAY_ASSIGN, ScriptLine
from llmperf_hook.launch.subshell_state import end_subshell

BRANCHES = "branches of an `if` llmperf cannot decide (bash runs one; which, only running the script tells)"
"""How a variable set apart by such branches is described where it was set (ScriptLaunch.unknown)."""
_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_ASSIGNS = re.compile(r"(?:^|[\s;&|(])(?:export\s+|local\s+|declare\s+(?:-\w+\s+)*)?([A-Za-z_][A-Za-z0-9_]*)\+?=")
"""A name a command's text assigns (`NP=8`, `export NP=8`, `then NP=8`)."""
_UNSETS = re.compile(r"(?:^|[\s;&|(])unset\s+(?:-v\s+)?((?:[A-Za-z_]\w*(?:\s+|$))+)")
"""The names a command's text unsets (`then unset X Y`)."""
_WHOLE_REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:\[[@*]\])?\}|([A-Za-z_][A-Za-z0-9_]*))")
"""A word that is one variable (`$NAME`, `${NAME}`) or all of an array's elements (`${NAME[@]}`)."""
_FLAG = re.compile(r"--?[A-Za-z][\w-]*")
"""An option word with no value of its own (`--bf16`; not `--lr=1e-4`)."""
Branches = tuple[tuple[str | None, str], ...]
"""Each branch's value of a variable (None: unknown) and where it set it, in reading order."""
_SLOT = re.compile(r"\[\d+\]=")
BRANCH_WORD = re.compile(r"\s*(?:then|elif|else)\b")
"""A command that opens a branch (`else TP=4`): its assignments belong to the branch it opens."""


def note_branch_values(conditions: Conditions, before: dict[str, str], env: dict[str, str], undecidable: set[str],
                       fresh: set[str], where: str, text: str = "", settled: set[str] = frozenset(),
                       removed: AbstractSet[str] = frozenset()) -> None:
    """Each variable a command changed (`before`: the variables before it; `fresh`: those it made undecidable, which
    may have been unset before), or that its text `text` assigns (`else NP=8` after `then NP=8`), kept with the
    undecided `if` branch it ran in (Conditions.note_assigned); None for a value only running the script gives.
    `settled`: the names an inner undecided `if` closed by the command settled (settle_branches), which its branch
    assigned whether or not their value changed; `removed`: names `unset` removed, which a branch leaves unset (not
    unknown: two ways that both unset NAME agree)."""
    written = {name for name in _ASSIGNS.findall(text) if name in env or name in undecidable} | settled | \
        {name for names in _UNSETS.findall(text) for name in names.split() if name in removed}
    for name in {name for name in set(before) | set(env) if before.get(name) != env.get(name)} | fresh | written:
        value = None if name in undecidable else env.get(name)
        if value is not None and set(_REFERENCE.findall(value)) & undecidable:  # `X=$NUM_GPUS`, NUM_GPUS unknown
            value = None
        unset = value is None and name in removed and name not in undecidable
        conditions.note_assigned(name, value, where + _UNSET_THERE if unset else where, (before.get(name),))


def note_array_assigned(conditions: Conditions, text: str, arrays: dict[str, list[str]], where: str) -> None:
    """A whole-array assignment `NAME=( ... )` (the line `text`, just applied to `arrays`) in an undecided branch,
    kept as a variable's value is (its elements as shell words). Not an append (`NAME+=( ... )`): the precision flags
    two branches append both stay, for frameworks/megatron_undecided_precision."""
    match = ARRAY_ASSIGN.match(text)
    slots = arrays.get(match.group(1)) if match and not match.group(2) else None
    if slots is not None:  # a sparse array (`A=([5]=x)`) as the words that assign it
        words = [f"[{k}]={slot}" for k, slot in enumerate(slots) if slot is not None] if None in slots else slots
        conditions.note_assigned(match.group(1), shlex.join(words), where)  # type: ignore[arg-type]


def start_branches(conditions: Conditions, reading: Any) -> None:
    """Each `if` just opened keeps the script's variables as its test leaves them (Frame.start)."""
    for frame in conditions.frames:
        if frame.kind == "if" and frame.start is None:
            frame.start = _state(reading)


def end_branch(conditions: Conditions, reading: Any, text: str) -> None:
    """At the `elif` / `else` / `fi` (`text`) that ends an undecided branch of the innermost `if`: what that branch
    leaves is kept for the `fi` (Frame.ends; not where it exits), and at `elif` / `else` the variables are put back as
    the branch found them. bash runs one branch, so the next one (and an `elif`'s test) reads the values from before
    the `if`, never the ones a branch before it set (bash manual 3.2.5.2: `elif` runs only where the test before it
    failed): `if X; then NP=8; else NN=$NP; fi` gives NN the value NP had before the `if`."""
    found = _NEXT_BRANCH.match(text)
    frame = conditions.frames[-1] if conditions.frames else None
    if found is None or frame is None or frame.kind != "if" or frame.start is None or frame.reading:
        return
    if frame.active is False:
        frame.skipped.add(frame.branch)
    if frame.active is not None:
        return
    if frame.branch not in frame.exits:
        frame.ends.append(_state(reading))
    if found.group(1) != "fi":
        end_subshell(reading, _copied(frame.start))


_NEXT_BRANCH = re.compile(r"\s*(elif|else|fi)(?![\w=+-])")
_STATE = ("env", "undecidable", "arrays", "assoc", "unknown_heads", "cwd", "cwd_ways", "exported", "positional",
          "functions")
"""What of the script's state a branch starts from (batch_script._Reading's variables, the directory, the export
attributes, the arguments and the functions: `then cd out; shift; f() { ...; }` is not seen by the `else`)."""
_SHELL = {"cwd": "`cd`", "positional": "`shift` / `set --`"}
"""The state an undecided `if`'s ways may leave apart that the reading keeps one value of (the way read first's)."""


def _state(reading: Any) -> dict[str, Any]:
    return _copied({name: getattr(reading, name) for name in _STATE})


def _copied(state: dict[str, Any]) -> dict[str, Any]:
    """A copy of `state` that nothing the reading changes in place reaches (faster than copy.deepcopy: values are
    strings, lists and dicts of strings)."""
    return {"env": dict(state["env"]), "undecidable": set(state["undecidable"]),
            "arrays": {name: list(value) for name, value in state["arrays"].items()},
            "assoc": {name: dict(value) for name, value in state["assoc"].items()},
            "unknown_heads": set(state["unknown_heads"]), "cwd": state["cwd"], "cwd_ways": state["cwd_ways"],
            "exported": set(state["exported"]),
            "positional": dict(state["positional"]), "functions": dict(state["functions"])}


def settle_branches(conditions: Conditions, reading: Any) -> set[str]:
    """At the `fi` of each undecided `if` closed since the last call: a variable (or array, note_array_assigned)
    two branches left different makes it undecidable, with where each branch set it (for the message of a launch
    that reads it) and what each set; one every way past the `fi` leaves alike takes that value. Returns the names
    settled, which the enclosing undecided `if` counts as its branch's assignments."""
    closed, conditions.closed = conditions.closed, []
    settled: set[str] = set()
    for frame in closed:
        _merge_shell(frame, reading)
        settled |= _merge_arrays(frame, reading) | set(frame.assigned)
        for name, by_branch in frame.assigned.items():
            _settle(reading, name, _ways_through(frame, name, by_branch), _is_array(frame, name))
    return settled


def _settle(reading: Any, name: str, branches: Branches, array: bool) -> None:
    """`name` (an `array`, or a variable) after the `fi`, from what each way through (`branches`) leaves in it."""
    values = {value for value, _ in branches}
    if len(values) == 1 and None not in values:  # every way past the `fi` gives it the same value
        if array:
            words = shlex.split(next(iter(values)))  # type: ignore[arg-type]
            sparse = bool(words) and all(_SLOT.match(word) for word in words)  # note_array_assigned's `[5]=x`
            reading.arrays[name] = placed(reading, [], words) if sparse else words  # type: ignore[assignment]
        else:
            reading.env[name] = next(iter(values))
        reading.undecidable.discard(name)
        return
    if branches and all(value is None and _is_unset(at) for value, at in branches):  # every way on leaves it unset
        if any(at == _UNSET for _, at in branches):  # a way that never unset it: the job's environment may set it
            reading.removed.discard(name)
        reading.env.pop(name, None)
        reading.arrays.pop(name, None)
        reading.undecidable.discard(name)
        return
    if not branches:
        return  # no way goes on past the `fi`
    forget(reading, name)
    if len(branches) > 1:
        reading.branch_values[name] = branches
        reading.unknown_at[name] = f"{_branch_sets(name, branches)}, {BRANCHES}"


def _merge_shell(frame: Any, reading: Any) -> None:
    """The directory, arguments and functions after the `fi` of an undecided `if`: what every way past it leaves
    alike; where the ways leave the directory apart, the way read first's, with a warning (as for flag-only branch
    values, launch_words); arguments they leave apart, undecided (_arguments_apart); a function they define apart,
    either body (_either_functions). A name any way exports stays exported (the reading's rule before branches were
    kept apart)."""
    ways = [*frame.ends, *([] if frame.has_else or frame.start is None else [frame.start])]
    if frame.start is None or not ways or not (frame.ends or frame.exits):
        return  # no way goes on past the `fi`, or no branch read undecided
    for name, what in _SHELL.items():
        setattr(reading, name, ways[0][name])
        if name == "positional" and any(way[name] != ways[0][name] for way in ways):
            _arguments_apart(reading, [way[name] for way in ways])
        elif any(way[name] != ways[0][name] for way in ways):
            reading.notes.append(f"the branches of an `if` llmperf cannot decide leave {what} apart; read as the "
                                 f"branch read first leaves them, but for a file sourced by a relative path, read as "
                                 f"either (bash runs one branch: if the job takes another, give its launch line "
                                 "after `--`).")
    directories = dict.fromkeys(folder for way in ways for folder in (way["cwd"], *way["cwd_ways"]))
    reading.cwd_ways = tuple(directories)[1:]
    reading.functions, apart = _either_functions([way["functions"] for way in ways])
    if apart:
        reading.notes.append(f"the branches of an `if` llmperf cannot decide define {', '.join(apart)} apart; a call "
                             "past the `fi` is read as either body (bash runs the one its branch defined).")
    reading.exported |= set().union(*(way["exported"] for way in ways))


def _arguments_apart(reading: Any, ways: list[dict[str, str]]) -> None:
    """The script's arguments after the `fi` of an undecided `if` whose ways leave them apart (`shift` or `set --` in
    some branch): each argument two ways leave different stays as written (`$1`, `$@`), undecided, as a variable the
    branches set apart is (bash runs one branch, 3.2.5.2), and its ways are named where the launch reads it; `$#`
    (a count the reading needs) is the way read first's, with a warning where it differs."""
    merged = dict(ways[0])
    for key in set().union(*ways) - {"0", "#"}:
        values = [way.get(key, "") for way in ways]
        if len(set(values)) > 1:
            merged[key] = f"${key}" if len(key) == 1 else f"${{{key}}}"
            said = " or ".join(dict.fromkeys(f"'{value}'" for value in values))
            reading.unknown_at[key] = f"`shift` / `set --` in some branch ({said}), {BRANCHES}"
            reading.undecidable.add(key)  # for launch_words, which names the arguments the launch still reads
    reading.positional = merged
    if len({way.get("#") for way in ways}) > 1:
        reading.notes.append("the branches of an `if` llmperf cannot decide leave the number of the script's arguments "
                             "($#) apart (`shift` / `set --`); $# is read as the branch read first leaves it, the "
                             "arguments they leave apart as undecided (bash runs one branch: if the job takes another, "
                             "give its launch line after `--`).")


_EITHER = "[ -e /llmperf/the-branch-bash-took ]"


def either_command(number: int, commands: list[str]) -> tuple[ScriptLine, ...]:
    """Lines that run one of `commands`, which only running the script tells: an undecided `if` over them (a file
    sourced from a directory the ways through an earlier undecided `if` left apart), so that what they set apart is
    undecided past it, as the branches' own assignments are."""
    lines: list[ScriptLine] = []
    for k, command in enumerate(commands):
        head = "else" if k == len(commands) - 1 else f"{'elif' if k else 'if'} {_EITHER}; then"
        lines += [ScriptLine(number, head), ScriptLine(number, command)]
    return (*lines, ScriptLine(number, "fi"))
"""A test llmperf does not decide (a file test): the way through an undecided `if` that a function's body stands for."""


def _either_functions(ways: list[dict[str, Definition]]) -> tuple[dict[str, Definition], list[str]]:
    """The functions past the `fi` of an undecided `if` (`ways`: those each way through it leaves): one every way
    defines alike as it is; one they define apart (or only some define) runs, where called, the body of the way bash
    took: an undecided `if` over the bodies (nothing where a way leaves it undefined: 'command not found'), so that a
    variable the bodies set apart is undecided there, as one the branches set apart themselves (3.3 Shell Functions:
    the body is the one defined when the call runs); and the names of those defined apart."""
    merged = dict(ways[0])
    apart = sorted(name for name in set().union(*ways) if any(way.get(name) != ways[0].get(name) for way in ways))
    for name in apart:
        merged[name] = _either(name, [way.get(name) for way in ways])
    return merged, apart


def _either(name: str, bodies: list[Definition | None]) -> Definition:
    first = next(body for body in bodies if body is not None)
    number = first.body[0].number if first.body else 0
    lines: list[ScriptLine] = []
    for k, body in enumerate(bodies):
        head = "else" if k == len(bodies) - 1 else f"{'elif' if k else 'if'} {_EITHER}; then"
        lines += [ScriptLine(number, head), *(body.body if body and body.body else [ScriptLine(number, ":")])]
    return Definition(name, (*lines, ScriptLine(number, "fi")), first.end, first.path)


def _is_array(frame: Any, name: str) -> bool:
    """Whether `name` is an indexed array where some way through the `if` leaves it (or before it)."""
    return any(name in state["arrays"] for state in [*frame.ends, *([frame.start] if frame.start else [])])


def _merge_arrays(frame: Any, reading: Any) -> set[str]:
    """The arrays after the `fi` of an undecided `if` whose branches each started from the values before it
    (Frame.ends, Frame.start), but those a branch assigns whole (note_array_assigned, which _settle settles): what
    every way past the `fi` leaves alike stays; elements that branches only appended all stay, the branch read
    first's first (frameworks/megatron_undecided_precision then settles two precision flags so added); an array the
    ways leave otherwise apart is unknown. Returns the arrays so settled: those some way (or the branch read last,
    which may exit) holds otherwise than before the `if`; the rest stay as they were, unnoted by an enclosing
    undecided `if`, and each `fi` costs one dict comparison per way where no branch touched an array."""
    ways = [*frame.ends, *([] if frame.has_else or frame.start is None else [frame.start])]
    if frame.start is None or not ways or not (frame.ends or frame.exits):
        return set()  # no way goes on past the `fi`, or no branch read undecided
    now = {"arrays": reading.arrays, "assoc": reading.assoc}
    names = (_changed(frame.start, [*ways, now], "arrays") | _changed(frame.start, [*ways, now], "assoc")) - \
        set(frame.assigned)
    for name in names:
        before = frame.start["arrays"].get(name) or []
        values = [way["arrays"].get(name) for way in ways]
        kinds = {name in way["assoc"] for way in ways}
        if kinds == {True} and all(way["assoc"][name] == ways[0]["assoc"][name] for way in ways):
            reading.assoc[name] = ways[0]["assoc"][name]
        elif len(kinds) == 1 and all(value == values[0] for value in values):
            _put(reading.arrays, name, values[0])
        elif kinds == {False} and all((value or [])[:len(before)] == before for value in values):
            reading.arrays[name] = before + [word for value in values for word in (value or [])[len(before):]]
        else:
            forget(reading, name)
            reading.unknown_at.setdefault(name, BRANCHES)
    reading.unknown_heads |= set().union(*(way["unknown_heads"] for way in ways))
    return names


def _changed(start: dict[str, Any], states: list[dict[str, Any]], kind: str) -> set[str]:
    """The arrays of `kind` ("arrays", "assoc") some state in `states` holds otherwise than `start` (or not at all);
    a state equal to one seen (the reading's own, at the `fi` of a branch that goes on) is compared once."""
    before = start[kind]
    seen = [before]
    out: set[str] = set()
    for held in (state[kind] for state in states):
        if not any(held == other for other in seen):
            seen.append(held)
            out |= {name for name in held.keys() | before.keys() if held.get(name) != before.get(name)}
    return out


def _put(found: dict[str, list[str]], name: str, value: list[str] | None) -> None:
    if value is None:
        found.pop(name, None)
    else:
        found[name] = value


def _ways_through(frame: Any, name: str, by_branch: dict[int, tuple[str | None, str]]) -> Branches:
    """What each way through an undecided `if` that goes on past its `fi` leaves in `name`: each branch that does not
    exit (bash manual 4.1 exit), its value where it set it, else the value from before the `if` (Frame.start, else
    Frame.prior); and that value too where no `else` runs when every test fails."""
    kept = _kept(frame, name)
    out: list[tuple[str | None, str]] = []
    for branch in [*range(frame.branch + 1), *([] if frame.has_else else [-1])]:
        if branch in frame.exits or branch in frame.skipped:
            continue
        found = by_branch.get(branch, kept)
        if found is None:  # a value from before the `if` that was not kept (an array)
            return tuple(by_branch[b] for b in sorted(by_branch))
        if found is not kept or kept not in out:
            out.append(found)
    return tuple(out)


def _kept(frame: Any, name: str) -> tuple[str | None, str] | None:
    """`name`'s value before the `if` (an array's: its elements as shell words; None: unset, or one only running
    the script gives) and how to say so; None where no value from before the `if` was kept."""
    if frame.start is not None:
        if name in frame.start["arrays"]:
            return shlex.join(frame.start["arrays"][name]), _AS_BEFORE
        if name in frame.start["undecidable"] or name in frame.start["assoc"]:
            return None, _AS_BEFORE  # a value only running the script gives, as before the `if`
        value = frame.start["env"].get(name)
        return value, _AS_BEFORE if value is not None else _UNSET
    prior = frame.prior.get(name)
    return None if prior is None else (prior[0], _AS_BEFORE if prior[0] is not None else _UNSET)


_AS_BEFORE = "as before that `if` (where no branch that sets it runs)"
_UNSET = "unset (as before that `if`, where no branch that sets it runs)"
_UNSET_THERE = " (unset there)"
"""Follows where a branch unset a variable (`unset NAME`)."""


def _is_unset(at: str) -> bool:
    return at == _UNSET or at.endswith(_UNSET_THERE)


def _branch_sets(name: str, values: Branches) -> str:
    """Where each branch sets `name`, and to what."""
    return " or ".join(at if _is_unset(at) else f"{at} ({name}={value!r})" if value is not None else
                       f"{at} (to what only running it gives)" for value, at in values)


_READ_NAME = re.compile(r"\$\{?(\w+)")
"""A name a word reads (`$NAME`, `${NAME...`)."""


def launch_words(words: list[str], unknown_at: dict[str, str], undecidable: set[str],
                 branch_values: dict[str, Branches]) -> tuple[list[str], dict[str, str], tuple[str, ...]]:
    """The launch line's `words` with flag-only branch variables settled (_first_branch_flags); the variables only
    running the script gives that its words still read (name -> where, for a refusal to name); the warnings."""
    unknown = {name: at for name, at in unknown_at.items() if name in undecidable}
    words, warnings = _first_branch_flags(words, branch_values, unknown)
    read = set(_READ_NAME.findall("\n".join(words))) if unknown else set()  # one scan, not one a name and word
    left = {name: at for name, at in unknown.items() if name in read}
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
        values = tuple(("" if _is_unset(at) else value, at) for value, at in  # unset, unquoted: no word
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

"""The blocks of a launch script read where bash runs them: a function's body at each call, a `for` loop's body once
per word, and `break` / `continue` inside such a loop (a mixin of batch_script._Reading).

bash runs a function's body when it is called, with the call's words as $1 ... "$@" (bash manual 3.3 Shell
Functions). A `for NAME in WORDS` loop whose words llmperf knows runs its body once per word (shell_loops.py).
`break [N]` ends the N innermost loops and `continue [N]` goes on with the next pass of the N-th (bash manual 4.1
Bourne Shell Builtins; "if n is greater than the number of enclosing loops, all enclosing loops are exited"), so
`for n in 1 2 4 8; do [ $n -ge $NEED ] && { NP=$n; break; }; done` leaves NP as bash does; one in a function the
body calls ends no loop (bash 5: the function's body is outside the caller's loops). A `break` or `continue`
that runs on a condition llmperf cannot decide (`if [ "$(hostname)" = a ]; then break; fi`), or that reaches past
a `while` read once (`while true; do break 2; done`), leaves the passes unknown: the loop is then read again from
where it started, once, as a body that may run (shell_conditions), so what it sets is unknown rather than one guess.
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from typing import Any, Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.shell_conditions import Conditions, condition_expander
from llmperf_hook.launch.shell_eval import UNSET_REF
from llmperf_hook.launch.shell_functions import Definition, definition
from llmperf_hook.launch.shell_loops import MAX_TOTAL_PASSES, ForLoop, for_loop, loop_values
from llmperf_hook.launch.shell_read import ReadCommand
from llmperf_hook.launch.shell_arithmetic_commands import run_arithmetic
from llmperf_hook.launch.shell_while import MAX_PASSES as MAX_WHILE_PASSES, WhileLoop, arithmetic_for, while_loop
from llmperf_hook.launch.shell_positional import leave_function, positional_table
from llmperf_hook.launch.shell_script import ScriptLine, protect_literal_dollars

WHILE_PASS_COST = 4
"""What one `while` pass counts against MAX_TOTAL_PASSES: its test is split and decided from its text again each
pass, about 0.35 ms a pass on the 2-core machine against about 50 us for a `for` pass, so a script's while passes stop
at 1,024, about 0.35 s (an argument loop takes one or two passes an argument)."""
_LOOP_EXIT = re.compile(r"(?<![\w$./-])(?:break|continue)(?![\w=./-])")
"""A body that may run `break` / `continue`: only then is the reading state kept, to start over if it is undecided."""
_LOOP_KINDS = frozenset({"for", "while", "until"})
_COUNT = re.compile(r"[-+]?\d+")
"""A count bash takes (a number, signed: `break 02`, `break -1`)."""
_ALL_LOOPS = 1 << 16
"""A count past any nesting: on a count below 1 bash says "loop count out of range" and leaves every enclosing loop
(checked with bash 5 against test_script_audit_h120 LOOPS)."""


class LoopExit(Exception):
    """`break N` / `continue N` run where llmperf follows the loop's passes (caught by BlockReading.loop)."""

    def __init__(self, word: str, levels: int) -> None:
        super().__init__(word)
        self.word, self.levels = word, levels


class FunctionReturn(Exception):
    """`return` run where it surely runs, in a function or a sourced file (caught by BlockReading.call / source)."""


class Unfollowable(Exception):
    """A `break` / `continue` that runs on a condition llmperf cannot decide: the loop's passes are unknown."""


class BlockReading:
    """Functions and `for` loops of batch_script._Reading (a mixin after ShellVariables, whose attributes these
    annotations and stubs stand for)."""

    env: dict[str, str]
    arrays: dict[str, list[str]]
    undecidable: set[str]
    exported: set[str]
    allexport: bool
    positional: dict[str, str]
    frames: list[dict[str, str | None]]
    path: str
    conditions: Conditions
    launches: list
    submissions: list
    singles: list
    functions: dict[str, Definition]
    calling: set[str]
    sweep: tuple[str, tuple[str, ...]] | None
    loop_calls: frozenset[str]
    passes: int
    kind: str
    script: str
    shell: tuple[str, str]
    listed_on: bool
    errexit_ignored: bool
    subshell = False
    """The command being read runs in a `( ... )` subshell on its line: a `break` there ends no loop of the script
    (bash 5: "break: only meaningful in a `for', `while', or `until' loop"; the subshell's commands go on)."""

    def read(self, lines: Sequence[ScriptLine]) -> None: ...

    def loop_test(self, text: str) -> bool | None: ...

    def loop_input(self, loop: WhileLoop) -> tuple[ReadCommand | None, str | None]: ...

    def expand(self, text: str, record: bool = True) -> str: ...

    def expand_arrays(self, text: str) -> str: ...

    def fields(self, value: str) -> list[str]: ...

    def args(self) -> list[str]: ...

    def where(self, line: ScriptLine) -> str: ...

    def source(self, name: str, line: ScriptLine) -> None: ...

    def block(self, lines: Sequence[ScriptLine], i: int) -> int | None:
        """A function definition or a `for` loop llmperf can run at lines[i] read: the index after it, else None."""
        defined = definition(lines, i)
        if defined is not None:
            self.functions[defined.name] = replace(defined, path=self.path)
            return defined.end
        loop = None if self.conditions.in_undecided_branch() else for_loop(lines, i)
        if loop is None:
            return self.while_block(lines, i)
        words = self.expand_arrays(protect_literal_dollars(loop.words))  # `'$V'` is the word $V (3.1.2.2)
        values = loop_values(words, condition_expander(self.undecidable, self.expand), self.args(),
                             MAX_TOTAL_PASSES - self.passes, self.fields)  # split at IFS (3.5.7)
        if values is None or set(UNSET_REF.findall(words)) & set(self.arrays):  # `$L`: an array's first item
            return None
        kept = _kept_state(self) if any(_LOOP_EXIT.search(line.text) for line in loop.body) else None
        try:
            self.passes += len(values)
            self.loop(loop, values)
        except Unfollowable:
            _restore_state(self, kept, keep_passes=True)
            return None  # read from the `for` line again, as a body that may run
        return loop.end

    def while_block(self, lines: Sequence[ScriptLine], i: int) -> int | None:
        """A `while` / `until` loop at lines[i] whose test llmperf decides before every pass (launch/shell_while.py),
        read pass by pass: the index after it; else None, the reading as it was (the loop is read as a body that
        may run)."""
        loop = None if self.conditions.in_undecided_branch() else while_loop(lines, i)
        counted = None if loop is not None or self.conditions.in_undecided_branch() else arithmetic_for(lines, i)
        loop = counted[1] if counted else loop
        if loop is None or self.passes >= MAX_TOTAL_PASSES:
            return None
        if loop.feed is not None:
            return self.read_loop(loop)
        kept, launched = _kept_state(self), len(self.launches) + len(self.submissions) + len(self.singles)
        if counted and counted[0]:  # `for (( i = 0; ...`: INIT once, before the first test
            run_arithmetic(self, [f"(( {counted[0]} ))"], False)
        for _ in range(MAX_WHILE_PASSES + 1):
            truth = None if self.passes >= MAX_TOTAL_PASSES else self.loop_test(loop.test)
            if truth is None:
                break
            if truth is loop.until:  # `while`: a false test ends it; `until`: a true one
                return loop.end
            self.passes += WHILE_PASS_COST
            self.read(loop.body)
            if len(self.launches) + len(self.submissions) + len(self.singles) > launched:
                break  # a launch in the body: read as before, once
        _restore_state(self, kept, keep_passes=True)
        return None

    def read_loop(self, loop: WhileLoop) -> int | None:
        """`while read -r A B; do ... done < FILE` (or `<<< WORD`, `<<EOF`): the body read once per line of the loop's
        input where llmperf has it (batch_script._Reading.loop_input), the names set from the line before each pass;
        at the end of the input read fails and the loop ends, its names set from a last line without a newline, else
        emptied (bash 5.2). Else None: the loop is read as a body that may run."""
        command, text = self.loop_input(loop)
        if command is None or text is None or loop.until:
            return None
        kept, launched = _kept_state(self), len(self.launches) + len(self.submissions) + len(self.singles)
        for _ in range(MAX_WHILE_PASSES + 1):
            line, found, text = text.partition(command.delimiter())
            command.assign(self, line)
            if not found:  # read's status is false: no delimiter before the end of its input
                return loop.end
            self.passes += WHILE_PASS_COST
            self.read(loop.body)
            if len(self.launches) + len(self.submissions) + len(self.singles) > launched or \
                    self.passes >= MAX_TOTAL_PASSES:
                break
        _restore_state(self, kept, keep_passes=True)
        return None

    def loop(self, loop: ForLoop, values: list[str]) -> None:
        """`for NAME in WORDS`: its body read once per word, NAME set to it (bash manual 3.2.5.1), until a `break`."""
        outer, self.sweep = self.sweep, (loop.name, tuple(values))
        outer_calls, self.loop_calls = self.loop_calls, frozenset(self.calling)
        try:
            for value in values:
                self.env[loop.name] = value
                self.undecidable.discard(loop.name)
                self.exported.update([loop.name] if self.allexport else [])
                runs = len(self.launches) + len(self.submissions) + len(self.singles)
                broken = self.one_pass(loop.body, outer is not None)
                if broken or len(self.launches) + len(self.submissions) + len(self.singles) > runs:
                    break  # a sweep: the later passes launch again from the same lines (launch() warns)
        finally:
            self.sweep, self.loop_calls = outer, outer_calls

    def read_to_return(self, body: Sequence[ScriptLine]) -> None:
        """A function's body (or a sourced file's lines) read up to a `return` that surely runs there (bash manual
        4.1: return ends the function or the `.` / `source` and goes on after its call); the `if` blocks around
        it end with it."""
        depth = len(self.conditions.frames)
        try:
            self.read(body)
        except FunctionReturn:
            del self.conditions.frames[depth:]
            self.conditions.join(";")

    def function_return(self, words: list[str]) -> None:
        """`return [N]` where it surely runs, in a function or a sourced file: FunctionReturn. Where it may not run
        (an undecided test, a loop or `case` body, a subshell, whose return ends only that) the lines after it are
        read as before."""
        if words[:1] == ["return"] and (self.calling or self.sourcing) and not (
                self.subshell or self.conditions.undecided or self.conditions.uncertain() or
                self.conditions.in_undecided_branch() or self.sweep is not None):
            raise FunctionReturn()

    def one_pass(self, body: Sequence[ScriptLine], nested: bool) -> bool:
        """One pass of a loop's body; True when a `break` ends the loop. A `break N` / `continue N` for an outer loop
        (`nested`: one llmperf reads pass by pass) goes on to it; with none, bash ends every enclosing loop."""
        depth = len(self.conditions.frames)
        try:
            self.read(body)
        except LoopExit as exit_:
            del self.conditions.frames[depth:]  # the `if` around it ends with the pass
            self.conditions.join(";")
            if exit_.levels > 1 and nested:
                raise LoopExit(exit_.word, exit_.levels - 1) from None
            return exit_.word == "break" or exit_.levels > 1
        return False

    def loop_exit(self, words: list[str], line: ScriptLine) -> bool:
        """`break [N]` / `continue [N]` at words (on `line`), in a loop read pass by pass: ends the pass (LoopExit),
        or the whole reading of the loop when it runs on a condition llmperf cannot decide (Unfollowable); False for
        another command, or one outside such a loop (in a `while` read once, bash's own business)."""
        if not words or words[0] not in ("break", "continue") or self.sweep is None or self.subshell or \
                frozenset(self.calling) != self.loop_calls:  # bash: a function's break ends no loop of its caller
            return False
        count = words[1] if len(words) > 1 else "1"
        levels = int(count) if _COUNT.fullmatch(count) else None
        if levels is None and not self.conditions.undecided and not (self.submissions or self.singles):
            self.bad_loop_count(line, words)
        inner = sum(frame.kind in _LOOP_KINDS for frame in self.conditions.frames)
        if levels is not None and 1 <= levels <= inner:  # ends a `while` / unfollowed loop read once: not our pass
            return False
        if inner or levels is None or self.conditions.undecided:  # past a loop read once: whether it gets here, unknown
            raise Unfollowable(words[0])
        if levels < 1:  # `break 0`, `continue -1`: "loop count out of range", and bash leaves every loop
            raise LoopExit("break", _ALL_LOOPS)
        raise LoopExit(words[0], levels)

    def bad_loop_count(self, line: ScriptLine, words: list[str]) -> None:
        """`break abc` that surely runs in a loop before the launch: bash 5 says "break: abc: numeric argument
        required" and ends the script (status 128; dash: "Illegal number", status 2), so no launch line runs (checked
        with bash 5.2 and dash: the lines after the loop never run). Refused as an `exit` there is."""
        said = f"{words[0]}: {words[1]}: numeric argument required" if self.shell[0] != "dash" \
            else f"{words[0]}: Illegal number: {words[1]}"
        raise UsageError(f"{self.kind} {self.script} stops at {self.where(line)} (`{line.text.strip()[:80]}`) before "
                         f"any launch line: {self.shell[0]} says '{said}' and ends the script there ({words[0]} takes a "
                         f"loop count, a whole number). Write `{words[0]}` or `{words[0]} N` with N a number, or give "
                         "the launch line after `--`.")

    def condition_source(self, line: ScriptLine, words: list[str]) -> None:
        """`if . FILE; then` / `while ! source FILE` (words: the `if` command up to its `;`): bash reads FILE there,
        as the condition's first command, whenever the `if` runs (bash manual 3.2.5.2; checked with bash 5.2: FILE's
        variables are set in the branch and after `fi`). Read with a fresh block stack, FILE's own `if`s being no part
        of the condition; what the branch does with its status is undecided (a file's last command's status). Only
        where the `if` surely runs: one in an undecided branch is left unread, as before."""
        at = 1 if words and words[0] in ("if", "while", "until") else len(words)
        at += words[at:at + 1] == ["!"]
        if at + 1 >= len(words) or words[at] not in (".", "source") or self.conditions.reading() or \
                self.conditions.in_undecided_branch() or not self.conditions.running():
            return
        saved, listed, ignored, self.conditions = self.conditions, self.listed_on, self.errexit_ignored, Conditions()
        self.listed_on = self.errexit_ignored = True  # set -e is off in an `if` condition, FILE's commands included
        try:  # (bash manual 4.3.1)
            self.source(self.expand(words[at + 1]), line)
        finally:
            self.conditions, self.listed_on, self.errexit_ignored = saved, listed, ignored

    def call(self, defined: Definition, args: list[str]) -> None:
        """A call of a function the script defined: its body read with the call's words as $1 ... "$@"."""
        if defined.name in self.calling:  # recursion: llmperf reads, it cannot tell where it ends
            return
        saved, self.positional = self.positional, positional_table(self.positional["0"], args)
        outer, self.path = self.path, defined.path
        ignored, self.errexit_ignored = self.errexit_ignored, self.errexit_ignored or self.listed_on  # `f || true`:
        self.calling.add(defined.name)  # set -e is ignored in its body (bash manual 4.3.1)
        self.frames.append({})
        try:
            self.read_to_return(defined.body)
        finally:
            leave_function(self)
            self.positional, self.path, self.errexit_ignored = saved, outer, ignored
            self.calling.discard(defined.name)


def _kept_state(reading: Any) -> dict[str, Any]:
    """A copy of everything the reading holds, to start a loop over from."""
    return {name: copy.deepcopy(value) for name, value in vars(reading).items()}


def _restore_state(reading: Any, kept: dict[str, Any] | None, keep_passes: bool = False) -> None:
    """The reading as `kept` has it; the containers the caller shares (env, used) are refilled in place.
    `keep_passes`: the loop passes read stay spent (BlockReading.passes), so that a loop given up on and started over
    inside an outer loop does not read its passes again at every outer pass (two nested while loops of 200 passes
    read for 4.4 s, R60)."""
    if kept is None:
        return
    kept = {**kept, "passes": reading.passes} if keep_passes else kept
    for name, value in kept.items():
        current = getattr(reading, name)
        if isinstance(current, (dict, set)):
            current.clear()
            current.update(value)
        elif isinstance(current, list):
            current[:] = value
        else:
            setattr(reading, name, value)

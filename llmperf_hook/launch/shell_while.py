"""`while TEST; do ... done` (and `until`) read pass by pass where llmperf can decide TEST before every pass.

The argument loop of Megatron-LM's scripts (`while [[ $# -gt 0 ]]; do case $1 in --repo) REPO="$2"; shift 2;; ...
esac; done`) tests only the script's own arguments, which llmperf has: bash runs the body while the test is true
(bash manual 3.2.5.1 Looping Constructs; `until` while it is false), so the body is read once per pass, the test
decided again before each, as long as every one is decided. A test llmperf cannot decide (a file, a command's
status, a value only running gives) at any pass, a body with `break`, `continue` or `return`, a launch in the body,
or more than MAX_PASSES passes: the reading goes back to where the loop started and reads it once as a body that
may run (shell_conditions), as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from llmperf_hook.launch.shell_script import ScriptLine

MAX_PASSES = 256
"""The most passes one `while` loop is read for (an argument loop takes one or two per argument)."""
_HEADER = re.compile(r"^\s*(while|until)\s+(.+?)\s*;\s*do\s*(?:#.*)?$")
_DO = re.compile(r"(?:^|[;&|\s])do(?=$|[;&|\s])")
_DONE = re.compile(r"(?:^|[;&|\s])done(?=$|[;&|\s<>)])")
_DONE_LINE = re.compile(r"^\s*done\s*((?:0?<(?![&>(])|<<<|<<-?)\s*\S.*)?$")
"""A `done` alone, or with an input redirection (`done < hosts.txt`, `done <<< "$LIST"`, `done <<EOF`): the loop's
standard input, which a `while read` test reads a line of at each pass."""
_ONE_LINE = re.compile(r"^\s*(while|until)\s+(.+?)\s*;\s*do\s+(.+?)\s*;?\s*done\s*"
                       r"((?:0?<(?![&>(])|<<<|<<-?)\s*\S.*)?$")
"""`while TEST; do BODY; done [< INPUT]` on one line."""
_LEAVES = re.compile(r"(?<![\w$./-])(?:break|continue|return)(?![\w=./-])")
"""Commands that leave the body early: such a loop is not read pass by pass. Not `exit`: where it surely runs in a
pass (the `*) echo "Unknown option $1"; exit 1;;` arm of an argument loop, which every argument loop of Megatron-LM's
examples/ has) bash ends the script there and the reading refuses as at any such exit (script_stops.exit_refusal);
where it does not run, the pass goes on."""


@dataclass(frozen=True)
class WhileLoop:
    """A `while TEST; do` ... `done` loop on lines of their own."""

    until: bool
    """`until`: the body runs while the test is false."""
    test: str
    """The test command as written."""
    body: tuple[ScriptLine, ...]
    """The lines between the header and `done`."""
    end: int
    """Index of the first line after `done`."""
    feed: ScriptLine | None = None
    """The `done` line where it redirects the loop's input (`done < FILE`)."""


def _code(text: str) -> str:
    found = re.search(r"(?:^|\s)#", text)
    return text[:found.start()] if found else text


_ARITHMETIC_FOR = re.compile(r"^\s*for\s*\(\(([^;]*);([^;]*);([^;]*)\)\)\s*;?\s*do\s*(?:#.*)?$")
"""`for (( INIT; TEST; STEP )); do` on a line of its own (bash manual 3.2.5.1: INIT once, then while TEST is not 0
the body and STEP; an empty TEST is 1)."""

_ARITHMETIC_FOR_LINE = re.compile(r"^\s*for\s*\(\(([^;]*);([^;]*);([^;]*)\)\)\s*;?\s*do\s+(.+?)\s*;?\s*done\s*$")
"""The same loop on one line: `for ((...)); do BODY; done`."""


def arithmetic_for(lines: Sequence[ScriptLine], i: int) -> tuple[str, WhileLoop] | None:
    """The C-style `for ((...))` loop lines[i] opens, as its INIT and the `while ((TEST))` loop it runs as (STEP the
    last line of the body); None for another line, or a loop not read pass by pass."""
    header = _ARITHMETIC_FOR.match(lines[i].text)
    one_line = None if header else _ARITHMETIC_FOR_LINE.match(_code(lines[i].text))
    if one_line is not None:  # `for ((i=0; i<3; i++)); do NP=$((NP*2)); done`
        init, test, step, body = (part.strip() for part in one_line.groups())
        text = f"while (( {test or 1} )); do {body}; {f'(( {step} ))' if step else ':'}; done"
        loop = _one_line(ScriptLine(lines[i].number, text), i + 1)
        return (init, loop) if loop is not None else None
    if header is None:
        return None
    init, test, step = (part.strip() for part in header.groups())
    loop = while_loop([ScriptLine(lines[i].number, f"while (( {test or 1} )); do"), *lines[i + 1:]], 0)
    if loop is None or loop.feed is not None:
        return None
    step_line = (ScriptLine(lines[i].number, f"(( {step} ))"),) if step else ()
    return init, WhileLoop(False, loop.test, loop.body + step_line, loop.end + i)


def _one_line(line: ScriptLine, end: int) -> WhileLoop | None:
    """`while read -r h s; do NN=$((NN+1)); done < hosts`: a loop on one line, its body a line of its own."""
    found = _ONE_LINE.match(_code(line.text))
    parts = found.group(2) + " " + found.group(3) if found else ""
    if found is None or any(pattern.search(parts) for pattern in (_DO, _DONE, _LEAVES)) or \
            "|" in found.group(2).replace("||", ""):
        return None
    feed = ScriptLine(line.number, "done " + found.group(4), line.heredoc) if found.group(4) else None
    return WhileLoop(found.group(1) == "until", found.group(2), (ScriptLine(line.number, found.group(3)),), end, feed)


def while_loop(lines: Sequence[ScriptLine], i: int) -> WhileLoop | None:
    """The loop lines[i] opens, up to its `done` line alone; None for another line or a loop not read pass by pass."""
    if _ONE_LINE.match(_code(lines[i].text)):
        return _one_line(lines[i], i + 1)
    header = _HEADER.match(lines[i].text)
    if header is None or _DONE.search(_code(header.group(2))) or "|" in header.group(2).replace("||", ""):
        return None
    depth = 1
    for j in range(i + 1, len(lines)):
        code = _code(lines[j].text)
        depth += len(_DO.findall(code)) - len(_DONE.findall(code))
        if depth <= 0:
            body = tuple(lines[i + 1:j])
            leaves = any(_LEAVES.search(_code(line.text)) for line in body)
            done = _DONE_LINE.match(code)
            return None if depth or done is None or leaves else \
                WhileLoop(header.group(1) == "until", header.group(2), body, j + 1, lines[j] if done.group(1) else None)
    return None

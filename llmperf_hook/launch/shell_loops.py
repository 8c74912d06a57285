"""`for NAME in WORDS; do ... done` in a launch script, run as bash runs it: once per word, NAME set to each in turn.

bash expands the words once, before the first pass (brace expansion, variables, "$@"; bash manual 3.2.5.1 Looping
Constructs, 3.5.1 Brace Expansion), then runs the body once per resulting word. Where llmperf knows every word (no
command substitution, no glob, no variable only running the script gives), it reads the body once per word, so a
loop that builds the arguments (`for s in 1 2; do ARGS+=" --stage$s"; done`) gives what bash gives. A sweep script
that launches in the body (bigscience tr7b-extrapolation-law.slurm: `for increment in {100..2000..100}; do ...
srun ... done`) then has one launch per word, on the same line; batch_script prices the first, which bash starts
first, and warns which values the others take. A `while` / `until` loop whose test llmperf decides before each pass
is read pass by pass too (launch/shell_while.py). Other loops (C-style `for ((...))`, words or tests llmperf cannot
know) are read once as a body that may run (shell_conditions), and so is a loop whose passes llmperf cannot
follow as bash runs them: a body with `return` (bash manual 4.1: it ends the function, and the loop with it; `break`
and `continue` are followed, launch/shell_blocks.py), or a `done` that a `;`, `|` or `&` follows (`done | tee log` runs the loop in a subshell, 3.2.3, so what it
sets is lost; `done; B=1` goes on past the loop on its line).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

from llmperf_hook.launch.brace_expansion import brace_expand
from llmperf_hook.launch.shell_script import ScriptLine, quoted_words, shell_split, word_quoting

MAX_PASSES = 256
"""The most words a loop is read for; a longer loop is read once as a body that may run (reading is per pass)."""
MAX_TOTAL_PASSES = 4096
"""The most passes one script is read for, all its loops together: nested loops multiply (three of {1..100} are a
million passes, minutes of reading), so past it a loop is read once as a body that may run. 80,000 passes of a
two-line body read in about 4 s on the 2-core machine (load ~3): this keeps a script's loops well under 1 s."""
_HEADER = re.compile(r"^\s*for\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\s+(.*?)\s*(?:;\s*(?:do)?)?\s*(?:#.*)?$", re.DOTALL)
"""`for NAME in WORDS`, then `; do`, `;` (its `do` on the next line) or nothing, and a comment."""
_ONE_LINE = re.compile(r"^\s*for\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\s+([^;]*?)\s*;\s*do\s+(.*?)\s*;?\s*done\s*$", re.DOTALL)
_DO_LINE = re.compile(r"^\s*do\s*(?:#.*)?$")
_DO = re.compile(r"(?:^|[;&|\s])do(?=$|[;&|\s])")
_DONE = re.compile(r"(?:^|[;&|\s])done(?=$|[;&|\s<>)])")
_DONE_LINE = re.compile(r"^\s*done(?:\s*(?:\d*>>?|<)\s*\S+)*\s*$")
"""The `done` that ends a loop read pass by pass: alone, or with redirections only (which run no subshell)."""
_EARLY_EXIT = re.compile(r"(?<![\w$./-])return(?![\w=./-])")
_ANY_BRACES = re.compile(r"\{[^{}]*(?:,|\.\.)[^{}]*\}")
_BACKGROUND = re.compile(r"(?<![&|>])&\s*(?:#[^'\"]*)?$")


@dataclass(frozen=True)
class ForLoop:
    """A `for NAME in WORDS` loop whose body spans whole lines."""

    name: str
    """The loop variable."""
    words: str
    """The word list as written (`{100..2000..100}`, `1 2 4`, `"$@"`)."""
    body: tuple[ScriptLine, ...]
    """The lines between `do` and `done`."""
    end: int
    """Index of the first script line after `done`."""
    number: int
    """Line number of the `for` line."""


def _code(text: str) -> str:
    """A line without its comment (a `#` that starts a word)."""
    found = re.search(r"(?:^|\s)#", text)
    return text[:found.start()] if found else text


def for_loop(lines: Sequence[ScriptLine], i: int) -> ForLoop | None:
    """The `for NAME in WORDS[; do]` loop lines[i] opens (`do` on it or alone on the next line) up to its `done` line,
    or written on the line (`for i in 1 2; do ...; done`); None for another line, or a loop without its `done`."""
    one_line = _ONE_LINE.match(_code(lines[i].text))
    if one_line is not None and not _DONE.search(one_line.group(3)):  # `for i in 1 2; do A+=$i; done`
        loop = ForLoop(one_line.group(1), one_line.group(2), (ScriptLine(lines[i].number, one_line.group(3)),),
                       i + 1, lines[i].number)
        return None if _EARLY_EXIT.search(one_line.group(3)) else loop
    header = _HEADER.match(lines[i].text)
    if header is None or _DONE.search(_code(header.group(2))):
        return None
    start = i + 1
    if not re.search(r";\s*do\s*(?:#.*)?$", lines[i].text):
        if start >= len(lines) or not _DO_LINE.match(lines[start].text):
            return None
        start += 1
    depth = 1  # each loop has one `do` and one `done`, wherever on its lines (`cat f | while read l; do`)
    for j in range(start, len(lines)):
        code = _code(lines[j].text)
        depth += len(_DO.findall(code)) - len(_DONE.findall(code))
        if depth <= 0:
            body = tuple(lines[start:j])
            plain = depth == 0 and _DONE_LINE.match(code) and not any(_EARLY_EXIT.search(_code(b.text)) for b in body)
            return ForLoop(header.group(1), header.group(2), body, j + 1, lines[i].number) if plain else None
    return None


def brace_expanded(words: list[str], quoted: list[bool]) -> tuple[list[str], list[bool]]:
    """A command's words (with their quoted_words marks) after bash's brace expansion (3.5.1), which comes before
    every other expansion: `--data-path {a,b}_text` is two words, `${X}{a,b}` too (a `${...}` is passed over). A word
    with any quoting, an assignment (`X={a,b}` is not expanded), one holding `$(` or a backquote, or one
    brace_expansion leaves alone stays as it is; an empty word it gives is removed, as bash removes an unquoted empty
    word (`{,}`: none, `a{,b}`: a ab)."""
    if len(quoted) != len(words) or not any("{" in word for word in words):
        return words, quoted
    out: list[str] = []
    marks: list[bool] = []
    for word, mark in zip(words, quoted):
        braced = None if mark or "$(" in word or "`" in word or re.match(r"[A-Za-z_]\w*\+?=", word) else \
            brace_expand(word)
        kept = [word] if braced is None else braced
        out.extend(kept)
        marks.extend([mark] * len(kept))
    return out, marks


def loop_values(words: str, expand: Callable[[str], str | None], args: Sequence[str],
                budget: int = MAX_TOTAL_PASSES, fields: Callable[[str], list[str]] = str.split) -> list[str] | None:
    """The words `for NAME in WORDS` runs its body for, as bash expands them (`args`: the arguments "$@" gives); None
    where only running the script tells (a command substitution, a glob, a variable llmperf does not know: `expand`
    gives None) or there are more than MAX_PASSES, or than the script's passes left (`budget`). `fields`: the field
    splitting at the script's IFS (ShellVariables.fields)."""
    if "$(" in words or "`" in words:
        return None
    try:
        split, quoting, quoted = shell_split(words), word_quoting(words), quoted_words(words)
    except ValueError:
        return None
    if len(quoting) != len(split) or len(quoted) != len(split):
        return None
    out: list[str] = []
    for word, unquoted, any_quote in zip(split, quoting, quoted):
        if word in ("$@", "${@}", "$*", "${*}"):  # bash manual 3.4.2 Special Parameters
            if any("$" in arg or "`" in arg for arg in args):
                return None
            if not any_quote:  # `$@`, `$*`: the arguments, split again at blanks
                out.extend(field for arg in args for field in fields(arg))
            else:  # `"$@"`: one word per argument, blanks kept; `"$*"`: one word, the arguments joined by a blank
                out.extend(args if "@" in word else [" ".join(args)])
            continue
        if any_quote and _ANY_BRACES.search(word):  # `"{1..3}"` is one word, `pre"x"{1,2}` two: which is unknown
            return None
        if word.startswith("~") and not any_quote:  # tilde expansion (3.5.2): the home folder where it runs
            return None
        braced_words = brace_expand(word) if not any_quote and (unquoted is False or "${" in word) else [word]
        if braced_words is None:
            return None
        for braced in braced_words:
            value = expand(braced)
            if value is None or (unquoted is not False and any(c in value for c in "*?[")) or \
                    (unquoted is False and any(c in braced for c in "*?[")):
                return None
            out.extend(fields(value) if unquoted is not False else [value])
    return out if len(out) <= min(MAX_PASSES, budget) else None


def in_background(text: str) -> bool:
    """Whether the line's last command runs in the background (`... &`, not `&&` or `>&`): a launch so in a loop
    starts every pass at once, no sweep (`for node in n1 n2; do ssh $node torchrun --nnodes 2 ... & done`: one job's
    nodes)."""
    return _BACKGROUND.search(text) is not None


def sweep_warning(name: str, values: Sequence[str], where: str, background: bool = False) -> str:
    """For a script that launches once per pass of a loop: which pass llmperf priced."""
    shown = ", ".join(values[:8]) + (f", ... ({len(values)} values)" if len(values) > 8 else "")
    if background:
        return (f"the launch at {where} runs in the background in a `for {name} in ...` loop ({name} = {shown}): bash "
                f"starts all {len(values)} at once. llmperf priced the first, {name}={values[0]}, as one launch with "
                "its own node count: right when each pass starts one node of the job; separate jobs sharing GPUs "
                "would contend and run slower than priced.")
    return (f"the launch at {where} runs in a `for {name} in ...` loop, once per value ({name} = {shown}): bash starts "
            f"{len(values)} jobs one after another. llmperf priced the first, {name}={values[0]}; to price another, "
            f"give its launch line after `--`, or the script with that one value in the loop.")

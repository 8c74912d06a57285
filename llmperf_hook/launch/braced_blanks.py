"""Blanks inside a parameter expansion (`${NP%% *}`, `${A:- x}`), which split no word in bash.

bash reads an unquoted `${...}` whole while it splits a line into words (bash manual 3.5.3: the closing brace is the
first `}` not quoted and not inside an embedded expansion); shlex, which shell_script.shell_split uses, would cut
`${NP%% *}` into `${NP%%` and `*}`. These helpers find such blanks and stand in for them while shlex splits.
"""

from __future__ import annotations

from typing import Sequence

_MARKS = {" ": "\ue025", "\t": "\ue026"}
"""Private-use characters that stand for a blank inside `${...}` while shlex splits the words."""


def braced_blanks(text: str, outside: Sequence[bool]) -> set[int]:
    """Where `text` has a blank inside a parameter expansion; `outside[i]`: text[i] is outside quotes (shell_script
    ._scan), where bash counts the braces."""
    depth, out = 0, set()
    for i, c in enumerate(text):
        if not outside[i]:
            continue
        if c == "$" and text[i + 1:i + 2] == "{":
            depth += 1
        elif c == "}" and depth:
            depth -= 1
        elif c in _MARKS and depth:
            out.add(i)
    return out


def mark_blanks(text: str, braced: set[int]) -> str:
    """`text` with the blanks at `braced` replaced by their marks (no word is split there)."""
    return "".join(_MARKS[c] if i in braced else c for i, c in enumerate(text))


def unmark_blanks(word: str) -> str:
    """The blanks mark_blanks stood in for, back."""
    for blank, mark in _MARKS.items():
        word = word.replace(mark, blank)
    return word

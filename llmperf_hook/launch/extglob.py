"""bash's extended glob patterns, `?(…)`, `*(…)`, `+(…)`, `@(…)` (bash manual 3.5.8.1 Pattern Matching, under
`shopt -s extglob`), as a `case` arm uses them (`*@(7b|13b)) TP=2;;`): matched through an equivalent regular
expression. `!(…)` and a pattern llmperf cannot translate give None: the arm is then undecided."""

from __future__ import annotations

import re

from llmperf_hook.launch.top_level_split import split_outside

_GROUP = {"?": "?", "*": "*", "+": "+", "@": ""}
"""An extglob group's operator -> the regex quantifier after `(?:…)`."""


def extglob_match(value: str, pattern: str) -> bool | None:
    """Whether `value` matches the glob `pattern` (extglob groups included); None where it holds `!(…)` or cannot be
    translated."""
    regex = _translate(pattern)
    return None if regex is None else re.fullmatch(regex, value, re.DOTALL) is not None


def _translate(pattern: str) -> str | None:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c in "?*+@!" and pattern[i + 1:i + 2] == "(":
            end = _closing(pattern, i + 1)
            if end is None or c == "!":
                return None
            alternatives = [_translate(part) for part in split_outside(pattern[i + 2:end], "|", "()")]
            if any(part is None for part in alternatives):
                return None
            out.append(f"(?:{'|'.join(alternatives)}){_GROUP[c]}")  # type: ignore[arg-type]
            i = end + 1
            continue
        if c == "[":
            end = pattern.find("]", i + 2)
            if end < 0:
                return None
            body = pattern[i + 1:end]
            out.append("[" + ("^" + body[1:] if body[:1] in "!^" else body).replace("\\", "\\\\") + "]")
            i = end + 1
            continue
        out.append(".*" if c == "*" else "." if c == "?" else re.escape(c))
        i += 1
    return "".join(out)


def _closing(text: str, at: int) -> int | None:
    """Where the `(` at `at` closes."""
    depth = 0
    for k in range(at, len(text)):
        depth += (text[k] == "(") - (text[k] == ")")
        if depth == 0:
            return k
    return None

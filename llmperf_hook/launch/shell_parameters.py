"""bash's parameter expansions that transform a variable's value (bash manual 3.5.3 Shell Parameter Expansion):
`${#NAME}`, `${NAME%PATTERN}` / `%%` / `#` / `##`, `${NAME/PATTERN/STRING}` / `//`, `${NAME^^}` / `^` / `,,` / `,`
and `${NAME:OFFSET[:LENGTH]}`. A launch script's `--save ${CKPT%/}`, `MASTER_ADDR=${NODES%%,*}` or
`--num-layers ${#LAYERS}` reach the launcher transformed; llmperf read them as written. Patterns are bash's globs
(`*`, `?`, `[...]`, matched as fnmatch does); a variable the environment lacks stays as written.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from typing import Mapping

from llmperf_hook.launch.braced_blanks import GLOB_MARKS, unmark_braces

OPERATOR = re.compile(r"\$\{(?:#([A-Za-z_][A-Za-z0-9_]*|[0-9]+)|([A-Za-z_][A-Za-z0-9_]*|[0-9]+)"
                      r"(?:(%%|%|##|#|//|/|\^\^|\^|,,|,)((?:[^}$]|\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$(?!\{))*)"
                      r"|:(\d+|\s+-?\d+)(?::(\s*-?\d+))?))\}")
"""`${NAME:-8}` is the default expansion (argv_words), not an offset: a negative offset needs a blank, `${NAME: -2}`.
NAME may be a positional parameter (`${1#*=}`, `${0##*/}`: shell_positional.expand_positional); the pattern and string
may hold `$NAME` / `${NAME}` references (`${P//$D/_}`), which bash expands first (3.5.3: "The pattern is expanded")."""
_SPEC_REF = re.compile(r"(\"?)\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))\1")
"""A `$NAME` / `${NAME}` (or its double-quoted form) inside a transforming expansion's pattern or string."""


def _trim(value: str, op: str, pattern: str) -> str:
    """`%`/`%%`: the shortest/longest suffix matching `pattern` removed; `#`/`##`: the prefix."""
    cuts = range(len(value) + 1)
    if op.startswith("%"):
        ends = [i for i in (reversed(cuts) if op == "%" else cuts) if fnmatchcase(value[i:], pattern)]
        return value[:ends[0]] if ends else value
    starts = [i for i in (cuts if op == "#" else reversed(cuts)) if fnmatchcase(value[:i], pattern)]
    return value[starts[0]:] if starts else value


def _expand_spec(spec: str, env: Mapping[str, str], used: dict[str, str]) -> str | None:
    """`spec` (a pattern and string) with its variable references replaced by their values, written so that
    _pattern_and_string reads them as bash does: a quoted `"$D"` matches its value literally, an unquoted `$D` is a
    glob (bash manual 3.5.8.1), and a `/` in either value belongs where the reference stood (bash splits PATTERN/STRING
    before it expands them); None when a reference names a variable `env` lacks (its value is not known here)."""
    names = [found.group(2) or found.group(3) for found in _SPEC_REF.finditer(spec)]
    if any(name not in env for name in names):
        return None

    def value(found: re.Match[str]) -> str:
        name = found.group(2) or found.group(3)
        used[name] = env[name]
        escaped = re.sub(r"([\\/'\"])", r"\\\1", env[name])
        return f'"{escaped}"' if found.group(1) else escaped

    return _SPEC_REF.sub(value, spec)


def _pattern_and_string(spec: str, split: bool = True) -> tuple[str, str]:
    """`PATTERN/STRING` split at the first `/` outside quotes (with `split`; else all of it is the pattern, as in
    `${P%/*}`), each part's quotes removed: bash removes them in both, inside double quotes too (`"${X/'b'/'Y'}"` is aYc
    for X=abc, bash 5.2), a quoted or escaped `/` is the pattern's (`"${P//\\//_}"`), and a quoted or escaped glob
    character in the pattern matches itself (fnmatch's `[*]`)."""
    parts, quote, escaped = [""], "", False
    for c in spec:
        if escaped or (c not in "'\"\\" and not (c == "/" and split and not quote and len(parts) == 1)):
            glob = (escaped or bool(quote)) and c in "*?[" and len(parts) == 1
            parts[-1], escaped = parts[-1] + (f"[{c}]" if glob else c), False
        elif c == "\\" and quote != "'":
            escaped = True
        elif c in "'\"" and quote in ("", c):
            quote = "" if quote else c
        elif c == "/":
            parts.append("")
        else:  # a quote inside the other kind of quotes
            parts[-1] += c
    pattern = "".join(f"[{c}]" if c in GLOB_MARKS.values() else c for c in parts[0]).replace("[^", "[!")  # bash's
    # `[^0-9]` is fnmatch's `[!0-9]` (bash manual 3.5.8.1)
    return unmark_braces(pattern), unmark_braces(parts[1]) if len(parts) > 1 else ""


def _replace(value: str, everywhere: bool, spec: str) -> str:
    """`/PATTERN/STRING`: the longest match at the first place it matches replaced (`//`: every match)."""
    pattern, replacement = _pattern_and_string(spec)
    out, i = "", 0
    while i <= len(value) and pattern:
        end = next((j for j in range(len(value), i, -1) if fnmatchcase(value[i:j], pattern)), None)
        if end is None:
            out, i = out + value[i:i + 1], i + 1
            continue
        out, i = out + replacement, end
        if not everywhere:
            return out + value[i:]
    return out if pattern else value


def _replace_anchored(value: str, anchor: str, spec: str) -> str:
    """`/#PATTERN/STRING` (`/%`): the longest match at the value's start (end) replaced; an empty PATTERN matches
    there, so STRING is prefixed (appended): bash manual 3.5.3."""
    pattern, replacement = _pattern_and_string(spec)
    cuts = range(len(value), -1, -1) if anchor == "#" else range(len(value) + 1)
    for cut in cuts:
        if anchor == "#" and fnmatchcase(value[:cut], pattern):
            return replacement + value[cut:]
        if anchor == "%" and fnmatchcase(value[cut:], pattern):
            return value[:cut] + replacement
    return value


def _case(value: str, op: str) -> str:
    if op in ("^^", ",,"):
        return value.upper() if op == "^^" else value.lower()
    return (value[:1].upper() if op == "^" else value[:1].lower()) + value[1:]


def _substring(value: str, offset: str, length: str | None) -> str:
    """`${NAME:OFFSET:LENGTH}`: a negative offset counts from the end, a negative length stops that far from it."""
    start = int(offset)
    start = max(len(value) + start, 0) if start < 0 else start
    if length is None:
        return value[start:]
    count = int(length)
    return value[start:start + count] if count >= 0 else value[start:len(value) + count]


def _transform(match: re.Match[str], env: Mapping[str, str], used: dict[str, str]) -> str:
    name = match.group(1) or match.group(2)
    if name not in env:
        return match.group(0)
    op, spec = match.group(3), match.group(4) or ""
    if "$" in spec:
        spec = _expand_spec(spec, env, used)  # type: ignore[assignment]
        if spec is None:
            return match.group(0)
    value = used[name] = env[name]
    if match.group(1):
        return str(len(value))
    if op in ("%", "%%", "#", "##"):
        return _trim(value, op, _pattern_and_string(spec, split=False)[0])
    if op == "/" and spec[:1] in ("#", "%"):
        return _replace_anchored(value, spec[0], spec[1:])
    if op in ("/", "//"):
        return _replace(value, op == "//", spec)
    if op:
        return _case(value, op)
    return _substring(value, match.group(5), match.group(6))


def expand_operators(word: str, env: Mapping[str, str], used: dict[str, str]) -> str:
    """`word` with each transforming expansion of a variable set in `env` replaced by its result."""
    return OPERATOR.sub(lambda m: _transform(m, env, used), word) if "${" in word else word

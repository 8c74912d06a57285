"""bash's brace expansion of one unquoted word (bash manual 3.5.1 Brace Expansion), as braces.c does it.

The word's first `{` that opens a brace expression splits it into a preamble, the expression and a postamble
(braces.c brace_expand). The expression is either a list, two or more parts parted by commas outside inner braces,
each part expanded again (`{a,{b,c}}` nests: a b c), or a sequence `{X..Y[..INCR]}` of integers or of single letters
(`{a..e}`, `{e..a..2}`: e c a). Each word it gives gets the preamble before it and each word of the postamble's own
expansion after it, left to right (`{a,b}{1,2}`: a1 a2 b1 b2; 3.5.1: "left to right order is preserved"). A `{` that
opens none (`{a}`, `{}`, `{1.5..2}`) stays as written and the search goes on after it (`{a}{b,c}`: {a}b {a}c).

Sequences (braces.c expand_seqterm, mkseq): INCR defaults to 1, 0 counts as 1, and its sign is made to follow the
direction from X to Y; when X or Y is written with a leading zero (`01`, `-01`) every term is zero-padded to the
longer of the two (`{-01..2}`: -01 000 001 002). Each case in tests/launch/test_launch_front_end_h189.py is compared
with bash 5.2.15 itself.
"""

from __future__ import annotations

import re

MAX_WORDS = 4096
"""The most words one word is expanded into here; a longer expansion is left as written (not read, never run)."""
_INTEGER = re.compile(r"[+-]?\d+")


_BACKSLASH = "\ue05c"
"""Stands for the backslash of a letter sequence (`{Z..a}`) until the words are made: that word is not empty yet."""


class _TooMany(Exception):
    pass


def brace_expand(word: str) -> list[str] | None:
    """The words bash makes of the unquoted `word` by brace expansion (the word itself when it holds no brace
    expression), less the empty ones it removes (`{,}`: none, `a{,b}`: a ab; 3.5.7: unquoted implicit nulls); None
    where llmperf leaves the word as written: more than MAX_WORDS words, or a word bash refuses to expand further.

    A letter sequence runs through the ASCII characters between its letters (`{a..Z}`: a ` _ ^ ] \\ [ Z), and bash
    expands each word it makes again (3.5: brace expansion comes first): the backslash is removed as a quote (3.5.9;
    alone, it leaves an empty word that is kept: bash 5.2.15 gives 8 words for `{Z..a}`), and a backquote followed by
    more of the word opens a command substitution that never closes (`x{a..Z}y`: 'bad substitution', the command is not
    run), where llmperf gives None."""
    try:
        words = [word for word in _expand(word) if word]
    except _TooMany:
        return None
    if any(re.search(r"`.", word) for word in words):
        return None
    return [word.replace(_BACKSLASH, "") for word in words]


def _expand(text: str) -> list[str]:
    start = _first_expression(text)
    if start is None:
        return [text]
    end, kind = start[1], start[2]
    amble = text[start[0] + 1:end]
    if kind == "sequence":
        middle = _sequence(amble)
    else:
        middle = [word for part in _parts(amble) for word in _expand(part)]
    tails = _expand(text[end + 1:]) if text[end + 1:] else [""]
    if len(middle) * len(tails) > MAX_WORDS:
        raise _TooMany
    return [text[:start[0]] + word + tail for word in middle for tail in tails]


def _first_expression(text: str) -> tuple[int, int, str] | None:
    """Where the first brace expression of `text` opens and closes, and its kind (braces.c brace_expand: a `{` that
    opens no valid expression is passed over, and so is a parameter expansion, braces.c brace_gobbler: 'treat ${...}
    like \\{...}', so `${U:-a,b}` stays one word and `${X}{a,b}` gives two)."""
    at = 0
    while at < len(text):
        if text[at] == "\\":
            at += 2
            continue
        if text.startswith("${", at):
            at = _parameter_end(text, at + 2)
            continue
        if text[at] == "{":
            closed = _closing(text, at + 1)
            if closed is not None and (closed[1] == "list" or _sequence_terms(text[at + 1:closed[0]]) is not None):
                return at, closed[0], closed[1]
        at += 1
    return None


def _parameter_end(text: str, i: int) -> int:
    """Where the `${...}` whose text starts at text[i] ends: after its `}`, inner braces counted."""
    level = 1
    while i < len(text) and level:
        if text[i] == "\\":
            i += 2
            continue
        level += (text[i] == "{") - (text[i] == "}")
        i += 1
    return i


def _closing(text: str, i: int) -> tuple[int, str] | None:
    """The `}` that closes a brace expression whose amble starts at text[i] (braces.c brace_gobbler): the first one
    outside inner braces after a comma (a list) or a `..` (a sequence, when no comma came before it) outside them."""
    level, kind = 0, ""
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == "}" and not level and kind:
            return i, kind
        if char == "{":
            level += 1
        elif char == "}" and level:
            level -= 1
        elif char == "," and not level:
            kind = "list"
        elif text.startswith("..", i) and text[i + 2:i + 3] != "}" and not level and not kind:
            kind = "sequence"
        i += 1
    return None


def _parts(amble: str) -> list[str]:
    """A list's parts: the amble cut at each comma outside inner braces."""
    parts, level, start = [], 0, 0
    for at, char in enumerate(amble):
        level += (char == "{") - (char == "}" and level > 0)
        if char == "," and not level and (not at or amble[at - 1] != "\\"):
            parts.append(amble[start:at])
            start = at + 1
    return [*parts, amble[start:]]


def _sequence_terms(amble: str) -> tuple[str, str, int] | None:
    """X, Y and INCR of a sequence `X..Y[..INCR]`: both integers or both single ASCII letters, INCR an integer."""
    first, _, rest = amble.partition("..")
    last, dots, step = rest.partition("..")
    if dots and not _INTEGER.fullmatch(step):
        return None
    letters = all(len(term) == 1 and term.isascii() and term.isalpha() for term in (first, last))
    if not letters and not (_INTEGER.fullmatch(first) and _INTEGER.fullmatch(last)):
        return None
    return first, last, int(step) if dots else 1


def _sequence(amble: str) -> list[str]:
    """The terms of a sequence expression (braces.c mkseq); a letter sequence's backslash as _BACKSLASH."""
    terms = _sequence_terms(amble)
    assert terms is not None  # _first_expression checked it
    first, last, step = terms
    letters = not _INTEGER.fullmatch(first)
    start, end = (ord(first), ord(last)) if letters else (int(first), int(last))
    step = abs(step) or 1
    if (abs(end - start) // step) + 1 > MAX_WORDS:
        raise _TooMany
    numbers = range(start, end + 1, step) if start <= end else range(start, end - 1, -step)
    if letters:
        return [_BACKSLASH if n == ord("\\") else chr(n) for n in numbers]
    width = _zero_padded_width(first, last)
    return [f"{n:0{width}d}" if width else str(n) for n in numbers]


def _zero_padded_width(first: str, last: str) -> int:
    """The width every term is zero-padded to (0: none): the longer term's, where either is written with a leading
    zero (`01`, `-01`; braces.c expand_seqterm)."""
    padded = any(len(term) > 1 and term[0] == "0" or len(term) > 2 and term[:2] == "-0" for term in (first, last))
    return max(len(first), len(last)) if padded else 0

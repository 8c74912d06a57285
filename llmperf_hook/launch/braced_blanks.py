"""Blanks inside a parameter expansion (`${NP%% *}`, `${A:- x}`), which split no word in bash, and quoted braces
inside one (`${A:-"a}b"}`), which close none.

bash reads an unquoted `${...}` whole while it splits a line into words (bash manual 3.5.3: the closing brace is the
first `}` not quoted and not inside an embedded expansion); shlex, which shell_script.shell_split uses, would cut
`${NP%% *}` into `${NP%%` and `*}`. These helpers find such blanks and stand in for them while shlex splits. shlex also
takes the quotes off `"a}b"`, after which `${A:-a}b}` reads as closed at the first brace: a quoted brace is marked
while it splits and stays marked until the expansion is read (argv_words.expand_env_refs unmarks the word it gives).
Inside a double-quoted `${...}` bash matches the word's own double quotes on their own (`X="${A:-"a b"}"` is `a b`),
where shlex would close the outer quotes at the first inner one: unnest_quotes takes such inner quotes off first.
"""

from __future__ import annotations

from typing import Sequence

_MARKS = {" ": "\ue025", "\t": "\ue026"}
"""Private-use characters that stand for a blank inside `${...}` while shlex splits the words."""
BRACE_MARK = "\ue027"
"""Stands for a quoted `}` inside `${...}`, from the split until expand_env_refs reads the expansion."""
SLASH_MARK = "\ue028"
"""Stands for a quoted `/` inside `${...}`: in `"${P//"/"/_}"` the quoted `/` is the pattern, not the separator of
pattern and string (bash 5.2 gives a_b_c for P=a/b/c); shell_parameters reads it as `/`."""
GLOB_MARKS = {"*": "\ue029", "?": "\ue02a", "[": "\ue02b"}
"""Stand for a quoted glob character inside `${...}`, which matches itself in a pattern (`${X//"?"/-}`)."""
_QUOTED_MARKS = {"}": BRACE_MARK, "/": SLASH_MARK, **GLOB_MARKS}


def braced_blanks(text: str, outside: Sequence[bool]) -> set[int]:
    """Where `text` has a blank inside a parameter expansion, or a quoted `}` there that closes no expansion quoted
    with it (`${A:-"a}b"}`; not `${A:-"${B}"}`), or a quoted `/`, `*`, `?` or `[` there (`${P//"/"/_}`); `outside[i]`: text[i] is outside quotes (shell_script._scan), where
    bash counts the braces."""
    depth, quoted_depth, out = 0, 0, set()
    for i, c in enumerate(text):
        opens = c == "$" and text[i + 1:i + 2] == "{"
        if not outside[i]:
            if depth and opens:
                quoted_depth += 1
            elif depth and c == "}":
                quoted_depth, brace = max(quoted_depth - 1, 0), not quoted_depth
                out |= {i} if brace else set()
            elif depth and c in "/*?[" and not quoted_depth:  # `${P//"/"/_}`: the quoted `/` is the pattern
                out.add(i)
        elif opens:
            depth += 1
        elif c == "}" and depth:
            depth -= 1
        elif c in _MARKS and depth:
            out.add(i)
    return out


def mark_blanks(text: str, braced: set[int]) -> str:
    """`text` with the blanks at `braced` replaced by their marks (no word is split there)."""
    marks = {**_QUOTED_MARKS, **_MARKS}
    return "".join(marks[c] if i in braced else c for i, c in enumerate(text))


def unmark_blanks(word: str) -> str:
    """The blanks mark_blanks stood in for, back."""
    for blank, mark in _MARKS.items():
        word = word.replace(mark, blank)
    return word


def unmark_braces(word: str) -> str:
    """The quoted braces (and slashes) marked while the words were split, back (the word of an expansion, or a launch
    word left as written)."""
    for c, mark in _QUOTED_MARKS.items():
        word = word.replace(mark, c)
    return word


def unnest_quotes(text: str) -> str:
    """`text` with the double quotes of a word inside a double-quoted `${...}` taken off (`"${A:-"a b"}"` ->
    `"${A:-a b}"`: the same word to bash, which removes them), a `}` they quoted marked as closing nothing
    (`"${A:-"a}b"}"`); unchanged where such a quote is not closed."""
    if '"${' not in text:
        return text
    out: list[str] = []
    quote, depth, i = "", 0, 0
    while i < len(text):
        c = text[i]
        if c == "\\" and quote != "'":
            out.append(text[i:i + 2])
            i += 2
            continue
        if quote == '"' and text.startswith("${", i):
            depth, c = depth + 1, "${"
        elif quote == '"' and depth and c == "}":
            depth -= 1
        elif quote == '"' and depth and c == '"':
            end = _closing_quote(text, i + 1)
            if end is None:
                return text
            out.append(_mark_quoted_braces(text[i + 1:end]))
            i = end + 1
            continue
        elif c in "'\"" and quote in ("", c):
            quote = "" if quote else c
        out.append(c)
        i += len(c)
    return "".join(out)


def _closing_quote(text: str, start: int) -> int | None:
    """Where the double-quoted string from `start` ends (a backslash escapes the next character), None if never."""
    i = start
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return i
        else:
            i += 1
    return None


def _mark_quoted_braces(inner: str) -> str:
    """A quoted word's `}` marked (BRACE_MARK), but not one closing a `${` of its own (`"${B}"`); its `/` marked
    (SLASH_MARK), and its glob characters (GLOB_MARKS), outside such a `${`."""
    depth, out = 0, []
    for i, c in enumerate(inner):
        if c == "$" and inner[i + 1:i + 2] == "{":
            depth += 1
        elif c == "}":
            depth, c = (depth - 1, c) if depth else (0, BRACE_MARK)
        elif c in "/*?[" and not depth:
            c = _QUOTED_MARKS[c]
        out.append(c)
    return "".join(out)

"""The builtins that set variables from text the script itself holds: `read NAME ... <<< WORD` (or a here-document)
and `printf -v NAME FORMAT ARGS` (bash manual 4.2 Bash Builtin Commands, `read` and `printf`; 3.6.7 Here Strings).

`read -r TP PP <<< "$LAYOUT"` takes one line of its input, splits it into fields at $IFS as word splitting does
(3.5.7), gives each name one field and the last name the rest of the line; `printf -v GBS "%d" 64` assigns what printf
would print; `mapfile -t L <<< "$X"` (`readarray`) makes each line an element. All are read, never run. Input from
`< FILE` is the text a here-document of the script wrote to FILE, else FILE as it is here (as a ds_config is read). A
`read` whose input only running the script gives (the terminal, a pipe, a file another command writes or that is not
here) leaves its names undecided, as a command substitution does, so a launch line using them names them."""

from __future__ import annotations

import os
import re
from typing import Any, Protocol, Sequence

from llmperf_hook.launch.shell_script import Heredoc, Redirection

DEFAULT_IFS = " \t\n"
_READ_OPTIONS_WITH_VALUE = frozenset("adinNptu")
"""read's options that take a value (`-a aname -d delim -i text -n nchars -N nchars -p prompt -t timeout -u fd`)."""
_PREFIX = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_UNEXPANDED = re.compile(r"\$[{(A-Za-z_0-9@*#?]|`")
"""A reference the script's variables did not give (set by a command substitution, or from the environment the job
starts in), or a command substitution: the text read or printed is not known."""
HERE_STRING_REF = re.compile(r"<<<\s*(\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)(?=$|[\s;&|)])")
"""`<<< $X`: a here-string's word is not split at blanks (3.6.7), so it is read as `<<< "$X"`."""


class _Script(Protocol):
    env: dict[str, str]
    undecidable: set[str]
    exported: set[str]
    allexport: bool
    arrays: dict[str, list[str]]
    cwd: str
    files: dict[str, Any]
    """The files the script wrote before this line (parsed_job.ScriptFile by path)."""

    def expand(self, text: str) -> str: ...

    def here_document(self, heredoc: Heredoc) -> str: ...


def _set(script: _Script, name: str, value: str) -> None:
    script.env[name] = value
    script.undecidable.discard(name)
    if script.allexport:
        script.exported.add(name)


def _leave_undecided(script: _Script, names: Sequence[str]) -> None:
    for name in names:
        script.env.pop(name, None)
        script.arrays.pop(name, None)
        script.undecidable.add(name)


def ifs_fields(line: str, ifs: str, count: int | None) -> list[str]:
    """`line` split at the characters of `ifs` as bash's read does: IFS white space at the start and end is dropped, a
    run of it separates fields, and each other IFS character (with the white space around it) ends one field. With
    `count`, at most that many fields: the last is the rest of the line with its delimiters (trailing IFS white space
    dropped). An empty IFS splits nothing."""
    white = "".join(c for c in ifs if c in DEFAULT_IFS)
    line = line.strip(white) if white else line
    if not ifs:
        return [line] if line else []
    fields: list[str] = []
    i = 0
    while i < len(line) and (count is None or len(fields) < count - 1):
        end = i
        while end < len(line) and line[end] not in ifs:
            end += 1
        fields.append(line[i:end])
        i = end
        while i < len(line) and line[i] in white:
            i += 1
        if i < len(line) and line[i] in ifs:  # one non-white delimiter (with the white space after it)
            i += 1
            while i < len(line) and line[i] in white:
                i += 1
    if i < len(line):
        fields.append(_last_field(line[i:], ifs, white))
    return fields


def _last_field(rest: str, ifs: str, white: str) -> str:
    """What the last name gets: the rest of the line, except that when it is one field and the delimiters after it
    (IFS white space, at most one other IFS character, white space) bash gives that field alone (read.def: the rest
    is taken whole unless get_word_from_string consumes all of it): `IFS=, read a b <<< "1,2,"` gives b=2,
    `<<< "1,,"` b empty, `<<< "1,2,,"` b=`2,,`."""
    end = 0
    while end < len(rest) and rest[end] not in ifs:
        end += 1
    after = rest[end:].lstrip(white)
    after = after[1:].lstrip(white) if after[:1] and after[0] in ifs else after
    return rest[:end] if not after else rest


_QUOTED_BASE = 0xF0000
"""Characters a backslash quoted stand in Unicode's plane-15 private use area while the line is split."""


def _split_unescaped(line: str, ifs: str, count: int | None) -> list[str]:
    """Without -r, a backslash quotes the next character, which then delimits nothing, and is removed; a
    backslash-newline continues the line."""
    quoted = re.sub(r"\\(.)", lambda m: chr(_QUOTED_BASE + ord(m.group(1))), line.replace("\\\n", ""),
                    flags=re.DOTALL)
    unquote = re.compile("[" + chr(_QUOTED_BASE) + "-" + chr(_QUOTED_BASE + 0xFFFF) + "]")
    return [unquote.sub(lambda m: chr(ord(m.group(0)) - _QUOTED_BASE), f) for f in ifs_fields(quoted, ifs, count)]


def input_text(script: _Script, redirections: Sequence[Redirection], heredoc: Heredoc | None) -> str | None:
    """The text read gets: a here-string's word expanded with a newline after it (3.6.7), or the here-document's
    text; None when it reads anything else (the terminal, a file, a pipe), or text holding a variable the script's
    own assignments do not give."""
    text = None
    for redirection in redirections:
        operator = redirection.operator.lstrip("0123456789")
        if redirection.operator[:1].isdigit() and redirection.operator.rstrip("<-") not in ("", "0"):
            continue  # `3<<< x`: not its standard input
        if operator == "<<<":  # `X=$(cmd); read A B <<< "$X"`: only running cmd gives the text
            text = script.expand(redirection.target) + "\n"
            text = None if _UNEXPANDED.search(text) else text
        elif operator in ("<<", "<<-") and heredoc is not None:  # a quoted one keeps its `$` as text
            text = script.here_document(heredoc)
            text = None if heredoc.expand and _UNEXPANDED.search(text) else text
        elif operator == "<":
            text = file_text(script, redirection.target)
        elif operator in ("<<", "<<-", "<&", "<>"):
            text = None
    return text


MAX_INPUT_BYTES = 1 << 20
"""The most of a file an input redirection is read for (a launch script reads a short list of settings or hosts)."""


def file_text(script: _Script, target: str) -> str | None:
    """What `< target` gives a command: the text a here-document of the script wrote there, else the file as it is
    where llmperf reads the script; None for a file another command writes (`sed ... > f`), one that is not here, one
    that is no regular file (a FIFO, /dev/stdin) or under /dev or /proc, or one past MAX_INPUT_BYTES."""
    name = script.expand(target)
    path = os.path.normpath(os.path.join(script.cwd, name))
    written = script.files.get(os.path.normpath(name), script.files.get(path))  # kept by the name the script wrote
    if written is not None:
        return None if written.command else written.text
    if path == os.devnull:  # no input: read fails and empties its names, mapfile gives no elements
        return ""
    try:  # a FIFO blocks until a writer opens it; /dev and /proc hold what the machine running the job gives
        if not os.path.isfile(path) or path.startswith(("/dev/", "/proc/")) or \
                os.path.getsize(path) > MAX_INPUT_BYTES:
            return None
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def read_builtin(script: _Script, words: Sequence[str], redirections: Sequence[Redirection],
                 heredoc: Heredoc | None, uncertain: bool = False) -> bool:
    """`[IFS=...] read [-r] [-a NAME] [NAME ...]`: its names set from its input's first line; True when `words` runs
    read. Without a here-string or here-document its input is unknown, and in a loop or `case` arm (`uncertain`)
    whether it runs: the names are left undecided."""
    command = read_command(script, words)
    if command is None:
        return False
    text = None if uncertain else input_text(script, redirections, heredoc)
    if text is None or not command.follows():
        _leave_undecided(script, command.names + ([command.options["a"]] if "a" in command.options else []))
        return True
    command.assign(script, text.split(command.delimiter(), 1)[0])
    return True


class ReadCommand:
    """A `[IFS=...] read [options] [NAME ...]` command: what it assigns from one line of input."""

    def __init__(self, prefixes: dict[str, str], options: dict[str, str], names: list[str]) -> None:
        self.prefixes, self.options, self.names = prefixes, options, names

    def follows(self) -> bool:
        """Whether llmperf follows what it reads (not with a count of characters, a timeout or another descriptor)."""
        return not any(letter in self.options for letter in "nNtu")

    def delimiter(self) -> str:
        """What ends its line: -d's first character (`-d ''`: a NUL), else a newline."""
        return self.options.get("d", "\n")[:1] or "\0"

    def assign(self, script: _Script, line: str) -> None:
        """Its names (or -a's array) set from `line`, split at IFS as read splits it."""
        ifs = script.expand(self.prefixes["IFS"]) if "IFS" in self.prefixes else script.env.get("IFS", DEFAULT_IFS)
        split = ifs_fields if "r" in self.options else _split_unescaped
        if "a" in self.options:
            script.arrays[self.options["a"]] = split(line, ifs, None)
            return
        fields = split(line, ifs, len(self.names))
        for k, name in enumerate(self.names):
            _set(script, name, fields[k] if k < len(fields) else "")


def read_command(script: _Script, words: Sequence[str]) -> ReadCommand | None:
    """`words` as a read command; None for another command."""
    at = 0
    while at < len(words) and _PREFIX.match(words[at]):
        at += 1
    if at >= len(words) or words[at] != "read":
        return None
    prefixes = dict(_PREFIX.match(word).groups() for word in words[:at])  # type: ignore[union-attr]
    options, names = _options([script.expand(word) for word in words[at + 1:]], _READ_OPTIONS_WITH_VALUE)
    return ReadCommand(prefixes, options, names or ([] if "a" in options else ["REPLY"]))


_MAPFILE_OPTIONS = frozenset("dnOsucC")
"""mapfile's options that take a value (bash manual 4.2 `mapfile`); -t takes none."""


def mapfile_builtin(script: _Script, words: Sequence[str], redirections: Sequence[Redirection],
                    heredoc: Heredoc | None, uncertain: bool = False) -> bool:
    """`mapfile [-t] [-d DELIM] [-n COUNT] [-s COUNT] [ARRAY]` / `readarray`: ARRAY (MAPFILE) set to its input's lines,
    each with its delimiter unless -t (bash manual 4.2); True when `words` runs it. Input llmperf does not have, a
    loop or `case` arm, or -O / -u / -C: the array is left undecided."""
    if not words or words[0] not in ("mapfile", "readarray"):
        return False
    options, names = _options(words[1:], _MAPFILE_OPTIONS)
    name = names[0] if names else "MAPFILE"
    text = None if uncertain else input_text(script, redirections, heredoc)
    counts = [options.get(letter, "0") for letter in "ns"]
    if text is None or any(letter in options for letter in "OucC") or not all(c.isdigit() for c in counts):
        _leave_undecided(script, [name])
        return True
    delimiter = options.get("d", "\n")[:1] or "\0"
    pieces = text.split(delimiter)
    lines = [piece + ("" if "t" in options else delimiter) for piece in pieces[:-1]]
    lines += [pieces[-1]] if pieces[-1] else []
    lines = lines[int(counts[1]):]
    script.arrays[name] = lines[:int(counts[0])] if int(counts[0]) else lines
    script.undecidable.discard(name)
    script.env.pop(name, None)
    return True


def _options(words: Sequence[str], with_value: frozenset[str]) -> tuple[dict[str, str], list[str]]:
    """A builtin's options (by letter, with their values: `-d ''` too) and the words after them."""
    options: dict[str, str] = {}
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] not in ("-", "--"):
        letters = words[i][1:]
        for k, letter in enumerate(letters):
            if letter in with_value:
                value = letters[k + 1:] or (words[i + 1] if i + 1 < len(words) else "")
                i += 0 if letters[k + 1:] else 1
                options[letter] = value
                break
            options[letter] = ""
        i += 1
    return options, list(words[i + (words[i:i + 1] == ["--"]):])


_SPEC = re.compile(r"%([-+ #0]*)(\*|\d+)?(?:\.(\*|\d*))?([diouxXfFeEgGcs%])|%|\\([0-7]{1,3}|x[0-9A-Fa-f]{1,2}|.)",
                   re.DOTALL)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "\\": "\\", '"': '"',
            "'": "'", "e": "\x1b", "E": "\x1b"}


def _number(text: str, integer: bool) -> int | float:
    """printf's numeric argument: C constants (`0x10`, `010` octal), or a leading quote's character code."""
    if text[:1] in ("'", '"'):
        return ord(text[1]) if len(text) > 1 else 0
    if not integer:
        return float(text or "0")
    body = text.lstrip("+-")
    base = 16 if body[:2].lower() == "0x" else 8 if body.startswith("0") and len(body) > 1 else 10
    return int(text or "0", base)


def printf_text(fmt: str, args: Sequence[str]) -> str | None:
    """What `printf FMT ARGS` prints: the format reused while arguments are left, a missing argument empty (or 0);
    None for what llmperf does not evaluate (%b, %q, a number bash would refuse)."""
    out: list[str] = []
    queue = list(args)
    while True:
        consumed, pieces, last = False, [], 0
        for match in _SPEC.finditer(fmt):
            pieces.append(fmt[last:match.start()])
            last = match.end()
            flags, width, precision, kind, escaped = match.groups()
            if escaped is not None:
                if escaped[0] in "01234567xuU":  # \101, \x41, \u20ac: character codes llmperf does not decode
                    return None
                pieces.append(_ESCAPES.get(escaped, "\\" + escaped))
                continue
            if kind is None:
                return None  # a lone `%` or a conversion llmperf does not evaluate (%b, %q)
            if kind == "%":
                pieces.append("%")
                continue
            if width == "*" or precision == "*" or ("#" in flags and kind == "o"):  # C's `%#o` is 010, Python's 0o10
                return None
            value = queue.pop(0) if queue else ""
            consumed = consumed or bool(args)
            if kind == "c":  # the argument's first character
                kind, value = "s", value[:1]
            try:
                converted = value if kind == "s" else _number(value, kind in "diouxX")
            except ValueError:
                return None
            if kind in "ouxX" and isinstance(converted, int) and converted < 0:
                converted %= 1 << 64  # C's unsigned conversions of intmax_t: printf %x -1 is ffffffffffffffff
            precision = "" if precision is None else "." + precision
            pieces.append(f"%{flags}{width or ''}{precision}{'d' if kind in 'iu' else kind}" % converted)
        pieces.append(fmt[last:])
        out.append("".join(pieces))
        if not queue or not consumed:
            return "".join(out)


def printf_builtin(script: _Script, words: Sequence[str], uncertain: bool = False) -> bool:
    """`printf -v NAME FORMAT [ARGS]`: NAME set to what printf would print (undecided in a loop or `case` arm); True
    when `words` runs it. A plain `printf` writes to standard output and sets nothing."""
    if not words or words[0] != "printf" or len(words) < 4 or words[1] != "-v":
        return False
    name = script.expand(words[2])
    at = 4 if words[3] == "--" else 3
    if at >= len(words):
        return False
    expanded = [script.expand(word) for word in words[at:]]
    text = None if uncertain or any(_UNEXPANDED.search(word) for word in expanded) else \
        printf_text(expanded[0], expanded[1:])
    if text is None:
        _leave_undecided(script, [name])
    else:
        _set(script, name, text)
    return True


_TESTED_BY = frozenset({"while", "until", "if", "elif", "!"})


def getopts_builtin(script: _Script, words: Sequence[str]) -> None:
    """`getopts OPTSTRING NAME [ARGS]` (bash manual 4.1), as a command or the test of `while getopts ...; do`: it sets
    NAME, OPTARG and OPTIND from the arguments one call at a time, which only running the loop tells, so they are left
    undecided (a `case $opt in n) NP=$OPTARG;;` then makes NP unknown; NAME unset matched no arm, NP stayed stale)."""
    at = next((k for k, word in enumerate(words) if word not in _TESTED_BY), len(words))
    if words[at:at + 1] == ["getopts"] and len(words) > at + 2:
        _leave_undecided(script, [words[at + 2], "OPTARG", "OPTIND"])


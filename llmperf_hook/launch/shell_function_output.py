"""`$(name ARGS)` where name is a function of the script that only prints: what it prints, worked out without
running anything (bash manual 3.5.4 Command Substitution: the command runs in a subshell and the substitution is its
standard output, trailing newlines deleted; 3.3 Shell Functions: the call's words are its $1 ...).

A launch script's helper such as `gpus_per_node() { echo 8; }` or `nodes() { local n=$1; echo $(( n * 2 )); }`
prints text its own words give. A body of only `echo`, `printf` (not -v), assignments, `local`, `:` and `return` is
followed line by line in a copy of the script's variables (its assignments stay in the subshell); one that runs any
other command, pipes, redirects, or reads a value llmperf does not know leaves the substitution as it is, so its
variable is unknown and a launch line using it names the line that set it.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

from llmperf_hook.launch.argv_words import expand_env_refs
from llmperf_hook.launch.shell_arithmetic import ARITH, arithmetic
from llmperf_hook.launch.shell_functions import Definition
from llmperf_hook.launch.shell_positional import expand_positional, positional_table
from llmperf_hook.launch.shell_read import printf_text
from llmperf_hook.launch.shell_script import (ASSIGN, LITERAL_DOLLAR, command_list, protect_literal_dollars,
                                              restore_dollars, shell_split, word_quoting)

_UNKNOWN = re.compile(r"\$[{(A-Za-z_0-9@*#?!$-]|`")
"""A reference or command substitution left in a word: its value is not known here."""
_REDIRECTION = re.compile(r"(?<![=\w])[0-9]*[<>]|&>")
"""A redirection (the output may go elsewhere): such a body is not followed."""
_QUIET = frozenset({":", "true"})


class _NotPure(Exception):
    """The function does more than print what its words give."""


def function_output(definition: Definition, args: Sequence[str], env: dict[str, str],
                    unknown: set[str]) -> str | None:
    """What `$(name ARGS)` gives for the script function `definition` called with `args` (expanded words), the
    script's variables `env` (a copy is changed) and `unknown` (names whose value only running the script gives);
    None where it is not only printing known text."""
    scope = dict(env)
    positional = positional_table(definition.name, list(args))
    printed: list[str] = []
    try:
        for line in definition.body:
            for joined, pipeline in command_list(protect_literal_dollars(line.text)):
                if joined not in ("", ";") or len(pipeline) != 1:
                    raise _NotPure
                if not _command(pipeline[0], scope, positional, unknown, printed):
                    return _output(printed)
    except (_NotPure, ValueError):
        return None
    return _output(printed)


def _output(printed: list[str]) -> str | None:
    """The substitution's value: the printed text without its trailing newlines (3.5.4)."""
    text = restore_dollars("".join(printed)).rstrip("\n")
    return None if _UNKNOWN.search("".join(printed)) else text


def _command(text: str, scope: dict[str, str], positional: dict[str, str], unknown: set[str],
             printed: list[str]) -> bool:
    """Follow one command of the body; False at a `return` (the function ends there)."""
    def expand(word: str) -> str:
        return expand_env_refs(expand_positional(word, positional), scope, {}, unknown)

    text = ARITH.sub(lambda found: arithmetic(expand(found.group(1)), scope), text)
    if "$(" in text or "`" in text or _REDIRECTION.search(text):
        raise _NotPure
    words, quoting = shell_split(text), word_quoting(text)
    fields = _fields(words, quoting if len(quoting) == len(words) else [None] * len(words), expand)
    if not words or words[0] in _QUIET:
        return True
    if words[0] == "return":
        return False
    if words[0] in ("local", "declare", "typeset") or all(ASSIGN.match(word) for word in words):
        _assign(words, scope, expand)
    elif words[0] == "echo":
        printed.append(_echo(fields[1:]))
    elif words[0] == "printf" and fields[1:2] != ["-v"] and len(fields) > 1:
        said = printf_text(fields[1], fields[2:])
        if said is None:
            raise _NotPure
        printed.append(said)
    else:
        raise _NotPure
    return True


def _fields(words: list[str], quoting: Sequence[bool | None], expand: Callable[[str], str]) -> list[str]:
    """The words as the command gets them: expanded, an unquoted expansion split at blanks (3.5.7)."""
    out: list[str] = []
    for word, unquoted in zip(words, quoting):
        value = expand(word)
        out.extend(value.split() if unquoted is True else [value])
    return out


def _echo(fields: list[str]) -> str:
    """What `echo [-n] [-E] WORDS` prints; `-e` and a backslash with it are not followed."""
    newline = "\n"
    while fields and re.fullmatch(r"-[neE]+", fields[0]):
        if "e" in fields[0]:
            raise _NotPure
        newline = "" if "n" in fields[0] else newline
        fields = fields[1:]
    return " ".join(fields) + newline


def _assign(words: list[str], scope: dict[str, str], expand: Callable[[str], str]) -> None:
    """`local X=1 Y`, `X=2`: the subshell's own variables (an option other than none is not followed)."""
    for word in words[1:] if words[0] in ("local", "declare", "typeset") else words:
        if word.startswith("-"):
            raise _NotPure
        match = ASSIGN.match(word)
        if match is None:
            scope.pop(word, None)
        else:
            scope[match.group(1)] = expand(match.group(2))


def function_substitution(reading: Any) -> Callable[[list[str]], str | None]:
    """For shell_substitution.substitute_paths: what `$(WORDS)` prints where WORDS calls a function of the script."""
    def run(words: list[str]) -> str | None:
        definition = reading.functions.get(words[0]) if words else None
        if definition is None or LITERAL_DOLLAR in " ".join(words):
            return None
        return function_output(definition, words[1:], reading.env, reading.undecidable)

    return run


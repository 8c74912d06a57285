"""Where bash ends a launch script before its launch line, refused (exit 2) naming the line: an `exit` that surely
runs, `${NAME:?message}` / `${NAME?message}` on a variable the script does not have, and under `set -u` any plain
expansion of one.

`exit [N]` ends the script there (bash manual 4.1), so there is no launch to read; the refusal names the line (a
script that wants its arguments: `[ -z "$1" ] && exit 1`). An exit in a subshell opened on its line, `( [ -z "$X" ]
&& exit )`, ends only that and is passed over (batch_script); one in a subshell opened on an earlier line is not told
apart.

bash manual 3.5.3 Shell Parameter Expansion, `${parameter:?word}`: "If parameter is null or unset, the expansion of
word (or a message to that effect if word is not present) is written to the standard error and the shell, if it is
not interactive, exits with a non-zero status" (`?` without the colon: only when it is unset). A launch script's `:
"${DATA_PATH:?set DATA_PATH}"` or `MODEL=${1:?usage: train.sh MODEL}` thus never reaches its launch line without them,
and reading on past it priced a job that never starts (and left `?set DATA_PATH}` in an option's value). A line
llmperf cannot tell runs (an undecided branch, a loop body) is passed over, as an `exit` there is.
"""

from __future__ import annotations

import re
from typing import AbstractSet, Any, Mapping, Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.argv_words import ENV_REF, in_command_substitution
from llmperf_hook.launch.braced_blanks import unmark_braces
from llmperf_hook.launch.shell_arithmetic import arithmetic
from llmperf_hook.launch.shell_associative import present
from llmperf_hook.launch.shell_parameters import OPERATOR
from llmperf_hook.launch.shell_script import without_comment


def _missing(name: str, colon: bool, env: Mapping[str, str], positional: Mapping[str, str]) -> bool:
    """Whether bash stops at `${name:?}` (colon) / `${name?}`: the variable (or the script's argument) is unset, or
    empty where the colon is written."""
    if name.isdigit():
        value = positional.get(name) if 0 < int(name) <= int(positional.get("#", "0")) else None
    else:
        value = env.get(name)
    return value is None or (colon and value == "")


def unset_checks(words: Sequence[str], env: dict[str, str], positional: Mapping[str, str],
                 undecidable: AbstractSet[str]) -> list[tuple[str, str]]:
    """The (expansion, what bash prints) of each `${NAME:?message}` in `words` bash stops at: one in the word of
    another expansion only where that word is used (`${B:-${A:?x}}` with B unset), none on a variable whose value
    only running the script tells. `env` (a copy) gains what a `${NAME:=word}` among them assigns."""
    out: list[tuple[str, str]] = []
    for word in words:
        for match in ENV_REF.finditer(word):
            name, op, inner = match.group(1), match.group(2) or "", match.group(3) or ""
            if name is None or name in undecidable or in_command_substitution(word, match.start()):
                continue
            missing = _missing(name, op.startswith(":"), env, positional)
            if "?" in op and missing:
                said = unmark_braces(inner).strip("'\"") or ("parameter null or not set" if op == ":?" else
                                                               "parameter not set")
                out.append((unmark_braces(match.group(0)), f"{name}: {said}"))
            elif inner and missing == ("+" not in op):  # the word a default (or `:+` alternative) expands to
                out += unset_checks([inner], env, positional, undecidable)
            if "=" in op and missing and not name.isdigit():  # `${A:=x} ${A:?}`: A set for the expansions after
                env[name] = inner  # it (bash expands left to right)
    return out


def stop_on_unset(words: Sequence[str], env: Mapping[str, str], positional: Mapping[str, str],
                  undecidable: AbstractSet[str], at: str) -> None:
    """Refuse (exit 2) a command that surely runs before the launch line and expands `${NAME:?...}` on a variable the
    script does not have; `at` names the script and line ("shell script train.sh stops at line 3 (`...`)")."""
    checks = unset_checks(words, dict(env), positional, undecidable)
    if not checks:
        return
    expansion, printed = checks[0]
    name = printed.split(":", 1)[0]
    fix = (f"give the script its argument {name} after its path" if name.isdigit() else
           f"set {name} in the environment llmperf reads the script in (`{name}=... llmperf ...`)")
    raise UsageError(f"{at} before any launch line: `{expansion}` requires {name} to be set"
                     f"{' and not empty' if ':?' in expansion else ''}, and it is not, so bash prints '{printed}' and "
                     f"exits (bash manual 3.5.3). To predict the job, {fix}, or give its launch line after `--`.")


def exit_refusal(at: str, words: Sequence[str]) -> UsageError:
    """The refusal of `exit [N]` (`words`) that surely runs before the launch line; `at` as for stop_on_unset."""
    status = f" {words[1]}" if len(words) > 1 else ""
    return UsageError(f"{at} before any launch line: bash runs that exit{status} there. Give the script what it checks "
                      "for at that point (its arguments or variables), or give its launch line after `--`.")


BASH_SETS = frozenset({
    "BASH", "BASHOPTS", "BASHPID", "BASH_ALIASES", "BASH_ARGC", "BASH_ARGV", "BASH_ARGV0", "BASH_CMDS", "BASH_COMMAND",
    "BASH_EXECUTION_STRING", "BASH_LINENO", "BASH_LOADABLES_PATH", "BASH_SOURCE", "BASH_SUBSHELL", "BASH_VERSINFO",
    "BASH_VERSION", "COMP_WORDBREAKS", "DIRSTACK", "EPOCHREALTIME", "EPOCHSECONDS", "EUID", "GROUPS", "HISTCMD",
    "HOSTNAME", "HOSTTYPE", "IFS", "LINENO", "MACHTYPE", "OPTERR", "OPTIND", "OSTYPE", "PATH", "PPID", "PS4", "PWD",
    "RANDOM", "SECONDS", "SHELL", "SHELLOPTS", "SHLVL", "SRANDOM", "TERM", "UID", "FUNCNAME", "PIPESTATUS", "_",
    "OLDPWD", "REPLY", "OPTARG"})
"""The variables bash 5.2 sets itself in a script started with an empty environment (`env -i bash -c 'compgen -v'`),
and those its builtins set as they run (`cd` OLDPWD, `read` REPLY, `getopts` OPTARG: bash manual 5.2), which the
reading does not track: never held unset."""
_PLAIN_REF = re.compile(r"\$(?:\{([A-Za-z_]\w*|[0-9]+)\}|([A-Za-z_]\w*|[0-9]))")
"""`$NAME`, `${NAME}`, `$1`, `${10}`: a reference without an operator that supplies a value."""


def unbound_reference(text: str, env: Mapping[str, str], positional: Mapping[str, str],
                      known_elsewhere: AbstractSet[str]) -> tuple[str, str] | None:
    """The first reference in the command `text` that bash rejects under `set -u`, and its name ("NAME: unbound
    variable", bash manual 4.3.1 `-u`): a plain `$NAME` / `${NAME}`, or a transforming `${#NAME}` / `${NAME%...}` /
    `${NAME/...}` (shell_parameters.OPERATOR), of a variable `env` lacks, or a `$N` past the script's arguments.
    `${NAME:-word}` and the other operators that supply a value, `$@`, `$*`, `$#` and arrays are exempt (bash 4.4
    and later), as are the variables bash sets itself (BASH_SETS), Slurm's (set where the job runs), those in
    `known_elsewhere` (a value only running the script gives, or a name the script writes bare, as `read NAME` or
    `for NAME in` do, which the reading may not follow), and what a command substitution expands in its subshell."""
    for found in sorted([*_PLAIN_REF.finditer(text), *OPERATOR.finditer(text)], key=lambda found: found.start()):
        name = next(filter(None, found.groups()[:2]))
        if in_command_substitution(text, found.start()) or text[found.end():found.end() + 1] == "[":
            continue
        if name.isdigit():
            if name != "0" and int(name) > int(positional.get("#", "0")):
                return found.group(0), f"${name}"
        elif name not in env and name not in BASH_SETS and name not in known_elsewhere and \
                not name.startswith("SLURM_"):
            return found.group(0), name
    return None


def stop_on_nounset(text: str, env: Mapping[str, str], positional: Mapping[str, str],
                    known_elsewhere: AbstractSet[str], at: str, removed: AbstractSet[str] = frozenset()) -> None:
    """Refuse (exit 2) a command that surely runs before the launch (or is the launch) and expands an unset variable
    while `set -u` is on (unbound_reference): bash prints 'NAME: unbound variable' and ends the script there.
    `removed`: the names the script itself unset (`unset NAME`), which no environment can give back."""
    unbound = unbound_reference(text, env, positional, known_elsewhere)
    if unbound is None:
        return
    found, name = unbound
    fix = (f"give the script its argument {name[1:]} after its path" if name.startswith("$") else
           f"drop the script's `unset {name}` before it or give it a default there (`${{{name}:-...}}`)"
           if name in removed else
           f"set {name} in the environment llmperf reads the script in (`{name}=... llmperf ...`) or give it a default "
           f"in the script (`${{{name}:-...}}`)")
    raise UsageError(f"{at}: `{found}` expands {name}, which is not set, while `set -u` (nounset) is on, so bash "
                     f"prints '{name}: unbound variable' and ends the script there, before its launch (bash manual "
                     f"4.3.1). To predict the job, {fix}, or give its launch line after `--`.")


_ELEMENT = re.compile(r"\$\{(#?)([A-Za-z_]\w*)\[((?:[^\[\]{}$]|\$\{[^{}]*\}|\$\(\([^()]*\)\)|\$\w+)+)\](\}?)"
                      r"|\$(?:!|\{!\})")
"""`${NAME[N]}`, `${NAME[KEY]}`, `${NAME[i+1]}` (a subscript of plain text, `$VAR` / `${...}` and `$(( ))`), also
behind `#` or an operator (`${#A[i]}`, `${A[i]:-x}`: only the variables its subscript reads count there), and `$!` /
`${!}`: what set -u also checks."""
_SUBSCRIPT_NAME = re.compile(r"\$\{?([A-Za-z_]\w*)\}?|([A-Za-z_]\w*)")
_SUBSCRIPT_REF = re.compile(r"\$\{#([A-Za-z_]\w*)\[[@*]\]\}|\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)"
                            r"|\$(?:([0-9])|\{([0-9]+)\})|\$\{?[0-9#@*?!$-]")
"""What an indexed array's subscript expands before its arithmetic (bash manual 6.7: 'subscript is treated as an
arithmetic expression'): `${#A[@]}`, `${i}`, `$i`, the script's argument `$1` / `${10}`; anything else (`${i:-0}`,
`$#`) is not followed here."""


def unset_element(text: str, reading: Any) -> tuple[str, str] | None:
    """The first of these in the command `text` (its `$` as bash expands it: shell_script.protect_literal_dollars)
    that bash 5.2 rejects under `set -u`, and what it names: an element an indexed array (dense, as the reading keeps it)
    lacks (`${A[5]}` of `A=(x)`, `${A[i+1]}` past the end: 'A[5]: unbound variable'; `${A[-2]}`: 'bad array
    subscript', which ends the script too), an unset variable its subscript reads (`${A[j]}`: 'j: unbound
    variable'), a key an associative array lacks, `${X[N]}` (N > 0) of a plain variable, `${NAME[N]}` of a name set
    nowhere or unset (`unset A`), and `$!` before any command ran in the background (bash manual 3.4.2: the process
    id of the job most recently placed into the background). `${#A[N]}` (0), `${A[@]}` / `${A[*]}`, an element behind
    an operator (`${A[5]:-}`; an unset variable its subscript reads still stops, `${A[j]:-}`) and `${#B[@]}` of an
    unset B (bash prints 'B: unbound variable' but goes on) do not stop a script (bash manual 4.3.1 `-u`, each checked
    with bash 5.2.15). A name whose elements only running the script gives, or that it writes where the reading does
    not follow, is spared."""
    for found in _ELEMENT.finditer(text):
        if in_command_substitution(text, found.start()):
            continue
        counted, name, subscript, closed = found.groups()
        if name is None:
            if not reading.background:
                return found.group(0), "$!" if found.group(0) == "$!" else "!"
            continue
        if name in reading.undecidable or name in reading.unknown_heads or name in reading.loose_arrays or \
                name in BASH_SETS or name.startswith("SLURM_"):
            continue
        key = _subscript(reading, subscript, name in reading.assoc)
        if key is not None and key.startswith("$"):  # an unset variable the subscript reads
            return found.group(0), key[1:]
        if key is not None and closed and not counted and _unset_element(reading, name, key):
            return found.group(0), f"{name}[{subscript}]"
    return None


def _unset_element(reading: Any, name: str, key: str) -> bool:
    if name in reading.assoc:
        return key not in reading.assoc[name]
    if not re.fullmatch(r"-?\d+", key):
        return False
    index = int(key)
    if name in reading.arrays:  # a sparse array's slot may be unset too (`unset 'A[1]'`, `A=([5]=x)`)
        slots = reading.arrays[name]
        return not -len(slots) <= index < len(slots) or slots[index] is None
    if name in reading.env:
        return index > 0  # a plain variable is element 0 of itself
    return name not in reading.written or name in reading.surely_unset() & reading.removed_surely


def _subscript(reading: Any, subscript: str, associative: bool) -> str | None:
    """The key or index a subscript gives: an associative array's key as written, or one `$k` variable's value; an
    indexed array's subscript evaluated as arithmetic (bash manual 6.7: `${A[i]}`, `${A[$i+1]}`, `${A[$((n-1))]}`,
    `${A[${#A[@]}-1]}`), its bare names read as variables; `$NAME` for an unset variable it reads (set -u stops at it);
    None where that is not known here (a variable only running gives, or written where the reading does not follow,
    or a loop read once leaves its variable as it was, not as its pass sets it)."""
    named = _SUBSCRIPT_NAME.fullmatch(subscript)
    if associative:
        return subscript if named is None or named.group(2) else _variable(reading, named.group(1))
    if any(f.kind in ("while", "until", "for") for f in reading.conditions.frames):
        return None
    text = _SUBSCRIPT_REF.sub(lambda m: _reference(reading, m), re.sub(r"\$\(\(([^()]*)\)\)", r"(\1)", subscript))
    if "\0" in text:
        return None
    if "\1" in text:  # `${A[$1+1]}` without a first argument: '$1: unbound variable'
        return "$$" + text.split("\1", 2)[1]
    for variable in dict.fromkeys(re.findall(r"[A-Za-z_]\w*", text)):
        value = _variable(reading, variable)
        if value is None or value.startswith("$"):
            return value
    value = arithmetic(text, dict(reading.env))
    return value if re.fullmatch(r"-?\d+", value) else None


def _reference(reading: Any, found: re.Match[str]) -> str:
    """One `$...` of an indexed array's subscript as text for its arithmetic; NUL where it is not followed here."""
    counted, braced, plain, digit, digits = found.groups()
    if counted:
        elements = reading.arrays.get(counted)
        return str(len(present(elements))) if elements is not None and counted not in reading.unknown_heads else "\0"
    number = digit or digits
    if number is not None and number != "0":  # the script's (or function's) argument, in parentheses as bash
        given = int(number) <= int(reading.positional.get("#", "0"))  # puts its text into the arithmetic
        return f"({reading.positional.get(number, '')})" if given else f"\1{number}\1"
    return braced or plain or "\0"  # `$i` reads i as a bare `i` does


def _variable(reading: Any, name: str) -> str | None:
    """A variable's value for a subscript; `$NAME` where it is surely unset; None where only running tells."""
    if name in reading.undecidable or name in BASH_SETS or name.startswith("SLURM_"):
        return None
    if name in reading.env:
        return reading.env[name]
    return f"${name}" if name not in reading.written or name in reading.surely_unset() & reading.removed_surely \
        else None


def stop_on_unset_element(text: str, reading: Any, at: str) -> None:
    """Refuse (exit 2) a command that surely runs before the launch (or is it) and expands what unset_element finds,
    while `set -u` is on: bash prints '...: unbound variable' and ends the script there."""
    unbound = unset_element(text, reading)
    if unbound is None:
        return
    found, name = unbound
    fix = ("start the command whose process id it means with `&` before it, or write `${!:-}`" if "!" in name else
           f"give the script its argument {name[1:]} after its path" if name[1:].isdigit() else
           f"give {name} a value before that line, or a default (`${{{name}:-...}}`)")
    raise UsageError(f"{at}: `{found}` expands {name}, which is not set, while `set -u` (nounset) is on, so bash "
                     f"prints '{name}: unbound variable' and ends the script there, before its launch (bash manual "
                     f"4.3.1). To predict the job, {fix}, or give its launch line after `--`.")


_BARE_NAME = re.compile(r"(?<![\w$])(?<!\$\{)(?<!\$\{[#!])([A-Za-z_]\w*)")
"""A name written other than as a `$NAME` / `${NAME}` reference."""


def bare_names(text: str) -> set[str]:
    """Every name `text` writes bare: each variable it may assign in a way the reading does not follow (`read -r A B`,
    `mapfile -t L`, `getopts n: opt`, `declare -n R=X`) is among them, so that unbound_reference never holds such a
    variable unset. A comment assigns nothing, nor does a line that is one `echo` (`echo "CKPT_DIR=$CKPT_DIR"`), and
    `declare X` / `local X` / `export X` / `unset X` with no value are followed by the reading (X stays, or becomes,
    unset): their names do not count."""
    code = (without_comment(line) for line in text.splitlines())
    kept = "\n".join(line for line in code if not _ASSIGNS_NOTHING.match(line))
    return set(_BARE_NAME.findall(_READ_SUBSCRIPT.sub("[", kept) if "[" in kept else kept))


_READ_SUBSCRIPT = re.compile(r"(?<=\$\{)([#!]?[A-Za-z_]\w*)\[(?:[^\]=+\-{}]|[+-](?![+-]))*\]")
"""`${A[j]}`, `${#A[i+1]}`: an element whose subscript only reads its names (bash manual 6.7: arithmetic without `=`,
`++` or `--`), so they count as no write (set -u stops at an unset j there)."""


_ASSIGNS_NOTHING = re.compile(r"\s*(?:echo\s[^;&|`$]*(?:\$(?!\()[^;&|`$]*)*|"
                              r"(?:declare|typeset|local|export|readonly|unset)(?:\s+-[a-mo-zA-Z]+)*(?:\s+[A-Za-z_]\w*)+\s*)$")
"""A line that is a single `echo` command (no list or pipe operator, no command substitution: its output is printed,
nothing assigned), or `declare` and its kin, or `unset`, given only names (no value; `-n`, a nameref, excepted)."""

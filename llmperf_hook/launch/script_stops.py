"""Where bash ends a launch script before its launch line, refused (exit 2) naming the line: an `exit` that surely
runs, and `${NAME:?message}` / `${NAME?message}` on a variable the script does not have.

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

from typing import AbstractSet, Mapping, Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.argv_words import ENV_REF, in_command_substitution
from llmperf_hook.launch.braced_blanks import unmark_braces


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

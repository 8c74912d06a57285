"""Normalise a pasted launch command into argv words before any launcher or framework parses it.

Two things real commands do that argparse would choke on here: array elements that arrive as one word
(`"--split '99,1,0'"` from a bash array expanded inside quotes) and `$VAR` references left unexpanded by
copying a line out of an sbatch script. Both are fixed here, once.
"""

from __future__ import annotations

import re
import shlex
from typing import AbstractSet, Mapping, MutableMapping, Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.braced_blanks import unmark_braces
from llmperf_hook.launch.shell_parameters import expand_operators

_PLAIN = r"(?:[^$}]|\$(?!\{))"
"""A character of a `${NAME:-word}` word that neither opens a nested `${` nor closes the expansion."""
DEFAULT_WORD = _PLAIN + "*"
for _ in range(3):  # `${A:-${B:-${C:-8}}}`: bash's closing brace is the first one outside an embedded expansion
    DEFAULT_WORD = rf"(?:{_PLAIN}|\$\{{{DEFAULT_WORD}\}})*"
ENV_REF = re.compile(rf"\$(?:\{{(\w+)(?:(:?[-=+?])({DEFAULT_WORD}))?\}}|(\w+))")
"""`$NAME`, `${NAME}` and `${NAME:-word}` (also `-`, `:=`, `=`, `:+`, `+`, `:?`, `?`), whose word may hold expansions
nested three deep (bash manual 3.5.3: the word is itself expanded, and only when it is used)."""


# Options whose value is itself a command-line string (deepspeed --launcher_args "--qos high", sbatch --wrap): the
# value word is kept whole.
FREE_TEXT_OPTIONS = frozenset({"--launcher_args", "--launcher-args", "--wrap", "--comment"})


def _free_text_option(word: str) -> bool:
    """One of FREE_TEXT_OPTIONS, or an abbreviation of one the launcher's parser accepts (`--launcher_arg`, `--wra`)."""
    return word.startswith("--") and len(word) > 4 and any(option.startswith(word) for option in FREE_TEXT_OPTIONS)


def split_joined_words(words: Sequence[str]) -> list[str]:
    """`"--split '99,1,0'"` -> ["--split", "99,1,0"]: a flag word holding whitespace is split like a shell would,
    also when the variable that gave it starts with blanks (bigscience's `SRUN_ARGS=" \\` newline `--wait=60 ..."`)."""
    out: list[str] = []
    for word in words:
        free_text = (out and _free_text_option(out[-1])) or _free_text_option(word.split("=", 1)[0])
        if word.lstrip().startswith("-") and any(ch.isspace() for ch in word.strip()) and not free_text \
                and not is_quoted_assignment(word) and not COMMAND_SUBSTITUTION.search(word):
            try:
                out.extend(shlex.split(word))
            except ValueError:  # unbalanced quote: keep the words as whitespace splits them
                out.extend(word.split())
        else:
            out.append(word)
    return out


def is_quoted_assignment(word: str) -> bool:
    """`--deepspeed_config="my dir/ds.json"` reaches us as ONE word `--deepspeed_config=my dir/ds.json`, a value with
    blanks the user quoted, not flags joined into one word: a `--name=` word none of whose later blank-separated parts
    is a flag is kept whole (it was split into `--deepspeed_config=my` and `dir/ds.json`, and the config 'my' was
    missing). `"--lr=1e-4 --bf16"` still splits."""
    head, _, value = word.partition("=")
    if not value or any(ch.isspace() for ch in head) or not re.fullmatch(r"--?[A-Za-z][\w.-]*", head):
        return False
    return not any(part.startswith(("-", "$")) for part in value.split()[1:])  # a flag, or a variable's words


def expand_env_refs(word: str, env: Mapping[str, str], used: dict[str, str],
                    unknown: AbstractSet[str] = frozenset(), assign: bool = False,
                    unset: AbstractSet[str] = frozenset()) -> str:
    """Replace `$VAR` / `${VAR}` with env values (recording each in `used`), `${VAR:-default}` with the default when
    VAR is unset or empty (`${VAR-default}`: unset), `${VAR:+word}` with word when VAR is set and not empty, else
    nothing (`${VAR+word}`: set; bash manual 3.5.3); other unknown references stay as written, and so does every
    reference to a name in `unknown`: a variable a launch script sets so that only running it tells its value, unset
    or empty included (`${NP:-8}` after `NP=$(nvidia-smi -L | wc -l)` is not 8). With `assign` (the expansion of a
    command bash runs: `env` is the shell's own variables), `${VAR:=word}` / `${VAR=word}` also set VAR to the word, as
    bash does, so that a later `$VAR` reads it. `${VAR:?msg}` / `${VAR?msg}` give VAR's value; where bash would stop
    the script instead they stay as written (script_stops refuses such a line). A plain `$VAR` of a name in `unset`
    (surely unset: the script ran `unset VAR`) gives nothing, as in bash (3.5.3: an unset parameter expands to the
    null string); any other stays as written, for the job's own environment may set it."""
    if "$" not in word:
        return word
    if "${!" in word:
        word = INDIRECT_REF.sub(lambda found: _indirect(found, env, used, unknown), word)
    text = expand_operators(word, env, used)

    def sub(match: re.Match[str]) -> str:
        name, op, default = match.group(1) or match.group(4), match.group(2), match.group(3)
        if name in unknown:
            return match.group(0)
        assigning = assign and not in_command_substitution(text, match.start())
        if op in ("+", ":+"):
            if name in env:
                used[name] = env[name]
            return word_of(default, assigning) if name in env and (op == "+" or env[name] != "") else ""
        if name in env and not (op in (":-", ":=", ":?") and env[name] == ""):
            used[name] = env[name]
            return env[name]
        if op in (":=", "=") and name[0].isdigit():  # bash: "$1: cannot assign in this way", the command fails
            return match.group(0)
        if op in (":=", "=") and assigning and isinstance(env, MutableMapping):  # bash 3.5.3: "the value of parameter
            value = env[name] = word_of(default, assigning)  # is then substituted"; `X=${A:=4}` leaves A=4 too
            return value
        if op and "?" not in op:  # ${VAR:-default} / ${VAR-default} / ${VAR:=default}: the default when VAR is unset
            return word_of(default, assigning)
        return "" if not op and name in unset else match.group(0)

    def word_of(default: str, assigning: bool) -> str:  # the word expanded only where it is used: `${A:-${B}}` with
        inner = expand_env_refs(default, env, used, unknown, assigning, unset)  # A set reads no B
        return unmark_braces(inner.strip('"'))

    return ENV_REF.sub(sub, text)


INDIRECT_REF = re.compile(r"\$\{!([A-Za-z_]\w*)\}")
"""`${!NAME}`: bash's indirect expansion, the variable NAME's value names (bash manual 3.5.3)."""


def _indirect(found: re.Match[str], env: Mapping[str, str], used: dict[str, str], unknown: AbstractSet[str]) -> str:
    """`${!NAME}` as the reference `${VALUE}` it stands for, where NAME holds a variable's name; else as written."""
    name = found.group(1)
    target = env.get(name)
    if name in unknown or target is None or not re.fullmatch(r"[A-Za-z_]\w*", target):
        return found.group(0)
    used[name] = target
    return "${" + target + "}"


def in_command_substitution(text: str, at: int) -> bool:
    """Whether text[at] lies inside a command substitution, `$(...)` or `` `...` `` (not `$((...))` arithmetic): bash
    runs its command in a subshell (manual 3.5.4), so a `${A:=w}` there assigns nothing in the script and a
    `${A:?}` there ends only that subshell (`X=$(echo ${A:=4})` leaves A unset; bash checked)."""
    opened: list[bool] = []  # per open parenthesis: whether it opens a command substitution
    backquote = False
    for i, c in enumerate(text[:at]):
        if c == "`":
            backquote = not backquote
        elif c == "(" and (opened or text[i - 1:i] == "$"):
            opened.append(text[i - 1:i] == "$" and text[i + 1:i + 2] != "(")
        elif c == ")" and opened:
            opened.pop()
    return backquote or any(opened)


def normalise_argv(argv: Sequence[str], env: Mapping[str, str], used: dict[str, str],
                   unknown: AbstractSet[str] = frozenset()) -> list[str]:
    """Expand env references in every word (not those to `unknown` names, expand_env_refs), then split joined words:
    `$MEGATRON_PARAMS` holding several flags becomes those flags, as the shell's word splitting of an unquoted
    variable would make them. A `${A:=4}` assigns A for the words after it (bash expands a command's words left to
    right, 3.7.1) in a copy of `env`: the shell's variable, not one the command's environment gains."""
    shell = dict(env)
    return split_joined_words([unmark_braces(expand_env_refs(str(w), shell, used, unknown, assign=True))
                               for w in argv])


def parse_int(value: str, what: str, origin: str) -> int:
    """An integer launcher/framework value, or a UsageError naming the flag and what was given."""
    try:
        return int(value.strip())
    except (ValueError, AttributeError):
        raise UsageError(f"{what} must be an integer, got {value!r} from {origin}{unexpanded_hint(str(value))}.") from None


def unexpanded_hint(text: str) -> str:
    """The hint for a number given as a `$VAR` nothing expanded (a line copied without its environment), or as a
    command's output (`$(nvidia-smi -L | wc -l)`), which no environment gives."""
    if COMMAND_SUBSTITUTION.search(text):
        return SUBSTITUTION_HINT
    return UNEXPANDED_HINT if "$" in text else ""


def without_env_hint(message: str, note: str) -> str:
    """`message` without its hint to set an unexpanded variable in the environment where `note` says where the
    script assigns it from what only running it tells, or reads an argument it was not given (shell_variables
    .unknown_value_note, shell_positional.missing_arguments_note): there the environment would not help."""
    return message.replace(UNEXPANDED_HINT, "") if note else message


UNEXPANDED_HINT = " (an unexpanded shell variable: set it in the environment or write the number)"
SUBSTITUTION_HINT = (" (a command substitution: its value is the output of a command that only running the launch "
                     "script runs, and llmperf reads the script without running anything; write the value in its "
                     "place, or give the launch line after `--` with it)")
COMMAND_SUBSTITUTION = re.compile(r"\$\((?!\()|`")
"""`$(command)` or a backquoted command (bash manual 3.5.4), not `$(( ))` arithmetic: bash splits its output into
words only once it has run (3.5.7), so the word is kept whole here (`--nproc_per_node=$(nvidia-smi -L | wc -l)` was
cut at its blanks, and torchrun refused an option `-L`)."""

"""A script's positional parameters ($0, $1 ..., $#, "$@") and the builtins that change what its launch line expands
to without running anything: `shift [N]`, `set -- ARGS`, `local`/`declare`/`typeset`/`readonly NAME=value` (`-x`:
exported) and `: ${NAME:=value}` (bash manual 3.4.1, 3.5.3, 4.1-4.2; POSIX 2.14 Special Built-In Utilities)."""

from __future__ import annotations

import re
from typing import Mapping, Protocol, Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.argv_words import DEFAULT_WORD, ENV_REF
from llmperf_hook.launch.shell_arithmetic import arithmetic
from llmperf_hook.launch.shell_associative import declare_associative
from llmperf_hook.launch.shell_parameters import expand_operators
from llmperf_hook.launch.shell_script import ScriptLine


class _Script(Protocol):
    """What the builtins change in batch_script._Reading."""

    positional: dict[str, str]
    env: dict[str, str]
    frames: list[dict[str, str | None]]
    undecidable: set[str]
    exported: set[str]
    readonly: set[str]
    shell: tuple[str, str]
    kind: str
    path: str
    subshell: bool

    def args(self) -> list[str]: ...

    def expand(self, text: str) -> str: ...

    def assign(self, words: list[str]) -> bool: ...


def positional_table(script: str, args: Sequence[str]) -> dict[str, str]:
    """$0, $#, $@, $* and $1 ... of a script (or function) run with `args`."""
    return {"0": script, "#": str(len(args)), "@": " ".join(args), "*": " ".join(args),
            **{str(i): arg for i, arg in enumerate(args, start=1)}}


_POSITIONAL = re.compile(rf"\$(?:\{{([0-9]+|[#@*])(?:(:?[-?])({DEFAULT_WORD}))?\}}|([0-9#@*]))")
"""`$1`, `${10}`, `${1:-word}` (the word may nest expansions: `${1:-${NP:-8}}`), `${1:?message}`, `$#`, `$@`, `$*`."""


_ARGUMENT_REF = re.compile(r"(?<!\\)\$(?:\{([1-9][0-9]*)\}|([1-9]))")
"""`$N` / `${N}` with no default (`${N:-x}` has one): the script's Nth argument, empty when it is not given."""


def missing_arguments(text: str, given: int) -> list[int]:
    """The numbers of the arguments past the `given` ones that `text` reads (`CHECKPOINT_PATH=$1` in Megatron-LM's
    examples, run without arguments)."""
    return [n for n in (int(braced or bare) for braced, bare in _ARGUMENT_REF.findall(text)) if n > given]


def missing_arguments_note(message: str, missing: Mapping[str, frozenset[str]]) -> str:
    """For a refusal naming an option whose value is an argument the launch script was not given (`$3 at line 17`
    for `--vocab-file $VOCAB_FILE`, VOCAB_FILE=$3): bash expands it to nothing, which leaves the option without it."""
    named = [where for where, options in missing.items()
             if any(re.search(r"(?<![\w-])" + re.escape(option) + r"(?![\w-])", message) for option in options)]
    if not named:
        return ""
    shown = ", ".join(named[:4]) + (", ..." if len(named) > 4 else "")
    return (f" (the launch script reads arguments it was not given: {shown}; bash expands each to nothing. Give them "
            "after the script's path, as the script expects.)")


class _Arguments(dict):  # type: ignore[type-arg]
    """The script's arguments by number, for expand_operators: one not given is empty, as bash expands it."""

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.isdigit()

    def __missing__(self, key: str) -> str:
        return ""


def expand_positional(text: str, positional: dict[str, str]) -> str:
    """`$1`, `${10}`, `${3:-MOCK}`, `$#`, `$@`: the script's arguments, as bash expands them (an argument not given is
    empty, or the default of `${N:-default}`)."""
    if "$" not in text or not positional:
        return text
    if "${" in text:  # `--nn=*) NN="${1#*=}"`, `${0##*/}`
        text = expand_operators(text, _Arguments((k, v) for k, v in positional.items() if k.isdigit()), {})

    def sub(match: re.Match[str]) -> str:
        name, op, default = match.group(1) or match.group(4), match.group(2), match.group(3)
        value = positional.get(name, "")
        missing = value == "" if op and op.startswith(":") else name not in positional
        if op and missing and "?" in op:  # bash stops the script there (script_stops): left for it to name
            return match.group(0)
        if op and missing:
            return expand_positional(default, positional).strip('"')  # `"${1:-'q'}"` keeps its single quotes
        return value

    return _POSITIONAL.sub(sub, text)


def _shift(script: _Script, line: ScriptLine, words: list[str]) -> None:
    """`shift [N]`: past $#, bash shifts nothing and goes on, while dash's special-builtin error ends the script."""
    count = int(words[1]) if len(words) > 1 and words[1].isdigit() else 1
    args = script.args()
    if count <= len(args):
        script.positional = positional_table(script.positional["0"], args[count:])
    elif script.shell[0] == "dash":
        raise UsageError(f"{script.kind} {script.path} stops at line {line.number} under dash: `{line.text.strip()}` "
                         f"shifts {count} of its {len(args)} argument(s) ('can't shift that many'). Give the script its "
                         "arguments after its name.")


def _declare(script: _Script, line: ScriptLine, words: list[str]) -> None:
    """`local np=4`, `declare X=1`, `readonly X=1`. In a function, `local` and `declare`/`typeset` without -g make the
    variable the function's own: bash restores the caller's value when the function returns, and a name given no
    value starts unset (bash manual 4.2 `local`, 3.3 Shell Functions: dynamic scoping; under dash it keeps its value).
    Outside a function `local` assigns nothing ('local: can only be used in a function'); dash stops there."""
    options = "".join(word[1:] for word in words[1:] if word.startswith("-"))
    if "A" in options:  # `declare -A M`: an associative array (launch/shell_associative.py)
        declare_associative(script, words)
        return
    if "n" in options:  # `declare -n REF=L`: REF reads and writes L (a nameref, bash manual 3.4), which llmperf does
        for word in words[1:]:  # not follow: REF is left unknown, not the text `L`
            if not word.startswith(("-", "+")):
                script.env.pop(word.partition("=")[0], None)
                script.undecidable.add(word.partition("=")[0])
        return
    scoped = bool(script.frames) and words[0] != "readonly" and "g" not in options
    if words[0] == "local" and not script.frames:
        if script.shell[0] == "dash":
            raise UsageError(f"{script.kind} {script.path} stops at line {line.number} under dash: `{line.text.strip()}` "
                             "is outside any function ('local: not in a function'). Assign the variable without "
                             "`local`.")
        return
    for word in words[1:]:
        if word.startswith(("-", "+")):
            continue
        name, eq, _ = word.partition("=")
        if "$" in name:  # `declare "$n=4"`: bash expands the word first, then assigns the name it gives (4.2 declare)
            name = _computed_name(script, line, name)
            word = name + word[word.index("="):] if eq else name
        if scoped:
            script.frames[-1].setdefault(name, script.env.get(name))
            if not eq and script.shell[0] == "bash":  # dash's local keeps the value the name had (dash(1) local)
                script.env.pop(name, None)
        if eq and "i" in options:  # `declare -i N=2*4`: the value is evaluated as arithmetic (bash manual 4.2 declare)
            word = f"{name}={arithmetic(script.expand(word.partition('=')[2]), script.env)}"
        if eq:
            script.assign([word])
        if "x" in options:  # `declare -x NAME=value`: exported, as `export` (bash manual 4.2 declare)
            script.exported.add(name)
        if (words[0] == "readonly" or "r" in options) and "f" not in options and not scoped:  # `unset NAME` fails
            script.readonly.add(name)


def _computed_name(script: _Script, line: ScriptLine, written: str) -> str:
    """The variable a `declare "$n=value"` word assigns (NeMo's argument loop: `declare $v="${value}"`); refused (exit
    2) where only running the script gives the name, since any of its variables may then change."""
    name = script.expand(written)
    if re.fullmatch(r"[A-Za-z_]\w*", name):
        return name
    raise UsageError(f"{script.kind} {script.path} line {line.number} (`{line.text.strip()[:80]}`): "
                     f"{line.text.split()[0]} assigns a variable whose name is {written}, which only running the script gives (a command's "
                     "output or input it reads), so llmperf cannot tell which of the script's variables it changes. "
                     "Give the script the values it would read, write that assignment with a fixed name, or give the "
                     "launch line after `--`.")


def leave_function(script: _Script) -> None:
    """The function's own variables (`local`) back to the caller's values as it returns."""
    for name, value in script.frames.pop().items():
        if value is None:
            script.env.pop(name, None)
        else:
            script.env[name] = value


def bind_locals(script: _Script, word: str) -> str:
    """`word` with its references to the running functions' `local` variables expanded where the line runs: a local
    given no value is unset, so `$X` is empty, while normalise_argv, which expands the launch's other references
    with the variables of its line, leaves one to a variable it does not know as written. A local a command
    substitution set stays unexpanded, as outside a function."""
    names = {name for frame in script.frames for name in frame} - script.undecidable
    if not names or "$" not in word:
        return word

    def one(match: re.Match[str]) -> str:
        if (match.group(1) or match.group(4)) not in names:
            return match.group(0)
        expanded = script.expand(match.group(0))
        return "" if expanded == match.group(0) else expanded

    return ENV_REF.sub(one, word)  # the references argv_words.expand_env_refs expands, nested words included


def run_builtin(script: _Script, line: ScriptLine, words: list[str]) -> bool:
    """Apply the builtin `words` run, if it is one of these; True when it was."""
    if words[0] == "shift":
        _shift(script, line, words)
    elif words[0] == "set" and "--" in words:
        script.positional = positional_table(script.positional["0"],
                                             [script.expand(w) for w in words[words.index("--") + 1:]])
    elif words[0] in ("local", "declare", "typeset", "readonly"):
        _declare(script, line, words)
    elif words[0] == ":":  # it expands its words, so that a `${NAME:=value}` among them assigns (expand_env_refs),
        for word in words[1:] if not script.subshell else []:  # but not in a subshell's (`: ${A:=4} | cat`)
            script.expand(word)
    else:
        return False
    return True

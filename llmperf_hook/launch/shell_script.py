"""The part of bash's grammar a batch script's launch line needs, read without running anything.

bash (gnu.org/software/bash/manual: 3.1.2 Quoting, 3.2 Shell Commands, 3.6 Redirections) reads a script as logical
lines: a backslash-newline outside single quotes continues the line, and a newline inside an open quote is part of
the word (bigscience's `GPT_ARGS=" \\ ... --seed 42` newline `$OPTIMIZER_ARGS \\ ..."`). A line holds commands
separated by `;`, `&&`, `||` or `&`, each a pipeline of simple commands joined by `|` (`clear; srun ... 2>&1 | tee
-a log`). A `<<WORD` redirection takes the following lines up to WORD as the command's standard input (a here-document;
`<<-` strips leading tabs, a quoted WORD turns expansion off), as in `cat <<EOT > $config_json`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import AbstractSet, Callable, Sequence

from llmperf_hook.launch.braced_blanks import braced_blanks, mark_blanks, unmark_blanks, unnest_quotes

ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
"""`NAME=value` / `export NAME=value` (bash manual 3.4 Shell Parameters); here, not in shell_variables, so that
launch_line reads a command's leading assignments without loading the script reader."""
_HEREDOC = re.compile(r"<<(-?)\s*(?:(['\"])([^'\"\n]+)\2|\\([^\s;&|<>()'\"]+)|([^\s;&|<>()'\"\\]+))")
"""`<<WORD`, `<<-WORD`; a quoted delimiter (`<<'EOF'`, `<<"EOF"`, `<<\\EOF`) turns the body's expansion off (3.6.6)."""
_REDIRECT = re.compile(r"^(?:\d*|&)(>>|>\||>&|<&|>|<<<|<<-|<<|<)(.*)$", re.DOTALL)


@dataclass(frozen=True)
class Heredoc:
    """A here-document a logical line opens."""

    body: str
    """The lines between the redirection and its delimiter, each ending in a newline."""
    expand: bool
    """Whether bash expands $VARS in the body (the delimiter is unquoted)."""
    first_line: int
    """Line number of the body's first line."""


@dataclass(frozen=True)
class ScriptLine:
    """One logical line of a script."""

    number: int
    """Line number where it starts (1-based)."""
    text: str
    """The line, continuations joined (a backslash-newline becomes a space, a newline in quotes stays)."""
    heredoc: Heredoc | None = None
    """The here-document the line opens, if any."""


def _scan(text: str) -> tuple[list[bool], str, int]:
    """For each character: outside quotes and not escaped; the quote still open at the end ("" if none); where a
    comment starts (len(text) if none)."""
    outside, quote, i = [False] * len(text), "", 0
    while i < len(text):
        c = text[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c == "\\":
            i += 2
            continue
        elif quote == '"':
            quote = "" if c == '"' else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or text[i - 1] in " \t;&|()"):
            return outside, "", i
        else:
            outside[i] = True
        i += 1
    return outside, quote, len(text)


_ANSI_C = re.compile(r"(?<![\\$])\$'((?:[^'\\]|\\.)*)'")
"""`$'...'`: bash's ANSI-C quoting (3.1.2.4), the backslash escapes decoded."""
_ANSI_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f",
                 "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def without_comment(text: str) -> str:
    """One line of a script up to the comment it ends with, if any (a `#` that begins a word outside quotes)."""
    return text[:_scan(text)[2]]


def _ansi_c(found: re.Match[str]) -> str:
    """A `$'...'` word part as a single-quoted shell word (its simple escapes decoded; a numeric one left as written)."""
    body = re.sub(r"\\(.)", lambda m: _ANSI_ESCAPES.get(m.group(1), m.group(0)), found.group(1))
    return shlex.quote(body)


def decode_ansi_c(text: str) -> str:
    """`text` with each `$'...'` word part (bash's ANSI-C quoting) made a single-quoted word of what it stands for."""
    return _ANSI_C.sub(_ansi_c, text)


LITERAL_DOLLAR = "\ue024"
"""Stands for a `$` bash takes literally (inside single quotes, or escaped `\\$`) while the script is read: the later
expansions of words and values (argv_words.expand_env_refs) see no reference in it; restore_dollars puts `$` back."""


def protect_literal_dollars(text: str) -> str:
    """`text` with each `$` that bash does not expand replaced by LITERAL_DOLLAR: inside single quotes (bash manual
    3.1.2.2: `X='$HOME'` holds the five characters) and `\\$` outside them (3.1.2.1, 3.1.2.3; the backslash removed,
    as bash removes it)."""
    if "$" not in text:
        return text
    out, quote, i = [], "", 0
    while i < len(text):
        c = text[i]
        if quote == "'":
            quote = "" if c == "'" else quote
            c = LITERAL_DOLLAR if c == "$" else c
        elif c == "\\" and text[i + 1:i + 2] == "$":
            c, i = LITERAL_DOLLAR, i + 1
        elif c == "\\":
            out.append(text[i:i + 2])
            i += 2
            continue
        elif c in "'\"" and quote in ("", c):
            quote = "" if quote else c
        out.append(c)
        i += 1
    return "".join(out)


def restore_dollars(text: str) -> str:
    """`text` with protect_literal_dollars undone."""
    return text.replace(LITERAL_DOLLAR, "$")


def shell_split(text: str) -> list[str]:
    """The words of a simple command as bash splits them: shlex's quoting, but a comment only where bash starts one,
    at a `#` that begins a word (`--save a#b` keeps `a#b`, which shlex's comments=True cut to `a`; `${#V}`, `$#`),
    and no split at a blank inside `${...}` (braced_blanks), nor at a double quote inside a double-quoted one."""
    text = unnest_quotes(text)
    outside, _, end = _scan(text)
    braced = braced_blanks(text[:end], outside)
    if not braced:
        return shlex.split(text[:end])
    return [unmark_blanks(word) for word in shlex.split(mark_blanks(text[:end], braced))]


def _word_marks(text: str) -> list[tuple[bool, bool]]:
    """For each word of a simple command (split at blanks outside quotes, as shlex.split(text, comments=True) splits
    it): whether it holds `$` outside quotes, and whether any part of it is quoted."""
    text = unnest_quotes(text)
    outside, _, end = _scan(text)
    braced = braced_blanks(text, outside)
    out: list[tuple[bool, bool]] = []
    dollar = quoted = in_word = False
    for i in range(end + 1):
        if i == end or (outside[i] and text[i] in " \t\n" and i not in braced):
            if in_word:
                out.append((dollar, quoted))
            dollar = quoted = in_word = False
        else:
            in_word, dollar, quoted = True, dollar or (outside[i] and text[i] == "$"), quoted or not outside[i]
    return out


def rejoin_substitutions(words: list[str], quoted: list[bool]) -> tuple[list[str], list[bool]]:
    """`words` (as shell_split gives them, with their quoted_words marks) with each unquoted command substitution that
    the split cut at its blanks made one word again, as bash reads it (3.5.4): `GPUS=$(nvidia-smi -L | wc -l)`,
    `--nproc-per-node $(nvidia-smi -L | wc -l)`, `` A=`hostname -s` ``. A quoted word that ends in a backquote opens
    none (the element `` ` `` of `A=({Z..a})`, which `"${A[@]}"` gives quoted)."""
    out: list[str] = []
    marks: list[bool] = []
    for word, mark in zip(words, quoted if len(quoted) == len(words) else [False] * len(words)):
        if out and (out[-1].count("$(") > out[-1].count(")") or
                    out[-1].count("`") % 2 and not (marks[-1] and out[-1].endswith("`"))):
            out[-1], marks[-1] = f"{out[-1]} {word}", marks[-1] or mark
        else:
            out.append(word)
            marks.append(mark)
    return out, marks


def word_quoting(text: str) -> list[bool | None]:
    """For each word of a simple command (as _word_marks splits it): True when it holds `$` outside quotes and no
    quoting at all (bash splits what that expansion gives at blanks and drops it when empty, 3.5.7 Word Splitting),
    False when it holds no `$` outside quotes (one word as written, even empty), None when it mixes both."""
    return [(None if quoted else True) if dollar else False for dollar, quoted in _word_marks(text)]


def quoted_words(text: str) -> list[bool]:
    """For each word of a simple command (as word_quoting splits it): whether any part of it is quoted (`'<audio>,1'`
    is a word, never a redirection)."""
    return [quoted for _, quoted in _word_marks(text)]


_WORD_REF = re.compile(r"(?<![^\s])\$(?:\{([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*])"
                       r"(?:(:?[-+])((?:[^}$'\"`\\]|\"?\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\})\"?)*))?\}"
                       r"|([A-Za-z_][A-Za-z0-9_]*|[0-9@*]))(?![^\s;&|])")
"""A word that is one unquoted `$NAME`, `${NAME}`, or `${NAME:-word}` / `${NAME:+word}` (and their forms without
`:`) whose word is plain text and `$NAME` references (`${VP_SIZE:+--num-layers-per-virtual-pipeline-stage
$VP_SIZE}`, Megatron-DeepSpeed's tests/functional_tests scripts: bash expands the word, then splits it, 3.5.3)."""
_INNER_REF = re.compile(r"(\"?)\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?\1")
"""A `$NAME` or `"$NAME"` (`${NAME}`, `"${NAME}"`) in the word of `${X:+word}`."""


def _with_operator(value: str | None, op: str, word: str) -> str | None:
    """`${NAME<op>word}` given NAME's value (None: unset): bash manual 3.5.3. `-`: word when unset (`:-` also when
    empty); `+`: word when set (`:+` only when not empty), else nothing."""
    empty = value is None or (op.startswith(":") and value == "")
    if op.endswith("-"):
        return word if empty else value
    return "" if empty else word


_QUOTED_ALL = re.compile(r"\"([^\"$`\\]*)\$(?:\{@\}|@|\{@:-([^\"$`\\}]*)\})([^\"$`\\]*)\"")
"""`"$@"`, alone or within a word (`--x="$@"`, `"$@"x`), with plain text around it in its quotes (`"x $@ y"`) or a
default (`"${@:-x}"`)."""
_ASSIGNMENT_START = re.compile(r"[A-Za-z_]\w*\+?=")
_UNQUOTED_ALL = re.compile(r"\$(?:\{[@*]\}|[@*])")
"""`$@` / `$*` (`${@}`, `${*}`): unquoted, each argument is a word, itself split at blanks (bash manual 3.4.2)."""
_BLANKS = re.compile(r"([ \t\n]+)")
_CASE_WORD = re.compile(r"(?:^|[\s;&|(])case\s+$")
"""Text that ends where the word of a `case` command starts (`case x$@ in`: bash does not split that word)."""


def _unsplit_word(text: str, outside: list[bool], at: int) -> bool:
    """Whether the word of `text` around `at` is one bash does not split into fields: an assignment's (`A=x$@`,
    `A="x y"$@`, `export A=...`; bash manual 3.4) or the word of a `case` (3.2.5.2). `outside`: _scan's marks; the
    word starts after the last blank or operator outside quotes."""
    start = next((i + 1 for i in range(at - 1, -1, -1) if outside[i] and text[i] in " \t;&|("), 0)
    return bool(_ASSIGNMENT_START.match(text, start) or _CASE_WORD.search(text, 0, start))


def _unquoted_fields(args: Sequence[str]) -> str:
    """What an unquoted `$@` stands for, as shell text: one word per argument, each split at blanks (3.5.7), so that
    `"x "$@" y"` with arguments `a` and `b c` gives `x a`, `b`, `c y` (the first argument joins the text before, the
    last the text after); an empty argument still parts its neighbours (`x$@y` with `''`, `a`, `''` gives `x a y`
    as three words) and is dropped between others (implicit null fields are removed, 3.5.7)."""
    return " ".join("".join(" " if piece.isspace() else shlex.quote(piece) for piece in _BLANKS.split(arg) if piece)
                    for arg in args)


def _operator_word(word: str, value_of: Callable[[str], str | None],
                   split: Callable[[str], list[str]] = str.split) -> str | None:
    """The word of `${X:-word}` / `${X:+word}` as the shell words bash makes of it (its `$NAME` expanded and split, a
    `"$NAME"` kept one word); None where it reads a variable llmperf does not know. At a script-set IFS (`split`)
    bash splits the whole result at it, literal text too (`IFS=,`: `${Y:-p,q}` two words, `${Y:-p q}` one; bash
    5.2.15 checked); a word with quotes is then left as written."""
    if any(value_of(name) is None for _, name in _INNER_REF.findall(word)):
        return None
    if split is not str.split:
        return None if re.search(r"['\"\\]", word) else shlex.join(split(_INNER_REF.sub(
            lambda ref: value_of(ref.group(2)) or "", word)))
    expanded = _INNER_REF.sub(lambda ref: (shlex.quote if ref.group(1) else str)(value_of(ref.group(2)) or ""), word)
    return shlex.join(shlex.split(expanded))


def split_unquoted_words(text: str, value_of: Callable[[str], str | None], args: Sequence[str],
                         unknown: AbstractSet[str] = frozenset(), unset: AbstractSet[str] = frozenset(),
                         split: Callable[[str], list[str]] = str.split) -> str:
    """The command with each word that is one unquoted `$NAME` / `${NAME}` / `$1` / `$@` of known value (`value_of`;
    None: not known, left as written) replaced by the fields bash splits it into (3.5.7 Word Splitting: an empty
    value gives no word, `--save $CHECKPOINT_PATH` without $1 is `--save` alone; `--dataset_names $DATA` gives one
    word per name), and a `"$@"` word by the script's arguments `args`, one word each (3.4.2 Special Parameters).
    A name in `unknown` (set so that only running the script tells) stays as written, `${NP:-8}` too: NP may be set;
    a plain `$NAME` of one in `unset` (the script unset it) gives no word. `split`: the field splitting at the
    script's IFS (ShellVariables.fields); `$@` / `$*` split each argument apart."""
    if "$" not in text:
        return text
    outside, _, end = _scan(text)

    def fields(found: re.Match[str]) -> str:
        if found.start() >= end or not outside[found.start()] or (found.group(1) or found.group(4)) in unknown:
            return found.group(0)
        value = value_of(found.group(1) or found.group(4))
        if not found.group(2) and (found.group(1) or found.group(4)) in unset:
            return ""
        if found.group(2) and _with_operator(value, found.group(2), "\0") == "\0":  # bash takes the word
            word = _operator_word(found.group(3), value_of, split)
            return found.group(0) if word is None else word
        if found.group(2):
            value = _with_operator(value, found.group(2), "")
        if value is not None and (found.group(1) or found.group(4)) in ("@", "*") and not found.group(2):
            return shlex.join([field for arg in args for field in split(arg)])
        if value is not None and _unsplit_word(text, outside, found.start()):  # `case $X in`: one word (3.2.5.2)
            return shlex.quote(value)
        if value is not None and brackets and brackets[found.start()]:  # a `[[ ]]` operand is not split either; kept
            return shlex.join(value.split())  # as read before H205's IFS (a quoted operand is no pattern there)
        return found.group(0) if value is None else shlex.join(split(value))

    def each_arg(found: re.Match[str]) -> str:
        """One word per argument, the text before `"$@"` in its word (`pre"$@"`, `"pre $@"`) joined to the first and
        the text after it to the last (bash manual 3.4.2: `"pre$@post"`); none without arguments; the default of
        `"${@:-x}"`. Not in an assignment (`A="$@"` joins them) nor a `case` word (_unsplit_word)."""
        at = found.start()
        _, quote, _ = _scan(text[:at])
        if at >= end or quote or _unsplit_word(text, outside, at):
            return found.group(0)
        before, default, after = found.groups()
        if not args or (default is not None and args == [""]):  # null: no word, unless text in the quotes or a
            # default gives one (3.5.3 `${@:-x}`: $@ is null without arguments or with one empty one)
            return "" if not before and not after and default is None else shlex.quote(before + (default or "") + after)
        words = list(args)
        words[0] = before + words[0]
        words[-1] += after
        return shlex.join(words)

    def unquoted_args(found: re.Match[str]) -> str:
        """An unquoted `$@` / `$*` within a word (`"x "$@" y"`, `x$*y`): _unquoted_fields. Not in an assignment
        (`A=x$@`, `A="x y"$@` is one word, 3.4), the word after `case` (not split, 3.2.5.2), nor in a command
        substitution (its own command)."""
        at = found.start()
        if at >= end or not outside[at] or _unsplit_word(text, outside, at) or \
                text.count("$(", 0, at) > text.count(")", 0, at) or text.count("`", 0, at) % 2:
            return found.group(0)
        if split is not str.split:  # a script-set IFS: each argument's fields (a field at the argument's edge is not
            return " ".join(shlex.join(split(arg)) for arg in args if split(arg))  # glued to the text beside it)
        return _unquoted_fields(args)

    text = _QUOTED_ALL.sub(each_arg, text)
    outside, _, end = _scan(text)  # where the words stand now: `"$@" $*` with no arguments moved `$*` back
    if "$@" in text or "$*" in text or "${@}" in text or "${*}" in text:
        text = _UNQUOTED_ALL.sub(unquoted_args, text)
        outside, _, end = _scan(text)
    brackets = _in_double_brackets(text, outside, end) if "[[" in text else []
    return _WORD_REF.sub(fields, text)


def plain_heredoc_operators(text: str) -> str:
    """`cat <<'EOF' > f` written `cat <<EOF > f`: the quotes of a here-document's delimiter turn its expansion off
    (Heredoc.expand), not the operator into a word, which strip_redirections would keep as one (`sbatch <<'EOF'`
    read `<<EOF` as its script file)."""
    outside, _, end = _scan(text)

    def plain(found: re.Match[str]) -> str:
        if not outside[found.start()] or "<<<" in text[max(found.start() - 1, 0):found.start() + 3] or \
                in_arithmetic(text, found.start()):
            return found.group(0)
        return f"<<{found.group(1)}{found.group(3) or found.group(4) or found.group(5)}"

    return _HEREDOC.sub(plain, text[:end]) + text[end:]


def in_arithmetic(text: str, at: int) -> bool:
    """Whether text[at] lies inside `(( ))` or `$(( ))`, where `<<` is a shift (bash manual 6.5), no here-document."""
    return text[:at].count("((") > text[:at].count("))")


def _heredoc(text: str, rest: list[str], number: int) -> tuple[Heredoc | None, int]:
    """The here-document `text` opens and how many of the following lines (`rest`) it takes."""
    outside, _, end = _scan(text)
    for match in _HEREDOC.finditer(text, 0, end):
        if not outside[match.start()] or "<<<" in text[max(match.start() - 1, 0):match.start() + 3] or \
                in_arithmetic(text, match.start()):
            continue
        strip_tabs, delimiter = match.group(1) == "-", match.group(3) or match.group(4) or match.group(5)
        quoted = match.group(5) is None
        body: list[str] = []
        for line in rest:
            if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                return Heredoc("".join(body), not quoted, number + 1), len(body) + 1
            body.append((line.lstrip("\t") if strip_tabs else line) + "\n")
        return Heredoc("".join(body), not quoted, number + 1), len(body)
    return None, 0


ARRAY_ASSIGN = re.compile(r"^\s*(?:export\s+|(?:declare|local|typeset)\s+(?:-[agxA]+\s+)*)?([A-Za-z_][A-Za-z0-9_]*)(\+?)=\(")
"""`NAME=(`, `NAME+=(` or `declare -a NAME=(`: a bash array assignment (Megatron-LM's example scripts keep their flags
in arrays, `GPT_MODEL_ARGS=(` newline `--num-layers 96` ... newline `)`, expanded as `${GPT_MODEL_ARGS[@]}`)."""


def array_and_rest(text: str) -> tuple[str, str]:
    """A one-line array assignment followed by more commands, `L=(); L+=(--lr 1); torchrun ...`: the assignment and
    what follows its `;` (or `&&`: an assignment's status is 0, bash manual 3.7.1); (text, "") for any other line."""
    match = ARRAY_ASSIGN.match(text)
    if match is None or "\n" in text:
        return text, ""
    depth, quote, i = 0, "", match.end() - 1
    while i < len(text):
        c = text[i]
        if c == "\\" and quote != "'":
            i += 2
            continue
        if c in "'\"" and quote in ("", c):
            quote = "" if quote else c
        elif not quote:
            depth += (c == "(") - (c == ")")
            if depth == 0:
                break
        i += 1
    rest = text[i + 1:].lstrip()
    joined = ";" if rest.startswith(";") and not rest.startswith(";;") else "&&" if rest.startswith("&&") else ""
    if depth or not joined or not rest[len(joined):].strip():
        return text, ""
    return text[:i + 1], rest[len(joined):]


def _array_closed(text: str) -> bool:
    """Whether an array assignment's `(` is closed by an unquoted `)` (comments after `#` on each line ignored)."""
    depth = 0
    for line in text.split("\n"):
        outside, _, end = _scan(line)
        depth += sum((c == "(") - (c == ")") for c, out in zip(line[:end], outside) if out)
    return depth <= 0


def logical_lines(text: str) -> list[ScriptLine]:
    """The script's logical lines in order; a comment line stays one line (its trailing backslash joins nothing);
    a bash array assignment spanning lines is one logical line, its lines joined by newlines."""
    physical = text.splitlines()
    out: list[ScriptLine] = []
    pending, first, i = "", 0, 0
    while i < len(physical):
        line, i = physical[i], i + 1
        if not pending:
            first = i
            if line.lstrip().startswith("#"):
                out.append(ScriptLine(i, line))
                continue
        if ARRAY_ASSIGN.match(pending + line) and not _array_closed(pending + line):
            pending += (line.rstrip()[:-1] if line.rstrip().endswith("\\") else line) + "\n"
            continue
        _, quote, _ = _scan(pending + line)
        if quote != "'" and line.rstrip().endswith("\\") and not line.rstrip().endswith("\\\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        if quote:
            pending += line + "\n"
            continue
        heredoc, taken = _heredoc(pending + line, physical[i:], i)
        out.append(ScriptLine(first, pending + line, heredoc))
        pending, i = "", i + taken
    if pending:
        out.append(ScriptLine(first, pending))
    return out


def ungroup(text: str) -> str:
    """A line whose commands are grouped, `( cd run && torchrun ... )` (a subshell) or `{ torchrun ...; } 2>&1 | tee
    log` (bash manual 3.2.5.3 Grouping Commands), with its grouping characters blanked: the commands are the same
    ones, run there (`((` is arithmetic, a `{` not followed by a blank no group)."""
    span = _group_span(text)
    if span is None:
        return text
    start, close = span
    return f"{text[:start]} {text[start + 1:close]} {text[close + 1:]}"


_LIST_OPERATOR = re.compile(r"&&|\|\||;(?!;)|(?<![<>&|])&(?![>&])")
"""An operator of a list (bash manual 3.2.4): `;`, `&&`, `||` or `&` (not `;;`, `|&`, `>&2`, `&>`)."""


def split_after_group(text: str) -> tuple[str, str] | None:
    """A line that begins with a group and goes on after it (`( cd run ) && NP=4`, `(NP=4); NP=6`): the group's
    part, with the list operator after it where that carries to what follows (CARRIED, `&`), and the rest, so that
    only the group runs in its subshell (bash manual 3.2.5.3); None for another line."""
    span = _group_span(text)
    if span is None:
        return None
    outside, _, end = _scan(text)
    for found in _LIST_OPERATOR.finditer(text, span[1] + 1, end):
        before = [c for c, out in zip(text[span[1] + 1:found.start()], outside[span[1] + 1:]) if out]
        nested = before.count("(") != before.count(")") or before.count("`") % 2  # in a `$( )` or backquotes
        if nested or not all(outside[found.start():found.end()]):
            continue
        rest = text[found.end():end]
        if not rest.strip() or (found.group() != ";" and rest.lstrip()[:1] == "("):
            return None  # `( ... ) || ( ... )`: read flat (ungroup), as one subshell
        return text[:found.start()] if found.group() == ";" else text[:found.end()], rest
    return None


def _group_span(text: str) -> tuple[int, int] | None:
    """Where the group a line begins with opens and closes (ungroup), None if it begins with none."""
    outside, _, end = _scan(text)
    start = len(text) - len(text.lstrip())
    if start >= end or text[start] not in "({" or text[start:start + 2] == "((" or \
            (text[start] == "{" and text[start + 1:start + 2] not in (" ", "\t")):
        return None
    opening, closing, depth = text[start], {"(": ")", "{": "}"}[text[start]], 0
    for i in range(start, end):  # `$(...)` and `${...}` inside open and close in pairs
        depth += outside[i] and (text[i] == opening) - (text[i] == closing)
        if depth == 0:
            return start, i
    return None


def pipelines(text: str) -> list[list[str]]:
    """The line's commands (split at unquoted `;`, `&&`, `||`, `&`), each the list of its pipeline's simple
    commands (split at `|`), comments dropped. `2>&1`, `>&` and `&>` are redirections, not separators."""
    return [pipeline for _, pipeline in command_list(text) if pipeline]


def command_list(text: str) -> list[tuple[str, list[str]]]:
    """The line's pipelines as pipelines() gives them, each with the operator before it (`""` for the first; `;`,
    `&&`, `||`, `&`, a case arm's `;;`, `;&`, `;;&`): an `if` condition's status is the list's (bash manual 3.2.4
    Lists). A line ending in one of CARRIED ends with that operator and an empty pipeline."""
    outside, _, end = _scan(text)
    substituted = _in_substitution(text, outside, end)
    if "[[" in text:  # `[[ -n $X && $NP == 2 ]]`: its `&&`, `||` are the test's own (bash manual 3.2.5.2)
        substituted = [a or b for a, b in zip(substituted, _in_double_brackets(text, outside, end))]
    out: list[tuple[str, list[str]]] = []
    pipeline: list[str] = []
    joined, start, i = "", 0, 0
    while i < end:
        c = text[i]
        redirect = c == "&" and ((i > 0 and text[i - 1] in "<>") or text[i + 1:i + 2] == ">")
        if not outside[i] or c not in ";&|" or redirect or substituted[i]:
            i += 1
            continue
        pipeline.append(text[start:i])
        step = 3 if text[i:i + 3] == ";;&" else 2 if text[i:i + 2] in ("&&", "||", "|&", ";;", ";&") else 1
        if c != "|" or step == 2 and text[i:i + 2] == "||":
            out.append((joined, pipeline))
            joined, pipeline = text[i:i + step], []
        i += step
        start = i
    pipeline.append(text[start:end])
    out.append((joined, pipeline))
    kept = [(op, [cmd for cmd in p if cmd.strip()]) for op, p in out if any(cmd.strip() for cmd in p)]
    return kept + [(joined, [])] if joined in CARRIED and not "".join(pipeline).strip() else kept


def forks(listed: list[tuple[str, list[str]]], n: int, text: str, lastpipe: bool = False) -> list[bool]:
    """For each command of pipeline `n` of command_list(`text`): whether bash runs it in a subshell, so that what it
    assigns or stops stays there: each command of a pipeline of two or more (bash manual 3.2.3) but the last under
    `shopt -s lastpipe` (4.3.2), and a pipeline ended by `&` (3.2.4)."""
    after = listed[n + 1][0] if n + 1 < len(listed) else "&" if _BACKGROUND_END.search(text) else ""
    count = len(listed[n][1])
    return [after == "&" or (count > 1 and not (lastpipe and k == count - 1)) for k in range(count)]


def group_forks(text: str) -> bool:
    """Whether the group a line begins with runs in a subshell: a `( list )` always (3.2.5.3), a `{ list; }` that
    is piped or sent to the background (`{ NP=4; } | cat` leaves NP as it was; 3.2.3)."""
    span = _group_span(text)
    if span is None:
        return False
    if text[span[0]] == "(":
        return True
    rest = command_list("x" + text[span[1] + 1:])  # the group's place taken by a plain word
    return bool(rest) and forks(rest, 0, "x" + text[span[1] + 1:])[0]


_BACKGROUND_END = re.compile(r"(?<![&|>])&\s*$")
"""A line ending in `&` (not `&&`, `|&` or `>&`): its last command runs asynchronously."""
CARRIED = ("&&", "||", ";&", ";;&")
"""Operators whose meaning reaches the next line's command when a line ends with them: a list going on (`A &&`), or
a `case` arm's `;&` / `;;&` (bash manual 3.2.5.2: run the next arm's commands too / test its patterns too)."""


_DOUBLE_BRACKETS = re.compile(r"(?:^|(?<=[\s;&|(!]))\[\[(?=\s)(.*?)\s\]\](?=$|[\s;&|)])", re.DOTALL)
"""A `[[ ... ]]` conditional command: `[[` a word of its own, up to the first `]]` word."""


def _in_double_brackets(text: str, outside: list[bool], end: int) -> list[bool]:
    """For each character: inside an unquoted `[[ ... ]]`."""
    inside = [False] * len(text)
    for found in _DOUBLE_BRACKETS.finditer(text, 0, end):
        if outside[found.start()]:
            inside[found.start():found.end()] = [True] * (found.end() - found.start())
    return inside


def _in_substitution(text: str, outside: list[bool], end: int) -> list[bool]:
    """For each character: inside an unquoted command substitution, `$(...)` or `` `...` `` (bash manual 3.5.4), whose
    `|` and `;` are the inner command's (`GPUS=$(nvidia-smi -L | wc -l)` is one command of the line)."""
    inside, depth, backquote = [False] * len(text), 0, False
    for i in range(end):
        c = text[i] if outside[i] else ""
        if c == "`":
            backquote = not backquote
        elif c == "(" and (depth or (i and text[i - 1] == "$" and outside[i - 1])):
            depth += 1
        elif c == ")" and depth:
            depth -= 1
        inside[i] = bool(depth) or backquote
    return inside


@dataclass(frozen=True)
class Redirection:
    """One redirection of a simple command: `2>&1` is ("2>&", "1", False), `> log` is (">", "log", True)."""

    operator: str
    """The operator with its file-descriptor prefix (`2>`, `&>`, `>>`, `<<`)."""
    target: str
    target_is_next_word: bool


def split_redirections(words: list[str], quoted: list[bool] | None = None) -> tuple[list[str], list[Redirection]]:
    """A simple command's words without its redirections, and its redirections; `quoted` (quoted_words, when it
    matches the words) marks words that are no redirection."""
    quoted = quoted if quoted is not None and len(quoted) == len(words) else [False] * len(words)
    kept: list[str] = []
    redirections: list[Redirection] = []
    i = 0
    while i < len(words):
        match = None if quoted[i] else _REDIRECT.match(words[i])
        if match is None:
            kept.append(words[i])
            i += 1
            continue
        target = match.group(2)
        operator, next_word = words[i][:len(words[i]) - len(target)], not target and i + 1 < len(words)
        if next_word:
            target, i = words[i + 1], i + 1
        redirections.append(Redirection(operator, target, next_word))
        i += 1
    return kept, redirections


def strip_redirections(words: list[str], quoted: list[bool] | None = None) -> tuple[list[str], list[str]]:
    """A simple command's words without its redirections, and the files it writes with `>` / `>>` (`2>&1`, `< in`,
    `<<EOT` dropped); `quoted` as split_redirections."""
    kept, redirections = split_redirections(words, quoted)
    return kept, written_files(redirections)


def written_files(redirections: Sequence[Redirection]) -> list[str]:
    """The files `>` / `>>` / `>|` redirections write."""
    return [r.target for r in redirections if r.operator.lstrip("0123456789&") in (">", ">>", ">|") and r.target]

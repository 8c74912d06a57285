"""A script's variables as bash holds them while it reads the script: plain values, arrays, and what expands them.

`NAME=value` / `export NAME=value` / `NAME+=value` assign (bash manual 3.4 Shell Parameters), `NAME=( words )` sets an
array (3.5.7 word splitting of its elements), and a value only running a command gives (`N=$(nvidia-smi -L | wc
-l)`) leaves its variable undecidable: a test on it is not decided, and the launch line leaves it unexpanded.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Callable, Mapping

from llmperf_hook.launch.argv_words import expand_env_refs
from llmperf_hook.launch.brace_expansion import brace_expand
from llmperf_hook.launch.shell_arithmetic import ARITH, arithmetic
from llmperf_hook.launch.shell_associative import (ASSOCIATIVE_DECLARE, assign_element, assign_pairs,
                                                   associative_values, converts_indexed, expand_items, forget,
                                                   index_of, placed, placed_at, present)
from llmperf_hook.launch.shell_conditions import ASSIGNMENT_WORD
from llmperf_hook.launch.shell_positional import expand_positional
from llmperf_hook.launch.shell_read import DEFAULT_IFS, ifs_fields
from llmperf_hook.launch.shell_script import (ARRAY_ASSIGN, ASSIGN, LITERAL_DOLLAR, Heredoc, protect_literal_dollars,
                                              quoted_words, shell_split, word_quoting)
from llmperf_hook.launch.sizing import PRICED_ENV
from llmperf_hook.launch.undecided_branches import BRANCHES

APPEND = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\+=(.*)$", re.DOTALL)
"""`NAME+=value`: bash appends to the variable's value (bash manual 3.4 Shell Parameters)."""
NAME_BEFORE_QUOTE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)(?=['\"])")
"""`$mbs'_gbs'`: the quote ends the name (bash reads $mbs), which shlex's unquoted word `$mbs_gbs` would lose."""
PWD = re.compile(r"`pwd`|\$\(pwd\)")
_EXPORTED_WORD = re.compile(r"[A-Za-z_]\w*(?:\+?=.*)?", re.DOTALL)
"""A word `export` takes: NAME, NAME=value or NAME+=value."""
_ARRAY_REF = re.compile(r"(\"?)\$\{([A-Za-z_][A-Za-z0-9_]*)\[([@*])\](?::\s*(-?\d+)(?::\s*(\d+))?)?\}\1")
"""`${NAME[@]}`, `${NAME[*]}`, and their slices `${NAME[@]:OFFSET[:LENGTH]}` (bash manual 3.5.3: a negative OFFSET,
after a blank, counts from the end)."""
_ARGUMENT_SLICE = re.compile(r"(\"?)\$\{([@*]):\s*(-?\d+)(?::\s*(\d+))?\}\1")
"""`"${@:2}"`, `${@:2:1}`, `"${*:3}"`: the script's (or function's) arguments from the OFFSET-th on (bash manual 3.5.3:
`${@:0}` starts with $0, a negative OFFSET, after a blank, counts from the last argument)."""
_ARRAY_INDICES = re.compile(r"(\"?)\$\{!([A-Za-z_][A-Za-z0-9_]*)\[([@*])\]\}\1")
"""`${!NAME[@]}` / `${!NAME[*]}`: the array's indices (bash manual 6.7)."""
_BASH_SOURCE = re.compile(r"\$\{BASH_SOURCE(?:\[0\])?\}|\$BASH_SOURCE\b")
_ARRAY_ITEM = re.compile(r"\$\{(#?)([A-Za-z_][A-Za-z0-9_]*)\[(-?\d+|[@*])\]\}")
"""`${NAME[N]}` (one element), `${#NAME[@]}` (the count), `${#NAME[N]}` (an element's length): bash manual 6.7."""
_INDEXED_WORD = re.compile(r"\[[^\]$`'\"]+\]=")
"""`[N]=value` / `[key]=value`, a word of a compound array assignment."""
_BARE_ELEMENT = re.compile(r"(?<![\w${#!])(([A-Za-z_]\w*)\[[^\[\]]+\])")
"""`NAME[SUBSCRIPT]` written bare, as arithmetic reads an array element."""
_ASSIGNING_EXPANSION = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?=")
"""`${NAME:=word}` / `${NAME=word}`: an expansion that assigns (bash manual 3.5.3)."""
_SHELL_ARRAYS = frozenset({"FUNCNAME", "PIPESTATUS", "GROUPS", "DIRSTACK", "COMP_WORDS", "COPROC"})
"""Arrays bash itself sets (bash manual 5.2 Bash Variables; BASH_SOURCE, BASH_ARGV ... start with BASH)."""
_HEREDOC_ESCAPE = re.compile(r"\\([\\$`\n])")
"""In an unquoted here-document a backslash quotes only `\\`, `$`, a backquote and a newline (bash manual 3.6.6)."""
_UNSET_ELEMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\[(.+)\]", re.DOTALL)
"""`NAME[SUBSCRIPT]`, a word of `unset`: one element."""
_HEREDOC_ARRAY = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]\}")
PRICED_NAMES = re.compile("|".join(PRICED_ENV) + r"|ACCELERATE_\w+")
"""Variables the prediction reads from the job's environment (sizing.PRICED_ENV: the DeepSpeed release, CUDA's
connection count; accelerate's ACCELERATE_* plugin settings): set without `export`, the job does not have them,
which is worth a warning."""


def child_environment(env: dict[str, str], hidden: frozenset[str]) -> dict[str, str]:
    """`env` (the script's variables where its launch line runs) made the environment of the command that line starts:
    bash passes a child process only the variables with the export attribute (bash manual 3.7.4 Environment), so the
    `hidden` ones are taken out; returns them with their values."""
    return {name: env.pop(name) for name in sorted(hidden) if name in env}


def not_exported_note(message: str, hidden: dict[str, str]) -> str:
    """For an error about a `$NAME` the command did not see: that NAME is a variable the script did not export."""
    names = [name for name in hidden if re.search(r"\$\{?" + name + r"\b", message)]
    if not names:
        return ""
    return (f" ({', '.join(names)} {'is' if len(names) == 1 else 'are'} set by the script without `export`, so the "
            "command it starts does not have it in its environment (bash passes only exported variables to a child "
            "process): write `export NAME=...`.)")


def unknown_value_note(message: str, unknown: Mapping[str, str]) -> str:
    """For an error quoting a `$NAME` the launch script sets so that only running it gives the value: where it does
    (setting NAME in the environment would not help, the script assigns it)."""
    found = {name: where for name, where in unknown.items() if re.search(r"\$\{?" + name + r"\b", message)}
    if not found:
        return ""
    named = "; ".join(f"${name} at {where}" for name, where in list(found.items())[:3])
    how = "" if all(BRANCHES in where for where in found.values()) else \
        (" from what only running it tells (a command's output, input it reads, or arithmetic or a loop llmperf does "
         "not follow), directly or through another variable")
    return (f" (the launch script sets {named}{how}; llmperf runs nothing, and setting it in the environment does not "
            "help, since the script assigns it. Write its value into the script, or give the launch line after "
            "`--`.)")


def unseen_warnings(hidden: dict[str, str]) -> list[str]:
    """One warning per variable the prediction reads from the job's environment that the script set but did not
    export (`CUDA_DEVICE_MAX_CONNECTIONS=1` without `export`: Megatron does not see it)."""
    return [f"{name}={value} is set by the script without `export`, so the job does not see it (bash passes only "
            f"exported variables to the commands it starts); predicted without it. Write `export {name}=...` if the "
            "job should have it." for name, value in hidden.items() if PRICED_NAMES.fullmatch(name)]


def _cut_substitution(words: list[str]) -> re.Match[str] | None:
    """`N=$(nvidia-smi -L | wc -l)` (or backquotes) reaches a command cut at the blanks and `|` inside it: the
    assignment word (after `export`) whose substitution it does not close, nothing after the word that closes it."""
    at = 1 if words[0] == "export" else 0
    match = ASSIGN.match(words[at]) if at < len(words) else None
    if match is None or not (match.group(2).count("(") > match.group(2).count(")") or match.group(2).count("`") % 2):
        return None
    closing = [k for k, word in enumerate(words) if k > at and (")" in word or "`" in word)]
    return match if closing in ([], [len(words) - 1]) else None


_NAME_REF = re.compile(r"\$(?:\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*))")
"""A plain `$NAME` / `${NAME}`."""
_SET_OPTIONS = {"a": "allexport", "e": "errexit", "m": "monitor", "u": "nounset"}
"""The `set` options the reading follows, by letter and by `-o` name (bash manual 4.3.1 The Set Builtin), each a
ShellVariables field of that name."""


@dataclass(kw_only=True)
class ShellVariables:
    """The variables of one pass over a script (batch_script._Reading reads the script's commands with them)."""

    env: dict[str, str]
    """The variables set, by name (the launching environment's first, then the script's)."""
    used: dict[str, str]
    """The variables an expansion read, for `llmperf explain`."""
    cwd: str = field(default_factory=os.getcwd)
    cwd_ways: tuple[str, ...] = ()
    """The other directories the script may be in where undecided branches `cd` apart (undecided_branches: the
    reading goes on in `cwd`, the way read first's, and reads a file sourced by a relative path from each)."""
    arrays: dict[str, list[str]] = field(default_factory=dict)
    assoc: dict[str, dict[str, str]] = field(default_factory=dict)
    """Associative arrays (`declare -A`), by name: their elements by key (launch/shell_associative.py)."""
    unknown_heads: set[str] = field(default_factory=set)
    """Arrays appended to (`A+=( ... )`) after undecided branches set them apart (undecided_branches.settle_branches):
    `arrays` holds only the appended elements, which follow the unexpanded `"${A[@]}"` where it is expanded."""
    positional: dict[str, str] = field(default_factory=dict)
    """$0, $1 ... ${10}, $#, $@ and $* of `bash train.sh ARGS` / `sbatch job.sh ARGS` (the script's arguments)."""
    split_refs: dict[str, str] = field(default_factory=dict)
    """Variables the command being read had split into words (word_value): recorded in `used` when it is the launch
    (or single python) line, as the launch line's other references are by expand."""
    frames: list[dict[str, str | None]] = field(default_factory=list)
    """One per function being read: the caller's value (None: unset) of each variable it made its own with `local`."""
    undecidable: set[str] = field(default_factory=set)
    """Variables a command substitution sets (`N=$(nvidia-smi ... | wc -l)`, also after a plain `N=1`, whose stale value
    env drops): a test on them is undecided, and the launch line leaves them unexpanded."""
    exported: set[str] = field(default_factory=set)
    """The names with bash's export attribute: the launching environment's, `export NAME`, `declare -x NAME`, and every
    variable assigned while `set -a` is on (bash manual 3.7.4 Environment, 4.3.1 The Set Builtin). Only these reach
    the environment of a command the script starts; the others are the shell's own."""
    allexport: bool = False
    """`set -a` / `set -o allexport` is on: each variable assigned is exported."""
    errexit: bool = False
    """`set -e` / `set -o errexit` is on: a command that fails ends the script (bash manual 4.3.1)."""
    lastpipe: bool = False
    """`shopt -s lastpipe` is on: the last command of a pipeline runs in the shell itself (bash manual 4.3.2), so what
    it assigns stays (subshell_state), unless job control is on (`monitor`)."""
    monitor: bool = False
    """`set -m` / `set -o monitor`: job control, which a script runs without unless it turns it on; lastpipe then has
    no effect ("if job control is not active", bash manual 4.3.2 shopt lastpipe)."""
    nounset: bool = False
    """`set -u` / `set -o nounset`: expanding an unset variable is an error that ends the script (bash manual 4.3.1;
    script_stops.stop_on_nounset)."""
    readonly: set[str] = field(default_factory=set)
    """Names `readonly NAME` / `declare -r NAME` made read-only: `unset NAME` fails on them and they keep their value
    (bash manual 4.1 `unset`: 'Readonly variables and functions may not be unset'; builtins/set.def unset_builtin)."""
    readonly_failed: str = ""
    """The read-only name the command being read failed to unset ('cannot unset: readonly variable': its status is 1)
    or, followed by `=`, to assign ('X: readonly variable': an assignment error); batch_script sets it back to ""
    before each command."""
    removed: set[str] = field(default_factory=set)
    """Names `unset NAME` / `unset -v NAME` removed (bash manual 4.1 Bourne Shell Builtins, `unset`), also on a
    condition llmperf cannot decide (applied and noted, as an assignment there is), until a command the reading does
    not follow may have set them again (batch_script.forget_removed drops those a later command writes bare: `read
    NAME`)."""

    def surely_unset(self) -> set[str]:
        """The names unset where the reading is: removed by `unset` and not set again since (a value, an undecided
        one, an array). bash expands such a `$NAME` to nothing (3.5.3); a name the script never set may come from the
        job's environment, so it is not among them."""
        return {name for name in self.removed if name not in self.env and name not in self.undecidable and
                name not in self.arrays and name not in self.assoc}

    def without_unset(self, word: str) -> str:
        """A launch word with each plain `$NAME` / `${NAME}` of a surely unset name gone (`"$X"` is an empty word,
        `${X}c` is `c`): the word as bash expands it; other references stay for the launch's own expansion."""
        gone = self.surely_unset() if self.removed and "$" in word else set()
        if not gone:
            return word
        return _NAME_REF.sub(lambda m: "" if (m.group(1) or m.group(2)) in gone else m.group(0), word)

    def expand(self, text: str, record: bool = True, assign: bool = True) -> str:
        """`text` with the script's arguments and variables expanded; each variable read is recorded in `used`
        unless `record` is False (a look at a command that may not be the launch). bash runs the command being read,
        so a `${NAME:=word}` in it assigns NAME (expand_env_refs), unless `assign` is False: what a command's child
        process expands (a here-document's body)."""
        text = expand_positional(text, self.positional_for(text))
        default_ifs = "IFS" in text and "IFS" not in self.env and "IFS" not in self.removed
        if default_ifs:  # bash starts with IFS set to <space><tab><newline> (variables.c): `OLD=$IFS` keeps that
            self.env["IFS"] = DEFAULT_IFS
        try:
            return expand_env_refs(PWD.sub(self.cwd, text), self.env, self.used if record else {}, self.undecidable,
                                   assign=assign, unset=self.surely_unset() if self.removed else frozenset())
        finally:
            if default_ifs and self.env.get("IFS") == DEFAULT_IFS:
                del self.env["IFS"]

    def expand_for_effects(self, words: list[str]) -> None:
        """Expand the words of a command llmperf reads no further (`echo "${TP:=2}"`, `mkdir -p ${OUT:=out}`) for the
        assignments their `${NAME:=word}` make: bash expands every command's words in the shell itself before it
        runs the command (bash manual 3.7.1), so the assignment holds for the lines after it."""
        for word in words:
            if _ASSIGNING_EXPANSION.search(word):
                self.expand(word, record=False)

    def bash_source(self) -> str:
        """The file being read, for ${BASH_SOURCE[0]} (batch_script: a sourced file's own path)."""
        return self.positional.get("0", "")

    def source_word(self, word: str) -> str:
        """A word of a command substitution llmperf works out, with ${BASH_SOURCE[0]} and the script's variables; bash
        expands it in the substitution's subshell (manual 3.5.4), so its `${NAME:=word}` assigns nothing here."""
        return self.expand(_BASH_SOURCE.sub(lambda _: self.bash_source(), word), record=False, assign=False)

    def assign_array(self, text: str) -> bool:
        """`NAME=( words )` / `NAME+=( words )`: its elements, each expanded as bash expands them at assignment."""
        match = ARRAY_ASSIGN.match(text)
        body = protect_literal_dollars(text[match.end():]) if match else ""
        if match is None or ")" not in body:
            return False
        inner = self.expand_arrays(NAME_BEFORE_QUOTE.sub(r"${\1}", body[:body.rindex(")")]))  # `A=( "${A[@]}" .. )`
        elements = self.array_elements(inner)
        if elements is None:
            return False
        name = match.group(1)
        if ASSOCIATIVE_DECLARE.match(text) and converts_indexed(self, name):
            return True  # the declaration fails: A keeps its elements
        if name in self.assoc or ASSOCIATIVE_DECLARE.match(text):  # `declare -A M=([7b]=1 [70b]=8)`
            return assign_pairs(self, name, elements, bool(match.group(2)))
        if match.group(2) and name in self.undecidable and name not in self.arrays:  # appended to undecided branches'
            self.unknown_heads.add(name)
        elif not match.group(2):
            self.unknown_heads.discard(name)
            self.undecidable.discard(name)
        held = self.arrays.get(name, [self.env[name]] if name in self.env else [])  # `X=a; X+=(b)`: (a b)
        slots = placed(self, list(held) if match.group(2) else [], elements)
        if slots is None:  # `A=([$k]=x)`: an index only running the script tells
            forget(self, name)
        else:
            self.arrays[name] = slots
        return True

    def word_value(self, name: str) -> str | None:
        """The value bash splits an unquoted `$name` word into: the script's argument (`1`, `@`, `*`) or a variable it
        sets; None (left as written, so that a launch using it names it) for one it does not set plainly."""
        if name.isdigit() or name in ("@", "*"):
            return self.positional.get(name, "")
        value = None if name in self.undecidable else self.env.get(name)
        if value is not None:
            self.split_refs[name] = value
        return value

    def args(self) -> list[str]:
        """The script's arguments, $1 ... $#."""
        return [self.positional[str(i)] for i in range(1, int(self.positional.get("#", "0")) + 1)]

    def array_elements(self, inner: str) -> list[str] | None:
        """The elements `( inner )` assigns: each word expanded, and an unquoted `$X` split at blanks, so that an
        empty one gives no element (bash manual 3.5.7; Megatron-LM's `--save $CHECKPOINT_PATH` without $1); a word
        quoted across lines is taken as written. None when the words cannot be split."""
        try:
            lines = [(shell_split(piece), word_quoting(piece), quoted_words(piece)) for piece in inner.split("\n")]
        except ValueError:
            try:
                return [self.expand(word) for word in shlex.split(inner, comments=True)]
            except ValueError:
                return None
        out: list[str] = []
        for words, quoting, quoted in lines:
            known = len(quoting) == len(words) == len(quoted)
            for word, unquoted, marked in zip(words, quoting if known else [None] * len(words), quoted if known else
                                              [True] * len(words)):
                if not marked and "{" in word and "$" not in word:  # `A=({1..3})`: 1 2 3 (bash manual 3.5.1)
                    braced = brace_expand(word)
                    out.extend([word] if braced is None else braced)
                    continue
                if word in ("$@", "${@}"):  # `ARGS=("$@")`: one element per argument (bash manual 3.4.2)
                    out.extend(field for arg in self.args() for field in (self.fields(arg) if unquoted else [arg]))
                    continue
                value = self.expand(word)
                whole = _INDEXED_WORD.match(word) is not None  # `[3]=$X`: an assignment's value is not split (3.4)
                out.extend(self.fields(value) if unquoted is True and not whole else [value])
        return out

    def expand_arrays(self, text: str) -> str:
        """`"${NAME[@]}"` -> the array's elements as shell words, `"${NAME[*]}"` -> them joined as one word, and an
        unquoted `${NAME[@]}` / `${NAME[*]}` -> its elements split at blanks (bash 3.5.7 word splitting: an element
        `"0:16 2.4B:320"` reaches the command as two words); an array the script never set stays, and one of
        unknown_heads stays followed by the elements appended since."""
        def words(found: re.Match[str]) -> str:
            quoted, name, subscript, offset, length = found.groups()
            slots = self.array_slots(name)
            unknown_head = name in self.unknown_heads and (offset is not None or quoted and subscript == "*")
            if slots is None or unknown_head or (offset is not None and name in self.assoc):  # "Substring expansion
                return found.group(0)  # applied to an associative array produces undefined results" (manual 3.5.3)
            if offset is not None:  # by index (6.7: a sparse array's slice starts at the first element set there)
                start = int(offset) + len(slots) if int(offset) < 0 else int(offset)
                slots = slots[max(start, 0):] if int(offset) >= -len(slots) else []
            elements = present(slots)
            elements = elements[:int(length)] if length is not None else elements
            if not quoted:
                known = shlex.join([field for element in elements for field in self.fields(element)])
            else:
                known = shlex.join(elements) if subscript == "@" else shlex.quote(self.star_joined(elements))
            return f"{found.group(0)} {known}" if name in self.unknown_heads else known

        def indices(found: re.Match[str]) -> str:  # `"${!NAME[@]}"`: each index a word (bash manual 6.7)
            quoted, name, subscript = found.groups()
            slots = self.array_slots(name)
            keys = associative_values(self, name, keys=True) if name in self.assoc else None
            if slots is None or name in self.unknown_heads:
                return found.group(0)
            listed = keys if keys is not None else [str(k) for k, slot in enumerate(slots) if slot is not None]
            if not quoted:  # as the elements are (`words`): split at the script's IFS
                return shlex.join([field for key in listed for field in self.fields(key)])
            return shlex.join(listed) if subscript == "@" else shlex.quote(self.star_joined(listed))

        text = _ARRAY_INDICES.sub(indices, expand_items(self, text)) if "${!" in text else expand_items(self, text)
        text = _ARGUMENT_SLICE.sub(self._argument_slice, text) if "${@:" in text or "${*:" in text else text
        return _ARRAY_REF.sub(words, _ARRAY_ITEM.sub(self._array_item, text))

    def _argument_slice(self, found: re.Match[str]) -> str:
        """`"${@:OFFSET:LENGTH}"` as the words bash gives (quoted `@`: one word an argument; quoted `*`: one word;
        unquoted: split at blanks)."""
        quoted, subscript, offset, length = found.groups()
        listed = [self.positional.get("0", ""), *self.args()]
        start = int(offset) if int(offset) >= 0 else len(listed) + int(offset)
        elements = listed[start:] if start >= 1 or int(offset) == 0 else []
        elements = elements[:int(length)] if length is not None else elements
        if not quoted:
            return shlex.join([field for element in elements for field in self.fields(element)])
        return shlex.join(elements) if subscript == "@" else shlex.quote(self.star_joined(elements))

    def arithmetic_elements(self, expr: str) -> str:
        """`$(( A[1] * 2 ))`, `$(( M[$k] ))`: each bare array element of an arithmetic expression as its value, in
        parentheses (evaluated as an expression of its own, as a bare NAME is: bash manual 6.5, 6.7); an element not
        known here stays an expansion, which leaves the arithmetic to bash."""
        if "[" not in expr or not (self.arrays or self.assoc):
            return expr
        return self.expand_arrays(_BARE_ELEMENT.sub(lambda m: f"(${{{m.group(1)}}})" if m.group(2) in self.arrays or
                                                    m.group(2) in self.assoc else m.group(0), expr))

    def fields(self, value: str) -> list[str]:
        """An unquoted expansion's value split into words at the script's IFS (bash manual 3.5.7 Word Splitting: its
        characters delimit fields, runs of IFS white space count once and go at the ends, `IFS=` splits nothing and
        an unset IFS is `<space><tab><newline>`; shell_read.ifs_fields). bash does not take IFS from its environment
        (variables.c initialize_shell_variables sets it), so only the script's own IFS counts."""
        ifs = self.env.get("IFS", DEFAULT_IFS)
        if ifs == DEFAULT_IFS:
            return value.split()
        return ifs_fields(value, ifs, None) if value else []

    def positional_for(self, text: str) -> dict[str, str]:
        """The positional parameters `text` expands: `"$*"` joined at the first character of the script's IFS (bash
        manual 3.4.2), not at a blank, where the script set one."""
        if ("$*" in text or "${*" in text) and self.env.get("IFS", DEFAULT_IFS) != DEFAULT_IFS:
            return {**self.positional, "*": self.star_joined(self.args())}
        return self.positional

    def splitter(self) -> Callable[[str], list[str]]:
        """fields, or str.split itself where IFS is bash's default (so that callers keep their own blank rules)."""
        return str.split if self.env.get("IFS", DEFAULT_IFS) == DEFAULT_IFS else self.fields

    def star_joined(self, elements: list[str]) -> str:
        """`"${A[*]}"`, `"${*:2}"`: one word, the elements joined with the first character of IFS (a blank where IFS is
        unset, nothing where it is empty: bash manual 3.4.2 Special Parameters, `*`)."""
        return self.env.get("IFS", " ")[:1].join(elements)

    def array_or_scalar(self, name: str) -> list[str] | None:
        """The elements `${name[@]}` expands: the array's; a plain variable's value as element 0; none for a name
        the script never set (no environment passes an array, bash manual 3.7.4, so `"${EXTRA[@]}"` after an `if`
        that did not set EXTRA gives no word); None (left as written) for a value only running the script tells, or
        one of bash's own arrays (BASH_*, FUNCNAME, PIPESTATUS ...)."""
        slots = self.array_slots(name)
        return present(slots) if slots is not None and name not in self.assoc else slots

    def array_slots(self, name: str) -> list[str | None] | None:
        """As array_or_scalar, but an indexed array's elements by index, None where none is set (`A=([0]=a [5]=b)`,
        `unset 'A[1]'`: bash's arrays are sparse, manual 6.7), for what reads them by index."""
        if name in self.arrays:
            return self.arrays[name]  # type: ignore[return-value]
        if name in self.assoc:
            return associative_values(self, name, keys=False)  # type: ignore[return-value]
        if name in self.undecidable or name in _SHELL_ARRAYS or name.startswith("BASH"):
            return None
        return [self.env[name]] if name in self.env else []

    def _array_item(self, found: re.Match[str]) -> str:
        """`${NAME[N]}` -> the element (empty past the end), `${#NAME[@]}` -> the count, `${#NAME[N]}` -> the
        element's length; a `${NAME[@]}` is left to expand_arrays, and an array the script never set stays."""
        count, name, subscript = found.groups()
        if count and name in self.assoc:  # `${#M[@]}`: its number of keys
            return str(len(self.assoc[name]))
        elements = self.array_slots(name)
        index = int(subscript) if subscript not in "@*" else None
        if index is not None and index < 0:  # `${L[-1]}`: counted from one past the highest index; before the start
            index = index + len(elements) if elements is not None and index + len(elements) >= 0 else None  # bash
            if index is None:  # stops on a "bad array subscript"
                return found.group(0)
        if elements is None or name in self.unknown_heads or (not count and index is None):
            return found.group(0)
        if index is None:
            return str(len(present(elements)))
        element = (elements[index] if index < len(elements) else None) or ""
        if count:
            return str(len(element))
        return element if re.fullmatch(r"[\w.,:/@%+=-]*", element) else found.group(0)  # quoting depends on the word

    def assign(self, words: list[str]) -> bool:
        """`NAME=value` / `export NAME=value`: applied unless it runs a command (`$(...)`, backquotes); its `$(( ))`
        arithmetic was evaluated with the rest of the command's text (batch_script._Reading.command)."""
        if len(words) == 1 + (words[0] == "export") and APPEND.match(words[-1]):
            return self.append(*APPEND.match(words[-1]).groups())  # type: ignore[union-attr]
        match = ASSIGN.match(" ".join(words[-2:])) if words[0] == "export" and len(words) == 2 else \
            ASSIGN.match(words[0]) if len(words) == 1 else _cut_substitution(words)
        if match is None:
            return False
        if match.group(1) in self.readonly:  # 'X: readonly variable': the assignment fails, X keeps its value (4.2)
            self.readonly_failed = f"{match.group(1)}="
            return True
        value = match.group(2)
        expanded = expand_env_refs(expand_positional(value, self.positional), self.env, {})
        if match.group(1) in self.arrays or match.group(1) in self.assoc:  # `A=z` of an array sets `A[0]` (6.7)
            assign_element(self, f"{match.group(1)}[0]={value}", False)
        elif ("$(" in value or "`" in value) and any(s in expanded for s in ("$(", "`")):
            self.env.pop(match.group(1), None)  # bash runs it (unless `${X:-$(nproc)}` finds X): any old value is stale,
            self.undecidable.add(match.group(1))  # so the launch line's $X is left unexpanded, as for an unset X
        else:
            self.env[match.group(1)] = self.expand(value)
            self.undecidable.discard(match.group(1))
        if self.allexport or words[0] == "export":
            self.exported.add(match.group(1))
        return True

    def assignments(self, words: list[str], uncertain: bool, applied: bool) -> bool:
        """`NAME=value NAME2=value2` with no command (bash assigns each in turn, left to right: bash manual 3.7.1;
        `applied`: before the launch line), or one `[export] NAME=value` in a loop or `case` body (`uncertain`), whose
        value only running the script gives; True when `words` is one of them."""
        assigned = ASSIGN.match(words[-1]) or APPEND.match(words[-1])
        several = len(words) > 1 and all(ASSIGNMENT_WORD.match(word) and word.count("(") == word.count(")") and
                                         word.count("`") % 2 == 0 for word in words)  # `TP=2 PP=$(nproc)`
        if uncertain and (len(words) <= 2 and assigned or several):
            for word in words if several else words[-1:]:
                name = (ASSIGN.match(word) or APPEND.match(word)).group(1)  # type: ignore[union-attr]
                if name in self.readonly:  # fails wherever it runs: the value stays
                    continue
                self.env.pop(name, None)
                self.undecidable.add(name)
                if words[0] == "export" or self.allexport:
                    self.exported.add(name)
            return True
        for word in words if several and applied else []:
            self.assign([word])
        return several and applied

    def append(self, name: str, value: str) -> bool:
        """`NAME+=value`: the old value (empty when unset) and the new; unknown when either is; a read-only NAME
        keeps its value (the assignment fails)."""
        if name in self.readonly:
            self.readonly_failed = f"{name}="
            return True
        if name in self.arrays or name in self.assoc:  # `A+=z` of an array appends to `A[0]` (bash manual 6.7)
            assign_element(self, f"{name}[0]+={value}", False)
        elif name in self.undecidable or "$(" in value or "`" in value:
            self.env.pop(name, None)
            self.undecidable.add(name)
        else:
            self.env[name] = self.env.get(name, "") + self.expand(value)
        if self.allexport:
            self.exported.add(name)
        return True

    def variable_builtin(self, words: list[str]) -> bool:
        """Apply `export`, `unset`, `set` (its -a / -o allexport, -e / -o errexit) or `shopt -s/-u lastpipe`, if `words`
        runs one of them; True when it did."""
        if words[0] == "export":
            self.export(words)
        elif words[0] == "unset":
            self.unset(words)
        elif words[0] == "set" and "--" not in words:  # `set -- ARGS` sets the positional parameters
            for k, word in enumerate(words[1:], start=1):
                named = words[k + 1] if word in ("-o", "+o") and k + 1 < len(words) else ""
                letters = word[1:] if word[:1] in "-+" and word[1:2] != "o" else ""
                for letter, option in _SET_OPTIONS.items():  # `set -euo pipefail` too
                    if named == option or letter in letters:
                        setattr(self, option, word.startswith("-"))
        elif words[0] == "shopt" and "lastpipe" in words[1:] and ("-s" in words or "-u" in words):
            self.lastpipe = "-s" in words
        else:
            return False
        return True

    def export(self, words: list[str]) -> None:
        """`export [-fnp] NAME[=value] ...` (bash manual 4.1): each NAME gets the export attribute (-n takes it away),
        and a NAME=value word assigns too, also one whose command substitution the command was cut at (`export
        N=$(nvidia-smi -L | wc -l)`); -f exports functions, which llmperf does not follow into child processes."""
        at = next((k for k, word in enumerate(words) if k and not word.startswith("-")), len(words))
        options = "".join(word[1:] for word in words[1:at])
        if "f" in options or at == len(words):
            return
        names = words[at:]
        if self.assign(names):  # one assignment, or a substitution cut at its blanks
            names = names[:1]
        elif all(_EXPORTED_WORD.fullmatch(word) for word in names):  # else words of a line bash would not run
            for word in names:
                if "=" in word:
                    self.assign([word])
        else:
            return
        for word in names:
            name = re.split(r"\+?=", word, maxsplit=1)[0]
            (self.exported.discard if "n" in options else self.exported.add)(name)

    def unset(self, words: list[str]) -> None:
        """`unset [-v] NAME ...`: the variable, its value and its export attribute gone (bash manual 4.1; -n unsets a
        nameref, no variable's value). `-f`, or no option for a name that is no variable, unsets the function of that
        name (4.1: 'if there is no variable by that name, a function with that name, if any, is unset')."""
        options = "".join(word[1:] for word in words[1:] if word.startswith("-"))
        functions = getattr(self, "functions", {})  # batch_script._Reading's (BlockReading)
        if "n" in options:
            return
        for name in (word for word in words[1:] if not word.startswith("-")):
            if "f" in options or not ("v" in options or self.is_variable(name)):
                functions.pop(name, None)
                if "f" in options:
                    continue
            if name in self.readonly:  # 'unset: X: cannot unset: readonly variable': X keeps its value, and the
                self.readonly_failed = name  # command fails (which `set -e` stops at: batch_script)
                continue
            element = _UNSET_ELEMENT.fullmatch(name)
            if element is not None:
                self.unset_element(*element.groups())
                continue
            self.env.pop(name, None)
            self.arrays.pop(name, None)
            self.assoc.pop(name, None)
            self.unknown_heads.discard(name)
            self.exported.discard(name)
            self.undecidable.discard(name)
            self.removed.add(name)

    def is_variable(self, name: str) -> bool:
        """Whether `name` is a variable here (a value, one only running gives, an array)."""
        return name in self.env or name in self.undecidable or name in self.arrays or name in self.assoc

    def unset_element(self, name: str, subscript: str) -> None:
        """`unset 'NAME[SUBSCRIPT]'`: that element gone (bash manual 6.7), the others keeping their indices (`unset
        'A[1]'` of `(a b c)` leaves `${!A[@]}` 0 2). An associative array's literal key, or an indexed array's
        subscript llmperf evaluates, is followed; any other leaves NAME unknown."""
        elements = self.arrays.get(name)
        index = index_of(self, subscript) if elements is not None else None
        if name in self.assoc and "$" not in subscript:
            self.assoc[name].pop(subscript.strip("'\""), None)
        elif elements is not None and name not in self.unknown_heads and index is not None:
            at = index + len(elements) if index < 0 else index  # `unset 'A[-1]'`: the highest index
            self.arrays[name] = placed_at(elements, at, None) if 0 <= at else elements  # type: ignore[assignment]
        elif elements is None and name not in self.assoc and subscript.strip() == "0":  # a plain variable's element 0
            self.env.pop(name, None)
            self.undecidable.discard(name)
        else:
            forget(self, name)

    def here_document(self, heredoc: Heredoc) -> str:
        """The text a here-document gives its command: as written when its delimiter is quoted (`<<'EOF'`), else with
        bash's expansions done on it (bash manual 3.6.6): `\\$`, `\\\\`, and a backslash-newline are what a
        backslash still quotes there (a `$` it quotes stays literal), quotes are plain characters (`'$X'` is
        expanded), `${A[@]}` is the array's elements joined by blanks, `$(( ))` arithmetic is evaluated."""
        if not heredoc.expand:
            return heredoc.body
        quoted = {"$": LITERAL_DOLLAR, "\n": ""}
        text = _HEREDOC_ESCAPE.sub(lambda m: quoted.get(m.group(1), m.group(1)), heredoc.body)
        text = _HEREDOC_ARRAY.sub(lambda m: " ".join(present(self.arrays[m.group(1)])) if m.group(1) in self.arrays
                                  else m.group(0), text)
        text = ARITH.sub(lambda m: arithmetic(self.expand(self.arithmetic_elements(m.group(1))), self.env), text)
        return self.expand(text, assign=False)  # bash expands it in the process it forks for the command (bash 5:
        # `cat <<EOF` with `${A:=4}` in the body leaves the script's A unset)

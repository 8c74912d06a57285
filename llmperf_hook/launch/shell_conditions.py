"""`if` / `elif` / `else` / `fi` in a launch script, decided from the script's own variables, never by running it.

Real launch scripts choose their flags in conditionals (Pai-Megatron-Patch: `if [ $MODEL_SIZE = 7B ]; then
NUM_LAYERS=28 ...`; Megatron-DeepSpeed: `if [[ "${no_pp}" = "true" ]]; then deepspeed_options="... --no-pipeline-
parallel"; fi`). Reading every branch applied the assignments of all of them. A test bash can decide from the
script's variables (bash manual 6.4 Bash Conditional Expressions: `[ A = B ]`, `[[ A == B ]]`, `test`, `!`,
-z / -n, -eq / -ne / -gt / -ge / -lt / -le) selects its branch; anything else (a command's exit status, a file
test, a variable only a command substitution sets) leaves the branch undecided, and an undecided branch is read as
before: its assignments applied, each branch from the values before the `if`, and a variable two of its branches
leave different is undecided after `fi` (launch/undecided_branches.py; bash keeps one of them, which only running the
script tells). Loops are
not run: `while [[ $# -gt 0 ]]` that bash would not enter (no arguments) is skipped, and a variable assigned inside
a loop that runs is unknown afterwards, so a launch using it says so instead of taking one pass's value. A `case` on a word the script sets runs its first arm whose glob pattern
matches (Megatron-LM's mamba example: `case "${MODEL_SCALE}" in "800M") ...`); on a word it does not know
(`case $1 in --tp) TP=$2`) every arm may run and what they assign is unknown. An arm's pattern (`7B)`, `7B|13B)`)
is stepped over, so an `if ... fi` on the arm's line opens and closes its own block.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from llmperf_hook.launch.extglob import extglob_match
from llmperf_hook.launch.shell_arithmetic import arithmetic
from llmperf_hook.launch.shell_arithmetic_commands import arithmetic_expressions
from llmperf_hook.launch.top_level_split import split_outside

_NAME_REF = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_PLAIN_REF = re.compile(r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")
"""`$NAME` / `${NAME}`: what is left of one after expansion is a variable nobody set."""
_EXPANSION = re.compile(r"\$[A-Za-z_{(0-9@*#?!$-]")
"""A `$` that starts an expansion bash would make (a `$` before anything else, or at the end, is literal)."""
_KEYWORDS = frozenset({"if", "then", "elif", "else", "fi", "while", "until", "for", "do", "done", "case", "esac", "{",
                       "}", "(", ")"})
"""Words that open, go on with or close a compound command (bash manual 3.2.5 Compound Commands)."""
_INT_TESTS = {"-eq": lambda a, b: a == b, "-ne": lambda a, b: a != b, "-gt": lambda a, b: a > b,
              "-ge": lambda a, b: a >= b, "-lt": lambda a, b: a < b, "-le": lambda a, b: a <= b}


@dataclass
class _Frame:
    """One open `if` block."""

    parts: list[tuple[str, bool | None]] = field(default_factory=list)
    """The tests of the condition being read (the commands before `then`), each with the list operator before it."""
    reading: bool = True
    """Between `if`/`elif` and `then`."""
    active: bool | None = None
    """Whether the current branch runs (None: undecided)."""
    taken: bool | None = False
    """Whether an earlier branch ran (None: undecided)."""
    kind: str = "if"
    """if, while, until, for, case, or `{` (a group of commands, bash manual 3.2.5.3)."""
    uncertain: bool = False
    """A loop or case body that may run: what it assigns cannot be known without running it."""
    subject: str | None = None
    """A `case` word's value, when the script's variables give it (its arms are then decided)."""
    gate: bool | None = True
    """Whether the compound command runs at all: False for `[ -n "$X" ] && if ...; fi` when the test fails (bash runs
    no part of it, 3.2.4 Lists), None when that status is undecided."""
    before: bool | None = None
    """A `{` group's: the list's status before it, which a group that does not run leaves as it was."""
    branch: int = 0
    """An `if`'s: the branch being read (0 for `then`, one more at each `elif` / `else`)."""
    assigned: dict[str, dict[int, tuple[str | None, str]]] = field(default_factory=dict)
    """An undecided `if`'s: the value (None: unknown) each of its branches left in a variable it assigned, and where
    (note_assigned), so that at `fi` a variable two branches set apart is known to be undecided (batch_script)."""
    prior: dict[str, tuple[str | None]] = field(default_factory=dict)
    """An undecided `if`'s: the value (None: unset) a variable its branches assign had before the `if`, which it keeps
    where no branch that assigns it runs (no `else`, or a branch that leaves it alone)."""
    has_else: bool = False
    """An `if`'s: it has an `else` branch (one of its branches then surely runs)."""
    exits: set[int] = field(default_factory=set)
    """An undecided `if`'s: the branches that end the script (an `exit` among their own commands), after which no
    value they set is read."""
    enters: bool = False
    """A loop's: bash surely runs its body once (a `while` test true, an `until` test false, a `for` over a word that
    is no expansion), each command of that first pass up to a `break` / `continue` / `return` in it (left)."""
    left: bool = False
    """A loop's: a `break`, `continue` or `return` in its body has been read, after which its commands may not run."""
    skipped: set[int] = field(default_factory=set)
    """An undecided `if`'s: the branches decided not to run (an `elif` whose test fails), no way through it."""
    start: dict[str, Any] | None = None
    """An `if`'s: the script's variables as its first test leaves them (undecided_branches.start_branches), which each
    branch starts from: bash reads an `elif` / `else` only where the branches before it did not run."""
    ends: list[dict[str, Any]] = field(default_factory=list)
    """An undecided `if`'s: the variables each of its branches that goes on past the `fi` left (end_branch), which
    settle_branches merges there."""


def _status(parts: list[tuple[str, bool | None]]) -> bool | None:
    """A condition list's status as bash runs it, left to right (bash manual 3.2.4 Lists: `&&` and `||` have equal
    precedence; `A && B` runs B only when A succeeds, `A || B` only when it fails, `;` always): None (undecided) where
    it hangs on an undecided test, and after a pipe (its status is one command's or, with pipefail, any's)."""
    status: bool | None = None
    for k, (joined, value) in enumerate(parts):
        if k == 0 or joined not in ("&&", "||", "|"):
            status = value
        elif joined == "|":
            status = None
        elif status is None:  # the test may or may not run: decided only where either way gives the same
            status = value if value is (joined == "||") else None
        elif status is (joined == "&&"):  # `true && B`, `false || B`: B runs and gives the status
            status = value
    return status


ASSIGNMENT_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
"""A word that assigns (`NAME=value`, `NAME+=value`): a command of only these has no command to run."""


def decide_test(words: list[str], expand: Callable[[str], str | None],
                unquoted: Sequence[bool | None] | None = None, quoted: Sequence[bool] | None = None) -> bool | None:
    """The truth of `[ ... ]`, `[[ ... ]]` or `test ...`, or None when bash would need more than the variables.
    `unquoted` (per word, as shell_script.word_quoting says; None: each word quoted, `"$X"`) tells the words of `[`
    and `test` that bash splits after expanding them: `[ -n $X ]` with X empty is `[ -n ]`, which is true.
    `quoted` (per word, as shell_script.quoted_words says; None: none quoted) tells the `[[ =~ ]]` patterns that match
    literally."""
    flags = list(unquoted) if unquoted is not None else [False] * len(words)
    literal = list(quoted) if quoted is not None else [False] * len(words)
    negate = False
    while words and words[0] == "!":
        negate, words, flags, literal = not negate, words[1:], flags[1:], literal[1:]
    if words and words[0] in (":", "true", "false"):  # builtins whose status is fixed, whatever their arguments
        return (words[0] != "false") != negate  # (bash manual 4.1 `:`, 4.2 / POSIX true and false)
    assigned = words[1:] if words[:1] == ["export"] else words
    if assigned and all(ASSIGNMENT_WORD.match(w) and "$(" not in w and "`" not in w for w in assigned):
        return not negate  # `[ -z "$X" ] && X=1 || X=2`: assignments alone (or exported) exit 0 (bash manual 3.7.1)
    arithmetic_test = arithmetic_truth(words, expand)
    if arithmetic_test is not None or words[:1] == ["let"] or (words and words[0].startswith("((")):
        return None if arithmetic_test is None else arithmetic_test != negate
    if len(words) >= 2 and (words[0], words[-1]) in (("[", "]"), ("[[", "]]")):
        inner, flags, literal = words[1:-1], flags[1:-1], literal[1:-1]
    elif words and words[0] == "test":
        inner, flags, literal = words[1:], flags[1:], literal[1:]
    else:
        return None
    while inner and inner[0] == "!":
        negate, inner, flags, literal = not negate, inner[1:], flags[1:], literal[1:]
    values = [expand(w) for w in inner]
    if any(v is None for v in values):
        return None
    if words[0] == "[[":  # no word splitting inside [[ ]]; its operators are the words as written
        result = _decide_double(inner, values, literal)  # type: ignore[arg-type]
    else:  # `[` and `test` are commands: they see the words expansion and splitting give, operators included
        fields = [_fields(w, v, q) for w, v, q in zip(inner, values, flags)]  # type: ignore[arg-type]
        args = None if any(f is None for f in fields) else [a for f in fields for a in f]  # type: ignore[union-attr]
        result = None if args is None else _decide(args, args, False)
    return None if result is None else result != negate


def arithmetic_truth(words: list[str], expand: Callable[[str], str | None]) -> bool | None:
    """The status of `(( expr ))` that assigns nothing: true when expr is not 0 (bash manual 3.2.5.2); None where
    llmperf cannot evaluate it (`let`, an assignment, an operator shell_arithmetic leaves to bash)."""
    expressions = arithmetic_expressions(words)
    if expressions is None or words[0] == "let" or _ARITH_ASSIGNS.search(expressions[0]):
        return None
    text = expand(re.sub(r"\b([A-Za-z_]\w*)\b", r"(${\1})", expressions[0]))  # a name: its value, as an expression
    value = None if text is None else arithmetic(text, {})
    return None if value is None or value.startswith("$((") else value != "0"


_ARITH_ASSIGNS = re.compile(r"(?<![<>=!])=(?!=)|\+\+|--")


def _fields(word: str, value: str, unquoted: bool | None) -> list[str] | None:
    """The arguments one word of `[` / `test` gives (bash manual 3.5.7 Word Splitting, 3.5.8 Filename Expansion):
    an unquoted expansion splits at blanks and vanishes when empty; None where that depends on quoting the words
    no longer show (a word mixing both) or on the files of the folder (`*`, `?`, `[` in an unquoted value)."""
    if "$" not in word or unquoted is False:
        return [value]
    if any(c in value for c in "*?["):
        return None
    parts = [p for p in re.split(r"[ \t\n]+", value) if p]
    return parts if unquoted else ([value] if parts == [value] else None)


def _decide_double(raw: list[str], values: list[str], quoted: list[bool]) -> bool | None:
    """`[[ A && B || C ]]`: each primary decided alone, `&&` before `||` and each side only where bash evaluates it
    (bash manual 3.2.5.2: `&&` and `||` do not evaluate the right side when the left decides the result); None where
    a side that counts is undecided, or a group `( )` or a `!` inside calls for more."""
    if "(" in raw or ")" in raw or "!" in raw:
        return _decide(raw, values, True, quoted) if "&&" not in raw and "||" not in raw else None
    result: bool | None = False  # the value of the `||` chain so far
    start, conjunction = 0, True  # the `&&` chain being read
    for k in range(len(raw) + 1):
        if k < len(raw) and raw[k] not in ("&&", "||"):
            continue
        if conjunction is not False:  # `false && X`: X is not evaluated
            part = _decide(raw[start:k], values[start:k], True, quoted[start:k])
            conjunction = False if part is False else None if part is None or conjunction is None else True
        if k == len(raw) or raw[k] == "||":
            if result is True:
                return True  # `true || X`: X is not evaluated
            result = True if conjunction is True else None if conjunction is None or result is None else False
            conjunction = True
        start = k + 1
    return result


_ERE_OPERATOR = re.compile(r"[.\[\]()*+?{}|^$]")
"""The characters a POSIX extended regular expression reads as operators."""

_POSIX_CLASSES = {"[:digit:]": "0-9", "[:alpha:]": "A-Za-z", "[:alnum:]": "A-Za-z0-9", "[:upper:]": "A-Z",
                  "[:lower:]": "a-z", "[:space:]": " \\t\\n\\r\\f\\v", "[:xdigit:]": "0-9A-Fa-f"}


def _matches_regex(value: str, pattern: str, quoted: bool) -> bool | None:
    """`[[ VALUE =~ PATTERN ]]`: PATTERN a POSIX extended regular expression matched anywhere in VALUE (bash manual
    3.2.5.2), read by Python's re where the two agree (its common bracket classes translated); None otherwise.
    A `quoted` pattern (any part of it) matches its quoted part literally ("Any part of the pattern may be quoted to
    force the quoted portion to be matched literally", 3.2.5.2): decided only where it holds no ERE operator, so that
    literal and regular expression agree (`=~ "7b"`); `=~ "a.c"` or `=~ "$P"` is left to bash."""
    found = regex_search(value, pattern, quoted)
    return None if found is None else found is not False


def regex_search(value: str, pattern: str, quoted: bool) -> re.Match[str] | bool | None:
    """The match of `[[ VALUE =~ PATTERN ]]` (_matches_regex's reading), False when it does not match, None where
    llmperf leaves it to bash."""
    if "\\" in pattern or (quoted and _ERE_OPERATOR.search(pattern)):  # an escape: POSIX and Python read some apart
        return None
    for name, chars in _POSIX_CLASSES.items():
        pattern = pattern.replace(name, chars)
    if "[:" in pattern or "[=" in pattern or "[." in pattern:
        return None
    try:
        return re.search(pattern, value) or False
    except re.error:
        return None


def rematch(words: list[str], expand: Callable[[str], str | None], quoted: Sequence[bool]) -> list[str] | None:
    """BASH_REMATCH after the test `words` (`[[ L =~ R ]]`, bash manual 5.2: the whole match, then each group's):
    empty when it fails; None where llmperf does not know it (an undecided test, or an alternation, where POSIX's
    longest match and Python's first may give other groups)."""
    values = [expand(word) for word in words[1:4]]
    if None in values or "|" in (values[2] or ""):
        return None
    found = regex_search(values[0] or "", values[2] or "", len(quoted) == 5 and quoted[3])
    return None if found is None else [] if found is False else [found.group(0), *(g or "" for g in found.groups())]


def _decide(raw: list[str], values: list[str], double: bool, quoted: Sequence[bool] = ()) -> bool | None:
    if len(values) == 1:
        return values[0] != ""
    if len(values) == 2 and raw[0] in ("-z", "-n"):
        return (values[1] == "") == (raw[0] == "-z")
    if len(values) != 3:
        return None
    left, op, right = values[0], raw[1], values[2]
    if op in ("=", "==", "!=") and double and any(c in right for c in "*?["):
        return None  # [[ A == pattern ]] globs unless the pattern was quoted, which the split words no longer show
    if op == "=~" and double:
        return _matches_regex(left, right, len(quoted) == 3 and quoted[2])
    if op in ("=", "=="):
        return left == right
    if op == "!=":
        return left != right
    if op in _INT_TESTS and double:  # [[ ]] evaluates both sides as arithmetic: an empty one is 0 (`[[ $BATCH -eq 0 ]]`)
        left, right = (v if v.strip() else "0" for v in (left, right))
    if op in _INT_TESTS and re.fullmatch(r"[+-]?\d+", left.strip()) and re.fullmatch(r"[+-]?\d+", right.strip()):
        return _INT_TESTS[op](int(left), int(right))
    return None


def condition_expander(undecidable: set[str], expand: Callable[[str], str]) -> Callable[[str], str | None]:
    """A word of a test with the script's variables: a variable the script sets by running a command (`$(...)`,
    also after an earlier plain value) is undecidable (None), and so is what only bash computes (`$(...)`, `${#X}`,
    `${X%.*}`); a variable nobody set is empty, as bash expands it."""
    def word(text: str) -> str | None:
        expanded = expand(text)  # `H="$ADDR $NODES"` with ADDR from `hostname`: H holds the unknown reference
        if {m.group(1) for m in _NAME_REF.finditer(text + " " + expanded)} & undecidable:
            return None
        done = _PLAIN_REF.sub("", expanded)
        return None if _EXPANSION.search(done) or "`" in done else done  # `^[0-9]+$`: a `$` no expansion starts
    return word


def _arm_pattern_end(words: list[str]) -> int:
    """How many words of a command in a `case` body are an arm's pattern (`7B)`, `(7B)`, `7B|13B)`, `7B | 13B)`;
    bash manual 3.2.5.2: `[(] pattern [| pattern]...) command-list ;;`), 0 when it opens with none. A pattern ends at
    the first word that closes more parentheses than the words so far open, bash's optional `(` before the first
    pattern not counted; `X=$(nproc)` closes what it opens, and so does an array the split cut at its blanks
    (`ARGS=(--num-layers` `32)`, a command of an arm on the line of its pattern)."""
    depth = 0
    for k, word in enumerate(words):
        depth += word.count("(") - word.count(")") - (k == 0 and word.startswith("("))
        if depth < 0:
            return k + 1
        if k > 0 and words[k - 1] != "|" and word != "|" and not words[k - 1].endswith("|") and not word.startswith("|"):
            return 0  # two words not joined by `|`: a command, not a pattern list
    return 0


_PATTERN = r"(?:[^\s;&|()'\"]|[?*+@!]\([^()'\"]*\))+"
"""One pattern of a case arm: glob characters, and extglob groups (`@(7b|13b)`, bash manual 3.5.8.1)."""
_ARM_PATTERNS = re.compile(rf"(^|;;&?|;&|\bin\s)(\s*)(\(?(?:{_PATTERN}(?:\s*\|\s*{_PATTERN})+|"
                           rf"[^\s;&|()'\"]*[?*+@!]\([^()'\"]*\)(?:{_PATTERN})?)\s*\))")
"""A case arm's pattern list joined by `|` (`gpt*|opt*)`, `7B | 13B)`), or a pattern with an extglob group
(`*@(7b|13b))`, whose `|` is the group's), at a line's start, after `;;` (`;&`, `;;&`) or `in`."""


def quote_arm_patterns(text: str) -> str:
    """A line of a `case` body with each `a|b)` pattern list quoted as one word, so that its `|` is not read as a
    pipe (shell_script.pipelines splits commands there)."""
    def quoted(found: re.Match[str]) -> str:
        return found.group(1) + found.group(2) + "'" + re.sub(r"\s+", "", found.group(3)) + "'"
    return _ARM_PATTERNS.sub(quoted, text)


def _open_arm(frame: _Frame, pattern_words: list[str], word: Callable[[str], str | None], after: str = ";;") -> None:
    """A `case` arm begins: it runs when no earlier arm ran and one of its patterns matches the word (bash manual
    3.2.5.2: the first matching arm runs; patterns match as globs, fnmatch's `*`, `?`, `[...]`, and extglob groups,
    launch/extglob.py); undecided, and what it assigns unknown, when the word or a pattern is not known or uses
    `!(…)`. After an arm that ran
    and ended in `;&` this one runs too, untested; after `;;&` its patterns are tested as well (`after`)."""
    ran = frame.active
    frame.taken = _taken(frame)
    listed = split_outside("".join(pattern_words).removeprefix("(").removesuffix(")"), "|", "()")
    patterns = [word(p.strip()) for p in listed]
    results = [None if p is None else extglob_match(frame.subject or "", p) if "(" in p else
               fnmatch.fnmatchcase(frame.subject or "", p) for p in patterns]
    known = frame.subject is not None and None not in results
    matched = known and any(results)
    if after == ";;&" and ran is not False:  # the arms from here on are tested as if none had run
        frame.taken = False if ran else None
    if after == ";&" and ran is not False:  # the arm before ran and falls through: this one's commands run too
        frame.active = ran
    elif frame.taken is True:
        frame.active = False
    elif not known or frame.taken is None:
        frame.active = None if (matched or not known) else False
    else:
        frame.active = matched
    frame.uncertain = frame.uncertain or frame.active is None


def _runs_surely(frame: _Frame) -> bool:
    """Whether a command read in `frame` surely runs, as far as that block says: a branch or `case` arm decided to
    run, or the first pass of a loop bash surely enters, before any `break` / `continue` / `return` in its body."""
    if frame.gate is not True or frame.reading:
        return False
    return frame.active is True or (frame.active is None and frame.enters and not frame.left and
                                    frame.kind in ("while", "until", "for"))


def _for_enters(words: list[str]) -> bool:
    """`for NAME in WORDS`: a word with no expansion (`1`, `""`) surely gives the loop one pass at least (bash manual
    3.2.5.1; brace expansion gives one word or more)."""
    return len(words) > 3 and words[2] == "in" and any(not set(word) & set("$`*?[") for word in words[3:])


def _taken(frame: _Frame) -> bool | None:
    """Whether a branch so far ran: once one surely ran the rest cannot; undecided while one might have."""
    if frame.taken is True or frame.active is True:
        return True
    return None if frame.taken is None or frame.active is None else False


class Conditions:
    """The open `if` blocks while a script is read; `step` says what of a command runs."""

    def __init__(self) -> None:
        self.frames: list[_Frame] = []
        self.joined, self.carried = ";", ""
        """The list operator before the next command, and the one a line ended with (join)."""
        self.listed: bool | None = None
        """The status of the command list read so far, outside a condition (None: not known)."""
        self.closed: list[_Frame] = []
        """The `if` blocks `step` closed at their `fi` since the caller last took them (their `assigned`)."""
        self.undecided = False
        """The command `step` last let through runs only if something llmperf could not decide holds: it sits in an
        undecided `if` branch, a loop or `case` body that may run, or after `&&` / `||` on an undecided status."""
        self.last_joined = ";"
        """The list operator before the command `step` last let through."""
        self.surely = True
        """The command `step` last let through surely runs where it is read: no undecided list status before it, and
        every block around it runs (_runs_surely), so bash expands its words (`set -u` stops at an unset one)."""

    def join(self, operator: str, line_end: bool = False) -> None:
        """The operator before the next command (shell_script.command_list): `""` starts a line, which goes on with
        the list of a line that ended in `&&` / `||` (line_end), else starts a new command (as after `;`)."""
        if line_end:
            self.carried = operator
        else:
            self.joined, self.carried = operator or self.carried or ";", ""

    def running(self) -> bool:
        """Whether a command here runs (an undecided branch counts as running)."""
        return all(f.active is not False and f.gate is not False for f in self.frames)

    def reading(self) -> bool:
        """Whether the innermost block is reading its condition (a test being evaluated, not a branch)."""
        return bool(self.frames) and self.frames[-1].reading

    def in_undecided_branch(self) -> bool:
        """Whether a command here runs only if a condition llmperf could not decide holds (an `if` branch, a loop or
        `case` body)."""
        return any(f.active is None or f.gate is None for f in self.frames)

    def tests_surely(self) -> bool:
        """Whether the command just read is part of the test of an `if` / `while` / `until` bash surely reaches: every
        block around it runs (decided), and no list operator before it may skip it (bash expands that test, so `set
        -u` stops at an unset variable in it; an `elif`'s test runs only where the tests before it failed, and a loop's
        body only where bash surely enters it)."""
        if not self.frames or self.frames[-1].kind not in ("if", "while", "until") or not self.frames[-1].reading or \
                (self.frames[-1].branch and self.frames[-1].taken is not False):
            return False  # an `elif`'s test runs where every test before it surely failed
        return self.frames[-1].gate is True and all(map(_runs_surely, self.frames[:-1]))

    def in_case(self) -> bool:
        """Whether the innermost block is a `case` body (a line may start with an arm's pattern)."""
        return bool(self.frames) and self.frames[-1].kind == "case"

    def note_assigned(self, name: str, value: str | None, where: str, prior: tuple[str | None] | None = None) -> None:
        """A variable a command set (value None: to what only running the script gives) in a branch of an undecided
        `if`: kept with the innermost such `if`, by branch; `prior`: its value before the command (None: unset), the
        first one kept as its value before the `if`."""
        frame = next((f for f in reversed(self.frames) if f.kind == "if" and not f.reading and f.active is None), None)
        if frame is not None:
            frame.assigned.setdefault(name, {})[frame.branch] = (value, where)
            if prior is not None:
                frame.prior.setdefault(name, prior)

    def note_exit(self) -> None:
        """An `exit` read as a command of its own in a branch of an undecided `if` (not after `&&` / `||`, not inside
        a loop, `case` or inner `if` there): the way through that branch ends the script (Frame.exits)."""
        frame = self.frames[-1] if self.frames else None
        if frame is not None and frame.kind == "if" and not frame.reading and frame.active is None and \
                self.last_joined not in ("&&", "||", "|"):
            frame.exits.add(frame.branch)

    def uncertain(self) -> bool:
        """Whether a command here sits in a loop or `case` body that may run."""
        return any(f.uncertain for f in self.frames)

    def step(self, words: list[str], test: Callable[[list[str]], bool | None],
             word: Callable[[str], str | None] = lambda _: None) -> list[str]:
        """Consume the compound-command keywords at the front of a command (all of them: `else if [ ... ]` opens a
        block); the rest of it when it runs, else []. `word` expands a case word or pattern (None: not known)."""
        head = words[0] if words else ""
        joined, self.joined, before = self.joined, ";", self.listed
        self.last_joined = joined
        if self._skipped(joined, head):
            return []
        gate = True if joined not in ("&&", "||") or self.reading() else \
            None if self.listed is None else self.listed is (joined == "&&")
        listed_undecided = joined in ("&&", "||") and self.listed is None and not self.reading()
        self.undecided = listed_undecided or self.in_undecided_branch()
        self.surely = not listed_undecided and all(map(_runs_surely, self.frames))
        self.listed = None if joined == "|" or head in _KEYWORDS or self.reading() else test(words)
        if head == "{":  # `mkdir -p X || {` newline `exit 1` newline `}`: the group runs as the list's status says
            self.frames.append(_Frame(reading=False, active=True, kind="{", gate=gate, before=before))
            return self.step(words[1:], test, word)
        if head == "}" and self.frames and self.frames[-1].kind == "{":  # its status: its last command's (3.2.5.3)
            group = self.frames.pop()
            self.listed = group.before if group.gate is False else before if group.gate else None
            return self.step(words[1:], test, word) if words[1:] else []
        if head in ("if", "while", "until", "for"):  # a test bash does not run (in a branch that does not) is not
            tested = None if head == "for" or not self.running() else test(words[1:])  # expanded: no `${A:=x}`
            self.frames.append(_Frame(parts=[("", tested)], kind=head, gate=gate,
                                      enters=head == "for" and _for_enters(words)))
            return []
        if head == "case":  # `case WORD in`, its arms possibly on the same line (`case $M in 7B) TP=2;; esac`)
            subject = word(words[1]) if len(words) > 1 else None
            self.frames.append(_Frame(reading=False, kind="case", uncertain=subject is None, subject=subject, gate=gate,
                                      active=False))
            return self.step(words[3:], test, word) if len(words) > 3 and words[2] == "in" else []
        frame = self.frames[-1] if self.frames else None
        if frame is None:
            return words
        end = _arm_pattern_end(words) if frame.kind == "case" and head != "esac" else 0
        if end:  # `7B) if [ ... ]; then` : the arm's pattern, then its commands
            _open_arm(frame, words[:end], word, joined)
            return self.step(words[end:], test, word)
        if frame.reading and head not in ("then", "do"):
            frame.parts.append((joined, test(words)))
            return []
        if head in ("then", "do"):
            self._decide(frame)
        elif head == "elif":  # after a branch that ran bash tests no `elif`
            frame.taken, frame.branch = _taken(frame), frame.branch + 1
            frame.reading, frame.parts = True, [("", None if frame.taken else test(words[1:]))]
            return []
        elif head == "else":
            frame.taken, frame.branch, frame.has_else = _taken(frame), frame.branch + 1, True
            frame.active = False if frame.taken else (None if frame.taken is None else True)
        elif head in ("fi", "done", "esac"):
            self.closed += [closed for closed in [self.frames.pop()] if closed.assigned or closed.ends or closed.exits]
        else:
            if head in ("break", "continue", "return") and self.running():
                for loop in self._left_by(head, words[1:2]):
                    loop.left = True
            return words if self.running() else []
        return self.step(words[1:], test, word)  # `then if ...`, `else if ...`, `do if ...`: bash reads on

    def _left_by(self, head: str, count: list[str]) -> list[_Frame]:
        """The blocks whose pass `break N` / `continue N` leaves: the N innermost loops (N is 1 unless given, bash
        manual 4.1 `break`, `continue`) and every block inside them; all for `return` (or an N not known here)."""
        loops = [i for i, frame in enumerate(self.frames) if frame.kind in ("while", "until", "for")]
        n = int(count[0]) if head != "return" and count and count[0].isdigit() else 1 if head != "return" else 0
        if n < 1 or n > len(loops) or (head != "return" and count and not count[0].isdigit()):
            return self.frames
        return self.frames[loops[-n]:]

    def _skipped(self, joined: str, head: str) -> bool:
        """A command after `&&` / `||` that bash does not run, as the list's status so far says (`[ $A = b ] &&
        TP=2`; bash manual 3.2.4 Lists); a compound command's keyword is always read, to keep its block."""
        return joined in ("&&", "||") and head not in _KEYWORDS and not self.reading() and \
            self.listed is (joined == "||")

    @staticmethod
    def _decide(frame: _Frame) -> None:
        condition = _status(frame.parts)
        frame.reading = False
        if frame.kind in ("while", "until", "for"):
            skipped = condition is False if frame.kind == "while" else condition is True if frame.kind == "until" \
                else False
            frame.enters = frame.enters or (frame.kind != "for" and condition is (frame.kind == "while"))
            frame.active, frame.uncertain = (False, False) if skipped else (None, True)
        elif frame.taken:
            frame.active = False
        elif frame.taken is None:
            frame.active = None if condition is not False else False
        else:
            frame.active = condition


def after_keywords(text: str, count: int) -> str:
    """`text` past its first `count` blank-separated words: the compound-command keywords Conditions.step consumed
    (`then`, `else`, `do`, `{`, none holding a blank), where the command it runs starts."""
    return re.sub(r"^\s*(?:\S+\s+){%d}" % count, "", text) if count else text.lstrip()

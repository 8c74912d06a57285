"""Scan a launcher's own options (torchrun, deepspeed, srun, sbatch) up to the first positional word (the script).

Launchers stop at the first positional word: it starts the program to run, everything after it belonging to that
program (argparse's REMAINDER in torch/distributed/run.py and deepspeed/launcher/runner.py; getopt_long with a
leading '+' in Slurm's slurm_option_table_create). The last repeated option wins and `--opt=value` equals
`--opt value`. A `Grammar` makes the scan match the launcher's real parser: the option strings it defines, spelled
as it spells them, with the abbreviations it accepts (argparse's allow_abbrev, True by default and left so by
torchrun and deepspeed; getopt_long's unique prefixes), and, for argparse, its refusals (an option it does not
define, an ambiguous prefix, a switch given `=value`, a value missing), each of which stops the launcher with exit
status 2 before any process starts. Without a grammar any `-`/`_` spelling of a table key is read and unknown
options only warn (launchers whose full option list llmperf does not hold).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

from llmperf_hook.errors import UsageError


@dataclass(frozen=True)
class Option:
    dest: str
    """Key the value is stored under."""
    takes_value: bool = True
    """False for switches (store_true)."""


@dataclass(frozen=True)
class Grammar:
    """How a launcher's own parser reads option words."""

    arity: Mapping[str, str]
    """Every option string the parser defines, as it spells it (`--num_gpus`, `-H`) -> "1" (takes a value), "0"
    (a switch) or "?" (an optional value, given only as `--opt=value`, getopt_long's optional_argument)."""
    style: Literal["argparse", "getopt"]
    """argparse: a prefix matching two option strings is ambiguous even when both spell one option (`--nproc` for
    --nproc-per-node and --nproc_per_node; argparse _parse_optional, Python 3.9-3.13). getopt: glibc getopt_long
    takes the first match when every match is the same option."""
    parser: str
    """Whose parser, for messages (`torch/distributed/run.py (argparse)`)."""
    strict: bool = True
    """An option the parser does not define stops it (argparse parse_args: 'unrecognized arguments'); False where
    plugins add options llmperf cannot list (Slurm's SPANK plugins such as pyxis)."""


@dataclass
class ScannedOptions:
    values: dict[str, str] = field(default_factory=dict)
    """dest -> value ("1" for switches); the last occurrence wins."""
    flags: dict[str, str] = field(default_factory=dict)
    """dest -> the spelling used on the command line (for provenance)."""
    unknown: list[str] = field(default_factory=list)
    """Options the table does not know (kept as warnings)."""
    unmodelled: list[str] = field(default_factory=list)
    """Options the launcher's parser defines (Grammar.arity) that the table leaves out: accepted, not priced."""
    rest: int = 0
    """Index of the first word after the options (the program to run)."""


def _canonical(word: str) -> str:
    name = word.split("=", 1)[0]
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


def _short_attached(word: str, table: Mapping[str, Option]) -> tuple[str, str] | None:
    """`-N4` / `-n32`: a one-letter option with its value attached."""
    if len(word) > 2 and word[0] == "-" and word[1] != "-" and word[:2] in table and table[word[:2]].takes_value:
        return word[:2], word[2:]
    return None


_PROGRAMS = ("python", "torchrun", "deepspeed", "bash", "sh")


def _unknown_takes_value(words: Sequence[str], i: int) -> bool:
    """An option we do not know: `--opt VALUE` when the next word is neither an option nor the program to run."""
    if "=" in words[i] or i + 2 >= len(words):
        return False
    nxt = words[i + 1]
    return not nxt.startswith("-") and not nxt.endswith((".py", ".sh")) and not nxt.split("/")[-1].startswith(_PROGRAMS)


def _refuse(grammar: Grammar, origin: str, what: str, fix: str) -> UsageError:
    return UsageError(f"{origin} would stop before starting anything: {what} ({grammar.parser}). {fix}")


def _expand(word: str, grammar: Grammar, origin: str) -> str | None:
    """The option string a long option word names, as the parser reads it: itself, or the one option string it is a
    unique prefix of; None when the parser defines no such option."""
    name, eq, value = word.partition("=")
    if name in grammar.arity:
        return word
    matches = [s for s in grammar.arity if s.startswith(name) and s.startswith("--")]
    distinct = matches if grammar.style == "argparse" else sorted({_canonical(m) for m in matches})
    if len(distinct) > 1:
        raise _refuse(grammar, origin, f"{name} is ambiguous, it could be {', '.join(sorted(matches))}",
                      "Write the option in full.")
    return matches[0] + eq + value if matches else None


_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def _argparse_option_like(word: str, grammar: Grammar) -> bool:
    """argparse's _parse_optional: does `word` read as an option (so it cannot be the previous option's value)? One of
    the parser's options, a prefix of one, or `-X...` for a short option -X (so `-q high` is -q when the parser has
    -q); else a negative number or a word with a blank is a value, and any other word starting with '-' an option."""
    if not word.startswith("-") or word == "-":
        return False
    name = word.split("=", 1)[0]
    if name in grammar.arity or (word[:2] in grammar.arity and not word.startswith("--")):
        return True
    if word.startswith("--") and any(s.startswith(name) for s in grammar.arity):
        return True
    return not _NEGATIVE_NUMBER.match(word) and " " not in word


def _value_in_word(word: str) -> bool:
    """`--opt=value` or `-Xvalue` (`-Hhostfile`): a valued option's value is in its own word, not the next one."""
    return "=" in word if word.startswith("--") else len(word) > 2


def _argparse_checks(words: Sequence[str], i: int, arity: str, grammar: Grammar, origin: str) -> None:
    """argparse's refusals of a known option: `--switch=value` ('ignored explicit argument') and a valued option
    followed by another option or by nothing ('expected one argument')."""
    name, eq, _ = words[i].partition("=")
    if arity == "0" and eq:
        raise _refuse(grammar, origin, f"{name} is a switch and takes no value, but {words[i]!r} gives one "
                      "(argparse: 'ignored explicit argument')", f"Write {name} alone.")
    nxt = words[i + 1] if i + 1 < len(words) else ""
    if arity == "1" and not _value_in_word(words[i]) and (not nxt or _argparse_option_like(nxt, grammar)):
        after = "the command ends there" if not nxt else f"{nxt!r} follows it"
        raise _refuse(grammar, origin, f"{name} needs a value, but {after} (argparse: 'expected one argument')",
                      f"Give {name} its value.")


def _clustered_switch(word: str, grammar: Grammar) -> bool:
    """`-lN2`: a short switch with more option letters behind it, which getopt_long and argparse alike read as the
    switch and then the rest (-l, then -N2; argparse _parse_optional / consume_optional's single-dash loop)."""
    return len(word) > 2 and word[1] != "-" and word[2] != "=" and grammar.arity.get(word[:2]) == "0"


def _grammar_word(words: Sequence[str], i: int, grammar: Grammar, origin: str) -> tuple[str, str | None]:
    """(the word as the parser reads it, with an abbreviation expanded; its arity, None when undefined)."""
    word = words[i]
    if word.startswith("--"):
        expanded = _expand(word, grammar, origin)
        if expanded is None:
            return word, None
        word = expanded
    arity = grammar.arity.get(word.split("=", 1)[0] if word.startswith("--") else word[:2])
    if arity is not None and grammar.style == "argparse":
        _argparse_checks([*words[:i], word, *words[i + 1:]], i, arity, grammar, origin)
    return word, arity


def _suggestion(name: str, grammar: Grammar) -> str:
    """The option string a misspelt option most likely means: its other separator (`--num-gpus` -> --num_gpus), else
    the closest name."""
    for other in (name[:2] + name[2:].replace("-", "_"), name[:2] + name[2:].replace("_", "-")):
        if other in grammar.arity:
            return other
    close = difflib.get_close_matches(name, [s for s in grammar.arity if s.startswith("--")], n=1, cutoff=0.75)
    return close[0] if close else ""


def _one_spelling_each(grammar: Grammar) -> list[str]:
    """The long options, one spelling per option (the first defined: `--nproc-per-node`, not also `--nproc_per_node`)."""
    first: dict[str, str] = {}
    for spelling in grammar.arity:
        if spelling.startswith("--"):
            first.setdefault(_canonical(spelling), spelling)
    return sorted(first.values())


def _unknown(words: Sequence[str], i: int, grammar: Grammar | None, origin: str, out: ScannedOptions) -> int:
    """Record an option the table lacks; the index past it (and past the value the parser gives it)."""
    word = words[i]
    if grammar is not None and grammar.strict:
        name = word.split("=", 1)[0]
        hint = _suggestion(name, grammar)
        fix = f"Write {hint} instead." if hint else \
            f"Remove it or fix its spelling; {origin}'s options are {', '.join(_one_spelling_each(grammar))}."
        raise _refuse(grammar, origin, f"it defines no option {name} (argparse: 'unrecognized arguments')", fix)
    out.unknown.append(word)
    return i + (2 if _unknown_takes_value(words, i) else 1)


def _prefix_matches(word: str, grammar: Grammar) -> list[str]:
    """The option strings argparse's _get_option_tuples finds for a word that is none of them: a long word's prefix
    (before any `=`) starts them; a short word `-Xrest` matches -X itself and any option string starting with it."""
    if word.startswith("--"):
        name = word.split("=", 1)[0]
        return [s for s in grammar.arity if s.startswith(name)]
    return [s for s in grammar.arity if s == word[:2] or s.startswith(word)]


def refuse_ambiguous_after_program(words: Sequence[str], program: int, grammar: Grammar | None, origin: str) -> None:
    """argparse refuses an ambiguous option prefix even among the training script's own arguments: parse_args first
    classifies every word (_parse_optional, which calls _get_option_tuples and stops at 'ambiguous option: --n could
    match --nnodes, --nproc-per-node, ...'), and only then hands the words after the script to its nargs=REMAINDER
    positional. So `torchrun train.py --nproc 8` stops torchrun (checked with torch 2.13's run.py on Python 3.11); a
    word after `--`, a full option string or a unique prefix passes to the script."""
    if grammar is None or grammar.style != "argparse":
        return
    for word in words[program + 1:]:
        if word == "--":
            return
        if len(word) < 2 or not word.startswith("-") or word.split("=", 1)[0] in grammar.arity:
            continue
        matches = _prefix_matches(word, grammar)
        if len(matches) > 1:
            raise _refuse(grammar, origin, f"{word.split('=', 1)[0]!r}, an argument of {words[program]}, is ambiguous "
                          f"to it: it could match {', '.join(matches)} (argparse reads every word for options before "
                          "it hands the script its arguments: 'ambiguous option')",
                          "Write the script's option in full, so that it is no prefix of two launcher options.")


def scan_options(words: Sequence[str], start: int, table: Mapping[str, Option], origin: str,
                 grammar: Grammar | None = None) -> ScannedOptions:
    """Read options from words[start:] until the first positional word; `table` keys are canonical spellings (dashes)
    of the options whose values matter."""
    out = ScannedOptions()
    words, split = list(words), 0  # split: words added by unclustering, so that `rest` indexes the caller's words
    i = start
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        if grammar is not None and _clustered_switch(word, grammar):
            words[i:i + 1], split = [word[:2], "-" + word[2:]], split + 1
            word = words[i]
        arity: str | None = None
        if grammar is not None:
            word, arity = _grammar_word(words, i, grammar, origin)
        attached = _short_attached(word, table)
        name = attached[0] if attached else _canonical(word)
        opt = table.get(name) if grammar is None or arity is not None else None  # `--num-gpus`: not runner.py's
        if opt is None and arity is not None:  # defined by the parser, not priced: skip it with its value
            out.unmodelled.append(word.split("=", 1)[0])
            i += 2 if arity == "1" and not _value_in_word(word) else 1
            continue
        if opt is None:
            i = _unknown(words, i, grammar, origin, out)
            continue
        # the parser's arity wins over the table's (sbatch -W is a switch, srun -W takes seconds; getopt's optional
        # values come only with `=`)
        takes_value = opt.takes_value if arity is None else arity == "1" or (arity == "?" and "=" in word)
        if not takes_value:
            out.values[opt.dest], out.flags[opt.dest] = "1", word.split("=", 1)[0]
            i += 1
            continue
        if attached:
            value, i = attached[1], i + 1
        elif "=" in word and word.startswith("--"):
            value, i = word.split("=", 1)[1], i + 1
        elif i + 1 < len(words):
            value, i = words[i + 1], i + 2
        else:
            raise UsageError(f"{word} needs a value in the {origin} command, but the command ends there.")
        out.values[opt.dest], out.flags[opt.dest] = value, name if attached else word.split("=", 1)[0]
    out.rest = i - split
    return out

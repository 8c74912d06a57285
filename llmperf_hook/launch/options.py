"""Scan a launcher's own options (torchrun, deepspeed, srun) up to the first positional word (the script).

Launchers are argparse programs: the last repeated option wins, `--opt=value` equals `--opt value`, and the
first positional word starts the program to run, everything after it belonging to that program.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from llmperf_hook.errors import UsageError


@dataclass(frozen=True)
class Option:
    dest: str
    """Key the value is stored under."""
    takes_value: bool = True
    """False for switches (store_true)."""


@dataclass
class ScannedOptions:
    values: dict[str, str] = field(default_factory=dict)
    """dest -> value ("1" for switches); the last occurrence wins."""
    flags: dict[str, str] = field(default_factory=dict)
    """dest -> the spelling used on the command line (for provenance)."""
    unknown: list[str] = field(default_factory=list)
    """Options the table does not know (kept as warnings)."""
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


def scan_options(words: Sequence[str], start: int, table: Mapping[str, Option], origin: str) -> ScannedOptions:
    """Read options from words[start:] until the first positional word; `table` keys are canonical spellings."""
    out = ScannedOptions()
    i = start
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        attached = _short_attached(word, table)
        name = attached[0] if attached else _canonical(word)
        opt = table.get(name)
        if opt is None:
            out.unknown.append(word)
            i += 2 if _unknown_takes_value(words, i) else 1
            continue
        if not opt.takes_value:
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
    out.rest = i
    return out

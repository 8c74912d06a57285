"""Read a training script's argv the way its argparse would: a table of known flags, the last repeated flag
winning, `--flag=value` equal to `--flag value`, `--no-X` switching a boolean X off, and unknown flags (with
their values) skipped. Both `--dash-names` and `--underscore_names` are accepted for every flag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

from llmperf_hook.errors import ConfigError
from llmperf_hook.launch.argv_words import unexpanded_hint
from llmperf_hook.provenance import Source, SourceKind

Kind = Literal["int", "float", "str", "true", "false", "path_or_true"]
_BOOL_WORDS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


@dataclass(frozen=True)
class Flag:
    dest: str
    kind: Kind
    nargs: int = 1
    """Values the flag takes (rampup-batch-size takes 3); ONE_OR_MORE for argparse's nargs='+'; only for valued
    kinds."""


ONE_OR_MORE = 0
"""Flag.nargs of an argparse nargs='+' flag: every following word up to the next option (a plain negative number
is a value, as argparse reads it); one value is read as that value, several as a tuple (Megatron's validate_args
unwraps a one-element list the same way)."""


@dataclass
class FlagValues:
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, Source] = field(default_factory=dict)
    seen_flags: dict[str, str] = field(default_factory=dict)
    """dest -> the spelling given (for messages)."""

    def get(self, dest: str, default: Any = None) -> Any:
        return self.values.get(dest, default)

    def has(self, dest: str) -> bool:
        return dest in self.values

    def source(self, dest: str, default: str = "") -> Source:
        return self.sources.get(dest, Source(SourceKind.DEFAULT, default))

    def spelling(self, dest: str) -> str:
        """The flag of `dest` as the user spelled it, else its canonical --dashed form (for messages)."""
        return self.seen_flags.get(dest, _canonical(dest))


def _canonical(name: str) -> str:
    return "--" + name.lstrip("-").replace("_", "-")


def _convert(text: str, kind: Kind, flag: str) -> Any:
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError:
        raise ConfigError(f"{flag} expects {'an integer' if kind == 'int' else 'a number'}, got {text!r} (argv)"
                          f"{unexpanded_hint(text)}.") from None
    return text


def _lookup(name: str, table: Mapping[str, Flag]) -> tuple[Flag | None, bool]:
    """(flag, negated): `--no-X` negates a boolean X unless `--no-X` is itself in the table."""
    if name in table:
        return table[name], False
    if name.startswith("--no-") and "--" + name[5:] in table and table["--" + name[5:]].kind == "true":
        return table["--" + name[5:]], True
    return None, False


_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
"""argparse.ArgumentParser._negative_number_matcher: '-3' and '-.5' are values, '-1e-3' is an option word."""


def _is_option(word: str) -> bool:
    """argparse's test: a word starting with '-' is an option unless it is a plain negative number."""
    return word.startswith("-") and not _NEGATIVE_NUMBER.match(word)


def _take_values(words: Sequence[str], i: int, word: str, flag: Flag) -> tuple[list[str], int]:
    if "=" in word:
        return [word.split("=", 1)[1]], i + 1
    if flag.nargs == ONE_OR_MORE:
        end = i + 1
        while end < len(words) and not _is_option(words[end]):
            end += 1
        if end == i + 1:
            raise ConfigError(f"{word} needs at least one value in the training script's arguments, but none follow it.")
        return list(words[i + 1:end]), end
    taken = list(words[i + 1:i + 1 + flag.nargs])
    if len(taken) < flag.nargs or any(t.startswith("--") for t in taken):
        raise ConfigError(f"{word} needs {flag.nargs} value(s) in the training script's arguments, but none follow it.")
    return taken, i + 1 + flag.nargs


def _skip_unknown(words: Sequence[str], i: int) -> int:
    i += 1
    while i < len(words) and not words[i].startswith("-"):
        i += 1
    return i


def parse_flags(words: Sequence[str], table: Mapping[str, Flag]) -> FlagValues:
    """Parse script argv against `table` (keys in canonical `--dash-form`)."""
    out = FlagValues()
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("--") or word == "--":
            i += 1
            continue
        name = _canonical(word.split("=", 1)[0])
        flag, negated = _lookup(name, table)
        if flag is None:
            i = i + 1 if "=" in word else _skip_unknown(words, i)
            continue
        value, i = _read_one(words, i, word, flag, negated)
        out.values[flag.dest] = value
        out.sources[flag.dest] = Source(SourceKind.ARGV, word.split("=", 1)[0])
        out.seen_flags[flag.dest] = word.split("=", 1)[0]
    return out


def _read_one(words: Sequence[str], i: int, word: str, flag: Flag, negated: bool) -> tuple[Any, int]:
    if flag.kind in ("true", "false"):
        value = (flag.kind == "true") != negated
        nxt = word.split("=", 1)[1] if "=" in word else (words[i + 1] if i + 1 < len(words) else "")
        if nxt.lower() in _BOOL_WORDS:  # Hugging Face style `--bf16 True`
            value = _BOOL_WORDS[nxt.lower()] if flag.kind == "true" else not _BOOL_WORDS[nxt.lower()]
            return value, i + (1 if "=" in word else 2)
        return value, i + 1
    if flag.kind == "path_or_true":  # Megatron-DeepSpeed `--deepspeed` switch vs HF Trainer `--deepspeed FILE`
        if "=" in word:
            return word.split("=", 1)[1], i + 1
        nxt = words[i + 1] if i + 1 < len(words) else ""
        return (nxt, i + 2) if nxt and not nxt.startswith("-") else (True, i + 1)
    texts, i = _take_values(words, i, word, flag)
    values = [_convert(t, flag.kind, word) for t in texts]
    return (values[0] if len(values) == 1 and flag.nargs in (1, ONE_OR_MORE) else tuple(values)), i

"""Edit flags in a launch command's argv the way argparse reads them (`--flag value` and `--flag=value`).

Every occurrence of a flag is rewritten in the spelling the user wrote (argparse takes the last one, so
rewriting all of them keeps the command unambiguous); a flag that was absent is appended at the end;
a switched-off store_true flag is removed. Words before the training script (launcher flags) never match
a framework flag name, so scanning the whole argv is safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class FlagHit:
    """One occurrence of a flag in argv."""

    index: int
    """Position of the flag word."""
    name: str
    """The spelling found (one of the names asked for)."""
    inline: bool
    """True for `--flag=value` (one word), False for `--flag value` or a bare switch."""


def find_flag(argv: Sequence[str], names: Sequence[str]) -> list[FlagHit]:
    """Every occurrence of one of `names`, a `_` in the option matching a `-`: Megatron forks that spell options with
    underscores (epfLLM's Megatron-LLM: --tensor_model_parallel_size), which explain reads as the same flag, and the
    Hugging Face parser, which takes both. The hit keeps the spelling written."""
    keys = {option_key(name) for name in names}
    hits: list[FlagHit] = []
    for i, word in enumerate(argv):
        option, eq, _ = word.partition("=")
        if option.startswith("--") and option_key(option) in keys:
            hits.append(FlagHit(i, option, bool(eq)))
    return hits


def option_key(option: str) -> str:
    """An option's name with `_` read as `-`."""
    return option.replace("_", "-")


def flag_value(argv: Sequence[str], names: Sequence[str]) -> str | None:
    """The value argparse would use (last occurrence), or None when absent or given without a value."""
    value = None
    for hit in find_flag(argv, names):
        if hit.inline:
            value = argv[hit.index].split("=", 1)[1]
        elif hit.index + 1 < len(argv) and not argv[hit.index + 1].startswith("--"):
            value = argv[hit.index + 1]
    return value


def set_value(argv: list[str], names: Sequence[str], value: str, *, append_as: str | None = None) -> list[str]:
    """Every occurrence of `names` gets `value`; when absent, `append_as value` is appended (names[0] by default)."""
    out = list(argv)
    hits = find_flag(out, names)
    for hit in hits:
        if hit.inline:
            out[hit.index] = f"{hit.name}={value}"
        elif hit.index + 1 < len(out) and not out[hit.index + 1].startswith("--"):
            out[hit.index + 1] = value
        else:
            out.insert(hit.index + 1, value)
            return set_value(out, names, value, append_as=append_as)
    if not hits:
        out += [append_as or names[0], value]
    return out


def remove(argv: Sequence[str], names: Sequence[str], *, takes_value: bool) -> list[str]:
    """Drop every occurrence (and its value word when the flag takes one and it was given separately)."""
    drop: set[int] = set()
    for hit in find_flag(argv, names):
        drop.add(hit.index)
        if takes_value and not hit.inline and hit.index + 1 < len(argv) and not argv[hit.index + 1].startswith("--"):
            drop.add(hit.index + 1)
    return [w for i, w in enumerate(argv) if i not in drop]


def set_switch(argv: Sequence[str], names: Sequence[str], on: bool) -> list[str]:
    """A store_true flag: present once (names[0] appended if absent) or removed everywhere."""
    present = bool(find_flag(argv, names))
    if on:
        return list(argv) if present else [*argv, names[0]]
    return remove(argv, names, takes_value=False)

"""A text split at a separator outside brackets, as bash splits an arithmetic `,` list outside `( )` and Slurm a host
list's `,` outside `[ ]`."""

from __future__ import annotations


def split_outside(text: str, sep: str, brackets: str) -> list[str]:
    """`text` split at each `sep` not inside `brackets` (an opening and a closing character, e.g. "()")."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c == brackets[0]) - (c == brackets[1])
        if c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]

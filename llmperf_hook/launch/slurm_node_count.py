"""`-N/--nodes` as sbatch and srun read it (src/common/proc_args.c verify_node_count): a count (`4`, `2k`), a range
`MIN-MAX`, or a size string, a list of counts and ranges with an optional step (`1,4`, `2-8:2` = 2,4,6,8; sbatch(1):
"--nodes=1-15:4" is equivalent to "--nodes=1,5,9,13").

Slurm allocates "as many nodes as possible within the range specified and without delaying the initiation of the job"
(sbatch(1) -N): the count the job gets is only known when it starts. llmperf prices the largest the option allows,
the count on a cluster with free nodes, and says so in a warning naming the others."""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_JOB_SIZE_BITMAP = 16384
"""slurm/slurm.h: the largest count a size string may list."""
_COUNT = re.compile(r"(\d+)([kK]?)([mM]?)")
_ITEM = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")


@dataclass(frozen=True)
class NodeCounts:
    """The node counts a -N value allows: every count from `low` to `high`, or those `listed`."""

    low: int
    high: int
    listed: tuple[int, ...] | None = None
    """The counts of a size string (`1,4`, `2-8:2`), smallest first; None for a count or a MIN-MAX range."""

    @property
    def assumed(self) -> int:
        """The count llmperf prices: the largest (Slurm allocates as many as it can without delaying the start)."""
        return self.high

    def warning(self, option: str, where: str) -> str | None:
        """Which count llmperf assumed, for a value that allows several; None for one count."""
        if self.low == self.high:
            return None
        listed = ", ".join(map(str, self.listed)) if self.listed and len(self.listed) <= 8 else \
            f"{self.low} to {self.high}"
        return (f"{option} ({where}) lets Slurm allocate {listed} nodes: llmperf assumes {self.assumed}, as many as "
                "the value allows (Slurm gives as many as it can without delaying the start, sbatch(1) -N); the job sees "
                "the count it got in SLURM_JOB_NUM_NODES. Pass llmperf --nnodes N to price another count.")


def _str_to_nodes(text: str) -> int | None:
    """str_to_nodes: digits with an optional k/K (x1024) then m/M (x1048576) suffix; None if it is not one."""
    match = _COUNT.fullmatch(text)
    if match is None:
        return None
    return int(match.group(1)) * (1024 if match.group(2) else 1) * (1 << 20 if match.group(3) else 1)


def _size_string(value: str) -> list[int] | None:
    """A list form (`,` or `:` in it): each item a count, `A-B` or `A-B:STEP` (bitfmt2int); no suffixes."""
    counts: set[int] = set()
    for item in value.split(","):
        match = _ITEM.fullmatch(item)
        if match is None:
            return None
        first, last, step = int(match.group(1)), int(match.group(2) or match.group(1)), int(match.group(3) or 1)
        if max(first, last) >= MAX_JOB_SIZE_BITMAP or step < 1:
            return None
        counts.update(range(first, last + 1, step))
    return sorted(counts) or None


def parse_node_counts(value: str) -> NodeCounts:
    """The counts `-N value` allows; ValueError with Slurm's own words when sbatch/srun would stop on it."""
    text = value.strip()
    if "," in text or ":" in text:
        counts = _size_string(text)
        if counts is None:
            raise ValueError(f'"{text}" is not a valid node count')
        return NodeCounts(counts[0], counts[-1], tuple(counts))
    low_text, dash, high_text = text.partition("-")
    low, high = _str_to_nodes(low_text), _str_to_nodes(high_text) if dash else None
    if low is None or (dash and high is None):
        raise ValueError(f'"{text}" is not a valid node count')
    if dash and high and high < low:
        raise ValueError(f"Maximum node count {high} is less than minimum node count {low}")
    return NodeCounts(low, high if dash and high else low)  # `4-0`: no maximum

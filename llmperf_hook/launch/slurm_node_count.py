"""`-N/--nodes` as sbatch and srun read it (src/common/proc_args.c verify_node_count): a count (`4`, `2k`), a range
`MIN-MAX`, or a size string, a list of counts and ranges with an optional step (`1,4`, `2-8:2` = 2,4,6,8; sbatch(1):
"--nodes=1-15:4" is equivalent to "--nodes=1,5,9,13"). A range's MIN may be left out or negative, which Slurm reads
as 1 (`--nodes=-4` is 1-4), and a MAX of 0 means no maximum.

Slurm allocates "as many nodes as possible within the range specified and without delaying the initiation of the job"
(sbatch(1) -N): the count the job gets is only known when it starts. llmperf prices the largest the option allows,
the count on a cluster with free nodes, and says so in a warning naming the others."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

NODE_RANGE_ENV = "LLMPERF_SLURM_NODE_RANGE"
"""llmperf's own variable in the environment it reads a batch script's launch line with (never the job's, never in
ParsedJob.env): the `--nodes` value of an allocation that allows several counts, so that a step sized by the
allocation (srun without -N, taking SLURM_NNODES) knows the fewest it may get (slurm.size_srun_tasks)."""
MAX_JOB_SIZE_BITMAP = 16384
"""slurm/slurm.h: the largest count a size string may list."""
_COUNT = re.compile(r"\s*([+-]?\d+)([kK]?)([mM]?)")
_INT_MAX = 2**31 - 1
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


def _str_to_nodes(text: str) -> tuple[int, str]:
    """str_to_nodes: strtol's digits (leading blanks and a sign allowed) with an optional k/K (x1024) then m/M
    (x1048576) suffix, and what is left after them; -1 for no digits (all of `text` left) or a count below 0."""
    match = _COUNT.match(text)
    if match is None:
        return -1, text
    number = int(match.group(1)) * (1024 if match.group(2) else 1) * (1 << 20 if match.group(3) else 1)
    return (number if 0 <= number <= _INT_MAX else -1), text[match.end():]


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


def _range(text: str) -> NodeCounts:
    """`MIN-MAX` as verify_node_count reads it: an empty or negative MIN is 1 (`--nodes=-4` is 1-4), a MAX of 0 means
    no maximum (`4-0`), and a MAX below MIN (an empty `4-` reads -1) is refused."""
    low_text, _, high_text = text.partition("-")
    low, left = _str_to_nodes(low_text)
    if left.strip():
        raise ValueError(f'"{low_text}" is not a valid node count')
    low = max(low, 1)  # `if (*min_nodes < 0) *min_nodes = 1;`
    high, left = _str_to_nodes(high_text)
    if left.strip():
        raise ValueError(f'"{high_text}" is not a valid node count')
    if high != 0 and high < low:
        raise ValueError(f"Maximum node count {high} is less than minimum node count {low}")
    return NodeCounts(low, high or low)


def allocation_counts(env: Mapping[str, str], nnodes: int) -> NodeCounts | None:
    """The counts the allocation's `--nodes` value allows (NODE_RANGE_ENV) where `nnodes`, read from SLURM_NNODES,
    is the count llmperf assumed for it (its maximum); None otherwise (a fixed count, or SLURM_NNODES set again)."""
    try:
        counts = parse_node_counts(env.get(NODE_RANGE_ENV, ""))
    except ValueError:
        return None
    return counts if counts.low < counts.high == nnodes else None


def parse_node_counts(value: str) -> NodeCounts:
    """The counts `-N value` allows; ValueError with Slurm's own words when sbatch/srun would stop on it."""
    text = value.strip()
    if "," in text or ":" in text:
        counts = _size_string(text)
        if counts is None:
            raise ValueError(f'"{text}" is not a valid node count')
        return NodeCounts(counts[0], counts[-1], tuple(counts))
    if "-" in text:
        return _range(text)
    count, left = _str_to_nodes(text)
    if left.strip() or count < 0:
        raise ValueError(f'"{text}" is not a valid node count')
    return NodeCounts(count, count)

"""Event simulation of the micro-batch schedule of one step: 1F1B and interleaved 1F1B (virtual stages).

Per pipeline rank the order of forward (F) and backward (B) passes is Megatron's
(megatron/core/pipeline_parallel/schedules.py): 1F1B runs min(pp - rank - 1, m) warm-up forwards, then
alternates one forward and one backward, then drains the remaining backwards; the interleaved schedule runs
(pp - rank - 1) * 2 + (vpp - 1) * pp warm-up forwards (all of them when m == pp) over virtual micro-batches
ordered in groups of pp micro-batches per model chunk. A pass starts when its rank is free and its input has
arrived: F(chunk c, rank r) after F(c, r-1) (or F(c-1, pp-1) for r = 0) plus the send/recv time, B after
B(c, r+1) (or B(c+1, 0) for the last rank) plus the send/recv time. The simulation is exact for this model
of the schedule: with uniform stages and free p2p the 1F1B step is (m + pp - 1) (tF + tB) (Narayanan et al.
2021, Sec. 2.2) and interleaving divides the bubble by vpp.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from llmperf_hook.errors import ConfigError

Pass = tuple[str, int, int]
"""("F" | "B", chunk, micro-batch)."""


@dataclass(frozen=True)
class PipelineResult:
    end_s: tuple[float, ...]
    """Per rank: when its last pass ends."""
    busy_s: tuple[float, ...]
    """Per rank: sum of its pass durations."""
    events: tuple[tuple[int, str, int, int, float, float], ...]
    """(rank, kind, chunk, micro-batch, start, end) when recorded, else empty."""


def virtual_order(m: int, pp: int, vpp: int, backward: bool) -> list[tuple[int, int]]:
    """(chunk, micro-batch) in execution order: groups of pp micro-batches, each group through all chunks."""
    order: list[tuple[int, int]] = []
    for group_start in range(0, m, pp):
        group = range(group_start, min(m, group_start + pp))
        chunks = range(vpp - 1, -1, -1) if backward else range(vpp)
        order.extend((c, i) for c in chunks for i in group)
    return order


def rank_program(rank: int, m: int, pp: int, vpp: int) -> list[Pass]:
    """The sequence of passes one pipeline rank executes."""
    fwd = [("F", c, i) for c, i in virtual_order(m, pp, vpp, backward=False)]
    bwd = [("B", c, i) for c, i in virtual_order(m, pp, vpp, backward=True)]
    total = len(fwd)
    if vpp == 1:
        warmup = min(pp - rank - 1, m)
    else:
        warmup = total if m == pp else min(total, (pp - rank - 1) * 2 + (vpp - 1) * pp)
    program: list[Pass] = fwd[:warmup]
    for k in range(total - warmup):
        program += [fwd[warmup + k], bwd[k]]
    return program + bwd[total - warmup:]


def _dependency(p: Pass, rank: int, pp: int, vpp: int) -> tuple[Pass, int] | None:
    kind, c, i = p
    if kind == "F":
        if rank > 0:
            return ("F", c, i), rank - 1
        return (("F", c - 1, i), pp - 1) if c > 0 else None
    if rank < pp - 1:
        return ("B", c, i), rank + 1
    return (("B", c + 1, i), 0) if c < vpp - 1 else (("F", c, i), rank)


@lru_cache(maxsize=256)
def compiled_schedule(pp: int, m: int, vpp: int) -> tuple[tuple[tuple[Pass, ...], ...], tuple[tuple[int, ...], ...],
                                                             tuple[tuple[int, ...], ...]]:
    """Per rank: its passes, and for each pass the rank and program position of the pass it waits for (-1: none)."""
    programs = tuple(tuple(rank_program(r, m, pp, vpp)) for r in range(pp))
    index = [{p: k for k, p in enumerate(prog)} for prog in programs]
    dep_rank: list[tuple[int, ...]] = []
    dep_pos: list[tuple[int, ...]] = []
    for r, prog in enumerate(programs):
        ranks, positions = [], []
        for p in prog:
            dep = _dependency(p, r, pp, vpp)
            ranks.append(-1 if dep is None else dep[1])
            positions.append(-1 if dep is None else index[dep[1]][dep[0]])
        dep_rank.append(tuple(ranks))
        dep_pos.append(tuple(positions))
    return programs, tuple(dep_rank), tuple(dep_pos)


def simulate_pipeline(fwd_s: list[list[float]], bwd_s: list[list[float]], p2p_s: float, m: int,
                      record: bool = False) -> PipelineResult:
    """Simulate one step; fwd_s[rank][chunk] / bwd_s[rank][chunk] are per-micro-batch pass durations."""
    pp, vpp = len(fwd_s), len(fwd_s[0])
    if vpp > 1 and m % pp:
        raise ConfigError(
            f"the interleaved schedule needs the number of micro-batches ({m}) to be a multiple of the pipeline "
            f"size ({pp}) (Megatron schedules.py). Change --global-batch-size, --micro-batch-size or the virtual "
            f"pipeline size.")
    programs, dep_rank, dep_pos = compiled_schedule(pp, m, vpp)
    durations = [[fwd_s[r][p[1]] if p[0] == "F" else bwd_s[r][p[1]] for p in programs[r]] for r in range(pp)]
    ends: list[list[float]] = [[] for _ in range(pp)]
    free = [0.0] * pp
    busy = [sum(d) for d in durations]
    remaining = sum(len(p) for p in programs)
    while remaining:
        progressed = remaining
        for r in range(pp):
            fin, prog_len, d_rank, d_pos, dur = ends[r], len(programs[r]), dep_rank[r], dep_pos[r], durations[r]
            t = free[r]
            k = len(fin)
            while k < prog_len:
                dr = d_rank[k]
                if dr >= 0:
                    other = ends[dr]
                    if d_pos[k] >= len(other):
                        break
                    ready = other[d_pos[k]] + (p2p_s if dr != r else 0.0)
                    if ready > t:
                        t = ready
                t += dur[k]
                fin.append(t)
                k += 1
                remaining -= 1
            free[r] = t
        assert remaining < progressed, "pipeline schedule deadlocked (internal error)"
    events: tuple[tuple[int, str, int, int, float, float], ...] = ()
    if record:
        events = tuple((r, p[0], p[1], p[2], ends[r][k] - durations[r][k], ends[r][k])
                       for r in range(pp) for k, p in enumerate(programs[r]))
    return PipelineResult(end_s=tuple(free), busy_s=tuple(busy), events=events)

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


def simulate_pipeline(fwd_s: list[list[float]], bwd_s: list[list[float]], p2p_s: float, m: int,
                      record: bool = False) -> PipelineResult:
    """Simulate one step; fwd_s[rank][chunk] / bwd_s[rank][chunk] are per-micro-batch pass durations."""
    pp, vpp = len(fwd_s), len(fwd_s[0])
    programs = [rank_program(r, m, pp, vpp) for r in range(pp)]
    done: list[dict[Pass, float]] = [dict() for _ in range(pp)]
    free = [0.0] * pp
    pos = [0] * pp
    busy = [0.0] * pp
    events: list[tuple[int, str, int, int, float, float]] = []
    remaining = sum(len(p) for p in programs)
    while remaining:
        progressed = False
        for r in range(pp):
            prog, fin = programs[r], done[r]
            while pos[r] < len(prog):
                p = prog[pos[r]]
                dep = _dependency(p, r, pp, vpp)
                ready = 0.0
                if dep is not None:
                    dep_end = done[dep[1]].get(dep[0])
                    if dep_end is None:
                        break
                    ready = dep_end + (p2p_s if dep[1] != r else 0.0)
                duration = fwd_s[r][p[1]] if p[0] == "F" else bwd_s[r][p[1]]
                start = max(free[r], ready)
                free[r] = fin[p] = start + duration
                busy[r] += duration
                if record:
                    events.append((r, p[0], p[1], p[2], start, free[r]))
                pos[r] += 1
                remaining -= 1
                progressed = True
        assert progressed, "pipeline schedule deadlocked (internal error)"
    return PipelineResult(end_s=tuple(free), busy_s=tuple(busy), events=tuple(events))

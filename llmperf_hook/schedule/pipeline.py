"""Event simulation of the micro-batch schedule of one step: 1F1B and interleaved 1F1B (virtual stages).

Per pipeline rank the order of forward (F) and backward (B) passes is Megatron's
(megatron/core/pipeline_parallel/schedules.py): 1F1B runs min(pp - rank - 1, m) warm-up forwards, then
alternates one forward and one backward, then drains the remaining backwards; the interleaved schedule runs
(pp - rank - 1) * 2 + (vpp - 1) * N warm-up forwards (all of them when m == pp) over virtual micro-batches
ordered in groups of N micro-batches per model chunk (N = --microbatch-group-size-per-virtual-pipeline-stage,
default pp; get_schedule_table). A pass starts when its rank is free and its input has
arrived: F(chunk c, rank r) after F(c, r-1) (or F(c-1, pp-1) for r = 0) plus the send/recv time, B after
B(c, r+1) (or B(c+1, 0) for the last rank) plus the send/recv time. The simulation is exact for this model
of the schedule: with uniform stages and free p2p the 1F1B step is (m + pp - 1) (tF + tB) (Narayanan et al.
2021, Sec. 2.2) and interleaving divides the bubble by vpp.

DeepSpeed's PipelineEngine runs the same 1F1B order as a lock-step (`simulate_lockstep`): its TrainSchedule
(deepspeed/runtime/pipe/schedule.py) has 2 (m + pp - 1) steps; in step t stage s runs the forward of micro-batch
(t - s) / 2 or the backward of (t - 2 pp + s + 1) / 2, whichever is whole and in range. A forward step begins
with SendGrad (the previous backward's input gradient) and RecvActivation to/from s - 1, a backward step with
RecvGrad and SendActivation from/to s + 1, each a blocking p2p.send / p2p.recv (torch.distributed send/recv,
which make the compute stream wait for the transfer, engine.py _exec_send_activations ... _exec_recv_grads).
Neighbours therefore meet at the start of each step and spend the transfers together before computing: a
middle stage spends four transfers per micro-batch on its own stream, where Megatron's 1F1B only waits for
an activation on the edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from llmperf_hook.errors import ConfigError

Pass = tuple[str, int, int]
"""("F" | "B", chunk, micro-batch)."""
Steps = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[bool, ...], tuple[int, ...]]
"""CompiledSchedule.steps: columns id, prev, dep, cross, slot."""


@dataclass(frozen=True)
class PipelineResult:
    end_s: tuple[float, ...]
    """Per rank: when its last pass ends."""
    busy_s: tuple[float, ...]
    """Per rank: sum of its pass durations."""
    events: tuple[tuple[int, str, int, int, float, float], ...]
    """(rank, kind, chunk, micro-batch, start, end) when recorded, else empty."""


def virtual_order(m: int, group_size: int, vpp: int, backward: bool) -> list[tuple[int, int]]:
    """(chunk, micro-batch) in execution order: groups of `group_size` micro-batches, each through all chunks."""
    order: list[tuple[int, int]] = []
    for group_start in range(0, m, group_size):
        group = range(group_start, min(m, group_start + group_size))
        chunks = range(vpp - 1, -1, -1) if backward else range(vpp)
        order.extend((c, i) for c in chunks for i in group)
    return order


def rank_program(rank: int, m: int, pp: int, vpp: int, group_size: int | None = None) -> list[Pass]:
    """The sequence of passes one pipeline rank executes (group_size: micro-batches per chunk group, default pp)."""
    group_size = group_size or pp
    fwd = [("F", c, i) for c, i in virtual_order(m, group_size, vpp, backward=False)]
    bwd = [("B", c, i) for c, i in virtual_order(m, group_size, vpp, backward=True)]
    total = len(fwd)
    if vpp == 1:
        warmup = min(pp - rank - 1, m)
    else:
        warmup = total if m == pp else min(total, (pp - rank - 1) * 2 + (vpp - 1) * group_size)
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


@dataclass(frozen=True)
class CompiledSchedule:
    """The schedule of (pp, m, vpp) flattened once: events in an order where every dependency comes first."""

    programs: tuple[tuple[Pass, ...], ...]
    order: tuple[int, ...]
    """Flat event ids (rank-major: offset[rank] + position) in dependency order."""
    prev: tuple[int, ...]
    """Per flat id: the previous pass on the same rank, or -1."""
    dep: tuple[int, ...]
    """Per flat id: the pass on another rank (or the own forward) it waits for, or -1."""
    cross: tuple[bool, ...]
    """Per flat id: the dependency crosses ranks (a send/recv sits on the edge)."""
    slot: tuple[int, ...]
    """Per flat id: index into the duration table (rank * 2 * vpp + (0 F, 1 B) * vpp + chunk)."""
    offset: tuple[int, ...]
    steps: Steps
    """Columns id, prev, dep, cross, slot in dependency order, what the simulation loop zips: one walk instead of
    four lookups by id per event. A missing prev is NO_PREV (an end slot that holds 0.0), a missing dep NO_DEP (one
    that holds -inf, never the later of the two): the loop needs no test for either."""


NO_PREV, NO_DEP = 0, 1
"""Offsets past the last event of the two sentinel end slots (CompiledSchedule.steps, _end_table)."""


def _end_table(n: int) -> list[float]:
    """End times of n events, then the sentinels: 0.0 for 'no previous pass', -inf for 'no dependency'."""
    end = [0.0] * (n + 2)
    end[n + NO_DEP] = float("-inf")
    return end


@lru_cache(maxsize=256)
def compiled_schedule(pp: int, m: int, vpp: int, group_size: int | None = None) -> CompiledSchedule:
    programs = tuple(tuple(rank_program(r, m, pp, vpp, group_size)) for r in range(pp))
    offset = [0] * pp
    for r in range(1, pp):
        offset[r] = offset[r - 1] + len(programs[r - 1])
    index = [{p: offset[r] + k for k, p in enumerate(prog)} for r, prog in enumerate(programs)]
    prev, dep, cross, slot = [], [], [], []
    for r, prog in enumerate(programs):
        for k, p in enumerate(prog):
            d = _dependency(p, r, pp, vpp)
            prev.append(offset[r] + k - 1 if k else -1)
            dep.append(-1 if d is None else index[d[1]][d[0]])
            cross.append(d is not None and d[1] != r)
            slot.append(r * 2 * vpp + (0 if p[0] == "F" else 1) * vpp + p[1])
    order = _dependency_order(programs, offset, dep)
    return CompiledSchedule(programs, order, tuple(prev), tuple(dep), tuple(cross), tuple(slot), tuple(offset),
                            _steps(order, prev, dep, cross, slot))


def _steps(order: tuple[int, ...], prev: list[int], dep: list[int], cross: list[bool], slot: list[int]) -> Steps:
    """CompiledSchedule.steps: the per-id tables read in dependency order, -1 replaced by the sentinel slots."""
    n = len(prev)
    prev_or_sentinel = [n + NO_PREV if i < 0 else i for i in prev]
    dep_or_sentinel = [n + NO_DEP if i < 0 else i for i in dep]
    columns = (prev_or_sentinel, dep_or_sentinel, cross, slot)
    return (order, *(tuple(map(column.__getitem__, order)) for column in columns))


def _dependency_order(programs: tuple[tuple[Pass, ...], ...], offset: list[int], dep: list[int]) -> tuple[int, ...]:
    """Walk the ranks round-robin, each as far as its dependencies allow (a valid schedule never deadlocks)."""
    done = [False] * len(dep)
    pos = [0] * len(programs)
    order: list[int] = []
    while len(order) < len(dep):
        before = len(order)
        for r, prog in enumerate(programs):
            while pos[r] < len(prog):
                e = offset[r] + pos[r]
                if dep[e] >= 0 and not done[dep[e]]:
                    break
                done[e] = True
                order.append(e)
                pos[r] += 1
        assert len(order) > before, "pipeline schedule deadlocked (internal error)"
    return tuple(order)


def _checked_schedule(fwd_s: list[list[float]], m: int, group_size: int | None) -> CompiledSchedule:
    """The compiled schedule of these passes, after the interleaved schedule's group rule (ConfigError, exit 2)."""
    pp, vpp = len(fwd_s), len(fwd_s[0])
    group = group_size or pp
    if vpp > 1 and (not pp <= group <= m or 0 < m % group < pp):
        raise ConfigError(
            f"the interleaved schedule cannot run {m} micro-batches in groups of {group} on {pp} pipeline ranks "
            f"(Megatron schedules.py: the group lies in [PP, micro-batches] and the last group is empty or at least PP). "
            f"Change --global-batch-size, --micro-batch-size, the virtual pipeline size or "
            f"--microbatch-group-size-per-virtual-pipeline-stage.")
    return compiled_schedule(pp, m, vpp, group if vpp > 1 else None)


def _duration_table(fwd_s: list[list[float]], bwd_s: list[list[float]]) -> list[float]:
    """Pass durations in CompiledSchedule.slot's order: per rank, its chunks' forwards, then their backwards."""
    return [t for r in range(len(fwd_s)) for t in (*fwd_s[r], *bwd_s[r])]


def _result(sched: CompiledSchedule, end: list[float], table: list[float], fwd_s: list[list[float]],
            bwd_s: list[list[float]], m: int, record: bool) -> PipelineResult:
    """Each rank's last end time, its busy time and (record) every pass's (rank, F/B, chunk, micro-batch, start,
    end), from the walk's `end` table."""
    pp = len(fwd_s)
    last = [sched.offset[r] + len(sched.programs[r]) - 1 for r in range(pp)]
    busy = [m * (sum(fwd_s[r]) + sum(bwd_s[r])) for r in range(pp)]  # every chunk runs F and B once per micro-batch
    events: tuple[tuple[int, str, int, int, float, float], ...] = ()
    if record:
        events = tuple((r, p[0], p[1], p[2], end[sched.offset[r] + k] - table[sched.slot[sched.offset[r] + k]],
                        end[sched.offset[r] + k]) for r in range(pp) for k, p in enumerate(sched.programs[r]))
    return PipelineResult(end_s=tuple(end[i] for i in last), busy_s=tuple(busy), events=events)


def simulate_pipeline(fwd_s: list[list[float]], bwd_s: list[list[float]], p2p_s: float, m: int,
                      record: bool = False, group_size: int | None = None) -> PipelineResult:
    """Simulate one step; fwd_s[rank][chunk] / bwd_s[rank][chunk] are per-micro-batch pass durations;
    group_size: the interleaved schedule's micro-batches per chunk group (None = pp)."""
    sched = _checked_schedule(fwd_s, m, group_size)
    table = _duration_table(fwd_s, bwd_s)
    end = _end_table(len(sched.prev))
    for e, p, d, cross, s in zip(*sched.steps):  # a pass starts when its rank is free and its input has arrived
        t = end[p]
        ready = end[d] + p2p_s if cross else end[d]
        end[e] = (ready if ready > t else t) + table[s]
    return _result(sched, end, table, fwd_s, bwd_s, m, record)


def simulate_pipeline_and_free(fwd_s: list[list[float]], bwd_s: list[list[float]], p2p_s: float, m: int,
                               record: bool = False, group_size: int | None = None
                               ) -> tuple[PipelineResult, PipelineResult]:
    """(simulate_pipeline with `p2p_s`, the same with free send/recv) in one walk of the schedule: each pass's two
    end times come from the same arithmetic as two separate simulations, so both results are theirs exactly."""
    if p2p_s <= 0:
        sim = simulate_pipeline(fwd_s, bwd_s, p2p_s, m, record, group_size)
        return sim, sim
    sched = _checked_schedule(fwd_s, m, group_size)
    table = _duration_table(fwd_s, bwd_s)
    end, free = _end_table(len(sched.prev)), _end_table(len(sched.prev))
    for e, p, d, cross, s in zip(*sched.steps):
        duration = table[s]
        t, ready = end[p], (end[d] + p2p_s if cross else end[d])
        end[e] = (ready if ready > t else t) + duration
        t, ready = free[p], free[d]
        free[e] = (ready if ready > t else t) + duration
    return (_result(sched, end, table, fwd_s, bwd_s, m, record),
            _result(sched, free, table, fwd_s, bwd_s, m, False))


def _lockstep_pass(rank: int, step: int, pp: int, m: int) -> tuple[str, int] | None:
    """What stage `rank` computes in TrainSchedule step `step` (_step_to_micro_batch): F of micro-batch
    (step - rank) / 2 on steps of the stage's parity, else B of (step - 2 pp + rank + 1) / 2; None when idle."""
    if (step - rank) % 2 == 0:
        i, kind = (step - rank) // 2, "F"
    else:
        i, kind = (step - 2 * pp + rank + 1) // 2, "B"
    return (kind, i) if 0 <= i < m else None


def _exchanges(rank: int, step: int, pp: int, m: int) -> int:
    """Transfers stage `rank` makes with its forward-side neighbour rank - 1 at the start of `step`, when the
    step is a forward step of `rank` (SendGrad of the previous step's backward, RecvActivation of this step's
    forward); the neighbour's backward step makes the matching RecvGrad / SendActivation."""
    if rank == 0 or (step - rank) % 2 != 0:
        return 0
    previous = _lockstep_pass(rank, step - 1, pp, m) if step > 0 else None
    current = _lockstep_pass(rank, step, pp, m)
    return int(previous is not None and previous[0] == "B") + int(current is not None and current[0] == "F")


def simulate_lockstep(fwd_s: list[float], bwd_s: list[float], transfer_s: float, m: int,
                      record: bool = False) -> PipelineResult:
    """Simulate one step of DeepSpeed's PipelineEngine (see the module docstring): per-stage pass durations,
    `transfer_s` per blocking send or receive of an activation or its gradient. The pair (s - 1, s) that
    exchanges at a step starts it when both are free, spends its transfers, then each computes its pass."""
    pp = len(fwd_s)
    free = [0.0] * pp
    events: list[tuple[int, str, int, int, float, float]] = []
    for step in range(2 * (m + pp - 1)):
        start = list(free)
        for rank in range(1, pp):
            n = _exchanges(rank, step, pp, m)
            if n:
                start[rank] = start[rank - 1] = max(free[rank], free[rank - 1]) + n * transfer_s
        for rank in range(pp):
            work = _lockstep_pass(rank, step, pp, m)
            duration = 0.0 if work is None else (fwd_s[rank] if work[0] == "F" else bwd_s[rank])
            free[rank] = start[rank] + duration
            if record and work is not None:
                events.append((rank, work[0], 0, work[1], start[rank], free[rank]))
    busy = tuple(m * (fwd_s[r] + bwd_s[r]) for r in range(pp))
    return PipelineResult(end_s=tuple(free), busy_s=busy, events=tuple(events))

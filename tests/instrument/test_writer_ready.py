"""The periodic flush never builds a record that is not ready (a GPU step still running: building it would
synchronize the host with the launch queue); forced flushes build everything, in order."""

from __future__ import annotations

import json

from llmperf_hook.instrument.jsonl_writer import FORCE_FLUSH_FACTOR, JsonlWriter, PendingLine
from llmperf_hook.instrument.step_timer import PerfCounterTimer


class FakeEvent:
    """A step's end event: done or not, and how many times something waited on it."""

    def __init__(self) -> None:
        self.done = False
        self.waited = 0


def line(ev: FakeEvent, step: int) -> PendingLine:
    def build() -> str:
        ev.waited += 0 if ev.done else 1  # building an unfinished step is what synchronizes on a GPU
        return json.dumps({"step": step})

    return PendingLine(build, lambda: ev.done)


def steps_in(path) -> list[int]:
    return [json.loads(x)["step"] for x in path.read_text().splitlines()] if path.exists() else []


def test_periodic_flush_writes_only_the_finished_leading_steps(tmp_path):
    path = tmp_path / "rank0.jsonl"
    writer = JsonlWriter(str(path), max_buffered=3, max_age_s=1e9)
    events = [FakeEvent() for _ in range(5)]
    events[0].done = events[1].done = True
    for i in range(3):
        writer.write(line(events[i], i))  # the third write reaches max_buffered: a periodic flush
    assert steps_in(path) == [0, 1]
    events[2].done = events[3].done = True  # step 4 still running
    for i in (3, 4):
        writer.write(line(events[i], i))
    assert steps_in(path) == [0, 1, 2, 3]  # 2, 3 and 4 waiting: a periodic flush, step 4 left waiting
    writer.write(line(FakeEvent(), 5))
    assert steps_in(path) == [0, 1, 2, 3]
    assert sum(ev.waited for ev in events) == 0
    writer.close()  # a forced flush: everything, in order, even the unfinished
    assert steps_in(path) == [0, 1, 2, 3, 4, 5]


def test_age_bound_flush_skips_a_running_step(tmp_path):
    path = tmp_path / "rank0.jsonl"
    writer = JsonlWriter(str(path), max_buffered=1000, max_age_s=0.0)
    done, running = FakeEvent(), FakeEvent()
    done.done = True
    writer.write(line(done, 0))
    writer.write(line(running, 1))
    assert steps_in(path) == [0] and running.waited == 0


def test_unfinished_steps_are_forced_out_past_the_bound(tmp_path):
    path = tmp_path / "rank0.jsonl"
    writer = JsonlWriter(str(path), max_buffered=2, max_age_s=1e9)
    for i in range(FORCE_FLUSH_FACTOR * 2):
        writer.write(line(FakeEvent(), i))  # a device that never reports done must not grow the buffer forever
    assert steps_in(path) == list(range(FORCE_FLUSH_FACTOR * 2))


def test_plain_dicts_and_cpu_steps_are_always_ready(tmp_path):
    path = tmp_path / "rank0.jsonl"
    writer = JsonlWriter(str(path), max_buffered=2, max_age_s=1e9)
    timer = PerfCounterTimer()
    writer.write({"step": 0})
    writer.write(PendingLine(lambda: json.dumps({"step": 1}), lambda: timer.ready(timer.mark())))
    assert steps_in(path) == [0, 1]

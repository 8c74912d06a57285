"""Stage [7]: one step's record as a line waiting in the rank's writer (jsonl_writer.JsonlWriter).

The step path of the hook takes only the raw marks (the timer's end mark, one getrusage, time.time) and queues
one StepLine; its JSON text is built when the writer flushes (every 64 records, or once a second), a batch of
lines in a row. Per step that is one small object, no closure, no JSON encoder and no system call beyond the
getrusage: formatting the line on the step path (a generic loop over a dict of values and json-style scalar
conversion) was about half of the hook's 30-42 us per 2-3 ms CPU step (benchmarks/bench_hook_overhead.py,
session 13), against a 1 % budget of ~25 us.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from llmperf_hook.instrument.step_timer import StepTimer

_JSON_BOOL = {False: "false", True: "true"}
_INF = float("inf")


class StepLine:
    """A step's raw marks; called, its JSON line. `ready()` says whether the line can be built without waiting
    for the device (a GPU step's end event has completed: step_timer.StepTimer.ready)."""

    __slots__ = ("prefix", "timer", "step", "start", "end", "start_cpu_s", "end_cpu_s", "warmup", "profiled",
                 "memory", "time_unix_s")

    def __init__(self, prefix: Callable[[], str], timer: StepTimer, step: int, start: Any, end: Any,
                 start_cpu_s: float | None, end_cpu_s: float, warmup: bool, profiled: bool,
                 memory: Mapping[str, int | None], time_unix_s: float) -> None:
        self.prefix = prefix
        """The record's leading fields as JSON text without its closing brace (recorder: identity, framework)."""
        self.timer, self.step, self.start, self.end = timer, step, start, end
        self.start_cpu_s, self.end_cpu_s = start_cpu_s, end_cpu_s
        self.warmup, self.profiled, self.memory, self.time_unix_s = warmup, profiled, memory, time_unix_s

    def ready(self) -> bool:
        return self.timer.ready(self.end)

    def __call__(self) -> str:
        timer = self.timer
        wall_s = None if self.start is None else timer.elapsed_s(self.start, self.end)
        # CPU seconds of this process (all its threads) in the step: on a CPU job, far less than the wall time
        # means the rank waited (for peers, or for a core the machine gave to someone else).
        cpu_s = None if self.start_cpu_s is None else self.end_cpu_s - self.start_cpu_s
        memory = "".join([f',"{k}":{json_int(v)}' for k, v in self.memory.items()])  # a list: no generator frame
        return (f'{self.prefix()},"step":{self.step},"wall_time_s":{json_float(wall_s)},"cpu_time_s":'
                f'{json_float(cpu_s)},"warmup":{_JSON_BOOL[self.warmup]},"profiled":{_JSON_BOOL[self.profiled]}'
                f'{memory},"time_unix_s":{json_float(self.time_unix_s)},"timer":"{timer.name}","device":'
                f'"{timer.device}"}}')


def json_float(value: float | None) -> str:
    """JSON for a float: null for None, NaN and the infinities (which JSON cannot hold)."""
    if value is None or not -_INF < value < _INF:  # NaN compares False too
        return "null"
    return repr(float(value))


def json_int(value: int | None) -> str:
    return "null" if value is None else str(int(value))

"""What the hook does at a GPU step boundary, checked against a stand-in torch.cuda (no GPU needed): no
synchronize on the step path (it drains the launch queue: benchmarks/measure_gpu_hook_overhead.py measured 1.4 ms
of a 35 ms H100 step), one allocator call per memory sample."""

from __future__ import annotations

import sys
import types

import pytest

from llmperf_hook.instrument.rank_memory import CudaMemoryProbe, process_usage
from llmperf_hook.instrument.step_timer import CudaEventTimer


class FakeEvent:
    log: list[str] = []

    def __init__(self, enable_timing: bool = False) -> None:
        self.t_ms = None

    def record(self) -> None:
        FakeEvent.log.append("record")
        self.t_ms = 10.0 * FakeEvent.log.count("record")

    def synchronize(self) -> None:
        FakeEvent.log.append("synchronize")

    def elapsed_time(self, end: "FakeEvent") -> float:
        return end.t_ms - self.t_ms

    def query(self) -> bool:
        return self.t_ms is not None


@pytest.fixture
def fake_torch(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    FakeEvent.log = []
    calls: list[str] = []
    stats = {"allocated_bytes": {"all": {"peak": 300, "current": 100}}, "reserved_bytes": {"all": {"peak": 512}}}
    cuda = types.SimpleNamespace(Event=FakeEvent, memory_stats_as_nested_dict=lambda: calls.append("stats") or stats,
                                 reset_peak_memory_stats=lambda: calls.append("reset"))
    torch = types.SimpleNamespace(cuda=cuda, calls=calls)
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


def test_boundary_records_an_event_and_synchronizes_only_when_the_time_is_read(fake_torch) -> None:
    timer = CudaEventTimer()
    start, end = timer.mark(), timer.mark()
    assert FakeEvent.log == ["record", "record"]  # the step path: no synchronize
    assert timer.elapsed_s(start, end) == pytest.approx(0.010)
    assert FakeEvent.log[-1] == "synchronize"


def test_memory_sample_is_one_allocator_call_and_a_reset(fake_torch) -> None:
    usage = process_usage()
    sample = CudaMemoryProbe().sample_and_reset(usage)
    assert fake_torch.calls == ["stats", "reset"]
    assert (sample["gpu_peak_allocated_bytes"], sample["gpu_peak_reserved_bytes"], sample["gpu_allocated_bytes"]) == (300, 512, 100)
    assert sample["peak_rss_bytes"] == usage.ru_maxrss * 1024  # from the step's own getrusage, no second call


def test_the_gpu_benchmarks_old_arms_take_the_recorders_calls(fake_torch) -> None:
    """benchmarks/measure_gpu_hook_overhead.py swaps its arms' timer and probe into the recorder, which asks the
    timer whether a step's end is ready (the writer's flush) and passes the probe the step's getrusage: an arm
    missing either failed the hook, which then timed nothing in that arm and the ones after it."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "measure_gpu_hook_overhead.py"
    spec = importlib.util.spec_from_file_location("measure_gpu_hook_overhead", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    fake_torch.cuda.max_memory_allocated = fake_torch.cuda.max_memory_reserved = lambda: 7
    fake_torch.cuda.memory_allocated = lambda: 5
    for name, (timer, probe) in bench.hook_arms().items():
        if timer is not None:
            assert timer.ready(timer.mark()) is True, name
            assert probe.sample_and_reset(process_usage())["gpu_peak_allocated_bytes"] in (300, 7), name

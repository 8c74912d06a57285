"""The hook's step path takes raw marks only: one getrusage per step (CPU time and peak RSS together), no JSON
text until the writer flushes, and the line it then builds is valid JSON with every field of a step record."""

from __future__ import annotations

import json

import pytest

from llmperf_hook.instrument import rank_memory, recorder as recorder_module
from llmperf_hook.instrument.config import HookConfig
from llmperf_hook.instrument.recorder import StepRecorder
from llmperf_hook.instrument.step_line import StepLine, json_float
from llmperf_hook.instrument.step_timer import PerfCounterTimer


def _recorder(tmp_path, monkeypatch: pytest.MonkeyPatch) -> tuple[StepRecorder, list[int]]:
    rec = StepRecorder(HookConfig(run_dir=str(tmp_path), job_id="j", num_steps=100, reference_speed=False))
    calls = [0]
    real = rank_memory.process_usage

    def counted():
        calls[0] += 1
        return real()

    monkeypatch.setattr(recorder_module, "process_usage", counted)
    return rec, calls


def test_step_path_makes_one_getrusage_and_builds_no_text(tmp_path, monkeypatch) -> None:
    rec, calls = _recorder(tmp_path, monkeypatch)
    rec.torch_optimizer_stepped()  # step 0: its meta record, and the start of step 1
    built = []
    monkeypatch.setattr(StepLine, "__call__", lambda self: built.append(self.step) or "{}")
    calls[0] = 0
    for _ in range(10):
        rec.torch_optimizer_stepped()
    assert calls[0] == 10  # one per step: no separate process_time() beside the peak-RSS read
    assert built == []  # nothing formatted on the step path (64 records or 1 s per flush)
    rec.writer.flush()
    assert built == list(range(11))  # step 0 waited in the buffer too


def test_built_line_is_a_full_step_record(tmp_path, monkeypatch) -> None:
    rec, _ = _recorder(tmp_path, monkeypatch)
    for _ in range(3):
        rec.torch_optimizer_stepped()
    rec.writer.close()
    lines = [json.loads(x) for x in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    steps = [r for r in lines if r["kind"] == "step"]
    assert [s["step"] for s in steps] == [0, 1, 2]
    usage = rank_memory.process_usage()
    for s in steps[1:]:
        assert 0 < s["wall_time_s"] < 1 and 0 <= s["cpu_time_s"] < 1
        assert 0 < s["peak_rss_bytes"] <= usage.ru_maxrss * 1024
        assert (s["framework"], s["job_id"], s["timer"], s["device"]) == ("torch", "j", "perf_counter", "cpu")
        assert s["warmup"] is False and s["profiled"] is False and s["time_unix_s"] > 1.7e9
    assert steps[0]["wall_time_s"] is None  # no start mark before the first step (no forward was seen)


def test_line_writes_null_for_missing_and_non_finite_values() -> None:
    line = StepLine(lambda: '{"kind":"step"', PerfCounterTimer(), 4, None, 2.0, None, 1.0, True, False,
                    {"peak_rss_bytes": None}, float("nan"))
    record = json.loads(line())
    assert (record["wall_time_s"], record["cpu_time_s"], record["peak_rss_bytes"], record["time_unix_s"]) == \
        (None, None, None, None)
    assert record["warmup"] is True and record["step"] == 4 and line.ready()
    assert [json_float(v) for v in (float("inf"), -float("inf"), 0.25)] == ["null", "null", "0.25"]


def test_a_forked_child_writes_its_own_pid_and_none_of_its_parents_records(tmp_path, monkeypatch) -> None:
    """The pid in every record is cached and refreshed at fork (os.register_at_fork), not read per record (a system
    call); the child drops the records its parent had waiting, which the parent writes itself."""
    import os

    rec, _ = _recorder(tmp_path, monkeypatch)
    rec.torch_optimizer_stepped()  # step 0 waits in the buffer
    child = os.fork()
    if child == 0:  # one step of its own, flushed, then out without the parent's atexit work
        try:
            rec.torch_optimizer_stepped()
            rec.writer.flush()
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    calls = []
    monkeypatch.setattr(os, "getpid", lambda: calls.append(1) or 1)
    for _ in range(3):
        rec.torch_optimizer_stepped()
    rec.writer.flush()
    assert calls == []
    steps = [(r["pid"], r["step"]) for r in map(json.loads, (tmp_path / "rank0.jsonl").read_text().splitlines())
             if r["kind"] == "step"]
    assert sorted(steps) == sorted([(rec._pid, s) for s in range(4)] + [(child, 1)])


def test_a_forked_child_takes_the_rank_files_lock_as_a_writer_of_its_own(tmp_path, monkeypatch) -> None:
    """flock locks an open file description, which a forked child shares with its parent: writing through the
    inherited descriptor, a child wrote while its parent held the lock. It now opens the file itself and waits."""
    import os
    import time

    from llmperf_hook.instrument.jsonl_writer import _exclusive

    rec, _ = _recorder(tmp_path, monkeypatch)
    rec.torch_optimizer_stepped()
    rec.writer.flush()  # the parent's descriptor is open
    with _exclusive(rec.writer._fd):
        child = os.fork()
        if child == 0:
            code = 1
            try:
                rec.torch_optimizer_stepped()
                rec.writer.flush()
                code = 0
            finally:
                os._exit(code)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert os.waitpid(child, os.WNOHANG) == (0, 0), "the child wrote while the parent held the lock"
            time.sleep(0.02)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    pids = [r["pid"] for r in map(json.loads, (tmp_path / "rank0.jsonl").read_text().splitlines())
            if r["kind"] == "step"]
    assert pids == [rec._pid, child]


def test_a_forked_child_leaves_its_parents_exit_work_to_the_parent(tmp_path, monkeypatch) -> None:
    """The profile window's op samples are written at exit (recorder._run_at_exit): a forked child that leaves
    through atexit (not a multiprocessing worker, which skips it) wrote the parent's samples a second time."""
    import os

    rec, _ = _recorder(tmp_path, monkeypatch)
    rec._at_exit.append(lambda: rec.writer.write(rec._base("op", op_class="gemm"), flush=True))
    child = os.fork()
    if child == 0:
        try:
            rec._run_at_exit()
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    rec._run_at_exit()
    ops = [r["pid"] for r in map(json.loads, (tmp_path / "rank0.jsonl").read_text().splitlines()) if r["kind"] == "op"]
    assert ops == [rec._pid]


@pytest.mark.parametrize("num_steps, stop_after, ends_at", [(3, None, 3), (5, 2, 2), (2, 4, 4), (1, 1, 1)])
def test_the_step_paths_shortcut_still_ends_and_stops_where_it_must(tmp_path, monkeypatch, num_steps: int,
                                                                    stop_after: int | None, ends_at: int) -> None:
    """_after_step returns at once below the first step where something happens (recorder._quiet_until): the end
    record after num_steps, the stop at --stop-after (before num_steps too), the hook finished at the later."""
    rec = StepRecorder(HookConfig(run_dir=str(tmp_path), job_id="j", num_steps=num_steps, stop_after_steps=stop_after,
                                  num_warmup_steps=0, reference_speed=False))
    stopped = []
    # the real one leaves the process (os._exit): here it only says where, and ends the loop
    monkeypatch.setattr(rec, "_stop_job", lambda: stopped.append(rec._num_steps_done) or setattr(rec, "enabled", False))
    while rec.enabled:
        rec.guarded(rec.torch_optimizer_stepped)
    rec.writer.close()
    records = [json.loads(x) for x in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    assert rec._num_steps_done == ends_at and stopped == ([stop_after] if stop_after else [])
    assert [r["step"] for r in records if r["kind"] == "step"] == list(range(min(num_steps, ends_at)))
    assert [r["num_steps"] for r in records if r["kind"] == "end"] == ([num_steps] if num_steps <= ends_at else [])

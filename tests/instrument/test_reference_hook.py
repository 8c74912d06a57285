"""The step hook's machine-speed reading: once per rank, right after its last recorded step (in the `end` record, or
`stop` when --stop-after comes first), never inside a step nor in the job's first iteration (before step 0 it took
100-250 ms from it), CPU jobs only, and never when the config turns it off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.instrument.config import HookConfig
from llmperf_hook.instrument.job_identity import local_world_size
from llmperf_hook.instrument.recorder import StepRecorder


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(x) for p in run_dir.glob("rank*.jsonl") for x in p.read_text().splitlines()]


def _two_steps(tmp_path: Path, **config) -> list[dict]:
    pytest.importorskip("torch")
    rec = StepRecorder(HookConfig(run_dir=str(tmp_path), job_id="j", num_steps=2, num_warmup_steps=0, **config))
    rec.mark_forward()  # the job's first forward: step 0 starts here
    rec.torch_optimizer_stepped()
    rec.mark_forward()
    rec.torch_optimizer_stepped()
    rec.writer.close()
    return _records(tmp_path)


def test_reading_is_taken_after_the_last_recorded_step(tmp_path: Path) -> None:
    records = _two_steps(tmp_path)
    assert [r["kind"] for r in records] == ["meta", "step", "step", "end"]
    meta, steps, end = records[0], records[1:3], records[3]
    ref = end["reference"]
    assert ref["where"] == "hook" and ref["cpu_s"] > 0 and set(ref["parts_s"]) == {"gemm_s", "sweep_s", "dispatch_s"}
    assert "reference" not in meta and end["time_unix_s"] >= steps[-1]["time_unix_s"] + ref["wall_s"] * 0.9
    # the reading takes tens of milliseconds; no step contains it
    assert max(s["wall_time_s"] for s in steps) < ref["wall_s"]


def test_no_reading_when_turned_off(tmp_path: Path) -> None:
    assert not [r for r in _two_steps(tmp_path, reference_speed=False) if "reference" in r]


def test_no_reading_on_a_gpu_job_or_a_disabled_hook(tmp_path: Path) -> None:
    rec = StepRecorder(HookConfig(run_dir=str(tmp_path), job_id="j", num_steps=2))
    assert rec._read_reference("cuda") == {}
    rec.enabled = False
    rec.guarded(rec.mark_forward)
    rec.guarded(rec.torch_optimizer_stepped)
    assert not rec._reference_taken and rec._start_mark is None


def test_local_world_size_from_the_launchers(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"):
        monkeypatch.delenv(key, raising=False)
    assert local_world_size(4) == 4
    monkeypatch.setenv("LOCAL_SIZE", "2")  # DeepSpeed's launcher
    assert local_world_size(8) == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")  # torchrun
    assert local_world_size(8) == 3


def test_a_job_that_ends_before_its_last_recorded_step_is_not_read(tmp_path: Path) -> None:
    """The job's own exit after 2 of --instrument 3 steps: no end record, no reading (at its exit either)."""
    pytest.importorskip("torch")
    rec = StepRecorder(HookConfig(run_dir=str(tmp_path), job_id="j", num_steps=3, num_warmup_steps=0))
    for _ in range(2):
        rec.mark_forward()
        rec.torch_optimizer_stepped()
    rec._run_at_exit()  # what the interpreter's exit runs
    rec.writer.close()
    assert [r["kind"] for r in _records(tmp_path)] == ["meta", "step", "step"] and not rec._reference_taken


def test_stop_after_before_the_last_recorded_step_reads_in_the_stop_record(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """--instrument 3 --stop-after 2: the job leaves at step 2 (job_exit's os._exit, replaced here), and its
    stop record holds the one reading."""
    pytest.importorskip("torch")
    from llmperf_hook.instrument import job_exit

    def leave(code: int) -> None:
        raise SystemExit(code)
    monkeypatch.setattr(job_exit, "exit_like_a_finished_job", leave)
    rec = StepRecorder(HookConfig(run_dir=str(tmp_path), job_id="j", num_steps=3, num_warmup_steps=0,
                                  stop_after_steps=2))
    with pytest.raises(SystemExit):
        for _ in range(3):
            rec.mark_forward()
            rec.torch_optimizer_stepped()
    records = _records(tmp_path)
    assert [r["kind"] for r in records] == ["meta", "step", "step", "stop"]
    assert [r["kind"] for r in records if "reference" in r] == ["stop"] and records[-1]["reference"]["cpu_s"] > 0

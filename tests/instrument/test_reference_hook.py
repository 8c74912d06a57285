"""The step hook's machine-speed reading: once per rank, before step 0 starts (never inside a step), CPU jobs only,
and never when the config turns it off."""

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


def test_reading_is_taken_before_step_zero_starts(tmp_path: Path) -> None:
    records = _two_steps(tmp_path)
    (meta,) = [r for r in records if r["kind"] == "meta"]
    steps = [r for r in records if r["kind"] == "step"]
    ref = meta["reference"]
    assert ref["where"] == "hook" and ref["cpu_s"] > 0 and set(ref["parts_s"]) == {"gemm_s", "sweep_s", "dispatch_s"}
    # the reading takes tens of milliseconds; step 0 (nothing between its marks) does not contain it
    assert len(steps) == 2 and steps[0]["wall_time_s"] < ref["wall_s"]  # it would be longer with the reading inside


def test_no_reading_when_turned_off(tmp_path: Path) -> None:
    (meta,) = [r for r in _two_steps(tmp_path, reference_speed=False) if r["kind"] == "meta"]
    assert "reference" not in meta


def test_no_reading_on_a_gpu_job_or_a_disabled_hook(tmp_path: Path) -> None:
    rec = StepRecorder(HookConfig(run_dir=str(tmp_path), job_id="j", num_steps=2))
    assert rec._read_reference("cuda") == {}
    rec.enabled = False
    rec.guarded(rec.mark_forward)
    assert rec._reference is None and rec._start_mark is None


def test_local_world_size_from_the_launchers(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"):
        monkeypatch.delenv(key, raising=False)
    assert local_world_size(4) == 4
    monkeypatch.setenv("LOCAL_SIZE", "2")  # DeepSpeed's launcher
    assert local_world_size(8) == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")  # torchrun
    assert local_world_size(8) == 3


def test_step_before_any_forward_reads_between_steps_zero_and_one(tmp_path: Path) -> None:
    """DeepSpeed's bf16 optimizer steps torch Adam at initialize, before any forward: step 0 has no start mark, so
    the reading comes after it, and step 1 starts after the reading."""
    pytest.importorskip("torch")
    rec = StepRecorder(HookConfig(run_dir=str(tmp_path), job_id="j", num_steps=2, num_warmup_steps=0))
    rec.torch_optimizer_stepped()  # step 0, no forward before it
    rec.torch_optimizer_stepped()  # step 1, right away
    rec.writer.close()
    records = _records(tmp_path)
    (meta,) = [r for r in records if r["kind"] == "meta"]
    steps = [r for r in records if r["kind"] == "step"]
    assert meta["reference"]["cpu_s"] > 0 and steps[1]["wall_time_s"] < meta["reference"]["wall_s"]

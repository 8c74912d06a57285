"""run_records.summarize_job on record streams the hook really writes."""

from __future__ import annotations

import json

import pytest
from refine_helpers import PREDICTION, write_run

from llmperf_hook.refine.run_records import summarize_job


def _step(step: int, framework: str, wall: float | None, warmup: bool) -> dict:
    return {"kind": "step", "job_id": "j", "rank": 0, "world_size": 1, "framework": framework, "step": step,
            "wall_time_s": wall, "warmup": warmup, "profiled": False, "device": "cuda"}


def test_framework_is_the_owner_of_the_steps_not_of_the_first_record() -> None:
    """DeepSpeed's bf16 optimizer (ZeRO-0) runs one torch optimizer step inside initialize: the hook's torch
    fallback writes the meta record then, and DeepSpeed's engine owns every later step (as on the H100 runs
    c03/c04 of measurements/h100-sxm5-80gb-2026-11-26)."""
    records = [{"kind": "meta", "job_id": "j", "rank": 0, "world_size": 1, "framework": "torch"},
               _step(0, "deepspeed", None, True), _step(1, "deepspeed", 3.1, True),
               _step(2, "deepspeed", 0.18, False), _step(3, "deepspeed", 0.17, False)]
    job = summarize_job(records, "j")
    assert job.framework == "deepspeed"
    assert job.step_time_s == 0.175 and job.num_timed_steps == 2


def test_malformed_records_are_skipped_not_fatal(tmp_path, monkeypatch) -> None:
    """Lines that parse as JSON but carry the wrong types (a rank 'zero', a string time, a list) made refine an
    internal error (int('zero')); they are skipped and counted, and the rest is refined."""
    from llmperf_hook.refine.refine_run import refine_run
    from llmperf_hook.refine.run_records import read_run_dir, well_formed

    good = {"kind": "step", "job_id": "j1", "rank": 0, "world_size": 1, "step": 1, "wall_time_s": 0.02}
    bad = [{**good, "rank": "zero"}, {**good, "wall_time_s": "abc"}, {**good, "step": None}, {**good, "step": 1.5},
           {**good, "wall_time_s": float("nan")}, {**good, "wall_time_s": -1}, {**good, "job_id": ["j1"]},
           {**good, "rank": True}, {"kind": "op", "job_id": "j1", "rank": 0, "op_class": "gemm", "phase": "fwd",
                                    "dims": {"m": "a"}, "seconds": 0.1}]
    assert well_formed(good) and well_formed({**good, "wall_time_s": None})
    assert not any(well_formed(b) for b in bad)
    lines = [json.dumps(x) for x in [good, *bad]] + ["[1, 2]", '"text"', json.dumps({**good, "step": 2})]
    (tmp_path / "rank0.jsonl").write_text("\n".join(lines) + "\n")
    run = read_run_dir(tmp_path)
    assert len(run.records) == 2 and run.num_bad_lines == len(bad) + 2
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    (job,) = refine_run(tmp_path, store_file=tmp_path / "store.sqlite").jobs
    assert job.job.step_times_s == (0.02, 0.02) and any("11 unreadable or malformed" in n for n in job.notes)


def test_prediction_files_that_are_not_objects_are_ignored(tmp_path, monkeypatch) -> None:
    """prediction.json holding a JSON list (a user's file of that name in a reused --run-dir) was an internal
    error ('list' object has no attribute 'get')."""
    from llmperf_hook.refine.refine_run import refine_run

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    (tmp_path / "rank0.jsonl").write_text(json.dumps({"kind": "step", "job_id": "j1", "rank": 0, "step": 1,
                                                      "wall_time_s": 0.02}) + "\n")
    (tmp_path / "prediction.json").write_text("[1, 2]")
    (tmp_path / "jobs" / "j1").mkdir(parents=True)
    (tmp_path / "jobs" / "j1" / "session.json").write_text('"text"')
    (job,) = refine_run(tmp_path).jobs
    assert job.predicted_before_s is None


def test_a_number_the_store_cannot_hold_is_a_malformed_line(tmp_path, monkeypatch) -> None:
    """A step line whose peak memory or step index reads 1e30 (a corrupted or edited line) passed as a number and
    made refine an internal error (OverflowError: SQLite INTEGER is 64-bit); it is skipped and counted."""
    from llmperf_hook.refine.refine_run import refine_run
    from llmperf_hook.refine.run_records import well_formed

    good = {"kind": "step", "job_id": "j1", "rank": 0, "world_size": 1, "step": 1, "wall_time_s": 0.02,
            "peak_rss_bytes": 2 ** 40}
    huge = [{**good, "peak_rss_bytes": 1e30}, {**good, "step": 2 ** 63}, {**good, "world_size": 1e19},
            {**good, "wall_time_s": float("inf")}]
    assert well_formed(good) and not any(well_formed(h) for h in huge)
    lines = [json.dumps(x) for x in [good, *huge, {**good, "step": 2}]]
    (tmp_path / "rank0.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    (job,) = refine_run(tmp_path, store_file=tmp_path / "store.sqlite").jobs
    assert job.job.peak_memory_bytes == 2 ** 40 and any("4 unreadable or malformed" in n for n in job.notes)


@pytest.mark.parametrize("names", [None, "aten::mm", 3, [1], [None, "aten::mm"], {"a": 1}])
def test_an_op_line_whose_torch_names_are_no_strings_is_malformed(tmp_path, monkeypatch, names) -> None:
    """An op line (run --instrument --profile-ops) whose torch_names is not a list of strings made refine an internal
    error (TypeError in ",".join, exit 1 with a traceback; found fuzzing a real ZeRO-3 run's records): it is
    skipped and counted like any malformed line, and the run's steps and its other op samples are stored."""
    from llmperf_hook.refine.refine_run import refine_run

    op = {"kind": "op", "job_id": "j1", "rank": 0, "op_class": "gemm", "phase": "fwd", "dtype": "fp32",
          "dims": {"m": 8, "n": 8, "k": 8}, "seconds": 1e-5, "count": 2, "torch_names": ["aten::mm"]}
    step = {"kind": "step", "job_id": "j1", "rank": 0, "world_size": 1, "step": 1, "wall_time_s": 0.02}
    lines = [step, op, {**op, "dims": {"m": 16, "n": 8, "k": 8}, "torch_names": names}]
    (tmp_path / "rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    (job,) = refine_run(tmp_path, hardware="cpu-test", store_file=tmp_path / "store.sqlite").jobs
    assert job.num_op_samples == 1 and any("1 unreadable or malformed" in n for n in job.notes), job.notes


def test_a_run_folder_of_the_earlier_layout_keeps_its_prediction_when_a_job_joins(tmp_path, monkeypatch) -> None:
    """A run directory written before jobs/<id>/ existed holds its job's prediction.json and session.json at the
    top; a job added by `run --instrument --run-dir` writes its own under jobs/ and leaves the top ones (they are
    not its to overwrite). refine gave the earlier job no prediction once two jobs were there, so it lost its
    calibration; the top session.json names whose the top files are."""
    from llmperf_hook.refine.refine_run import refine_run

    run = write_run(tmp_path / "run", "old", {0: [0.05, 0.02, 0.02, 0.02]})  # prediction.json at the top
    (run / "session.json").write_text(json.dumps({"schema": 1, "job_id": "old", "steps": 4}))
    write_run(run, "new", {0: [0.05, 0.03, 0.03, 0.03]}, prediction=None)
    (run / "jobs" / "new").mkdir(parents=True)
    (run / "jobs" / "new" / "prediction.json").write_text(json.dumps({**PREDICTION, "step_time_s": 0.015}))
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    jobs = {j.job.job_id: j for j in refine_run(run, store_file=tmp_path / "store.sqlite").jobs}
    assert jobs["old"].predicted_before_s == 0.010 and jobs["new"].predicted_before_s == 0.015
    assert jobs["old"].calibration is not None and jobs["old"].calibration.num_runs == 2
    (run / "jobs" / "old").mkdir(parents=True)  # a job of the present layout without a prediction of its own
    assert refine_run(run, store_file=tmp_path / "store.sqlite").jobs[1].predicted_before_s is None

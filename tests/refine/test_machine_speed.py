"""The machine-speed reference: its readings, the profile's record of them, the run summary's median of the ranks'
readings, and refine storing it (not applying it)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from llmperf_hook.instrument.reference_speed import (PROFILE_FILE_NAME, WORKLOAD, ReferenceReading,
                                                     normalise_to_reference, profile_reference_cpu_s,
                                                     profile_reference_doc, reading_from_json, readings_in,
                                                     speed_ratio)
from llmperf_hook.refine.calibration import find_calibration
from llmperf_hook.refine.refine_run import refine_run
from llmperf_hook.refine.run_records import read_run_dir, summarize_job
from refine_helpers import write_run


def reading(cpu_s: float, concurrent: int = 1, where: str = "") -> ReferenceReading:
    return ReferenceReading(cpu_s, {"gemm_s": cpu_s / 3, "sweep_s": cpu_s / 3, "dispatch_s": cpu_s / 3}, 0.07,
                            1.7e9, concurrent, 0.5, WORKLOAD, where)


def test_reading_round_trips_and_other_workloads_are_refused() -> None:
    r = reading(0.008, 2, "hook")
    assert reading_from_json(json.loads(json.dumps(r.to_json()))) == r
    assert reading_from_json({**r.to_json(), "workload": "v0: something else"}) is None
    assert reading_from_json({**r.to_json(), "cpu_s": 0}) is None
    assert reading_from_json({"error": "RuntimeError: x"}) is None and reading_from_json(None) is None
    assert readings_in([r.to_json(), {"cpu_s": 1}, "x"]) == [r] and readings_in({"a": 1}) == []


def test_normalisation_brings_a_slow_minute_back_to_the_profile_speed() -> None:
    assert speed_ratio(0.011, 0.010) == pytest.approx(1.1)
    # 10 % slower machine now: a 66 ms step is a 60 ms step at the profile's speed
    assert normalise_to_reference(0.066, 0.011, 0.010) == pytest.approx(0.060)


def test_profile_doc_keeps_medians_per_concurrency_and_the_drift() -> None:
    doc = profile_reference_doc([reading(0.008), reading(0.010), reading(0.009), reading(0.012, 2), reading(0.011, 2)])
    assert profile_reference_cpu_s(doc, 1) == pytest.approx(0.009)
    assert profile_reference_cpu_s(doc, 2) == pytest.approx(0.0115)
    assert profile_reference_cpu_s(doc, 3) is None
    assert doc["drift_during_profile"] == pytest.approx(0.010 / 0.008) and len(doc["readings"]) == 5
    assert profile_reference_cpu_s({**doc, "workload": "older"}, 1) is None and profile_reference_cpu_s(None) is None


def test_measure_reference_is_one_thread_cpu_time_and_restores_threads() -> None:
    torch = pytest.importorskip("torch")
    from llmperf_hook.instrument.reference_speed import measure_reference

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        r = measure_reference("test")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert set(r.parts_s) == {"gemm_s", "sweep_s", "dispatch_s"} and all(v > 0 for v in r.parts_s.values())
    assert r.cpu_s == pytest.approx(sum(r.parts_s.values())) and 0.0005 < r.cpu_s < 0.5
    assert r.where == "test" and r.concurrent == 1


def with_reference(run: Path, cpu_s: float, concurrent: int) -> Path:
    for path in run.glob("rank*.jsonl"):
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        for x in lines:
            if x["kind"] == "meta":
                x["reference"] = reading(cpu_s, concurrent, "hook").to_json()
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run


def write_profile(home: Path, readings: list[ReferenceReading]) -> None:
    prof = home / "profiles" / "cpu-test"
    prof.mkdir(parents=True)
    (prof / "profile.json").write_text("{}")
    (prof / PROFILE_FILE_NAME).write_text(json.dumps(profile_reference_doc(readings)))


def test_summary_takes_the_median_of_the_ranks_readings(tmp_path: Path) -> None:
    run = with_reference(write_run(tmp_path / "r", "j1", {0: [0.5, 0.02], 1: [0.5, 0.02]}), 0.011, 2)
    job = summarize_job(read_run_dir(run).records, "j1")
    assert job.reference_cpu_s == pytest.approx(0.011) and job.reference_concurrent == 2
    plain = summarize_job(read_run_dir(write_run(tmp_path / "p", "j2", {0: [0.5, 0.02]})).records, "j2")
    assert plain.reference_cpu_s is None


def test_summary_reads_the_reading_from_the_end_and_stop_records(tmp_path: Path) -> None:
    """The hook writes its reading in the `end` record (`stop` when --stop-after comes first), after the last
    recorded step (before 28 Nov 2026: in the meta record, read before step 0)."""
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.02], 1: [0.5, 0.02]})
    for rank, cpu_s, kind in ((0, 0.010, "end"), (1, 0.014, "stop")):
        with open(run / f"rank{rank}.jsonl", "a") as f:
            f.write(json.dumps({"schema": 1, "kind": kind, "job_id": "j1", "rank": rank,
                                "reference": reading(cpu_s, 2, "hook").to_json()}) + "\n")
    job = summarize_job(read_run_dir(run).records, "j1")
    assert job.reference_cpu_s == pytest.approx(0.012) and job.reference_concurrent == 2


def test_refine_records_the_reading_and_calibrates_from_the_raw_step(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The reading does not track this machine's step-time drift (bench_cpu_testbed.py --drift-check), so it is
    stored with the run for later analysis and never changes the calibration."""
    home = tmp_path / "home"
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    write_profile(home, [reading(0.009), reading(0.010, 2)])
    run = with_reference(write_run(tmp_path / "r", "j1", {0: [0.5, 0.022, 0.022], 1: [0.5, 0.022, 0.022]}), 0.011, 2)
    refine_run(run)
    assert find_calibration("cpu-test", "local-cpu", "deepspeed").step_time_scale == pytest.approx(2.2)
    with sqlite3.connect(home / "store.sqlite") as conn:
        (stored,) = conn.execute("SELECT reference_cpu_s FROM refine_runs WHERE job_id = 'j1'").fetchone()
    assert stored == pytest.approx(0.011)


def test_concurrent_readings_come_from_separate_processes() -> None:
    pytest.importorskip("torch")
    from llmperf_hook.instrument.reference_speed import measure_reference_concurrent

    got = measure_reference_concurrent(2, "test-2", start_delay_s=2.0)
    assert len(got) == 2 and all(r.concurrent == 2 and r.where == "test-2" and r.cpu_s > 0 for r in got)

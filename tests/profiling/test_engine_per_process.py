"""DeepSpeed's engine term is measured with each engine in a process of its own (cpu_engine_workers.deepspeed_child),
as a real job runs it: glibc's malloc thresholds only ever rise within a process, so an engine measured after fifteen
others (the method until 27 Nov 2026) paid none of the page faults a fresh job's DeepSpeed step pays (bf16 testbed
steps predicted 14-16 % low, /work/notes/h159.md). The framework file says which method measured it, its engine steps
are keyed apart in the step-time history, and the testbed re-measures a file of the earlier method."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmperf_hook.profile import cpu_engine_cost as ec
from llmperf_hook.profile import cpu_engine_workers as ew
from llmperf_hook.profile.cpu_framework import FORMAT_VERSION, carried_history, measured_steps

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
import testbed_setup as setup  # noqa: E402
from testbed_configs import CLUSTER, DTYPES  # noqa: E402

TINY: tuple[tuple[int, int, int, int], ...] = ((1, 32, 16, 1),)


def test_each_engine_is_measured_in_a_process_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("deepspeed")
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    monkeypatch.setattr(ec, "ENGINE_WARMUP", 1)
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(key, value)
    workers = ew._start_engine_workers("fp32", TINY, 2)  # a reading plan's shapes and repetitions (cpu_reading_plan)
    try:
        assert [zero for zero, _, _ in workers] == [0, 1, 2, 3]
        pids = {proc.pid for _, _, proc in workers}
        assert len(pids) == 4 and os.getpid() not in pids
        for _, conn, _ in workers:
            conn.send("go")
            fwd_bwd_s, step_s = conn.recv()
            assert fwd_bwd_s > 0 and step_s > 0
    finally:
        ew.stop_engine_workers(workers)
    assert [proc.exitcode for _, _, proc in workers] == [0, 0, 0, 0]  # each ended when told, none killed


def test_measured_steps_key_the_engine_method_apart() -> None:
    entry = {"samples": [{"shape": [1, 128, 128, 2], "fwd_bwd_s": 0.01}],
             "deepspeed_step": {"0": {"samples": [[1000, 0.02, 0.005, 0.018, 0.004]]}}}
    old = {"format_version": FORMAT_VERSION, "dtypes": {"bf16": entry}}
    new = {**old, "engine_method": ec.ENGINE_METHOD}
    assert set(measured_steps(old)) == {"bf16/fwd_bwd/1x128x128x2", "bf16/deepspeed_z0/0"}
    assert set(measured_steps(new)) == {"bf16/fwd_bwd/1x128x128x2", "bf16/deepspeed_process_z0/0"}
    # the history a re-measured file carries compares only the steps both methods measured alike
    (then,) = carried_history(old)
    assert set(then["steps"]) & set(measured_steps(new)) == {"bf16/fwd_bwd/1x128x128x2"}


def _complete_file(home: Path, engine_method: str | None) -> Path:
    entry = {"per_unit_s": 1e-5, "compute_scale": 0.9, "optimizer_per_tensor_s": 1e-5, "optimizer_per_param_s": 3e-9,
             "readings": [{}, {}, {}], "concurrency_slowdown": {"2": 1.02}, "reading_wall_per_cpu": [1.0, 1.01, 1.0],
             "deepspeed_step": {"0": {"per_step_s": 2e-3, "per_param_s": 1e-9}},
             "rank_transport": {"per_byte_s": 9e-10}, "tiny_isolated_diff_s": 3.5e-3}
    # every dtype the testbed trains in (testbed_setup.framework_cost_gaps checks each since af691801): a file of
    # bf16 alone has an fp32 gap, which re-measures it whatever its engine method and stops a busy start
    doc = {"format_version": FORMAT_VERSION, "loads_1m": [0.5], "load_avg_1m": 0.5,
           "dtypes": {dtype: entry for dtype in DTYPES},
           "measured_utc": str(time.perf_counter_ns())}
    if engine_method:
        doc["engine_method"] = engine_method
    path = home / "profiles" / CLUSTER / "framework_overhead.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("method, measured_again", [(None, True), (ec.ENGINE_METHOD, False)])
def test_the_testbed_re_measures_a_file_of_engines_measured_in_one_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str | None, measured_again: bool) -> None:
    _complete_file(tmp_path, method)
    calls = []

    def fake_run(argv, **kwargs):
        calls.append(argv)
        _complete_file(tmp_path, ec.ENGINE_METHOD)
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(setup.subprocess, "run", fake_run)
    setup.refresh_framework_cost(tmp_path, 0.3)
    assert bool(calls) == measured_again


def test_a_busy_start_keeps_a_file_of_the_earlier_method_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    _complete_file(tmp_path, None)
    monkeypatch.setattr(setup.subprocess, "run", lambda *args, **kwargs: pytest.fail("measured on a busy machine"))
    setup.refresh_framework_cost(tmp_path, 6.0)
    said = capsys.readouterr().out
    assert "kept; rerun when quieter" in said and "engines measured all in one process" in said


def _gappy_file(tmp_path: Path, box_s: float) -> Path:
    path = tmp_path / "framework_overhead.json"
    path.write_text(json.dumps({"dtypes": {"fp32": {"readings": [{}, {}, {}], "time_box_s": box_s,
                                                    "concurrency_slowdown": {"2": 1.0}}}}))
    return path


def test_the_notes_say_what_measures_the_missing_terms(tmp_path: Path) -> None:
    """A larger --budget helps only while it cut the box below its share of RESERVED_S; the testbed says its own."""
    from llmperf_hook.profile.cpu_framework_readings import time_box_notes

    (cut,) = time_box_notes(_gappy_file(tmp_path, 20.0), ["fp32"])
    assert "DeepSpeed's engine step" in cut and "a larger --budget gives it more" in cut
    (full,) = time_box_notes(_gappy_file(tmp_path, 100.0), ["fp32"])
    assert "whatever the --budget" in full and "quieter" in full and "larger --budget" not in full
    (testbed,) = setup.framework_cost_gaps(_gappy_file(tmp_path, 240.0), ["fp32"])
    assert "--budget" not in testbed and f"{setup.FRAMEWORK_BOX_S:.0f} s per dtype" in testbed


@pytest.mark.parametrize("outcome", ["nothing measured", "failed"])
def test_a_re_measurement_that_gets_nothing_keeps_the_file_it_was_to_replace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcome: str) -> None:
    from llmperf_hook.profile import cpu_framework_readings as cfr

    path = _complete_file(tmp_path, ec.ENGINE_METHOD)
    before = path.read_text()
    seen = []

    def measure(*args):
        seen.append(path.is_file())  # moved out of the predictions' way while it measures
        if outcome == "failed":
            raise KeyboardInterrupt
        return {"dtypes": {}}

    monkeypatch.setattr(cfr, "_measure_dtypes", measure)
    if outcome == "failed":
        with pytest.raises(KeyboardInterrupt):
            cfr.write_framework_overhead(path.parent, CLUSTER, ["bf16"], 1, keep_earlier=True)
    else:
        cfr.write_framework_overhead(path.parent, CLUSTER, ["bf16"], 1, keep_earlier=True)
    assert seen == [False] and path.read_text() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_llmperf_profile_drops_the_earlier_file_a_re_fit_made_stale_when_it_measures_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """profile_fit calls it right after writing a new fit: the earlier file's residual is against the old one."""
    from llmperf_hook.profile import cpu_framework_readings as cfr

    path = _complete_file(tmp_path, ec.ENGINE_METHOD)
    monkeypatch.setattr(cfr, "_measure_dtypes", lambda *args: {"dtypes": {}})
    cfr.write_framework_overhead(path.parent, CLUSTER, ["bf16"], 1)
    assert list(path.parent.iterdir()) == []
    assert cfr.time_box_notes(path, ["bf16"])[0].startswith("framework cost bf16: not measured")


def test_a_re_measurement_replaces_the_file_whole_with_its_history(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.profile import cpu_framework_readings as cfr

    path = _complete_file(tmp_path, ec.ENGINE_METHOD)
    fresh = {"dtypes": {"bf16": {"per_unit_s": 2e-5}}, "load_avg_1m": 0.4}
    monkeypatch.setattr(cfr, "_measure_dtypes", lambda *args: dict(fresh))
    monkeypatch.setattr(cfr, "describe_spread", lambda doc: "")
    cfr.write_framework_overhead(path.parent, CLUSTER, ["bf16"], 1)
    doc = json.loads(path.read_text())
    assert doc["dtypes"] == fresh["dtypes"] and "history" in doc
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_the_testbed_puts_the_earlier_file_back_when_its_re_measurement_is_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL ends write_framework_overhead with the earlier file still aside and a non-zero status (a traceback of
    subprocess.run's check before); the testbed puts it back and stops saying so."""
    path = _complete_file(tmp_path, None)
    before = path.read_text()

    def killed(argv, **kwargs):
        os.replace(path, path.with_name(path.name + ".replaced"))
        return subprocess.CompletedProcess(argv, -9)

    monkeypatch.setattr(setup.subprocess, "run", killed)
    with pytest.raises(SystemExit, match="exited with status -9.*the file measured"):
        setup.refresh_framework_cost(tmp_path, 0.3)
    assert path.read_text() == before and sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_a_re_measurement_after_a_killed_one_carries_the_file_it_left_aside(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.profile import cpu_framework_readings as cfr

    path = _complete_file(tmp_path, ec.ENGINE_METHOD)
    earlier = json.loads(path.read_text())
    earlier["dtypes"]["bf16"]["samples"] = [{"shape": [1, 128, 128, 2], "fwd_bwd_s": 0.01}]
    path.write_text(json.dumps(earlier))
    os.replace(path, path.with_name(path.name + ".replaced"))  # what a SIGKILL mid-measurement leaves
    monkeypatch.setattr(cfr, "_measure_dtypes", lambda *args: {"dtypes": {"bf16": {"per_unit_s": 2e-5}}})
    monkeypatch.setattr(cfr, "describe_spread", lambda doc: "")
    cfr.write_framework_overhead(path.parent, CLUSTER, ["bf16"], 1)
    assert json.loads(path.read_text())["history"] == carried_history(earlier) != []
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_a_failed_write_keeps_the_earlier_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.profile import cpu_framework_readings as cfr

    path = _complete_file(tmp_path, ec.ENGINE_METHOD)
    before = path.read_text()
    monkeypatch.setattr(cfr, "_measure_dtypes", lambda *args: {"dtypes": {"bf16": {}}, "bad": {1, 2}})
    with pytest.raises(TypeError):  # a set is not JSON: the write fails half-way
        cfr.write_framework_overhead(path.parent, CLUSTER, ["bf16"], 1, keep_earlier=True)
    assert path.read_text() == before and sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_the_engine_process_creates_no_shm_buffer_a_launcher_s_local_size_would_ask_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"LOCAL_SIZE": "1", "PATH": "/bin"}
    monkeypatch.setattr(ew.os, "environ", env)
    ew._one_rank_env()
    assert "LOCAL_SIZE" not in env and env["WORLD_SIZE"] == "1" and env["RANK"] == "0"

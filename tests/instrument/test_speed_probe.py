"""The speed probe (instrument/speed_probe.py): a job's own GPT-layer shapes timed by the profiler's sampler code in
fp32 and bf16, read by the hook beside the reference workload when LLMPERF_SPEED_PROBE names them; and the drift
check's measure of whether a reading tracks the step time (benchmarks/testbed_checks.drift_tracking)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from llmperf_hook.instrument.config import HookConfig
from llmperf_hook.instrument.speed_probe import (PROBE_ENV, ProbeSpec, measure_probe, parse_spec, probe_from_env,
                                                 probe_shapes)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
TINY = ProbeSpec(hidden=32, heads=2, seq=16, mbs=1)


def test_spec_text_round_trips_and_bad_text_says_the_form() -> None:
    assert parse_spec(TINY.text()) == TINY
    for bad in ("256,4,128", "a,b,c,d", ""):
        with pytest.raises(ValueError, match="hidden,heads,seq,mbs"):
            parse_spec(bad)
    with pytest.raises(ValueError, match="multiple of heads"):
        ProbeSpec(hidden=30, heads=4, seq=16, mbs=1)


def test_shapes_are_the_layers_in_the_samplers_contract() -> None:
    pytest.importorskip("torch")
    from llmperf_hook.profile.op_sampler import make_runner

    shapes = probe_shapes(ProbeSpec(hidden=64, heads=4, seq=32, mbs=2))
    assert [s.dims.get("n") for s in shapes if s.op_class == "gemm"] == [192, 192, 256]
    assert all(s.dims.get("m", 64) == 64 for s in shapes)  # tokens = mbs x seq
    for s in shapes:  # every shape builds with the sampler's own runner (its dims keys are the contract)
        make_runner(s.op_class, s.dims, s.phase == "bwd", "fp32", "cpu")()


def test_probe_times_each_dtype_and_restores_the_threads() -> None:
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    reading = measure_probe(TINY, target_s=0.001)
    assert torch.get_num_threads() == threads
    assert set(reading.probe_s) == {"fp32", "bf16"} and reading.spec == TINY.text()
    for dtype, shapes in reading.shapes_s.items():
        assert len(shapes) == len(probe_shapes(TINY)) and all(v > 0 for v in shapes.values())
        assert math.isclose(reading.probe_s[dtype], sum(shapes.values()))
    assert json.loads(json.dumps(reading.to_json()))["probe_s"] == dict(reading.probe_s)


def test_probe_from_env_only_when_named_and_an_error_never_raises() -> None:
    pytest.importorskip("torch")
    assert probe_from_env({}) is None
    assert "error" in probe_from_env({PROBE_ENV: "256,4"})
    assert set(probe_from_env({PROBE_ENV: TINY.text()})["probe_s"]) == {"fp32", "bf16"}


def test_hook_reading_carries_the_probe_and_the_drift_check_reads_it(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from testbed_runs import hook_probe_s

    monkeypatch.setenv(PROBE_ENV, TINY.text())
    records = _one_recorded_step(tmp_path)
    end = next(r for r in records if r["kind"] == "end")
    probe = end["reference"]["extra"]["probe"]
    assert probe["spec"] == TINY.text()
    assert hook_probe_s(records, "j") == probe["probe_s"] and hook_probe_s(records, "other") == {}


def test_only_the_hooks_reading_times_the_probe_and_unset_it_is_not_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from llmperf_hook.instrument import speed_probe
    from llmperf_hook.instrument.reference_speed import HOOK_WHERE, measure_reference

    loaded = subprocess.run([sys.executable, "-c", "import sys, llmperf_hook.instrument.reference_speed; "
                             f"print({speed_probe.__name__!r} in sys.modules)"], capture_output=True, text=True)
    assert loaded.stdout.strip() == "False", loaded.stderr  # the hook imports reference_speed, not the probe
    monkeypatch.delenv(PROBE_ENV, raising=False)
    monkeypatch.delitem(sys.modules, speed_probe.__name__)  # restored after the test
    assert measure_reference(HOOK_WHERE).extra == {} and speed_probe.__name__ not in sys.modules
    calls: list[dict] = []
    monkeypatch.setattr(speed_probe, "probe_from_env", lambda env: calls.append(dict(env)) or {"probe_s": {}})
    monkeypatch.setitem(sys.modules, speed_probe.__name__, speed_probe)
    monkeypatch.setenv(PROBE_ENV, TINY.text())
    assert measure_reference("profile-start").extra == {} and not calls  # the profile's readings never run it
    assert measure_reference(HOOK_WHERE).extra == {"probe": {"probe_s": {}}} and calls == [{PROBE_ENV: TINY.text()}]


def test_a_failing_probe_loses_only_the_probe_not_the_steps_or_the_reference(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from llmperf_hook.instrument import speed_probe

    def broken(*_args, **_kw):
        raise RuntimeError("probe kernel failed")

    monkeypatch.setattr(speed_probe, "measure_probe", broken)
    monkeypatch.setenv(PROBE_ENV, TINY.text())
    records = _one_recorded_step(tmp_path)
    assert [r["kind"] for r in records].count("step") == 1
    reference = next(r for r in records if r["kind"] == "end")["reference"]
    assert reference["cpu_s"] > 0 and reference["extra"]["probe"] == {"error": "RuntimeError: probe kernel failed"}


def test_the_probe_stops_at_its_wall_limit() -> None:
    pytest.importorskip("torch")
    from llmperf_hook.profile.op_sampler import OverLimit

    with pytest.raises(OverLimit):  # the first shape's first call already passes a limit of 0 s
        measure_probe(TINY, target_s=0.001, limit_s=0.0)


def test_drift_rows_saved_whole_and_summarised_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from testbed_checks import report_drift_file, save_rows

    rows = {1: [{"cpu_s": 0.1 * s, "measured_s": 0.11 * s, "change": 0.01, "ref": 0.006 * s} for s in (1, 1.2, 0.9)]}
    path = tmp_path / "drift-x.json"
    save_rows(path, {1: rows[1][:1]})
    save_rows(path, rows)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    report_drift_file(path)
    out = capsys.readouterr().out
    assert "config 1" in out and "3 runs" in out and "ref " in out


def test_drift_tracking_normalises_by_a_reading() -> None:
    from testbed_checks import drift_tracking

    speed = [1.0, 1.3, 0.9, 1.2, 1.05]
    rows = [{"cpu_s": 0.1 * s, "tracks": 0.002 * s, "flat": 0.002 * (1, 1.1, 1, 0.95, 1.05)[i]}
            for i, s in enumerate(speed)]
    tracks, flat = drift_tracking(rows, "tracks"), drift_tracking(rows, "flat")
    assert tracks["corr"] > 0.999 and tracks["sd_normalised"] < 1e-9 < tracks["sd_raw"]
    assert flat["sd_normalised"] > 0.5 * flat["sd_raw"] and abs(flat["corr"]) < 0.9
    assert drift_tracking(rows[:2], "tracks") is None


def _one_recorded_step(run_dir: Path) -> list[dict]:
    """A job of one recorded step through the real step hook (StepRecorder, no warm-up): the records its rank wrote."""
    from llmperf_hook.instrument.recorder import StepRecorder

    rec = StepRecorder(HookConfig(run_dir=str(run_dir), job_id="j", num_steps=1, num_warmup_steps=0))
    rec.mark_forward()
    rec.torch_optimizer_stepped()
    rec.writer.close()
    return [json.loads(x) for p in run_dir.glob("rank*.jsonl") for x in p.read_text().splitlines()]

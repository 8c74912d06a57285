"""The speed probe (instrument/speed_probe.py): a job's own GPT-layer shapes timed by the profiler's sampler code in
fp32 and bf16, read by the hook beside the reference workload when LLMPERF_SPEED_PROBE names them; and the drift
check's measure of whether a reading tracks the step time (benchmarks/testbed_checks.drift_tracking)."""

from __future__ import annotations

import json
import math
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
    from llmperf_hook.instrument.recorder import StepRecorder
    from testbed_runs import hook_probe_s

    monkeypatch.setenv(PROBE_ENV, TINY.text())
    rec = StepRecorder(HookConfig(run_dir=str(tmp_path), job_id="j", num_steps=1, num_warmup_steps=0))
    rec.mark_forward()
    rec.torch_optimizer_stepped()
    rec.writer.close()
    records = [json.loads(x) for p in tmp_path.glob("rank*.jsonl") for x in p.read_text().splitlines()]
    end = next(r for r in records if r["kind"] == "end")
    probe = end["reference"]["extra"]["probe"]
    assert probe["spec"] == TINY.text()
    assert hook_probe_s(records, "j") == probe["probe_s"] and hook_probe_s(records, "other") == {}


def test_drift_tracking_normalises_by_a_reading() -> None:
    from testbed_checks import drift_tracking

    speed = [1.0, 1.3, 0.9, 1.2, 1.05]
    rows = [{"cpu_s": 0.1 * s, "tracks": 0.002 * s, "flat": 0.002 * (1, 1.1, 1, 0.95, 1.05)[i]}
            for i, s in enumerate(speed)]
    tracks, flat = drift_tracking(rows, "tracks"), drift_tracking(rows, "flat")
    assert tracks["corr"] > 0.999 and tracks["sd_normalised"] < 1e-9 < tracks["sd_raw"]
    assert flat["sd_normalised"] > 0.5 * flat["sd_raw"] and abs(flat["corr"]) < 0.9
    assert drift_tracking(rows[:2], "tracks") is None

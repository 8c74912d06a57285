"""The CPU testbed's re-measurement of the framework cost (benchmarks/testbed_setup.refresh_framework_cost): a file
without the DeepSpeed engine, concurrency or rank-transport term is re-measured, in a box of FRAMEWORK_BOX_S per
dtype (not the profile command's 120 s, in which the 27 Nov 21:20 file lost the engine and transport terms), and a
re-measured file that still lacks one, or one the machine is too busy to re-measure, stops the benchmark instead of
scoring predictions without it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
import testbed_setup as setup  # noqa: E402
from testbed_configs import CLUSTER  # noqa: E402

from llmperf_hook.profile.cpu_engine_cost import ENGINE_METHOD  # noqa: E402
from llmperf_hook.profile.cpu_framework import FORMAT_VERSION  # noqa: E402


def _entry(complete: bool) -> dict:
    entry = {"per_unit_s": 1e-5, "compute_scale": 0.9, "optimizer_per_tensor_s": 1e-5, "optimizer_per_param_s": 3e-9,
             "readings": [{}, {}, {}], "concurrency_slowdown": {"2": 1.02}, "reading_wall_per_cpu": [1.0, 1.01, 1.22]}
    if complete:
        entry |= {"deepspeed_step": {"0": {"per_step_s": 2e-3, "per_param_s": 1e-9}},
                  "rank_transport": {"per_byte_s": 9e-10}, "tiny_isolated_diff_s": 3.5e-3}
    return entry


def _write(home: Path, complete: bool, load: float = 0.5) -> Path:
    path = home / "profiles" / CLUSTER / "framework_overhead.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format_version": FORMAT_VERSION, "loads_1m": [load], "load_avg_1m": load,
                                "engine_method": ENGINE_METHOD, "measured_utc": str(time.perf_counter_ns()),
                                "dtypes": {"bf16": _entry(complete), "fp32": _entry(complete)}}))
    return path


def _write_earlier_reading(home: Path) -> None:
    """A complete file of the per-op-unit reading before session 18 (the tiny pair against the profile's
    extrapolated prediction): every term present, no tiny_isolated_diff_s."""
    path = _write(home, complete=True)
    doc = json.loads(path.read_text())
    for entry in doc["dtypes"].values():
        del entry["tiny_isolated_diff_s"]
    path.write_text(json.dumps(doc))


class FakeMeasure:
    """subprocess.run of the re-measurement: records the code and writes the file it would leave."""

    def __init__(self, home: Path, complete: bool) -> None:
        self.home, self.complete, self.calls = home, complete, []

    def __call__(self, argv, **kwargs):
        self.calls.append(argv)
        _write(self.home, self.complete)
        return subprocess.CompletedProcess(argv, 0)


def test_a_complete_file_measured_quiet_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture) -> None:
    _write(tmp_path, complete=True)
    fake = FakeMeasure(tmp_path, True)
    monkeypatch.setattr(setup.subprocess, "run", fake)
    setup.refresh_framework_cost(tmp_path, 0.3)
    assert fake.calls == [] and "kept" in capsys.readouterr().out


def test_a_file_without_the_engine_terms_is_re_measured_in_the_testbeds_box(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, complete=False)
    assert any("DeepSpeed's engine step" in g for g in setup.framework_cost_gaps(path, ["bf16", "fp32"]))
    fake = FakeMeasure(tmp_path, True)
    monkeypatch.setattr(setup.subprocess, "run", fake)
    setup.refresh_framework_cost(tmp_path, 0.3)
    (argv,) = fake.calls
    assert argv[-2:] == ["bf16", "fp32"]
    assert f"time.perf_counter() + {setup.FRAMEWORK_BOX_S} * len(sys.argv[2:])" in argv[2]
    assert setup.FRAMEWORK_BOX_S >= 180  # 60 s per dtype lost the engine and transport terms (module docstring)
    assert setup.framework_cost_gaps(path, ["bf16", "fp32"]) == []


def test_a_re_measured_file_still_without_a_term_stops_the_benchmark(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, complete=False)
    monkeypatch.setattr(setup.subprocess, "run", FakeMeasure(tmp_path, False))
    with pytest.raises(SystemExit) as stop:
        setup.refresh_framework_cost(tmp_path, 0.3)
    message = str(stop.value)
    assert "incomplete" in message and "DeepSpeed's engine step" in message and "rerun when quieter" in message


def test_a_busy_machine_stops_on_an_incomplete_file_and_says_what_it_lacks(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Too busy to re-measure a file with gaps: scoring its predictions would measure the missing terms (the 21:18
    run of 2026-11-27 scored 27.8 % on a file without the engine and transport terms), so the benchmark stops."""
    _write(tmp_path, complete=False)
    fake = FakeMeasure(tmp_path, True)
    monkeypatch.setattr(setup.subprocess, "run", fake)
    with pytest.raises(SystemExit) as stop:
        setup.refresh_framework_cost(tmp_path, 99.0)
    message = str(stop.value)
    assert fake.calls == [] and "busy now" in message and "gloo's transport" in message and "rerun" in message


def test_a_busy_machine_keeps_a_complete_file_measured_by_older_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture) -> None:
    _write_earlier_reading(tmp_path)
    fake = FakeMeasure(tmp_path, True)
    monkeypatch.setattr(setup.subprocess, "run", fake)
    setup.refresh_framework_cost(tmp_path, 99.0)
    assert fake.calls == [] and "busy now" in capsys.readouterr().out


def test_a_complete_file_of_the_earlier_per_unit_reading_is_re_measured(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A file whose per-op-unit cost was the tiny pair against the profile's extrapolated prediction (no
    tiny_isolated_diff_s: before session 18) is re-measured with this code's paired, isolated reading."""
    _write_earlier_reading(tmp_path)
    fake = FakeMeasure(tmp_path, True)
    monkeypatch.setattr(setup.subprocess, "run", fake)
    setup.refresh_framework_cost(tmp_path, 0.3)
    assert len(fake.calls) == 1


def test_a_file_measured_while_its_process_waited_for_a_core_is_not_accepted(tmp_path: Path) -> None:
    """Readings with wall / CPU time 2-5 (load 9-12) had CPU times inflated 18-35 %: such a file is a gap."""
    path = _write(tmp_path, complete=True)
    assert setup.framework_cost_gaps(path, ["bf16", "fp32"]) == []
    doc = json.loads(path.read_text())
    doc["dtypes"]["bf16"]["reading_wall_per_cpu"] = [3.64, 3.93, 2.58, 1.97]
    path.write_text(json.dumps(doc))
    (gap,) = setup.framework_cost_gaps(path, ["bf16", "fp32"])
    assert "bf16" in gap and "waited for a core" in gap and "3.1" in gap


def test_a_re_measurement_that_got_no_reading_stops_the_benchmark_and_keeps_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """write_framework_overhead puts the file it was to replace back when no reading of any dtype ended in its box (a
    machine that got busy): the benchmark stops saying so, and the earlier file is there as it was."""
    path = _write(tmp_path, complete=False)
    before = path.read_text()
    monkeypatch.setattr(setup.subprocess, "run", lambda argv, **kwargs: subprocess.CompletedProcess(argv, 0))
    with pytest.raises(SystemExit) as stop:
        setup.refresh_framework_cost(tmp_path, 0.3)
    assert "no reading of any dtype" in str(stop.value) and "kept as it was" in str(stop.value)
    assert path.read_text() == before


def _write_earlier_reading_path(home: Path) -> Path:
    _write_earlier_reading(home)
    return home / "profiles" / CLUSTER / "framework_overhead.json"


def _drop_bf16(path: Path) -> None:
    doc = json.loads(path.read_text())
    del doc["dtypes"]["bf16"]
    path.write_text(json.dumps(doc))


class FakeMeasureFp32Only(FakeMeasure):
    """A re-measurement in which no bf16 reading ended in its box (an AVX2-only EPYC: ~2.5-3 min of CPU a reading)."""

    def __call__(self, argv, **kwargs):
        done = super().__call__(argv, **kwargs)
        _drop_bf16(_write(self.home, self.complete))
        return done


def test_asked_to_re_measure_a_file_without_a_dtype_the_configurations_train_in_it_measures_that_dtype(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before session 21 a complete fp32-only file was kept and bf16 scored without its framework terms, unsaid."""
    _drop_bf16(_write(tmp_path, complete=True))
    fake = FakeMeasure(tmp_path, True)
    monkeypatch.setattr(setup.subprocess, "run", fake)
    setup.refresh_framework_cost(tmp_path, 0.3, remeasure=True)
    (argv,) = fake.calls
    assert argv[-2:] == ["bf16", "fp32"] and "bf16" in setup.DTYPES


def test_a_file_without_a_dtype_is_scored_with_a_caveat_on_a_busy_machine_not_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """A busy machine cannot re-measure it, and stopping on its absence (af691801) left a benchmark that never scored
    on this AVX2-only EPYC (h174): the file is kept, and the bf16 configurations are scored on the operator profile
    alone, said once per dtype where the framework cost is printed."""
    path = _write(tmp_path, complete=True)
    _drop_bf16(path)
    fake = FakeMeasure(tmp_path, True)
    monkeypatch.setattr(setup.subprocess, "run", fake)
    setup.refresh_framework_cost(tmp_path, 99.0)
    assert fake.calls == [] and "kept" in capsys.readouterr().out
    assert setup.missing_dtypes(path) == ["bf16"]
    setup.print_framework_cost(tmp_path)
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if "framework cost bf16" in ln]
    assert "not in framework_overhead.json" in line and "operator profile alone" in line
    assert "--remeasure-framework-cost" in line


def test_a_quiet_machine_measures_a_dtype_the_file_lacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture) -> None:
    """The light reading plan (profile/cpu_reading_plan.py) reads bf16 within the box on this AVX2-only EPYC, whose
    full bf16 readings never ended in one: a quiet start measures it with the file's other dtypes, unasked."""
    _drop_bf16(_write(tmp_path, complete=True))
    fake = FakeMeasure(tmp_path, True)
    monkeypatch.setattr(setup.subprocess, "run", fake)
    setup.refresh_framework_cost(tmp_path, 0.3)
    (argv,) = fake.calls
    assert argv[-2:] == ["bf16", "fp32"] and "(no bf16 entry)" in capsys.readouterr().out
    assert setup.missing_dtypes(tmp_path / "profiles" / CLUSTER / "framework_overhead.json") == []


def test_asked_to_re_measure_a_busy_machine_stops_naming_the_missing_dtype(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _drop_bf16(_write(tmp_path, complete=True))
    fake = FakeMeasure(tmp_path, True)
    monkeypatch.setattr(setup.subprocess, "run", fake)
    with pytest.raises(SystemExit) as stop:
        setup.refresh_framework_cost(tmp_path, 99.0, remeasure=True)
    message = str(stop.value)
    assert fake.calls == [] and "--remeasure-framework-cost" in message
    assert "framework cost bf16: not measured" in message


@pytest.mark.parametrize("remeasure", [False, True])
def test_a_re_measurement_without_a_dtype_stops_only_when_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    remeasure: bool) -> None:
    """A stale file is re-measured either way, bf16 with it on a quiet machine; bf16 got no reading in its box. Asked
    for, that is a stop (the user wanted it measured); otherwise the file is used and the dtype scored with its
    caveat."""
    _drop_bf16(_write_earlier_reading_path(tmp_path))
    fake = FakeMeasureFp32Only(tmp_path, True)
    monkeypatch.setattr(setup.subprocess, "run", fake)
    if remeasure:
        with pytest.raises(SystemExit, match="framework cost bf16: not measured"):
            setup.refresh_framework_cost(tmp_path, 0.3, remeasure=True)
    else:
        setup.refresh_framework_cost(tmp_path, 0.3)
    (argv,) = fake.calls
    assert argv[argv.index(str(tmp_path / "profiles" / CLUSTER)) + 1:] == ["bf16", "fp32"]


def test_the_score_names_the_configurations_scored_without_a_dtypes_framework_cost(
        capsys: pytest.CaptureFixture) -> None:
    from testbed_configs import CONFIGS
    from testbed_report import print_missing_framework_cost

    print_missing_framework_cost({"framework_cost_missing": ["bf16"]}, CONFIGS)
    (line,) = capsys.readouterr().out.splitlines()
    bf16 = [str(i) for i, c in enumerate(CONFIGS) if c.dtype == "bf16"]
    assert line.startswith("CAVEAT: configurations " + ", ".join(bf16) + " (bf16)")
    print_missing_framework_cost({"framework_cost_missing": []}, CONFIGS)
    assert capsys.readouterr().out == ""


def test_asked_to_re_measure_a_complete_file_measured_quiet_it_re_measures(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, complete=True)
    fake = FakeMeasure(tmp_path, True)
    monkeypatch.setattr(setup.subprocess, "run", fake)
    setup.refresh_framework_cost(tmp_path, 0.3, remeasure=True)
    assert len(fake.calls) == 1

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

def _drop_bf16(path: Path) -> None:
    doc = json.loads(path.read_text())
    del doc["dtypes"]["bf16"]
    path.write_text(json.dumps(doc))


def test_a_file_without_a_dtype_the_configurations_train_in_is_re_measured_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A complete fp32-only file (no bf16 reading ended in its box on an AVX2-only EPYC) was kept, and the bf16
    configurations were scored without their framework terms, priced as a GPU's, 76-121 % high (h174)."""
    _drop_bf16(_write(tmp_path, complete=True))
    fake = FakeMeasure(tmp_path, True)
    monkeypatch.setattr(setup.subprocess, "run", fake)
    setup.refresh_framework_cost(tmp_path, 0.3)
    (argv,) = fake.calls
    assert argv[-2:] == ["bf16", "fp32"] and "bf16" in setup.DTYPES


def test_a_busy_machine_stops_on_a_file_without_a_dtype_the_configurations_train_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _drop_bf16(_write(tmp_path, complete=True))
    fake = FakeMeasure(tmp_path, True)
    monkeypatch.setattr(setup.subprocess, "run", fake)
    with pytest.raises(SystemExit) as stop:
        setup.refresh_framework_cost(tmp_path, 99.0)
    assert fake.calls == [] and "framework cost bf16: not measured" in str(stop.value)

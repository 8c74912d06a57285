"""hardware/local_cpu.py: an instrumented job that runs on this machine's CPU is predicted for a CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.hardware import local_cpu
from llmperf_hook.hardware.load import load_hardware
from llmperf_hook.refine.refine_run import hardware_device

DS = ["deepspeed", "--num_gpus", "2", "train.py"]


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    return tmp_path


def test_local_launchers_on_the_cpu_only() -> None:
    assert local_cpu.runs_on_local_cpu(DS, {"DS_ACCELERATOR": "cpu"})
    assert local_cpu.runs_on_local_cpu(["torchrun", "--nproc-per-node", "2", "t.py"], {"DS_ACCELERATOR": "CPU"})
    assert not local_cpu.runs_on_local_cpu(["srun", "python", "t.py"], {"DS_ACCELERATOR": "cpu"})
    assert not local_cpu.runs_on_local_cpu(["sbatch", "job.sh"], {"DS_ACCELERATOR": "cpu"})


def test_this_cpu_is_described_once_as_a_cpu_hardware_file(home: Path) -> None:
    assert local_cpu.local_cpu_hardware(DS, {"DS_ACCELERATOR": "cpu"}) == "cpu-local"
    path = home / "hardware" / "cpu-local.yaml"
    spec = load_hardware("cpu-local")
    assert spec.peak_for("fp32") > 1e8 and spec.memory_bandwidth_bytes_per_s > 1e8
    assert hardware_device("cpu-local") == "cpu"  # so refine calibrates it from a CPU job
    before = path.read_text()
    local_cpu.local_cpu_hardware(DS, {"DS_ACCELERATOR": "cpu"})
    assert path.read_text() == before  # described once, never rewritten


def test_a_fitted_cpu_profile_is_preferred(home: Path) -> None:
    for name, clock in (("cpu-old", "cpu 2.1 GHz"), ("gpu-like", "sm 1.4 GHz")):
        (home / "profiles" / name).mkdir(parents=True)
        (home / "profiles" / name / "profile.json").write_text(json.dumps({"hardware": {"clock": clock}}))
    assert local_cpu.local_cpu_hardware(DS, {"DS_ACCELERATOR": "cpu"}) == "cpu-old"
    assert not (home / "hardware" / "cpu-local.yaml").exists()

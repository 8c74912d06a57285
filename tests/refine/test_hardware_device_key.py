"""A hardware file's `device` key as predict and refine read it: `cuda` (torch's device type, `llmperf profile --device
cuda`) is a GPU, not exit 2; anything else is refused naming the accepted values; and refine's device check
(refine_run.hardware_device) reads the key as predict does, not only the description's `--device cpu` mark (R81)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from llmperf_hook.errors import UsageError
from llmperf_hook.hardware.load import load_hardware
from llmperf_hook.refine.refine_run import CalibrationKey, device_mismatch, hardware_device

SPEC = {"peak_TFLOPs": {"fp32": 1.0}, "memory_bandwidth_GBps": 10.0, "memory_capacity_GiB": 8.0,
        "description": "written by hand"}


@pytest.fixture()
def hardware_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    folder = tmp_path / "hardware"
    folder.mkdir()
    return folder


def _write(folder: Path, name: str, device: str | None) -> None:
    doc = {"name": name, **SPEC, **({"device": device} if device is not None else {})}
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(doc))


@pytest.mark.parametrize("value, device, refine_device", [
    ("cuda", "gpu", "cuda"), ("CUDA", "gpu", "cuda"), ("gpu", "gpu", "cuda"), ("cpu", "cpu", "cpu"), (None, "gpu", "cuda"),
])
def test_predict_and_refine_read_the_device_key_alike(hardware_dir: Path, value: str | None, device: str,
                                                      refine_device: str) -> None:
    _write(hardware_dir, "my-box", value)
    assert load_hardware("my-box").device == device
    assert hardware_device("my-box") == refine_device


def test_an_unknown_device_is_refused_naming_the_accepted_values(hardware_dir: Path) -> None:
    _write(hardware_dir, "my-tpu", "tpu")
    with pytest.raises(UsageError, match=r"device must be gpu or cpu \(cuda is read as gpu\), found 'tpu'"):
        load_hardware("my-tpu")
    assert hardware_device("my-tpu") is None  # refine says nothing it cannot read; predict refuses the file


def test_a_cpu_job_does_not_calibrate_a_hand_written_cpu_file_as_a_gpu(hardware_dir: Path) -> None:
    """The key alone (no `--device cpu` in the description) makes the file a CPU's for refine too: a CPU job may
    calibrate it, a GPU job may not."""
    _write(hardware_dir, "my-cpu", "cpu")
    key = CalibrationKey("my-cpu", "my-cluster", "deepspeed")
    assert device_mismatch("cpu", key, None) == ""
    assert "is a CPU profile" in device_mismatch("cuda", key, None)

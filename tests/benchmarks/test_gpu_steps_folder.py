"""benchmarks/bench_gpu_steps.py: which hardware a measurement folder was taken on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from script_module import load_script

ROOT = Path(__file__).resolve().parents[2]


def _bench():  # type: ignore[no-untyped-def]
    return load_script(ROOT / "benchmarks" / "bench_gpu_steps.py")


def test_a_folder_of_runs_only_takes_the_hardware_its_launch_predictions_named(tmp_path: Path) -> None:
    (tmp_path / "runs" / "z1").mkdir(parents=True)
    (tmp_path / "runs" / "z1" / "prediction.json").write_text(json.dumps({"cluster": {"gpu": "h200-sxm-141gb"}}))
    hardware, cluster = _bench().device_presets(tmp_path)
    assert hardware == "h200-sxm-141gb" and cluster == "dgx-h200"


def test_a_folder_that_names_no_hardware_says_so(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="neither op_samples_meta.json nor runs/.*prediction.json"):
        _bench().device_presets(tmp_path)

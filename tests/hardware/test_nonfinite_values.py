"""Hardware and cluster YAML values that pass a `> 0` check and still give wrong numbers: YAML's .nan and .inf
(float('nan') <= 0 is False), and efficiencies above 1 (every op faster than the hardware's peak)."""

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.hardware.load import load_cluster, load_hardware

BASE = {"name": "my-gpu", "peak_TFLOPs": "{bf16: 100}", "memory_bandwidth_GBps": "1000", "memory_capacity_GiB": "80"}


def _write(tmp_path: Path, **values: str) -> Path:
    path = tmp_path / "my-gpu.yaml"
    path.write_text("".join(f"{k}: {v}\n" for k, v in {**BASE, **values}.items()))
    return path


@pytest.mark.parametrize("key,value,says", [
    ("peak_TFLOPs", "{bf16: .nan}", "bf16 must be a positive number, found nan"),
    ("peak_TFLOPs", "{bf16: .inf}", "bf16 must be a positive number, found inf"),
    ("memory_bandwidth_GBps", ".nan", "memory_bandwidth_GBps must be a positive number, found nan"),
    ("memory_capacity_GiB", ".inf", "memory_capacity_GiB must be a positive number, found inf"),
    ("gemm_efficiency", ".nan", "gemm_efficiency must be a positive number, found nan"),
    ("gemm_efficiency", "1.5", "gemm_efficiency 1.5 is above 1"),
    ("memory_efficiency", "2", "memory_efficiency 2 is above 1"),
    ("attention_efficiency", "1.01", "attention_efficiency 1.01 is above 1"),
    ("kernel_launch_us", ".inf", "kernel_launch_us must be a positive number, found inf"),
])
def test_a_value_that_would_give_a_wrong_number_is_refused(key: str, value: str, says: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=says.replace(".", r"\.")):
        load_hardware(str(_write(tmp_path, **{key: value})))


def test_an_efficiency_of_exactly_1_is_a_measured_peak(tmp_path: Path) -> None:
    """`llmperf profile` writes gemm_efficiency 1.0: its peaks are what the device reached."""
    assert load_hardware(str(_write(tmp_path, gemm_efficiency="1.0", memory_efficiency="1"))).gemm_efficiency == 1.0


def test_a_cluster_bus_efficiency_above_1_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("name: c\ngpu: a100-sxm4-80gb\ngpus_per_node: 8\nintra_node_bandwidth_GBps: 300\n"
                    "inter_node_bandwidth_GBps: 25\ninter_node_bus_efficiency: 1.2\n")
    with pytest.raises(UsageError, match="inter_node_bus_efficiency 1.2 is above 1"):
        load_cluster(str(path))


@pytest.mark.parametrize("value", [".nan", ".inf", "-4", "2.5", "eight", "true"])
def test_nics_per_node_is_a_whole_count(value: str, tmp_path: Path) -> None:
    """nics_per_node was int(raw value): .nan or 'eight' an internal ValueError, .inf OverflowError, -4 accepted as
    NCCL's channel count (graph/step_ops.py reads it as one), 2.5 cut to 2 without a word."""
    path = tmp_path / "c.yaml"
    path.write_text("name: c\ngpu: a100-sxm4-80gb\ngpus_per_node: 8\nintra_node_bandwidth_GBps: 300\n"
                    f"inter_node_bandwidth_GBps: 25\nnics_per_node: {value}\n")
    with pytest.raises(UsageError, match="nics_per_node must be a positive integer"):
        load_cluster(str(path))
    path.write_text(path.read_text().replace(f"nics_per_node: {value}", "nics_per_node: 4"))
    assert load_cluster(str(path)).nics_per_node == 4

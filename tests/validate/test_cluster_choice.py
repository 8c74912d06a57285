"""Cluster columns -> preset or derived cluster file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from llmperf_hook.errors import UsageError
from llmperf_hook.validate.cluster_choice import (
    choose_cluster,
    hardware_name_for,
    parse_inter_node_GBps_per_gpu,
    read_cluster_presets,
)
from llmperf_hook.validate.runs_csv import build_measured_run

from .validate_helpers import BASE_ROW


@pytest.mark.parametrize("text, per_gpu", [
    ("InfiniBand HDR 200Gb/s x8 per node (Selene DGX A100 SuperPOD)", 25.0),
    ("InfiniBand NDR 400Gb/s x8 per node (DGX H100)", 50.0),
    ("800 Gbps per node (vTrain config inter_node_bandwidth)", 12.5),
    ("8x 200 Gb/s HDR", 25.0),
    ("", None),
    # bytes (B) are not bits (b): '50 GB/s per GPU' was read as 50 Gb/s, 8x too slow (H99 audit)
    ("RoCE 50 GB/s per GPU", 50.0),
    ("100 GBps per node", 12.5),
    ("InfiniBand 400 Gbit/s x8 per node", 50.0),
    ("3.2 Tb/s per node", 50.0),
    ("3.2 Tb/s per-node", 50.0), ("3.2 Tb/s/node", 50.0), ("RoCE 400 Gb/s Per Node", 6.25),
])
def test_network_text(text: str, per_gpu: float | None) -> None:
    run = build_measured_run({**BASE_ROW, "inter_node_network": text}, 1)
    assert parse_inter_node_GBps_per_gpu(run) == per_gpu


def test_number_column_wins_over_text() -> None:
    run = build_measured_run({**BASE_ROW, "inter_node_bandwidth_GBps": "40"}, 1)
    assert parse_inter_node_GBps_per_gpu(run) == 40.0


@pytest.mark.parametrize("gpu, name, assumed", [
    ("A100-SXM4-80GB", "a100-sxm4-80gb", False),
    ("A100 SXM4 40GB", "a100-sxm4-40gb", False),
    ("A100 (variant not stated in repo)", "a100-sxm4-80gb", True),
    ("H100-SXM5-80GB", "h100-sxm5-80gb", False),
    ("GH200", "gh200-96gb", False),
    ("H200-SXM-141GB", "h200-sxm-141gb", False),
    ("H100 PCIe", "h100-pcie-80gb", False),  # its own preset since session 6 (was modelled as the SXM5)
    ("A100 80GB PCIe", "a100-pcie-80gb", False),
    ("A100 PCIe 40GB", "a100-sxm4-40gb", True),
    ("NVIDIA B200", "b200-180gb", False),
    ("GB200 NVL72", "gb200-186gb", False),
    ("L40S", "l40s-48gb", False),
    ("AMD MI300X", "mi300x-192gb", False),
])
def test_hardware_names(gpu: str, name: str, assumed: bool) -> None:
    got, note = hardware_name_for(gpu)
    assert got == name and (note is not None) == assumed


def test_unknown_gpu_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="MI250"):
        hardware_name_for("MI250")


def test_preset_matched_by_network(clusters_dir: Path, tmp_path: Path) -> None:
    presets = read_cluster_presets(clusters_dir)
    selene = build_measured_run(BASE_ROW, 1)
    vtrain = build_measured_run({**BASE_ROW, "inter_node_network": "800 Gbps per node",
                                 "gpu_type": "A100 (variant not stated)"}, 1)
    h100 = build_measured_run({**BASE_ROW, "gpu_type": "H100-SXM5-80GB",
                               "inter_node_network": "InfiniBand NDR 400Gb/s x8 per node"}, 1)
    assert choose_cluster(selene, presets, tmp_path).cluster == "dgx-a100"
    assert choose_cluster(vtrain, presets, tmp_path).cluster == "vtrain-a100"
    assert choose_cluster(h100, presets, tmp_path).cluster == "dgx-h100"
    h200 = build_measured_run({**BASE_ROW, "gpu_type": "H200 SXM 141GB",
                               "inter_node_network": "InfiniBand NDR 400Gb/s x8 per node"}, 1)
    assert choose_cluster(h200, presets, tmp_path).cluster == "dgx-h200"


def test_single_node_run_ignores_the_network(clusters_dir: Path, tmp_path: Path) -> None:
    run = build_measured_run({**BASE_ROW, "tp": "2", "dp": "1", "num_gpus": "2", "inter_node_network": ""}, 1)
    assert choose_cluster(run, read_cluster_presets(clusters_dir), tmp_path).cluster in ("dgx-a100", "vtrain-a100")


def test_unmatched_network_derives_a_cluster_file(clusters_dir: Path, tmp_path: Path) -> None:
    run = build_measured_run({**BASE_ROW, "inter_node_network": "4x 100Gb/s per node"}, 1)
    choice = choose_cluster(run, read_cluster_presets(clusters_dir), tmp_path / "work")
    derived = yaml.safe_load(Path(choice.cluster).read_text())
    assert derived["inter_node_bandwidth_GBps"] == 6.25 and derived["gpu"] == "a100-sxm4-80gb"
    assert derived["gpus_per_node"] == 8


def test_multi_node_run_without_network_is_an_error(clusters_dir: Path, tmp_path: Path) -> None:
    run = build_measured_run({**BASE_ROW, "inter_node_network": "InfiniBand"}, 1)
    presets = {k: v for k, v in read_cluster_presets(clusters_dir).items()}
    with pytest.raises(UsageError, match="inter_node_bandwidth_GBps"):
        choose_cluster(run, presets, tmp_path)


def test_cluster_column_is_used_as_given(clusters_dir: Path, tmp_path: Path) -> None:
    run = build_measured_run({**BASE_ROW, "cluster": "my-cluster.yaml"}, 1)
    assert choose_cluster(run, read_cluster_presets(clusters_dir), tmp_path).cluster == "my-cluster.yaml"


def test_gpu_without_its_own_preset_derives_from_its_generation(clusters_dir: Path, tmp_path: Path) -> None:
    """A100 40 GB rows take an A100 cluster with the GPU swapped (multi-node and single-node alike)."""
    from llmperf_hook.hardware.load import load_cluster

    presets = read_cluster_presets(clusters_dir)
    multi = build_measured_run({**BASE_ROW, "gpu_type": "A100-SXM4-40GB"}, 1)
    derived = yaml.safe_load(Path(choose_cluster(multi, presets, tmp_path / "a").cluster).read_text())
    assert derived["gpu"] == "a100-sxm4-40gb" and derived["inter_node_bandwidth_GBps"] == 25.0
    assert derived["gpus_per_node"] == 8 and derived["name"].startswith("dgx-a100")
    single = build_measured_run({**BASE_ROW, "gpu_type": "A100-SXM4-40GB", "tp": "8", "dp": "1", "num_gpus": "8",
                                 "inter_node_network": ""}, 1)
    cluster = load_cluster(choose_cluster(single, presets, tmp_path / "b").cluster)
    assert cluster.gpu.name == "a100-sxm4-40gb" and cluster.gpus_per_node == 8


def test_other_node_size_drops_the_node_topology_fits(clusters_dir: Path, tmp_path: Path) -> None:
    """An H100 cluster of 4 GPUs per node is not a DGX: its intra-node numbers come from the loader's defaults."""
    from llmperf_hook.hardware.load import intra_node_defaults, load_cluster

    run = build_measured_run({**BASE_ROW, "gpu_type": "H100-SXM5-80GB", "gpus_per_node": "4", "dp": "4",
                              "tp": "4", "inter_node_network": "Slingshot 200Gb/s x4 per node"}, 1)
    path = choose_cluster(run, read_cluster_presets(clusters_dir), tmp_path).cluster
    raw = yaml.safe_load(Path(path).read_text())
    assert "intra_node_bus_efficiency" not in raw and "nics_per_node" not in raw
    cluster = load_cluster(path)
    latency_us, efficiency = intra_node_defaults("h100-sxm5-80gb", 4)
    assert cluster.intra_node.bus_efficiency == efficiency and cluster.intra_node.latency_s == latency_us * 1e-6

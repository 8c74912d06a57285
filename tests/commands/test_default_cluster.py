"""With --hardware and no --cluster, predict assumes the shipped cluster built of that GPU (its NVLink, network and
host), not dgx-h100's with the GPU swapped in (api.home_cluster)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from llmperf_hook.api import DEFAULT_CLUSTER, resolve_cluster
from llmperf_hook.commands.predict import command as predict_command
from llmperf_hook.resources import configs_dir

GPT = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "1024",
       "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
       "--micro-batch-size", "1", "--global-batch-size", "8", "--vocab-size", "32000", "--bf16",
       "--tensor-model-parallel-size", "2"]


@pytest.mark.parametrize(("hardware", "cluster"), [("h200-sxm-141gb", "dgx-h200"), ("a100-sxm4-80gb", "dgx-a100"),
                                                   ("gh200-96gb", "vista"), ("h100-pcie-80gb", "pcie-h100-4x400g")])
def test_hardware_alone_takes_its_own_cluster(hardware: str, cluster: str) -> None:
    spec, notes = resolve_cluster(None, hardware)
    assert (spec.name, spec.gpu.name) == (cluster, hardware)
    assert f"assuming {cluster}, the shipped cluster of {hardware} GPUs" in notes[0]


def test_a100_nodes_get_nvlink3_not_the_default_clusters() -> None:
    a100, _ = resolve_cluster(None, "a100-sxm4-80gb")
    default, _ = resolve_cluster(DEFAULT_CLUSTER, "a100-sxm4-80gb")
    assert a100.intra_node.bandwidth_bytes_per_s < default.intra_node.bandwidth_bytes_per_s


def test_a_gpu_no_preset_holds_keeps_the_default(tmp_path) -> None:
    yaml_file = tmp_path / "my-gpu.yaml"
    shipped = (configs_dir() / "hardware" / "h100-sxm5-80gb.yaml").read_text()
    yaml_file.write_text(shipped.replace("name: h100-sxm5-80gb", "name: my-gpu"))
    spec, notes = resolve_cluster(None, str(yaml_file))
    assert spec.name == DEFAULT_CLUSTER and spec.gpu.name == "my-gpu"
    assert f"assuming {DEFAULT_CLUSTER}" in notes[0]


def test_predict_cli_names_the_assumed_cluster() -> None:
    out = CliRunner().invoke(predict_command, ["--hardware", "h200-sxm-141gb", "--format", "json", "--", *GPT])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output[out.output.index("{"):])
    assert data["cluster"]["name"] == "dgx-h200" and data["cluster"]["gpu"] == "h200-sxm-141gb"


def _home_with(tmp_path, monkeypatch, clusters: dict[str, str]) -> None:
    """An LLMPERF_HOME holding a user hardware file `my-cpu` and the given cluster files (name -> gpu)."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    (tmp_path / "hardware").mkdir()
    shipped = (configs_dir() / "hardware" / "h100-sxm5-80gb.yaml").read_text()
    (tmp_path / "hardware" / "my-cpu.yaml").write_text(shipped.replace("name: h100-sxm5-80gb", "name: my-cpu"))
    (tmp_path / "clusters").mkdir()
    for name, gpu in clusters.items():
        (tmp_path / "clusters" / f"{name}.yaml").write_text(
            f"name: {name}\ngpu: {gpu}\ngpus_per_node: 2\nintra_node_bandwidth_GBps: 2\n"
            f"inter_node_bandwidth_GBps: 1\nintra_node_latency_us: 50\n")


def test_hardware_alone_takes_the_cluster_profile_comm_measured_for_it(tmp_path, monkeypatch) -> None:
    """A user's own hardware (a CPU profile) with the cluster file `llmperf profile --comm` wrote for it: that
    machine's measured network (2 GB/s, 50 us), not dgx-h100's NVLink with the hardware swapped in."""
    _home_with(tmp_path, monkeypatch, {"my-box": "my-cpu", "other-box": "other-cpu"})
    spec, notes = resolve_cluster(None, "my-cpu")
    assert (spec.name, spec.gpu.name, spec.gpus_per_node) == ("my-box", "my-cpu", 2)
    assert spec.intra_node.bandwidth_bytes_per_s == pytest.approx(2e9)
    assert "assuming my-box, the cluster `llmperf profile --comm` described for my-cpu" in notes[0]


def test_a_shipped_gpu_keeps_its_shipped_cluster_over_a_users_file(tmp_path, monkeypatch) -> None:
    _home_with(tmp_path, monkeypatch, {"my-h200s": "h200-sxm-141gb"})
    assert resolve_cluster(None, "h200-sxm-141gb")[0].name == "dgx-h200"


def test_user_hardware_without_a_cluster_file_keeps_the_default(tmp_path, monkeypatch) -> None:
    _home_with(tmp_path, monkeypatch, {"other-box": "other-cpu"})
    spec, notes = resolve_cluster(None, "my-cpu")
    assert spec.name == DEFAULT_CLUSTER and f"assuming {DEFAULT_CLUSTER}" in notes[0]

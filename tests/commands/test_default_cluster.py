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

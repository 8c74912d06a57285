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


def test_several_cluster_files_for_one_hardware_are_named(tmp_path, monkeypatch) -> None:
    """Two `llmperf profile --comm` runs (other --cluster-name) for one CPU: the newest is assumed, as before, and
    the note names the other, which was silent."""
    import os

    _home_with(tmp_path, monkeypatch, {"old-box": "my-cpu", "new-box": "my-cpu"})
    os.utime(tmp_path / "clusters" / "old-box.yaml", (1e9, 1e9))
    spec, notes = resolve_cluster(None, "my-cpu")
    assert spec.name == "new-box"
    assert "assuming new-box" in notes[0] and "(the newest of 2 for it: old-box too)" in notes[0], notes


GPT4 = ["torchrun", "--nproc-per-node", "4", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "128",
        "--num-attention-heads", "4", "--seq-length", "128", "--max-position-embeddings", "128",
        "--micro-batch-size", "2", "--global-batch-size", "8", "--vocab-size", "1000"]


def test_more_ranks_than_profile_comm_ran_stay_on_one_node(tmp_path, monkeypatch) -> None:
    """The file's gpus_per_node (2) is the ranks the comm profile ran, not what the machine holds: 4 ranks on one
    host were placed on 2 nodes, with a note that ranks 2-3 had no GPU to bind. Named with --cluster, the file is the
    user's word: placed as written, and said."""
    from llmperf_hook.api import resolve_command

    _home_with(tmp_path, monkeypatch, {"my-box": "my-cpu"})
    job, _, spec, notes = resolve_command(GPT4, {}, hardware="my-cpu")
    assert (job.nnodes, spec.name, spec.gpus_per_node) == (1, "my-box", 4)
    assert "the job's 4 ranks per node are placed on one node of it" in notes[-1], notes
    assert not any("no GPU to bind" in n for n in notes), notes
    _, _, named, notes = resolve_command(GPT4, {}, cluster="my-box", hardware="my-cpu")
    assert named.gpus_per_node == 2 and "no GPU to bind" in notes[-1], notes


def test_a_calibration_left_under_the_old_default_is_said(tmp_path, monkeypatch) -> None:
    """Before d37bfb6a such hardware was assumed on dgx-h100 and refine stored its calibration under that key; on the
    measured cluster it is no longer found, which nothing said."""
    from llmperf_hook.api import predict_command
    from llmperf_hook.refine import observation_store as store
    from llmperf_hook.refine.calibration import Calibration

    _home_with(tmp_path, monkeypatch, {"my-box": "my-cpu"})
    gpt2 = ["torchrun", "--nproc-per-node", "2", *GPT4[3:]]
    assert not any("has a calibration" in w for w in predict_command(gpt2, {}, hardware="my-cpu").estimate.warnings)
    conn = store.connect()
    store.save_calibration(conn, Calibration("my-cpu", DEFAULT_CLUSTER, "megatron", 1.25, 4, 0.002))
    conn.close()
    pred = predict_command(gpt2, {}, hardware="my-cpu")
    note = next(w for w in pred.estimate.warnings if "has a calibration" in w)
    assert f"under {DEFAULT_CLUSTER} (the cluster assumed for it without --cluster before" in note, note
    assert "none under my-box: this prediction is uncalibrated" in note, note
    assert pred.estimate.calibration_scale == 1.0

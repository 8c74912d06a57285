"""tune holds every candidate to `run --require-fit`'s host verdict (schedule/host_memory.py): a ZeRO-Offload layout
that fits the GPU but pins more host RAM per node than the cluster states is pruned and counted with its reason;
nothing that fits -> exit 3 naming the host; a cluster that states no host RAM is said to leave it unchecked.

The command: Llama-3 8B under DeepSpeed ZeRO-2 with offload_optimizer cpu on one 8-GPU node, micro-batch 1 with 8
accumulation steps, so its host memory also holds the accumulated 16-bit gradients (stage_1_and_2.py
accumulated_grads_in_cpu); a layout without accumulation (micro-batch 8) pins less."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from llmperf_hook.resources import configs_dir

from .helpers import run_cli

GiB = float(1 << 30)
ARGV = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds.json"]
DS_CONFIG = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
             "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}


def _setup(tmp_path: Path, monkeypatch, host_gib: float | None) -> str:
    """ds.json in the working folder and a DGX H100 cluster file whose host RAM is `host_gib` (None: not stated)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps(DS_CONFIG))
    raw = yaml.safe_load((configs_dir() / "clusters" / "dgx-h100.yaml").read_text())
    raw.pop("host_memory_GiB")
    if host_gib is not None:
        raw["host_memory_GiB"] = host_gib
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _host_bytes(cluster: str, argv: list[str], capsys) -> tuple[int, bool | None]:
    code, out, err = run_cli(["predict", "--cluster", cluster, "--model", "llama3-8b", "--format", "json", "--", *argv],
                             capsys)
    assert code == 0, err
    host = json.loads(out)["memory"]["host"]
    return host["bytes_per_node"], host["fits"]


def _tune(cluster: str, capsys, *extra: str) -> tuple[int, str, str]:
    return run_cli(["tune", "--cluster", cluster, "--model", "llama3-8b", "--top", "10", *extra, "--", *ARGV], capsys)


def test_layouts_over_the_host_ram_are_pruned_with_their_reason(tmp_path: Path, capsys, monkeypatch) -> None:
    cluster = _setup(tmp_path, monkeypatch, None)
    own, _ = _host_bytes(cluster, ARGV, capsys)
    cluster = _setup(tmp_path, monkeypatch, own / GiB - 1)  # the command's own layout is 1 GiB over
    assert _host_bytes(cluster, ARGV, capsys)[1] is False
    code, out, err = _tune(cluster, capsys, "--format", "json", "--apply", "--dry-run")
    assert code == 0, err
    data = json.loads(out)
    assert data["search"]["num_oom_host"] >= 1 and data["search"]["host_capacity_bytes"] == int((own / GiB - 1) * GiB)
    assert data["baseline"]["host_fits"] is False and data["baseline"]["fits"] is False
    for row in data["top"]:
        assert row["host_fits"] and row["host_bytes_per_node"] <= data["search"]["host_capacity_bytes"], row
    s = data["search"]
    assert s["num_considered"] == (s["num_invalid"] + s["num_oom_estimated"] + s["num_oom_predicted"]
                                   + s["num_over_margin"] + s["num_slower_by_estimate"]
                                   + s["num_fitting"])  # host RAM: of num_oom_predicted
    assert s["num_oom_predicted"] >= s["num_oom_host"]
    # the applied command is one `run --require-fit` would launch: predict says its host memory fits
    assert _host_bytes(cluster, data["applied"]["argv"], capsys)[1] is True
    code, out, err = _tune(cluster, capsys)
    assert "out of host RAM" in out and "NOT to fit the host RAM" in out and "(no fit: host RAM)" in out


def test_nothing_fitting_the_host_exits_3_naming_the_host(tmp_path: Path, capsys, monkeypatch) -> None:
    cluster = _setup(tmp_path, monkeypatch, 8)
    code, out, err = _tune(cluster, capsys, "--format", "json")
    assert code == 3
    data = json.loads(out)
    assert data["search"]["num_oom_host"] >= 1 and data["search"]["num_fitting"] == 0
    assert data["nearest"]["host_bytes_per_node"] > 8 * GiB
    assert data["nearest"]["short_of"] == "host"
    assert abs(data["nearest"]["short_bytes"] - (data["nearest"]["host_bytes_per_node"] - 8 * GiB)) < 1.0
    assert "host RAM" in data["error"] and "offload_optimizer cpu" in data["error"] and "Offload less" in data["error"]
    assert data["nearest"]["layout"] in data["error"]


def test_a_cluster_without_host_ram_says_the_host_is_not_checked(tmp_path: Path, capsys, monkeypatch) -> None:
    cluster = _setup(tmp_path, monkeypatch, None)
    code, out, err = _tune(cluster, capsys)
    assert code == 0, err
    assert "does not state its host RAM" in err and "offload_optimizer cpu" in err
    assert "host memory of the offloads NOT checked" in out
    code, out, err = _tune(cluster, capsys, "--format", "json")
    assert json.loads(out)["search"]["host_capacity_bytes"] is None


def test_a_command_without_offload_says_nothing_of_the_host(tmp_path: Path, capsys, monkeypatch) -> None:
    cluster = _setup(tmp_path, monkeypatch, None)
    (tmp_path / "ds.json").write_text(json.dumps({**DS_CONFIG, "zero_optimization": {"stage": 2}}))
    code, out, err = _tune(cluster, capsys)
    assert code == 0, err
    assert "host RAM" not in err and "host" not in out.split("\n\n")[0]


MEGATRON_OFFLOAD = [  # Llama-3 8B on one 8-GPU node, Megatron-LM's HybridDeviceOptimizer with all of its state on the host
    "torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "32", "--hidden-size", "4096",
    "--ffn-hidden-size", "14336", "--num-attention-heads", "32", "--group-query-attention", "--num-query-groups", "8",
    "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope", "--seq-length", "4096",
    "--max-position-embeddings", "4096", "--vocab-size", "128256", "--untie-embeddings-and-output-weights",
    "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--use-distributed-optimizer",
    "--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.0", "--use-precision-aware-optimizer",
]


def test_a_megatron_offload_is_named_in_megatron_words(tmp_path: Path, capsys, monkeypatch) -> None:
    """Megatron-LM offloads with --optimizer-cpu-offload / --optimizer-offload-fraction: the exit-3 message named
    DeepSpeed's offload_optimizer and advised its ds_config keys, which a Megatron-LM command has not."""
    cluster = _setup(tmp_path, monkeypatch, 8)
    code, out, err = run_cli(["tune", "--cluster", cluster, "--", *MEGATRON_OFFLOAD], capsys)
    assert code == 3, err
    assert "--optimizer-cpu-offload (--optimizer-offload-fraction 1)" in err and "--optimizer-offload-fraction" in err
    assert "offload_optimizer" not in err and "offload_param" not in err and "ds_config" not in err

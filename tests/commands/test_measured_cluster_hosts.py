"""The cluster file `llmperf profile --comm` writes says what it measured on (`measured_on: {device, hosts,
machines}`), and predict assumes it for a profile of that device whatever its --name, those machines' first
(api.assumed_cluster;
R75's notes: the file named the default profile name, so `--name my-cpu` never found its network, and two hosts of
one CPU model sharing an $LLMPERF_HOME shared one network). Old files without it are read as before."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml

from llmperf_hook import api
from llmperf_hook.api import DEFAULT_CLUSTER, resolve_cluster
from llmperf_hook.resources import configs_dir

CPU = "Intel(R) Xeon(R) Test CPU @ 2.00GHz"
GPT4 = ["torchrun", "--nproc-per-node", "4", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "128",
        "--num-attention-heads", "4", "--seq-length", "128", "--max-position-embeddings", "128",
        "--micro-batch-size", "2", "--global-batch-size", "8", "--vocab-size", "1000"]


def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clusters: dict[str, dict]) -> None:
    """An LLMPERF_HOME with hardware `my-cpu` (a profile fitted on CPU) and the given cluster files."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    (tmp_path / "hardware").mkdir()
    shipped = (configs_dir() / "hardware" / "h100-sxm5-80gb.yaml").read_text()
    (tmp_path / "hardware" / "my-cpu.yaml").write_text(shipped.replace("name: h100-sxm5-80gb", "name: my-cpu"))
    (tmp_path / "profiles" / "my-cpu").mkdir(parents=True)
    (tmp_path / "profiles" / "my-cpu" / "profile.json").write_text(json.dumps({"hardware": {"device": CPU}}))
    (tmp_path / "clusters").mkdir()
    for name, extra in clusters.items():
        doc = {"name": name, "gpu": "cpu-xeon-test-1t", "gpus_per_node": 2, "intra_node_bandwidth_GBps": 2,
               "inter_node_bandwidth_GBps": 1, **extra}
        (tmp_path / "clusters" / f"{name}.yaml").write_text(yaml.safe_dump(doc))


def test_a_profile_named_otherwise_finds_the_network_measured_on_its_device(tmp_path, monkeypatch) -> None:
    _home(tmp_path, monkeypatch, {"my-box": {"measured_on": {"device": CPU, "hosts": [socket.gethostname()]}},
                                  "other-cpu-box": {"measured_on": {"device": "AMD EPYC", "hosts": [socket.gethostname()]}}})
    spec, notes = resolve_cluster(None, "my-cpu")
    assert (spec.name, spec.gpu.name) == ("my-box", "my-cpu") and "assuming my-box" in notes[0]


def test_this_hosts_network_is_preferred_to_a_newer_one_of_another_host(tmp_path, monkeypatch) -> None:
    import os

    _home(tmp_path, monkeypatch, {"mine": {"gpu": "my-cpu", "measured_on": {"device": CPU, "hosts": [socket.gethostname()]}},
                                  "host-a": {"gpu": "my-cpu", "measured_on": {"device": CPU, "hosts": ["host-a"]}}})
    os.utime(tmp_path / "clusters" / "mine.yaml", (1, 1))  # host-a's file is the newer one
    spec, notes = resolve_cluster(None, "my-cpu")
    assert spec.name == "mine" and "other hosts" not in notes[0], notes


def test_another_hosts_network_of_this_device_is_assumed_before_the_default_and_said(tmp_path, monkeypatch) -> None:
    """A container's hostname changes with each start (docker: the container id), and a node of a measured cluster
    may not be among the hosts the comm run had: the nearest measurement of this device beats DEFAULT_CLUSTER's
    8-GPU NVLink node with this device swapped in (R77; H198 fell back to it)."""
    _home(tmp_path, monkeypatch, {"host-a": {"gpu": "my-cpu", "measured_on": {"device": CPU, "hosts": ["host-a"]}}})
    spec, notes = resolve_cluster(None, "my-cpu")
    assert (spec.name, spec.gpu.name) == ("host-a", "my-cpu") and spec.name != DEFAULT_CLUSTER
    assert f"assuming host-a, the cluster `llmperf profile --comm` described for my-cpu " \
           f"({tmp_path / 'clusters' / 'host-a.yaml'}) on other hosts (host-a), not this one ({socket.gethostname()})" \
           in notes[0], notes
    assert api.assumed_cluster(None, "my-cpu")[2]  # its ranks per node stay on one node, as for this host's file


def test_a_file_written_before_hosts_were_kept_is_read_as_before(tmp_path, monkeypatch) -> None:
    _home(tmp_path, monkeypatch, {"old-box": {"gpu": "my-cpu"}})
    assert resolve_cluster(None, "my-cpu")[0].name == "old-box"


def test_predict_batch_keeps_a_jobs_ranks_on_one_measured_node_as_predict_does(tmp_path, monkeypatch) -> None:
    """predict --batch passed the resolved cluster, so the ranks-per-node rule of a measured file did not apply: 4
    ranks on one host were placed on 2 nodes of 2, with a note that ranks 2-3 had no GPU to bind."""
    from llmperf_hook.commands.predict import predict_batch_line

    _home(tmp_path, monkeypatch, {"my-box": {"gpu": "my-cpu"}})
    (tmp_path / "profiles" / "my-cpu" / "profile.json").unlink()  # predicted on the hardware file's roofline
    single = api.predict_command(GPT4, {}, hardware="my-cpu")
    batch, _ = predict_batch_line(" ".join(GPT4), {"cluster": None, "hardware": "my-cpu", "nnodes": None,
                                                  "nproc_per_node": None, "model": None, "id": None}, {})
    assert (batch.cluster.name, batch.cluster.gpus_per_node) == ("my-box", 4) == (single.cluster.name, 4)
    assert batch.estimate.step_time_s == pytest.approx(single.estimate.step_time_s)
    assert not any("no GPU to bind" in w for w in batch.warnings), batch.warnings


def test_resolve_command_scans_the_cluster_folder_once(tmp_path, monkeypatch) -> None:
    """_measured_is_assumed scanned the folder resolve_cluster had just scanned."""
    _home(tmp_path, monkeypatch, {"my-box": {"gpu": "my-cpu"}})
    scans = []
    real = api._cluster_docs
    monkeypatch.setattr(api, "_cluster_docs", lambda folder: scans.append(folder) or real(folder))
    job, _, spec, notes = api.resolve_command(GPT4, {}, hardware="my-cpu")
    assert (spec.name, spec.gpus_per_node) == ("my-box", 4) and len(scans) == 1


def test_a_container_restarted_under_a_new_hostname_keeps_its_own_network(tmp_path, monkeypatch) -> None:
    """A file measured on this machine before its container got a new hostname (docker: the container id) is still
    this machine's by its boot id (profile/machine_identity.py), so it is chosen over a newer file another machine
    measured and its calibrations stay under one cluster name; without the boot id the newer one was taken."""
    import os

    from llmperf_hook.profile.machine_identity import machine_id

    here = {"device": CPU, "hosts": ["3f2a9c1b7d0e"], "machines": [machine_id()]}  # the old container's name
    _home(tmp_path, monkeypatch, {
        "mine": {"gpu": "my-cpu", "measured_on": here},
        "theirs": {"gpu": "my-cpu", "measured_on": {"device": CPU, "hosts": ["host-b"], "machines": ["another-boot"]}}})
    os.utime(tmp_path / "clusters" / "mine.yaml", (1, 1))  # the other machine's file is the newer one
    spec, notes = resolve_cluster(None, "my-cpu")
    assert spec.name == "mine" and "other hosts" not in notes[0], notes


def test_profile_comm_records_the_machines_it_measured_on(tmp_path, monkeypatch) -> None:
    """The ranks' boot ids as the comm run gathered them, else this machine's (a one-rank run). The device and its
    hardware name are stubbed: measuring them imports torch and times GEMMs (17 s at load 7, R86)."""
    from llmperf_hook.profile import comm_sampler, local_hardware
    from llmperf_hook.profile.machine_identity import machine_id

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    monkeypatch.setattr(local_hardware, "fingerprint", lambda device, threads: {"device": CPU})
    monkeypatch.setattr(comm_sampler, "_local_hardware_name", lambda device: "my-cpu")

    class Model:
        layouts = ()

    ranks = comm_sampler._ensure_cluster_yaml("box", Model(), "cpu", 2, ("a", "b"), ("boot-b", "boot-a"))
    alone = comm_sampler._ensure_cluster_yaml("one", Model(), "cpu", 1)
    assert yaml.safe_load(ranks.read_text())["measured_on"]["machines"] == ["boot-b", "boot-a"]
    assert yaml.safe_load(alone.read_text())["measured_on"]["machines"] == [machine_id()]

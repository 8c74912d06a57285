"""`llmperf profile --comm` inputs and outputs that need no second process: message-size checks before any rank
waits on another, and the cluster file written so `--cluster NAME` resolves (the 2-rank gloo run is in test_comm.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from llmperf_hook.errors import UsageError
from llmperf_hook.profile import comm_sampler
from llmperf_hook.profile.comm_model import CommModel, LayoutFit
from llmperf_hook.profile.comm_sampler import CommRequest, check_message_sizes


@pytest.mark.parametrize("min_b,max_b", [(4096, 0), (4096, -5), (4096, float("nan")), (4096, float("inf")),
                                         (1e6, 1e5), (0, 4096)])
def test_bad_message_sizes_are_usage_errors(min_b: float, max_b: float) -> None:
    with pytest.raises(UsageError, match="finite, positive, and min <= max"):
        check_message_sizes(CommRequest("c", min_bytes=min_b, max_bytes=max_b), 2, 64 << 30)


def test_sizes_beyond_memory_are_refused_before_allocating(monkeypatch: pytest.MonkeyPatch) -> None:
    """--max-bytes 1e12 used to be SIGKILLed by the kernel's OOM killer mid-run."""
    with pytest.raises(UsageError, match="--max-bytes 1e\\+12.*at most"):
        check_message_sizes(CommRequest("c", max_bytes=1e12), 2, 24 << 30)
    check_message_sizes(CommRequest("c", max_bytes=2**26), 2, 24 << 30)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(UsageError, match="--max-bytes"):  # raised before init_process_group waits for rank 1
        comm_sampler.run_comm_profile(CommRequest("c", max_bytes=float("nan")))


def _model(name: str) -> CommModel:
    fit = LayoutFit("allreduce", 1, 2, 2e-4, 1.5e9, (), (), (4096.0, 262144.0), 8)
    return CommModel(name, (fit,), {})


def test_new_cluster_name_gets_a_cluster_file_that_predict_resolves(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`profile --comm --cluster-name mybox` then `predict --cluster mybox` failed: 'cluster mybox not found'."""
    from llmperf_hook.hardware.load import load_cluster

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(comm_sampler, "_local_hardware_name", lambda device: "a100-sxm4-80gb")
    path = comm_sampler._ensure_cluster_yaml("mybox", _model("mybox"), "cpu", 2)
    assert path == tmp_path / "clusters" / "mybox.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc["gpus_per_node"] == 2 and doc["intra_node_bandwidth_GBps"] == 1.5 and doc["intra_node_latency_us"] == 200
    cluster = load_cluster("mybox")
    assert cluster.name == "mybox" and cluster.gpus_per_node == 2
    path.write_text(path.read_text().replace("gpus_per_node: 2", "gpus_per_node: 4"))  # the user's edit
    assert comm_sampler._ensure_cluster_yaml("mybox", _model("mybox"), "cpu", 2) is None  # never overwritten
    assert "gpus_per_node: 4" in path.read_text()
    assert comm_sampler._ensure_cluster_yaml("perlmutter", _model("perlmutter"), "cpu", 2) is None  # a preset
    assert not (tmp_path / "clusters" / "perlmutter.yaml").exists()


def test_unwritable_home_is_refused_before_measuring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "afile"))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UsageError, match="comm model.*is a file"):
        comm_sampler.run_comm_profile(CommRequest("c"))


def test_damaged_store_is_refused_before_measuring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 stores the timings at the end: a damaged store failed there, after every collective was timed."""
    from llmperf_hook.store import OpSampleRecord, open_store

    with open_store(tmp_path / "store.sqlite") as store:
        store.record_op_samples(OpSampleRecord("cpu-x", "fp32", "gemm", "fwd", {"m": m}, 1e-4) for m in range(1, 600))
    data = bytearray((tmp_path / "store.sqlite").read_bytes())
    data[4096:8192] = b"\x55" * 4096  # a page written over
    (tmp_path / "store.sqlite").write_bytes(bytes(data))
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr("torch.distributed.init_process_group", lambda *a, **k: pytest.fail("measuring started"))
    with pytest.raises(UsageError, match="store .* is damaged"):
        comm_sampler.run_comm_profile(CommRequest("c"))


def test_operator_options_with_comm_are_refused(capsys: pytest.CaptureFixture) -> None:
    from llmperf_hook.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["profile", "--comm", "--cluster-name", "c", "--ops", "gemm", "--dtype", "bf16"])
    assert exc.value.code == 2 and "--ops, --dtype with --comm" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "says"), [
    (["--comm", "--cluster-name", "c", "--budget", "1"], "--budget with --comm"),
    (["--comm", "--cluster-name", "c", "--store", "x.sqlite", "--threads", "2"], "--threads, --store with --comm"),
    (["--device", "cpu", "--max-bytes", "65536"], "--max-bytes without --comm"),
    (["--device", "cpu", "--cluster-name", "c"], "--cluster-name without --comm"),
])
def test_options_the_other_mode_ignores_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture, args: list[str], says: str) -> None:
    """They were silently ignored: --budget / --store with --comm (every size is timed, into the default store),
    the message sizes and cluster name of an operator profile."""
    from llmperf_hook.cli import main

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    with pytest.raises(SystemExit) as exc:
        main(["profile", *args])
    assert exc.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "store.sqlite").exists()


def test_device_cuda_without_a_gpu_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """--device now chooses the collectives' device (NCCL on the GPUs, gloo on the CPU) as it does the operators'."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UsageError, match="--device cuda: torch sees no CUDA device"):
        comm_sampler.run_comm_profile(CommRequest("c", device="cuda"))


@pytest.mark.parametrize(("device", "gpu", "says"), [
    ("cuda", False, "--device cuda: torch sees no CUDA device"),  # was: the gloo name refusal, a wrong reason
    ("cpu", True, "configs/clusters/dgx-h100.yaml"),  # gloo under a GPU cluster's name, though a GPU is here
])
def test_shipped_cluster_name_follows_the_chosen_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture, device: str, gpu: bool,
                                                        says: str) -> None:
    import torch

    from llmperf_hook.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit) as exc:
        main(["profile", "--comm", "--device", device, "--cluster-name", "dgx-h100"])
    assert exc.value.code == 2 and says in capsys.readouterr().err


def test_rounds_are_interleaved_and_the_quietest_is_fitted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every collective is measured once per round, rounds interleaved; per size the least of the rounds is
    fitted (a busy round only adds time) and every round's time is stored; a collective the backend lacks is
    asked once and skipped with one note."""
    import numpy as np

    class FakeDist:
        def get_world_size(self) -> int:
            return 2

        def get_rank(self) -> int:
            return 0

        def new_group(self, ranks):
            return tuple(ranks)

        def get_backend(self) -> str:
            return "gloo"

        def all_gather_object(self, out: list, obj: object) -> None:
            out[:] = [obj] * len(out)

    calls: list[str] = []
    busy = {1: 3.0}  # round 1 (the second) ran beside another program

    def measure(dist, kind, ranks, group, sizes, device, reps):
        calls.append(kind)
        if kind == "reducescatter":
            return None
        rnd = sum(c == kind for c in calls) - 1
        return [1e-4 * (i + 1) * busy.get(rnd, 1.0) * (1.1 if rnd == 2 else 1.0) for i in range(len(sizes))]

    captured = {}
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(comm_sampler, "_measure_layout", measure)
    monkeypatch.setattr(comm_sampler, "_write",
                        lambda dist, req, samples, notes, labels, device, rounds=None, hosts=(), machines=():
                        captured.update(samples=samples, notes=notes, rounds=rounds, hosts=hosts))
    req = CommRequest("c", num_sizes=3, collectives=("allreduce", "allgather", "reducescatter"), rounds=3)
    comm_sampler._sample_and_fit(FakeDist(), req, "cpu")
    assert calls == ["allreduce", "allgather", "reducescatter", "allreduce", "allgather", "allreduce", "allgather"]
    assert [s.collective for s in captured["samples"]] == ["allreduce", "allgather"]
    assert np.allclose(captured["samples"][0].time_s, [1e-4, 2e-4, 3e-4])  # round 0, the quietest
    assert len(captured["notes"]) == 1 and "reducescatter" in captured["notes"][0]
    assert captured["hosts"] == (comm_sampler.socket.gethostname(),)  # the ranks' hosts, for the cluster file
    rows = comm_sampler._store_rows("c", "gloo", captured["samples"], captured["rounds"])
    assert len(rows) == 2 * 3 * 3 and max(r.time_s for r in rows) == pytest.approx(9e-4)


def test_two_nodes_of_one_rank_time_their_pair_once() -> None:
    """torchrun --nnodes 2 --nproc-per-node 1: 'whole job' was the same two ranks as 'pair across nodes', timed twice
    (80 timings where 40 were new) and pooled into one layout."""
    assert [label for label, *_ in comm_sampler._layouts(2, 1)] == ["pair across nodes"]
    assert [label for label, *_ in comm_sampler._layouts(4, 2)] == ["pair in node", "pair across nodes", "whole job"]


def test_nodes_on_one_machine_are_said() -> None:
    """Two torchruns with --nnodes 2 on one host: the 'across nodes' timings are loopback (played 28 Nov: 478 us,
    2.06 GB/s written as inter-node figures of the cluster file)."""
    note = comm_sampler.same_machine_note(["a", "a", "a", "a"], local=2)
    assert note and "are 1 machine(s)" in note and "loopback" in note, note
    assert comm_sampler.same_machine_note(["a", "a", "b", "b"], local=2) is None
    assert comm_sampler.same_machine_note(["a", "a"], local=2) is None  # one node
    assert comm_sampler.machine_id()


def test_one_rank_is_refused_before_the_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "0")
    for world in ("1", "x"):
        monkeypatch.setenv("WORLD_SIZE", world)
        with pytest.raises(UsageError, match=f"at least 2 processes, but \\$WORLD_SIZE='{world}'"):
            comm_sampler.run_comm_profile(CommRequest("c"))


def test_the_cluster_file_says_what_it_measured_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """R75: the file named the default profile name (`cpu-<model>-1t`) whatever profile this machine had, and no
    host. Now its gpu is the newest profile of this device, and measured_on names the device and the ranks' hosts."""
    import json

    from llmperf_hook.profile import local_hardware

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(local_hardware, "fingerprint", lambda device, threads: {"device": "Test CPU 9000"})
    for name, device in (("my-cpu", "Test CPU 9000"), ("elsewhere", "Other CPU")):
        (tmp_path / "profiles" / name).mkdir(parents=True)
        (tmp_path / "profiles" / name / "profile.json").write_text(json.dumps({"hardware": {"device": device}}))
    assert comm_sampler._local_hardware_name("cpu") == "my-cpu"
    monkeypatch.setattr(comm_sampler, "_local_hardware_name", lambda device: "my-cpu")
    path = comm_sampler._ensure_cluster_yaml("mybox", _model("mybox"), "cpu", 4, ("node-a", "node-b"))
    doc = yaml.safe_load(path.read_text())
    assert doc["gpu"] == "my-cpu" and doc["measured_on"] == {"device": "Test CPU 9000", "hosts": ["node-a", "node-b"],
                                                             "machines": [comm_sampler.machine_id()]}

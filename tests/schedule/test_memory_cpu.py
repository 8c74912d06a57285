"""A CPU job's memory (schedule/memory_cpu.py): a rank is a process (no CUDA context, NCCL buffers or caching-allocator
reserve; its measured resident memory; DeepSpeed's buckets by the pages written), and the ranks of a host share its
RAM. GPU jobs keep the GPU's terms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from llmperf_hook.api import predict_command
from llmperf_hook.commands.run import check_gates
from llmperf_hook.errors import InfeasibleError, UsageError
from llmperf_hook.hardware.load import parse_cluster, parse_hardware
from llmperf_hook.report.json_report import render_prediction_json
from llmperf_hook.report.table import render_prediction_table
from llmperf_hook.schedule import memory_cpu
from llmperf_hook.schedule.memory import DEEPSPEED_BUCKET_ELEMS

REPO = Path(__file__).resolve().parents[2]
TRAIN_GPT = REPO / "examples" / "cpu-testbed" / "train_gpt.py"
GiB = 2**30


def cpu_cluster(ram_gib: float, description: str = "", device: str | None = "cpu", gpus_per_node: int = 2):
    hw = {"name": "cpu-t", "peak_TFLOPs": {"fp32": 0.09, "bf16": 0.02}, "memory_bandwidth_GBps": 16,
          "memory_capacity_GiB": ram_gib, "gemm_efficiency": 1.0, "memory_efficiency": 1.0,
          "description": description, **({"device": device} if device else {})}
    return parse_cluster({"name": "cpu-c", "gpu": hw, "gpus_per_node": gpus_per_node, "intra_node_bandwidth_GBps": 2,
                          "inter_node_bandwidth_GBps": 1}, "test")


def ds_command(tmp_path: Path, zero: int, ranks: int, hidden: int = 256, offload: bool = False) -> list[str]:
    ds = tmp_path / f"ds{zero}.json"
    zero_cfg = {"stage": zero, **({"offload_optimizer": {"device": "cpu"}} if offload else {})}
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "train_batch_size": 2 * ranks,
                              "zero_optimization": zero_cfg, "zero_force_ds_cpu_optimizer": not offload}))
    return ["deepspeed", "--num_gpus", str(ranks), str(TRAIN_GPT), "--deepspeed_config", str(ds), "--num-layers", "2",
            "--hidden-size", str(hidden), "--num-attention-heads", "4", "--seq-length", "128",
            "--max-position-embeddings", "128", "--micro-batch-size", "2", "--global-batch-size", str(2 * ranks),
            "--vocab-size", "1024", "--no-pipeline-parallel"]


def predict(argv: list[str], cluster):
    return predict_command(argv, {"DS_ACCELERATOR": "cpu"}, cluster=cluster)


def test_cpu_rank_is_a_process_not_a_gpu(tmp_path: Path) -> None:
    pred = predict(ds_command(tmp_path, zero=1, ranks=2), cpu_cluster(64))
    parts = pred.estimate.memory.components
    assert not {"cuda_context", "nccl_buffers", "allocator_fragmentation"} & set(parts)
    assert parts["process_resident"] == int(memory_cpu.resident_table()["deepspeed-zero1"][2] * 2**20)
    # DeepSpeed's 500M-element bucket: only the rank's gradients are written into it (fp32, 4 bytes each)
    assert 0 < parts["zero_buckets"] <= 8 * 2**20 < DEEPSPEED_BUCKET_ELEMS * 4
    assert sum(parts.values()) == pred.estimate.memory.peak_bytes_per_gpu


def test_gpu_job_keeps_gpu_terms(tmp_path: Path) -> None:
    pred = predict(ds_command(tmp_path, zero=1, ranks=2), "dgx-h100")
    parts = pred.estimate.memory.components
    assert parts["cuda_context"] > 0 and parts["nccl_buffers"] > 0 and "process_resident" not in parts
    assert parts["zero_buckets"] == DEEPSPEED_BUCKET_ELEMS * 4


def test_host_ram_holds_every_rank_of_the_host(tmp_path: Path) -> None:
    argv = ds_command(tmp_path, zero=1, ranks=2)
    peak = predict(argv, cpu_cluster(64)).estimate.memory.peak_bytes_per_gpu
    # RAM for one rank but not for the two on the host: does not fit
    short = predict(argv, cpu_cluster(1.5 * peak / GiB)).estimate.memory
    assert not short.fits and short.headroom_bytes == pytest.approx(1.5 * peak - 2 * peak, abs=2**20)
    assert short.must_fit_bytes == 2 * peak  # tune's rule compares the same need (memory_rule.fits_gpu)
    roomy = predict(argv, cpu_cluster(3 * peak / GiB)).estimate.memory
    assert roomy.fits and not roomy.tight
    tight_pred = predict(argv, cpu_cluster(2.1 * peak / GiB))
    assert tight_pred.estimate.memory.fits and tight_pred.estimate.memory.tight
    assert any(w.startswith("memory fits, tight: 2 rank(s) on a host") for w in tight_pred.estimate.warnings)
    with pytest.raises(InfeasibleError, match="does not fit the host: 2 rank"):
        check_gates(predict(argv, cpu_cluster(1.5 * peak / GiB)), None, require_fit=True)


def test_offloads_of_every_rank_of_the_host(tmp_path: Path) -> None:
    """A CPU host runs the processes the launch starts on it, whatever the cluster file's gpus_per_node: the offloads
    of all 4 ranks are on the host, beside the 4 ranks' own memory."""
    argv = ds_command(tmp_path, zero=2, ranks=4, offload=True)
    mem, by_four = (predict(argv, cpu_cluster(64, gpus_per_node=n)).estimate.memory for n in (2, 4))
    assert mem.host_bytes_per_node == by_four.host_bytes_per_node > 0
    assert mem.must_fit_bytes == by_four.must_fit_bytes == 4 * mem.peak_bytes_per_gpu + mem.host_bytes_per_node


def test_host_ranks_by_stage() -> None:
    class Cfg:  # rank placement only needs these
        world_size, nproc_per_node = 4, 2
    # pp 2: ranks 0-1 on stage 0 (host 0), ranks 2-3 on stage 1 (host 1)
    assert memory_cpu.host_ranks_bytes(Cfg(), [10, 30]) == (2, 60)
    Cfg.nproc_per_node = 4
    assert memory_cpu.host_ranks_bytes(Cfg(), [10, 30]) == (4, 80)


def test_written_bucket_bytes() -> None:
    assert memory_cpu.written_bucket_bytes(4e9, 1e9, 1e6) == pytest.approx(4e6)
    assert memory_cpu.written_bucket_bytes(4e9, 1e9, 5e9) == 4e9  # the whole bucket when the gradients fill it


def test_report_says_rank_and_host(tmp_path: Path) -> None:
    pred = predict(ds_command(tmp_path, zero=2, ranks=2), cpu_cluster(64))
    table = render_prediction_table(pred)
    assert "memory per rank" in table and "memory per host  2 ranks" in table and "memory per GPU" not in table
    mem = render_prediction_json(pred, {}, 1)["memory"]
    assert mem["device"] == "cpu" and mem["ranks_per_host"] == 2
    assert mem["host_ranks_bytes"] == 2 * mem["peak_bytes_per_gpu"]
    assert "device" not in render_prediction_json(predict(ds_command(tmp_path, 2, 2), "dgx-h100"), {}, 1)["memory"]


def test_hardware_device_key() -> None:
    assert cpu_cluster(8, device=None).gpu.device == "gpu"
    # files `llmperf profile --device cpu` wrote before the key existed say so in their description
    old = cpu_cluster(8, "AMD EPYC measured by `llmperf profile --device cpu` with 1 thread(s) per rank", None)
    assert old.gpu.device == "cpu"
    with pytest.raises(UsageError, match="device must be gpu or cpu"):
        parse_hardware({"name": "x", "peak_TFLOPs": {"fp32": 1}, "memory_bandwidth_GBps": 1,
                        "memory_capacity_GiB": 1, "device": "tpu"}, "test")


def test_device_of_every_writer_and_preset() -> None:
    """Both directions: no shipped GPU preset and no `llmperf profile --device cuda` file is read as a CPU; both CPU
    writers' descriptions (before the key) are; the key, where present, wins over the description."""
    from llmperf_hook.hardware.load import hardware_device_of
    from llmperf_hook.resources import configs_dir

    presets = sorted((configs_dir() / "hardware").glob("*.yaml"))
    assert presets and {hardware_device_of(yaml.safe_load(p.read_text()), p.name) for p in presets} == {"gpu"}
    gpu_profile = "NVIDIA H100 80GB HBM3 measured by `llmperf profile --device cuda`"
    cpu_local = ("this machine's CPU, described by `llmperf run --instrument` for a job that runs on it (as `llmperf "
                 "profile --device cpu` would, without its operator samples)")
    assert [hardware_device_of({"description": d}, "t") for d in (gpu_profile, cpu_local)] == ["gpu", "cpu"]
    assert hardware_device_of({"description": cpu_local, "device": "gpu"}, "t") == "gpu"
    assert hardware_device_of({"description": gpu_profile, "device": "CPU"}, "t") == "cpu"

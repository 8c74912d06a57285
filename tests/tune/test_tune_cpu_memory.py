"""tune on CPU hardware prunes by predict's CPU rule (schedule/memory_cpu.py: a host's ranks against its RAM), not by
the surrogate's GPU terms: with 3 GiB of RAM, a two-rank DeepSpeed job of ~0.4 GiB per rank fits at every ZeRO stage
(predict: 0.8 GiB per host), but the surrogate priced each rank with a CUDA context and whole 500M-element buckets
(~4.7 GiB at ZeRO-1/2/3) and pruned five candidates as certain out-of-memory, ZeRO-3 (the fastest) among them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.cli import main
from llmperf_hook.hardware.load import parse_cluster
from llmperf_hook.tune import surrogate_memory
from llmperf_hook.tune.candidates import candidates_from_list
from llmperf_hook.tune.candidate import candidate_of

REPO = Path(__file__).resolve().parents[2]
TRAIN_GPT = REPO / "examples" / "cpu-testbed" / "train_gpt.py"
HARDWARE = {"name": "cpu3-hw", "peak_TFLOPs": {"fp32": 0.09, "bf16": 0.02}, "memory_bandwidth_GBps": 16,
            "memory_capacity_GiB": 3, "gemm_efficiency": 1.0, "memory_efficiency": 1.0, "device": "cpu"}
CLUSTER = {"name": "cpu3", "gpu": HARDWARE, "gpus_per_node": 2, "intra_node_bandwidth_GBps": 2,
           "inter_node_bandwidth_GBps": 1}


def _command(tmp_path: Path) -> list[str]:
    ds = tmp_path / "z2.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "train_batch_size": 4,
                              "zero_optimization": {"stage": 2}}))
    return ["deepspeed", "--num_gpus", "2", str(TRAIN_GPT), "--deepspeed_config", str(ds), "--num-layers", "2",
            "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "128",
            "--max-position-embeddings", "128", "--micro-batch-size", "2", "--global-batch-size", "4",
            "--vocab-size", "1024", "--no-pipeline-parallel"]


def test_surrogate_leaves_cpu_memory_to_the_full_prediction(tmp_path: Path) -> None:
    pred = predict_command(_command(tmp_path), {}, cluster=parse_cluster(CLUSTER, "test"))
    cols = candidates_from_list((candidate_of(pred.config),)).columns
    peak, must = surrogate_memory.estimate_memory_bytes(pred.config, pred.cluster, cols)
    assert np.isnan(peak).all() and np.isnan(must).all()


def test_tune_keeps_what_predict_says_fits_the_host(tmp_path: Path) -> None:
    cluster = tmp_path / "cpu3.yaml"
    cluster.write_text(json.dumps(CLUSTER))  # JSON is YAML
    out = subprocess.run([sys.executable, "-m", "llmperf_hook", "tune", "--cluster", str(cluster), "--format", "json",
                          "--top", "50", "--", *_command(tmp_path)], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, env={"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                                            "LLMPERF_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["search"]["num_oom_estimated"] == result["search"]["num_oom_predicted"] == 0
    assert {row["zero_stage"] for row in result["top"]} >= {1, 2, 3}  # every stage listed (ranked by speed, not pruned)
    # headroom is per host, as predict's verdict: the RAM less both ranks (H206 left it RAM less one rank's peak)
    base, mem = result["baseline"], predict_command(_command(tmp_path), {}, cluster=parse_cluster(CLUSTER, "t")).estimate.memory
    assert base["headroom_bytes"] == pytest.approx(mem.headroom_bytes, rel=1e-6)
    assert base["headroom_bytes"] < base["capacity_bytes"] - 1.5 * base["peak_bytes_per_gpu"]


def _tune_table(tmp_path: Path, ram_gib: float, capsys: pytest.CaptureFixture[str],
                monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    cluster = tmp_path / "cpu.yaml"
    cluster.write_text(json.dumps({**CLUSTER, "gpu": {**HARDWARE, "memory_capacity_GiB": ram_gib}}))
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as ended:
        main(["tune", "--cluster", str(cluster), "--", *_command(tmp_path)])
    out = capsys.readouterr()
    return int(ended.value.code or 0), out.out, out.err


def test_tune_speaks_of_ranks_and_hosts_on_a_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """On CPU hardware tune's words are predict's (a host's ranks against its RAM), not a GPU's: the table's fit rule,
    and the nothing-fits message (0.5 GiB: two ranks of ~0.35 GiB each, the processes alone over)."""
    code, table, _ = _tune_table(tmp_path, 3, capsys, monkeypatch)
    assert code == 0 and "fits = the resident memory of a host's ranks together (predict's rule)" in table
    assert "GiB of RAM" in table and "peak GiB is one rank's resident memory" in table
    assert "allocator's reserve" not in table
    code, _, err = _tune_table(tmp_path, 0.5, capsys, monkeypatch)
    assert code == 3 and "per host (its ranks' resident memory together)" in err, err
    assert "Run fewer ranks on each host" in err and "per GPU" not in err and "GPUs" not in err

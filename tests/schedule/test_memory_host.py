"""Host memory per node that DeepSpeed's offloads pin (schedule/host_memory.py), and the verdict against the cluster's
host RAM (ClusterSpec.host_memory_bytes, the preset's host_memory_GiB): the report shows it, `run --require-fit`
exits 3 when it does not fit."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from llmperf_hook.api import predict_config
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.hardware.load import load_cluster

DGX = load_cluster("dgx-a100")
GPN = 8


def _zero(stage: int, layers: int = 8, **opt: object):
    return make_config(num_layers=layers, hidden_size=2048, num_attention_heads=16, dp=GPN, framework="deepspeed",
                       optimizer_kw=dict(zero_stage=stage, fp32_main_grads=False, **opt))


def _host(cfg, cluster=DGX):
    return predict_config(cfg, cluster).memory


def _params(cfg) -> int:
    from llmperf_hook.api import build_graph
    return build_graph(cfg, DGX).stages[0].num_params


def test_zero3_offload_pins_twenty_bytes_per_parameter_on_the_node() -> None:
    """Per parameter of a rank's partition: fp32 master + Adam m, v (12), the fp32 gradient (4), ZeRO-3's bf16
    gradient partition (2), the bf16 parameter partition (2); the node's 8 ranks hold the whole model once."""
    cfg = _zero(3, offload_optimizer="cpu", offload_param="cpu")
    mem = _host(cfg)
    partition = _params(cfg) / GPN
    assert mem.host_components == pytest.approx({
        "host_optimizer_states": GPN * 12 * partition, "host_fp32_gradients": GPN * 4 * partition,
        "host_gradient_partition": GPN * 2 * partition, "host_parameters": GPN * 2 * partition}, rel=1e-6)
    assert mem.host_capacity_bytes == 2048 * 2**30 and mem.host_fits


def test_zero2_offload_keeps_a_16_bit_parameter_copy_but_no_16_bit_gradient_on_the_host() -> None:
    """12 + 4 B of the optimizer, and the pinned 16-bit partition the updated fp32 weights are cast into before
    their copy to the GPU (stage_1_and_2.py param_buffer_of_bit16_for_cpu_offload_groups, DeepSpeed >= 0.17.0):
    2 B; without gradient accumulation no gradient is kept there."""
    cfg = _zero(2, offload_optimizer="cpu")
    mem = _host(cfg)
    assert set(mem.host_components) == {"host_optimizer_states", "host_fp32_gradients", "host_parameter_copy"}
    assert mem.host_components["host_parameter_copy"] == pytest.approx(GPN * 2 * _params(cfg) / GPN, rel=1e-6)
    assert mem.host_bytes_per_node == pytest.approx(GPN * 18 * _params(cfg) / GPN, rel=1e-6)
    assert "host_parameter_copy" not in _host(_zero(3, offload_optimizer="cpu")).host_components


def test_zero2_offload_with_gradient_accumulation_saves_the_16_bit_gradients_on_the_host() -> None:
    """Between micro-steps each partition parameter's gradient goes to a pinned host buffer of its dtype
    (stage_1_and_2.py async_accumulate_grad_in_cpu_via_gpu): 2 B more per parameter of the partition."""
    one = _zero(2, offload_optimizer="cpu")
    four = replace(one, batch=replace(one.batch, global_batch_size=4 * one.batch.global_batch_size,
                                      num_microbatches=4))
    extra = _host(four).host_components["host_accumulated_gradients"]
    assert extra == pytest.approx(GPN * 2 * _params(one) / GPN, rel=1e-6)
    assert "host_accumulated_gradients" not in _host(one).host_components


def test_nvme_offload_pins_its_swap_buffers() -> None:
    """offload_param nvme: 5 pinned buffers of buffer_size (1e8) bf16 elements per rank; besides, the optimizer's fp32
    swap buffers (4 x the largest sub-group), ZeRO-3's gradient partition, and the parameter partition up to
    max_in_cpu (1e9) elements, moved to the host for good (stage3.py _create_param_groups_fp16_flat_cpu_memory):
    all of this small one's, a share of a partition over the limit."""
    cfg = _zero(3, offload_optimizer="nvme", offload_param="nvme")
    parts = _host(cfg).host_components
    partition = _params(cfg) / GPN
    assert parts["host_nvme_swap_buffers"] == pytest.approx(GPN * (5 * 100_000_000 * 2 + 4 * partition * 4), rel=1e-6)
    assert parts["host_parameters"] == pytest.approx(GPN * 2 * partition, rel=1e-6)
    assert "host_optimizer_states" not in parts
    capped = replace(cfg, optimizer=replace(cfg.optimizer, nvme_param_max_in_cpu_elems=1_000_000))
    assert _host(capped).host_components["host_parameters"] == GPN * 2 * 1_000_000


def test_nothing_offloaded_nothing_on_the_host() -> None:
    assert _host(_zero(3)).host_components == {}
    assert _host(make_config(num_layers=2, hidden_size=1024, num_attention_heads=16, dp=8)).host_bytes_per_node == 0


def test_verdict_against_the_cluster_host_ram() -> None:
    """A 64-layer h 8192 model (~51 B parameters) offloaded whole from one node: ~1 TB pinned, over 512 GiB of host
    RAM; a preset that states none gets no verdict."""
    cfg = _zero(3, layers=64, offload_optimizer="cpu", offload_param="cpu")
    cfg = replace(cfg, model=replace(cfg.model, hidden_size=8192, ffn_hidden_size=4 * 8192, num_attention_heads=64,
                                     num_query_groups=64, kv_channels=128))
    small = replace(DGX, host_memory_bytes=512 * 2**30)
    mem = _host(cfg, small)
    assert mem.host_bytes_per_node > 512 * 2**30 and not mem.host_fits
    unknown = _host(cfg, load_cluster("pcie-h100-4x400g"))  # a generic PCIe server: no datasheet states its RAM
    assert unknown.host_capacity_bytes == 0 and unknown.host_fits


def test_run_require_fit_exits_3_when_the_host_ram_is_short(tmp_path: Path) -> None:
    """GPT-3 175B with ZeRO-3 offloading optimizer and parameters from one DGX A100: ~175 B x 20 B = 3.5 TB of
    pinned host memory against its 2 TB; the GPUs themselves fit (full recompute)."""
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                                    "offload_param": {"device": "cpu"}}}))
    argv = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "96", "--hidden-size", "12288",
            "--num-attention-heads", "96", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--micro-batch-size", "1", "--global-batch-size", "8", "--vocab-size", "50257", "--bf16",
            "--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1",
            "--deepspeed",
            "--deepspeed_config", str(ds), "--zero-stage", "3", "--no-pipeline-parallel"]
    out = subprocess.run([sys.executable, "-m", "llmperf_hook", "run", "--cluster", "dgx-a100", "--dry-run",
                          "--require-fit", "--", *argv], capture_output=True, text=True, timeout=300)
    assert out.returncode == 3, out.stderr
    assert "host memory" in out.stderr and "2048 GiB of host RAM" in out.stderr and "Traceback" not in out.stderr
    assert "exceeds the 80.00 GiB" not in out.stderr  # the GPUs fit
    js = subprocess.run([sys.executable, "-m", "llmperf_hook", "predict", "--cluster", "dgx-a100", "--format", "json",
                         "--", *argv], capture_output=True, text=True, timeout=300)
    host = json.loads(js.stdout)["memory"]["host"]
    assert host["fits"] is False and host["bytes_per_node"] > host["capacity_bytes"] == 2048 * 2**30
    table = subprocess.run([sys.executable, "-m", "llmperf_hook", "predict", "--cluster", "dgx-a100", "--", *argv],
                           capture_output=True, text=True, timeout=300).stdout
    assert "host memory/node" in table and "of 2.00 TiB: DOES NOT FIT" in table

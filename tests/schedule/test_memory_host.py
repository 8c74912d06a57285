"""Host memory per node that DeepSpeed's offloads pin (schedule/host_memory.py), and the verdict against the cluster's
host RAM (ClusterSpec.host_memory_bytes, the preset's host_memory_GiB): the report shows it, `run --require-fit`
exits 3 when it does not fit."""

from __future__ import annotations

import json
import math
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


def _block(num_bytes: float) -> float:
    """A pinned buffer as torch's CUDA host allocator takes it: the next power of two (measured on an H200,
    measurements/h200-sxm-141gb-2026-11-27/pinned.txt)."""
    return 2.0 ** math.ceil(math.log2(num_bytes))


def _params(cfg) -> int:
    from llmperf_hook.api import build_graph
    return build_graph(cfg, DGX).stages[0].num_params


def _tensors(cfg) -> list[int]:
    """The rank's parameter tensors in registration order (graph/ddp_buckets.chunk_tensors), whose one embedding
    entry is two parameters: the word embedding and the learned position table."""
    from llmperf_hook.api import build_graph
    from llmperf_hook.graph.ddp_buckets import chunk_tensors
    from llmperf_hook.graph.params import position_table_rows

    lumped = [n for c in build_graph(cfg, DGX).stages[0].chunks for n in chunk_tensors(cfg, c)[0] if n]
    positions = position_table_rows(cfg) * cfg.model.hidden_size
    return [lumped[0] - positions, positions, *lumped[1:]] if positions else lumped


def test_zero3_offload_pins_twenty_bytes_per_parameter_on_the_node() -> None:
    """Per parameter of a rank's partition: fp32 master + Adam m, v (12, pageable), the fp32 gradient (4), ZeRO-3's
    bf16 gradient partition (2), the bf16 parameter partition (2), the last three pinned (pin_memory, DeepSpeed's
    default since 0.19.5) in power-of-two blocks; the node's 8 ranks hold the whole model once. With pin_memory
    false: their sizes, but for the parameter partition, which stage3.py pins whatever pin_memory says
    (_create_param_groups_fp16_flat_cpu_memory)."""
    cfg = _zero(3, offload_optimizer="cpu", offload_param="cpu")
    mem = _host(cfg)
    partition = _params(cfg) / GPN
    zero_init = sum(_block(2 * math.ceil(n / GPN)) for n in _tensors(cfg))  # test_zero_init_pinned_copies_stay_cached
    assert mem.host_components == pytest.approx({
        "host_optimizer_states": GPN * 12 * partition, "host_fp32_gradients": GPN * _block(4 * partition),
        "host_gradient_partition": GPN * _block(2 * partition), "host_parameters": GPN * _block(2 * partition),
        "host_zero_init_pinned_cache": GPN * zero_init}, rel=1e-6)
    assert mem.host_capacity_bytes == 2048 * 2**30 and mem.host_fits
    pageable = replace(cfg, optimizer=replace(cfg.optimizer, offload_optimizer_pin_memory=False,
                                              offload_param_pin_memory=False))
    assert _host(pageable).host_bytes_per_node == pytest.approx(GPN * (18 * partition + _block(2 * partition)),
                                                                rel=1e-6)


def test_zero2_offload_keeps_a_16_bit_parameter_copy_but_no_16_bit_gradient_on_the_host() -> None:
    """12 + 4 B of the optimizer, and the pinned 16-bit partition the updated fp32 weights are cast into before
    their copy to the GPU (stage_1_and_2.py param_buffer_of_bit16_for_cpu_offload_groups, DeepSpeed >= 0.17.0):
    2 B; without gradient accumulation no gradient is kept there."""
    cfg = _zero(2, offload_optimizer="cpu")
    mem = _host(cfg)
    partition = _params(cfg) / GPN
    assert set(mem.host_components) == {"host_optimizer_states", "host_fp32_gradients", "host_parameter_copy",
                                        "host_gradient_staging"}
    assert mem.host_components["host_parameter_copy"] == pytest.approx(GPN * _block(2 * partition), rel=1e-6)
    # pinned: the fp32 master partition (Adam's moments are pageable), its fp32 gradient, the 16-bit copy, the
    # 16-bit staging buffer of the largest parameter (temp_grad_buffer_for_cpu_offload)
    staging = _block(2 * max(_tensors(cfg)))
    assert mem.host_components["host_gradient_staging"] == GPN * staging
    assert mem.host_bytes_per_node == pytest.approx(
        GPN * (8 * partition + 2 * _block(4 * partition) + _block(2 * partition) + staging), rel=1e-6)
    assert "host_parameter_copy" not in _host(_zero(3, offload_optimizer="cpu")).host_components


def test_zero2_offload_with_gradient_accumulation_saves_the_16_bit_gradients_on_the_host() -> None:
    """Between micro-steps each partition parameter's gradient goes to a pinned host buffer of its own, the whole
    parameter in its dtype (stage_1_and_2.py async_accumulate_grad_in_cpu_via_gpu: torch.zeros(param.numel()) then
    get_accelerator().pin_memory): one power-of-two block per tensor the rank's partition touches, a tensor astride
    two partitions held whole by both; the busiest rank's, times the node's 8. Pageable: the same tensors' sizes."""
    one = _zero(2, offload_optimizer="cpu")
    four = replace(one, batch=replace(one.batch, global_batch_size=4 * one.batch.global_batch_size,
                                      num_microbatches=4))
    tensors = _tensors(one)
    size = math.ceil(sum(tensors) / (2 * GPN)) * 2  # stage_1_and_2.py partition_size of the 2 x dp aligned group
    starts = [sum(tensors[:i]) for i in range(len(tensors))]
    per_rank = [[n for n, a in zip(tensors, starts) if a < (r + 1) * size and a + n > r * size] for r in range(GPN)]
    extra = _host(four).host_components["host_accumulated_gradients"]
    assert extra == pytest.approx(GPN * max(sum(_block(2 * n) for n in ns) for ns in per_rank), rel=1e-6)
    assert extra > 1.2 * 2 * _params(one)  # rounding and tensors astride partitions: the partition was a lower bound
    assert "host_accumulated_gradients" not in _host(one).host_components
    pageable = replace(four, optimizer=replace(four.optimizer, offload_optimizer_pin_memory=False))
    assert _host(pageable).host_components["host_accumulated_gradients"] == pytest.approx(
        GPN * max(sum(2 * n for n in ns) for ns in per_rank), rel=1e-6)


def test_nvme_offload_pins_its_swap_buffers() -> None:
    """offload_param nvme: 5 pinned buffers of buffer_size (1e8) bf16 elements per rank; besides, the optimizer's fp32
    swap buffers (4 x the largest sub-group), ZeRO-3's gradient partition, and the parameter partition up to
    max_in_cpu (1e9) elements, moved to the host for good (stage3.py _create_param_groups_fp16_flat_cpu_memory):
    all of this small one's, a share of a partition over the limit."""
    cfg = _zero(3, offload_optimizer="nvme", offload_param="nvme")
    parts = _host(cfg).host_components
    partition = _params(cfg) / GPN
    assert parts["host_nvme_swap_buffers"] == pytest.approx(GPN * (5 * 100_000_000 * 2 + 4 * partition * 4), rel=1e-6)
    assert parts["host_parameters"] == pytest.approx(GPN * _block(2 * partition), rel=1e-6)
    assert "host_optimizer_states" not in parts
    capped = replace(cfg, optimizer=replace(cfg.optimizer, nvme_param_max_in_cpu_elems=1_000_000))
    assert _host(capped).host_components["host_parameters"] == GPN * 2**21  # 2 MB pinned: a 2 MiB block


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


def test_zero3_pins_each_optimizer_sub_groups_gradient_on_its_own() -> None:
    """stage3.py: each offloaded sub-group's fp32 gradient is its own pinned buffer (subgroup_gradient_buffer), so a
    partition cut into sub_group_size pieces takes one power-of-two block per piece."""
    cfg = _zero(3, offload_optimizer="cpu")
    partition = _params(cfg) / GPN
    size = int(partition // 3)  # three full sub-groups and the rest
    cut = replace(cfg, optimizer=replace(cfg.optimizer, sub_group_size_elems=size))
    want = 3 * _block(4 * size) + _block(4 * (partition - 3 * size))
    assert _host(cut).host_components["host_fp32_gradients"] == pytest.approx(GPN * want, rel=1e-6)


def test_ds_config_pin_memory_false_keeps_the_buffers_pageable(tmp_path: Path) -> None:
    """zero_optimization.offload_optimizer.pin_memory false (read from the ds_config): no power-of-two blocks."""
    from llmperf_hook.api import predict_command

    def run(pin: bool):
        ds = tmp_path / f"ds_{pin}.json"
        ds.write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu",
                                                                                          "pin_memory": pin}}}))
        argv = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "8", "--hidden-size", "2048",
                "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
                "--micro-batch-size", "1", "--global-batch-size", "8", "--vocab-size", "32000", "--bf16",
                "--deepspeed", "--deepspeed_config", str(ds), "--zero-stage", "2", "--no-pipeline-parallel"]
        return predict_command(argv, {}, cluster="dgx-a100")

    pinned, pageable = run(True), run(False)
    assert [p.config.optimizer.offload_optimizer_pin_memory for p in (pinned, pageable)] == [True, False]
    from llmperf_hook.api import build_graph
    partition = build_graph(pageable.config, pageable.cluster).stages[0].num_params / GPN
    largest = 32000 * 2048  # the word embedding
    assert pageable.estimate.memory.host_bytes_per_node == pytest.approx(GPN * (18 * partition + 2 * largest),
                                                                         rel=1e-6)
    assert pinned.estimate.memory.host_bytes_per_node > pageable.estimate.memory.host_bytes_per_node


def test_deepspeed_before_0_19_5_keeps_the_offload_pageable(tmp_path: Path) -> None:
    """pin_memory defaulted to False before v0.19.5 (7dfa67aea): with LLMPERF_DEEPSPEED_VERSION=0.19.4 and no
    pin_memory key the offloaded buffers are pageable; 0.19.5 pins them."""
    from llmperf_hook.api import predict_command

    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}))
    argv = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "8", "--hidden-size", "2048",
            "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
            "--micro-batch-size", "1", "--global-batch-size", "8", "--vocab-size", "32000", "--bf16",
            "--deepspeed", "--deepspeed_config", str(ds), "--zero-stage", "2", "--no-pipeline-parallel"]
    pins = [predict_command(argv, {"LLMPERF_DEEPSPEED_VERSION": v}, cluster="dgx-a100").config.optimizer
            .offload_optimizer_pin_memory for v in ("0.19.4", "0.19.5")]
    assert pins == [False, True]


def test_zero_init_pinned_copies_stay_cached() -> None:
    """ZeRO-3 offload_param cpu: zero.Init pins each parameter's partition on its own (partition_parameters.py
    _partition_param, pinned when offload_param.pin_memory), then stage3.py copies them into its pinned flat buffer
    (_move_to_flat_buffer: src.data = dest.data) and frees them into torch's pinned cache, which nothing empties
    (no torch._C._host_emptyCache in DeepSpeed): one power-of-two block per parameter partition stays. pin_memory
    false: pageable, freed. A later pinned request of the same power of two takes a cached block: with 1e6-element
    sub-groups each sub-group's fp32 gradient (4 MiB) reuses one of the 4 MiB blocks of the MLP weights' partitions
    (2048 x 8192 / 8 x 2 B)."""
    cfg = _zero(3, offload_optimizer="cpu", offload_param="cpu")
    blocks = [_block(2 * math.ceil(n / GPN)) for n in _tensors(cfg)]
    assert _host(cfg).host_components["host_zero_init_pinned_cache"] == pytest.approx(GPN * sum(blocks), rel=1e-6)
    unpinned = replace(cfg, optimizer=replace(cfg.optimizer, offload_param_pin_memory=False))
    assert "host_zero_init_pinned_cache" not in _host(unpinned).host_components
    cut = replace(cfg, optimizer=replace(cfg.optimizer, sub_group_size_elems=1_000_000))
    sub_groups = math.ceil(_params(cfg) / GPN / 1_000_000)
    four_mib = blocks.count(2.0**22)
    assert 0 < four_mib < sub_groups
    assert _host(cut).host_components["host_zero_init_pinned_cache"] == pytest.approx(
        GPN * (sum(blocks) - four_mib * 2.0**22), rel=1e-6)


def _ds_offload_argv(tmp_path: Path, stage: int, zero: dict) -> list[str]:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": stage, **zero}}))
    return ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "8", "--hidden-size", "2048",
            "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
            "--micro-batch-size", "1", "--global-batch-size", "8", "--vocab-size", "32000", "--bf16",
            "--deepspeed", "--deepspeed_config", str(ds), "--zero-stage", str(stage), "--no-pipeline-parallel"]


def test_native_pin_backend_takes_no_power_of_two_blocks(tmp_path: Path) -> None:
    """DS_PIN_MEMORY_BACKEND=native (DeepSpeed >= 0.19.6): get_accelerator().pin_memory goes to posix_memalign +
    mlock of the request's size (deepspeed/utils/pin_memory.py, csrc/pin_memory/page_alloc.cpp), freed when the
    tensor goes: the pinned buffers cost their size and zero.Init's copies do not stay. DeepSpeed 0.19.5 has no such
    backend: torch's blocks."""
    from llmperf_hook.api import predict_command

    argv = _ds_offload_argv(tmp_path, 3, {"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}})
    torch_pins = predict_command(argv, {}, cluster="dgx-a100")
    native = predict_command(argv, {"DS_PIN_MEMORY_BACKEND": " Native"}, cluster="dgx-a100")
    old = predict_command(argv, {"DS_PIN_MEMORY_BACKEND": "native", "LLMPERF_DEEPSPEED_VERSION": "0.19.5"},
                          cluster="dgx-a100")
    assert [p.config.optimizer.native_pinned_memory for p in (torch_pins, native, old)] == [False, True, False]
    partition = _params(native.config) / GPN
    assert native.estimate.memory.host_components == pytest.approx({
        "host_optimizer_states": GPN * 12 * partition, "host_fp32_gradients": GPN * 4 * partition,
        "host_gradient_partition": GPN * 2 * partition, "host_parameters": GPN * 2 * partition}, rel=1e-6)
    assert old.estimate.memory.host_components == torch_pins.estimate.memory.host_components


def test_zero12_offload_keeps_a_gpu_staging_buffer_of_the_largest_parameter() -> None:
    """stage_1_and_2.py with cpu_offload: temp_grad_buffer_for_gpu_offload = torch.zeros(largest_param_numel) on the
    GPU, in the model's dtype, for the whole run: the word embedding's 32,000 x 2048 x 2 B here; ZeRO-3 and
    non-offloaded ZeRO-2 have none."""
    cfg = _zero(2, offload_optimizer="cpu")
    parts = predict_config(cfg, DGX).memory.components
    assert parts["zero_offload_grad_staging"] == 2 * max(_tensors(cfg)) == 2 * cfg.model.padded_vocab_size * 2048
    for other in (_zero(2), _zero(3, offload_optimizer="cpu")):
        assert "zero_offload_grad_staging" not in predict_config(other, DGX).memory.components


def test_nvme_optimizer_sub_groups_take_no_zero_init_block() -> None:
    """offload_optimizer nvme swaps each sub-group's fp32 gradient (stage3.py initialize_optimizer_states: a pinned
    subgroup_gradient_buffer only where _swappable_optimizer_subgroup refuses, under 1 MiB), so no sub-group takes
    a cached zero.Init block of offload_param cpu: with 1e6-element sub-groups (4 MiB gradients) the 4 MiB blocks of
    the MLP weights' partitions all stay; only the pinned gradient partition may take one."""
    cfg = _zero(3, offload_optimizer="nvme", offload_param="cpu", sub_group_size_elems=1_000_000)
    blocks = [_block(2 * math.ceil(n / GPN)) for n in _tensors(cfg)]
    assert blocks.count(2.0**22) > 0
    gradient_partition = _block(2 * _params(cfg) / GPN)
    kept = sum(blocks) - (gradient_partition if gradient_partition in blocks else 0.0)
    assert _host(cfg).host_components["host_zero_init_pinned_cache"] == pytest.approx(GPN * kept, rel=1e-6)

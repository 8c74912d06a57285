"""Host and GPU memory of the offloads beyond DeepSpeed's defaults (schedule/host_memory.py, schedule/memory.py):
the ds_config's own NVMe swap buffer counts, Megatron-LM's --optimizer-cpu-offload with --optimizer-offload-fraction
(HybridDeviceOptimizer), --num-distributed-optimizer-instances, --overlap-param-gather, and the host RAM the cluster
presets state."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from llmperf_hook.api import build_graph, predict_command
from llmperf_hook.errors import ConfigError
from llmperf_hook.hardware.load import load_cluster

GPN = 8
SHAPE = ["--num-layers", "8", "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
         "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--global-batch-size", "64",
         "--vocab-size", "32000", "--bf16"]
OFFLOAD = ["--use-distributed-optimizer", "--use-precision-aware-optimizer", "--optimizer-cpu-offload"]


def _megatron(*flags: str, gpus: int = GPN):
    return predict_command(["torchrun", "--nproc-per-node", str(gpus), "pretrain_gpt.py", *SHAPE, *flags], {},
                           cluster="dgx-a100")


def _shard(pred) -> float:
    """Parameters of one rank's distributed-optimizer shard (dp = 8, tp = pp = 1)."""
    return build_graph(pred.config, pred.cluster).stages[0].num_params / GPN


def _pinned(num_bytes: float) -> float:
    """torch's CUDA host allocator: a pinned block rounded up to the next power of two (measured on an H200,
    measurements/h200-sxm-141gb-2026-11-27/pinned.txt)."""
    return 2.0 ** math.ceil(math.log2(num_bytes))


def _tensors(pred) -> list[int]:
    """The rank's parameter tensors: the word embedding (32,000 x 2048) and the position table (2048 x 2048) are
    parameters of their own, then the layers' and the head's."""
    from llmperf_hook.graph.ddp_buckets import chunk_tensors

    stage = build_graph(pred.config, pred.cluster).stages[0]
    lumped = [n for c in stage.chunks for n in chunk_tensors(pred.config, c)[0] if n]
    assert lumped[0] == (32000 + 2048) * 2048  # chunk_tensors' one embedding entry
    return [32000 * 2048, 2048 * 2048, *lumped[1:]]


def test_megatron_cpu_offload_pins_its_copies_in_power_of_two_blocks() -> None:
    """HybridDeviceOptimizer, param_update_in_fp32: per offloaded parameter an fp32 copy, its fp32 gradient (both
    pinned, each tensor's block rounded up to a power of two by torch's host allocator) and AdamW's exp_avg /
    exp_avg_sq (pageable, 8 B) on the CPU (hybrid_optimizer.py _get_sub_optimizer_param_groups,
    _set_sub_optimizer_grads); the node's 8 ranks hold their 8 shards. Before: 4 B each, unrounded."""
    pred = _megatron(*OFFLOAD)
    host = pred.estimate.memory.host_components
    shard_blocks = sum(_pinned(4 * n / GPN) for n in _tensors(pred))
    assert host["host_optimizer_states"] == pytest.approx(GPN * 8 * _shard(pred), rel=1e-6)
    assert host["host_fp32_parameters"] == host["host_fp32_gradients"] == pytest.approx(GPN * shard_blocks, rel=1e-6)
    assert shard_blocks > 1.05 * 4 * _shard(pred)  # the rounding is not small for this model (7 % here)
    assert pred.estimate.memory.components["optimizer_states"] == 0


def test_megatron_cpu_offload_keeps_the_first_builds_pinned_copies() -> None:
    """core/optimizer/__init__.py builds a HybridDeviceOptimizer over the rank's whole parameters, then
    DistributedOptimizer.__init__ builds the one it keeps over the shards while the first still lives: the first's
    fp32 copies of every parameter (pinned) are freed into torch's pinned cache, which keeps them, and no shard-sized
    request of a different power of two reuses them: 4 B per parameter of the whole model per rank, more than the
    shard's 16 B at dp 8. On one GPU (the shard is the whole tensor) the fp32 gradients reuse them."""
    pred = _megatron(*OFFLOAD)
    whole = sum(_pinned(4 * n) for n in _tensors(pred))
    assert pred.estimate.memory.host_components["host_first_build_fp32_copies"] == pytest.approx(GPN * whole, rel=1e-6)
    one = _megatron(*OFFLOAD, gpus=1)
    host = one.estimate.memory.host_components
    assert "host_first_build_fp32_copies" not in host
    assert host["host_fp32_gradients"] == pytest.approx(sum(_pinned(4 * n) for n in _tensors(one)), rel=1e-6)


def test_megatron_no_pin_cpu_flags_keep_the_copies_pageable() -> None:
    """--no-pin-cpu-grads / --no-pin-cpu-params (arguments.py store_false into pin_cpu_grads / pin_cpu_params;
    hybrid_optimizer.py: torch.empty(..., pin_memory=self.pin_cpu_grads), `if cpu_copy and self.pin_cpu_params:
    param.pin_memory()`): that half is priced at its size. Pageable fp32 copies of the first build go back to the C
    allocator once DistributedOptimizer replaces it, before the first step allocates the gradients and Adam's states:
    the host peaks at the larger of init (whole model 4 B) and step (shard 4 + 8 B), beside the shard's parameters.
    On one GPU, pinned gradients reuse nothing of a pageable first build."""
    pinned = _megatron(*OFFLOAD).estimate.memory.host_components
    pageable_grads = _megatron(*OFFLOAD, "--no-pin-cpu-grads")
    host = pageable_grads.estimate.memory.host_components
    assert host["host_fp32_gradients"] == pytest.approx(GPN * 4 * _shard(pageable_grads), rel=1e-6)
    assert host["host_fp32_parameters"] == pinned["host_fp32_parameters"]
    assert host["host_first_build_fp32_copies"] == pinned["host_first_build_fp32_copies"]
    both = _megatron(*OFFLOAD, "--no-pin-cpu-grads", "--no-pin-cpu-params")
    host = both.estimate.memory.host_components
    assert both.config.optimizer.pin_cpu_params is False and both.config.optimizer.pin_cpu_grads is False
    shard = _shard(both)
    init, step = 4 * sum(_tensors(both)), (4 + 8) * shard
    assert init > step  # dp 8: the first build's whole copies are the peak
    assert host["host_fp32_parameters"] == pytest.approx(GPN * 4 * shard, rel=1e-6)
    assert sum(host.values()) == pytest.approx(GPN * (4 * shard + init), rel=1e-6)
    one = _megatron(*OFFLOAD, "--no-pin-cpu-params", gpus=1)
    host = one.estimate.memory.host_components
    assert host["host_fp32_gradients"] == pytest.approx(sum(_pinned(4 * n) for n in _tensors(one)), rel=1e-6)
    assert "host_first_build_fp32_copies" not in host  # init 4 B < step 4 + 8 B of the same (whole) shard


def test_megatron_offload_fraction_splits_the_optimizer_between_host_and_gpu() -> None:
    """--optimizer-offload-fraction 0.25: a quarter of the shard's optimizer on the host, three quarters (fp32 master
    and Adam states, 12 B) left on the GPU; no 'modelled as full offload' warning any more."""
    full, quarter = _megatron(*OFFLOAD), _megatron(*OFFLOAD, "--optimizer-offload-fraction", "0.25")
    shard = _shard(full)
    assert quarter.estimate.memory.host_bytes_per_node == pytest.approx(full.estimate.memory.host_bytes_per_node / 4)
    assert quarter.estimate.memory.components["optimizer_states"] == pytest.approx(12 * shard * 0.75, rel=1e-6)
    assert not [w for w in quarter.warnings + quarter.estimate.warnings if "offload" in w]
    steps = [op for op in build_graph(quarter.config, quarter.cluster).stages[0].step_ops if op.op_class == "optimizer"]
    assert sorted(op.dims["params"] for op in steps) == pytest.approx(sorted([shard * 0.25, shard * 0.75]), abs=1)


def test_offload_fraction_zero_steps_everything_on_the_gpu() -> None:
    """Fraction 0: HybridDeviceOptimizer offloads nothing; the step runs on the GPU and the host holds nothing."""
    pred = _megatron(*OFFLOAD, "--optimizer-offload-fraction", "0")
    assert pred.estimate.memory.host_components == {}
    steps = [op for op in build_graph(pred.config, pred.cluster).stages[0].step_ops if op.op_class == "optimizer"]
    assert steps and all("offload" not in op.tags for op in steps)


def test_distributed_optimizer_instances_shard_over_dp_divided_by_n() -> None:
    """--num-distributed-optimizer-instances 2: each instance shards the state over dp / 2 = 4 ranks
    (parallel_state.py intra_partial_data_parallel_size), twice the optimizer bytes of one instance."""
    one = _megatron("--use-distributed-optimizer").estimate.memory.components["optimizer_states"]
    two = _megatron("--use-distributed-optimizer", "--num-distributed-optimizer-instances", "2")
    assert two.estimate.memory.components["optimizer_states"] == pytest.approx(2 * one, rel=1e-6)
    step = [op for op in build_graph(two.config, two.cluster).stages[0].step_ops if op.op_class == "optimizer"]
    assert step[0].dims["params"] == pytest.approx(_shard(two) * 2, abs=1)  # its shard: over 4 ranks, not 8


def test_distributed_optimizer_instances_must_divide_dp_times_cp() -> None:
    """3 instances do not divide dp 8: Megatron's initialize_model_parallel asserts (exit 2)."""
    with pytest.raises(ConfigError, match="partial DistOpt shard factor"):
        _megatron("--use-distributed-optimizer", "--num-distributed-optimizer-instances", "3")


def _nvme(tmp_path: Path, param: dict, optimizer: dict):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/nvme",
                                                                      **param},
                                                    "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme",
                                                                          **optimizer}}}))
    argv = ["deepspeed", "--num_gpus", str(GPN), "pretrain_gpt.py", *SHAPE[:-5], "--micro-batch-size", "1",
            "--global-batch-size", "8", "--vocab-size", "32000", "--bf16", "--deepspeed", "--deepspeed_config",
            str(ds), "--zero-stage", "3", "--no-pipeline-parallel"]
    return predict_command(argv, {}, cluster="dgx-a100")


def test_nvme_swap_buffers_follow_the_ds_config_buffer_counts(tmp_path: Path) -> None:
    """offload_param.buffer_count 2 and offload_optimizer.buffer_count 6 (DeepSpeed's defaults 5 and 4): the pinned
    swap buffers are 2 x buffer_size bf16 elements and 6 x the largest fp32 sub-group per rank."""
    default = _nvme(tmp_path, {}, {}).estimate.memory.host_components["host_nvme_swap_buffers"]
    pred = _nvme(tmp_path, {"buffer_count": 2, "buffer_size": 50_000_000}, {"buffer_count": 6})
    partition = build_graph(pred.config, pred.cluster).stages[0].num_params / GPN
    assert pred.config.optimizer.nvme_param_buffer_count == 2 and pred.config.optimizer.nvme_optimizer_buffer_count == 6
    swap = pred.estimate.memory.host_components["host_nvme_swap_buffers"]
    assert swap == pytest.approx(GPN * (2 * 50_000_000 * 2 + 6 * partition * 4), rel=1e-6)
    assert default == pytest.approx(GPN * (5 * 100_000_000 * 2 + 4 * partition * 4), rel=1e-6)


@pytest.mark.parametrize(("preset", "gib"), [("perlmutter", 256), ("vista", 120), ("gb200-nvl72", 960),
                                              ("dgx-a100", 2048), ("dgx-h100", 2048), ("mi300x-8x400g", 1850),
                                              ("pcie-l40s-2x200g", 1536), ("pcie-h100-4x400g", 0),
                                              ("vtrain-a100", 0)])
def test_cluster_presets_state_their_host_ram(preset: str, gib: int) -> None:
    """NERSC: 256 GB per Perlmutter GPU node; TACC Vista: Grace's 120 GB LPDDR5X; GB200 NVL72: 2 Grace x 480 GB per
    4-GPU compute tray (the OS host whose ranks the verdict adds up); the DGX datasheets' 2 TB; Azure ND MI300X v5's
    1,850 GiB; AWS g6e.48xlarge's 1,536 GiB. No public figure for a generic 8 x H100 PCIe node or vTrain's nodes:
    0, no verdict."""
    assert load_cluster(preset).host_memory_bytes == gib * 2**30


def test_a_preset_without_host_ram_says_the_host_verdict_is_unknown() -> None:
    from llmperf_hook.report.table import render_prediction_table

    pred = predict_command(["torchrun", "--nproc-per-node", str(GPN), "pretrain_gpt.py", *SHAPE, *OFFLOAD], {},
                           cluster="vtrain-a100")
    assert "the cluster preset states no host RAM: no verdict" in render_prediction_table(pred)


def test_overlap_param_gather_adds_no_buffer() -> None:
    """The distributed optimizer's overlapped all-gather writes each bucket's shards into the bucket's own parameter
    buffer (param_and_grad_buffer.py start_param_sync: all_gather_into_tensor over shard_buffer(bucket.param_data,
    intra_distributed_optimizer_instance_size)): the same memory with and without --overlap-param-gather."""
    plain = _megatron("--use-distributed-optimizer", "--overlap-grad-reduce").estimate.memory
    overlap = _megatron("--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather").estimate.memory
    assert overlap.components == plain.components


@pytest.mark.parametrize("strategy, shards", [("full_shard offload", GPN), ("no_shard offload", 1)])
def test_fsdp_cpu_offload_keeps_16_bytes_per_parameter_of_the_shard_on_the_host(strategy: str, shards: int) -> None:
    """torch FSDP CPU offload: the fp32 flat-parameter shard, its fp32 gradient and Adam's two states on the CPU,
    16 B per parameter of the rank's shard; FULL_SHARD splits the model over the node's 8 ranks, NO_SHARD (ZeRO-0)
    leaves each rank the whole model, 8 x the host bytes (priced over a 1/8 shard before)."""
    from llmperf_hook.frameworks.resolve import JobOverrides

    pred = predict_command(["torchrun", "--nproc_per_node", str(GPN), "run_clm.py", "--model_name_or_path", "x",
                            "--fsdp", strategy, "--bf16", "--per_device_train_batch_size", "1", "--block_size", "1024"],
                           {}, cluster="dgx-a100", overrides=JobOverrides(model="llama2-7b"))
    params = build_graph(pred.config, pred.cluster).stages[0].num_params
    assert pred.estimate.memory.host_bytes_per_node == pytest.approx(GPN * 16 * params / shards, rel=1e-6)


def test_megatron_activation_cpu_offloading_moves_layers_to_the_host() -> None:
    """--cpu-offloading-num-layers 5 of 8: Transformer Engine's CPU offload keeps the saved activations of layers
    0-4 in pinned host memory (cpu_offload.py _default_offload_sync_init: '(num_layers - num_offloaded_layers) * T'
    on the GPU); the node's 8 ranks each keep theirs. Before, the flag changed nothing but a warning."""
    from llmperf_hook.schedule.activations import layer_activation_bytes

    plain = _megatron("--use-distributed-optimizer")
    offload = _megatron("--use-distributed-optimizer", "--cpu-offloading", "--cpu-offloading-num-layers", "5")
    layer = layer_activation_bytes(offload.config)
    assert offload.config.recompute.cpu_offloading_num_layers == 5
    assert plain.estimate.memory.components["activations"] - offload.estimate.memory.components["activations"] \
        == pytest.approx(5 * layer, rel=1e-6)
    assert offload.estimate.memory.host_components == pytest.approx({"host_offloaded_activations": GPN * 5 * layer})
    warning = [w for w in offload.warnings if w.startswith("--cpu-offloading")]
    assert warning and "PCIe copies" in warning[0]


def test_tune_prices_activation_offloading_as_predict_does() -> None:
    """tune's array memory model (tune/surrogate_memory.py) leaves the offloaded layers off the GPU too: the job's
    own candidate and its micro-batch / TP variants have predict's peak (they were ~50 % above before)."""
    import dataclasses

    from llmperf_hook import api
    from llmperf_hook.commands.tune import memory_only
    from llmperf_hook.tune import surrogate
    from llmperf_hook.tune.candidate import apply_candidate, candidate_of
    from llmperf_hook.tune.candidates import candidates_from_list

    argv = ["torchrun", "--nproc-per-node", str(GPN), "pretrain_gpt.py", *SHAPE, "--use-distributed-optimizer",
            "--cpu-offloading-num-layers", "5"]
    _, cfg, spec, _ = api.resolve_command(argv, {}, cluster="dgx-h100")
    own = candidate_of(cfg)
    cands = (own, dataclasses.replace(own, micro_batch_size=2), dataclasses.replace(own, tp=2))
    peaks = surrogate.estimate(cfg, spec, candidates_from_list(cands).columns).peak_bytes
    for cand, peak in zip(cands, peaks):
        assert peak == pytest.approx(memory_only(apply_candidate(cfg, cand), spec).peak_bytes_per_gpu, abs=64)

"""Memory of ZeRO++ hpZ, data_types.grad_accum_dtype, partial optimizer offload and Megatron-DeepSpeed's
--partition-activations / --checkpoint-in-cpu (schedule/memory.py), hand-computed on the small job of
tests/graph/test_zeropp_ops.py (P parameters on one pipeline stage, 16 ranks, bf16)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmperf_hook.frameworks.training_config import ParallelLayout, RecomputeConfig, TrainingConfig
from llmperf_hook.graph.build import build_graph
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.schedule.memory import activation_bytes, checkpoints_off_gpu_bytes, state_bytes
from tests.graph.test_zeropp_ops import GPN, _cfg

CLUSTER = load_cluster("dgx-a100")


def _state(cfg: TrainingConfig) -> tuple[dict[str, float], int]:
    stage = build_graph(cfg, CLUSTER).stages[0]
    return state_bytes(cfg, stage, GPN), stage.num_params


def test_hpz_adds_a_secondary_copy_of_one_kth_of_the_weights() -> None:
    plain, p = _state(_cfg())
    hpz, _ = _state(_cfg(zero_hpz_partition_size=8))
    assert "zero_hpz_secondary" not in plain
    assert hpz["zero_hpz_secondary"] == pytest.approx(2 * p / 8)  # +2P/k bytes per GPU
    assert hpz["weights"] == plain["weights"] == pytest.approx(2 * p / 16)
    whole, _ = _state(_cfg(zero_hpz_partition_size=16))  # a secondary group of the whole DP group still exists
    assert whole["zero_hpz_secondary"] == pytest.approx(2 * p / 16)


@pytest.mark.parametrize("stage, extra_per_param", [
    (1, 4.0),             # BF16_Optimizer: a full fp32 buffer (4P); the ZeRO optimizer's fp32 partition is the step's
    (2, 2.0 / 8),         # the gradient partition accumulates in fp32 instead of bf16: +2P/8
    (3, 2.0 / 8),
])
def test_fp32_grad_accumulation(stage: int, extra_per_param: float) -> None:
    base = _cfg(world=8)
    plain = replace(base, optimizer=replace(base.optimizer, zero_stage=stage))
    fp32 = replace(plain, optimizer=replace(plain.optimizer, grad_accum_dtype="fp32"))
    (before, p), (after, _) = _state(plain), _state(fp32)
    assert after["gradients"] - before["gradients"] == pytest.approx(extra_per_param * p)


def test_fp16_zero1_keeps_a_per_parameter_fp32_accumulator_besides_the_partition() -> None:
    base = _cfg(world=8)
    plain = replace(base, precision="fp16", optimizer=replace(base.optimizer, zero_stage=1))
    fp32 = replace(plain, optimizer=replace(plain.optimizer, grad_accum_dtype="fp32"))
    (before, p), (after, _) = _state(plain), _state(fp32)
    assert after["gradients"] - before["gradients"] == pytest.approx(4.0 * p)


def test_partial_offload_keeps_the_gpu_sub_groups_optimizer_state() -> None:
    full, p = _state(_cfg(offload_optimizer="cpu"))
    local = p // 16
    half, _ = _state(_cfg(offload_optimizer="cpu", offload_optimizer_ratio=0.5, sub_group_size_elems=-(-local // 4)))
    none, _ = _state(_cfg())
    assert full["optimizer_states"] == 0.0
    assert none["optimizer_states"] == pytest.approx(12 * p / 16)
    assert half["optimizer_states"] == pytest.approx(none["optimizer_states"] / 2)


def _checkpointing(**flags: bool) -> TrainingConfig:
    base = _cfg(world=8)
    return replace(base, framework="megatron-deepspeed", parallel=ParallelLayout(tp=4, dp=2),
                   recompute=RecomputeConfig("full", "uniform", 1, **flags))


def test_partition_activations_stores_one_tpth_of_each_checkpoint() -> None:
    """4 layers x one 2 MiB checkpoint (s b h = 1024 x 1 x 1024 bf16) per micro-batch; 3/4 of it leaves the GPU."""
    plain, part = _checkpointing(), _checkpointing(partition_activations=True)
    assert checkpoints_off_gpu_bytes(part, 4) == pytest.approx(4 * 2 * 2**20 * 3 / 4)
    stage = build_graph(plain, CLUSTER).stages[0]
    drop = activation_bytes(plain, stage)["activations"] - activation_bytes(part, stage)["activations"]
    assert drop == pytest.approx(4 * 2 * 2**20 * 3 / 4)


def test_checkpoint_in_cpu_keeps_no_checkpoint_on_the_gpu() -> None:
    cpu = _checkpointing(checkpoint_in_cpu=True)
    stage = build_graph(cpu, CLUSTER).stages[0]
    assert checkpoints_off_gpu_bytes(cpu, 4) == pytest.approx(4 * 2 * 2**20)
    assert activation_bytes(cpu, stage)["activations"] == pytest.approx(0.0)
    assert activation_bytes(cpu, stage)["recompute_working_set"] > 0  # the rematerialised layer stays on the GPU


def test_without_full_recompute_nothing_moves() -> None:
    cfg = replace(_checkpointing(partition_activations=True), recompute=RecomputeConfig(partition_activations=True))
    assert checkpoints_off_gpu_bytes(cfg, 4) == 0.0

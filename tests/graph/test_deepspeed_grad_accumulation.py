"""Megatron-DeepSpeed under ZeRO 0/1: each micro-batch's weight gradient is added into param.grad by autograd's
AccumulateGrad (its wgrad GEMM returns the gradient; the fused accumulation path is commented out), except the first
micro-batch of a step, whose gradient is taken as is (FP16_Optimizer.zero_grad(set_to_none=True))."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.graph.step_ops import main_grad_add_ops


def _mds(micro_batches: int, zero_stage: int = 0, precision: str = "fp16"):
    cfg = make_config(num_layers=2, hidden_size=1024, num_attention_heads=16, tp=2, micro_batch_size=1,
                      global_batch_size=micro_batches, framework="megatron-deepspeed", precision=precision,
                      optimizer_kw={"zero_stage": zero_stage, "fp32_main_grads": False})
    return replace(cfg, gradient_accumulation_fusion=zero_stage >= 2)


@pytest.mark.parametrize("m", [2, 4, 16])
def test_fp16_adds_six_bytes_per_parameter_on_all_but_the_first_micro_batch(m: int) -> None:
    (op,) = main_grad_add_ops(_mds(m), 1_000_000)
    assert op.op_class == "grad_accumulate" and op.phase == "bwd"
    assert op.bytes_moved == pytest.approx(1_000_000 * 6 * (m - 1) / m)  # read 2 + read 2 + write 2 bytes


def test_one_micro_batch_adds_nothing_and_zero_2_accumulates_in_its_partitions() -> None:
    assert main_grad_add_ops(_mds(1), 1_000_000) == ()
    assert main_grad_add_ops(_mds(8, zero_stage=2), 1_000_000) == ()


def test_megatron_ddp_adds_every_micro_batch() -> None:
    cfg = replace(make_config(num_layers=2, hidden_size=1024, num_attention_heads=16, tp=2, global_batch_size=4),
                  gradient_accumulation_fusion=False)
    (op,) = main_grad_add_ops(cfg, 1_000_000)
    assert op.bytes_moved == pytest.approx(1_000_000 * (2 * 4 + 2))  # fp32 main_grad read + write, bf16 grad read

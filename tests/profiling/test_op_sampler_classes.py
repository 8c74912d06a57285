"""Every compute op the CPU framework-cost measurement samples alone (profile/cpu_framework.measure_profile_bias:
the graphs of its reference shapes) has a runner in the operator sampler: a graph op class without one stopped
`llmperf profile --device cpu` with an internal error (KeyError 'grad_sum', the tied-embedding gradient sum)."""

from __future__ import annotations

import pytest

from llmperf_hook.profile import cpu_framework as cf

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("shape", cf.BIAS_SHAPES[:1])
def test_every_reference_compute_op_can_be_sampled(shape: cf.Shape) -> None:
    from llmperf_hook.profile.op_sampler import make_runner

    # the very ops measure_profile_bias samples, through its own graph walk
    ops = [op for op, _, _ in cf._predicted_ops(shape, "fp32", "a100-sxm4-80gb")[0]]
    assert "grad_sum" in {op.op_class for op in ops}  # the reference GPT ties its embedding at pp 1
    for op in ops:
        make_runner(op.op_class, op.dims, op.phase == "bwd", "fp32", "cpu")()


def test_grad_sum_runs_as_an_add_of_two_gradients() -> None:
    from llmperf_hook.profile.op_sampler import sample_op

    assert sample_op("grad_sum", {"elements": 4096}, "bwd", "fp32", "cpu", target_s=0.001).time_s > 0

"""What Megatron-DeepSpeed's DeepSpeed-MoE layer keeps for its backward (schedule/activations.deepspeed_moe_saved_bytes,
DeepSpeed v0.19.4+ sharded_moe.py), on a TP 2 job (h 1024, 2 x 2048 tokens, top-2, 8 experts, fp16):

  gate's fp32 input copy      4 sbh                       TopKGate.forward input.float() -> F.linear
  experts' FC1 input          2 k sbh / TP  (no flag)      drop_tokens before the dispatch all-to-all
                              2 k sbh       (--enable-expert-tensor-parallelism: gather_tokens after it)
  decode's routed outputs     2 k sbh                      _sparse_decode: routed * gates saves routed
the experts' intermediates (the TP-split term) are unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.schedule import activations as act
from tests.graph.test_mds_expert_tp import H, K, MDS, T, in_job_dir  # noqa: F401 (the fixture)

TP = 2
"""MDS's --tensor-model-parallel-size."""
SBH = T * H


def _cfg(*extra: str):
    return resolve_job([*MDS, *extra], {})[1]


def test_moe_layer_keeps_gate_copy_fc1_input_and_routed_outputs(in_job_dir: Path) -> None:
    whole, split = _cfg(), _cfg("--enable-expert-tensor-parallelism")
    assert (whole.parallel.etp, split.parallel.etp) == (1, TP)
    assert act.mlp_terms(whole)[0] == pytest.approx(SBH * (4 + 2 * K / TP + 2 * K))
    assert act.mlp_terms(split)[0] == pytest.approx(SBH * (4 + 2 * K + 2 * K))
    assert act.mlp_terms(whole)[1] == act.mlp_terms(split)[1]  # the experts' intermediates: k n f / TP either way


def test_only_megatron_deepspeed_runs_deepspeed_moe(in_job_dir: Path) -> None:
    cfg = _cfg()
    hf = replace(cfg, framework="hf-deepspeed")  # transformers' own MoE blocks: not DeepSpeed's MOELayer
    assert act.mlp_terms(hf)[0] == pytest.approx(2 * SBH)


def test_deepspeed_before_sparse_dispatch_keeps_the_one_hot_einsum_operands(in_job_dir: Path) -> None:
    """DeepSpeed v0.19.3 and older: + the 16-bit dispatch mask and combine weights (2 x 2 k T^2) and the gate's fp32
    one-hot locations (4 k T x kT/E); v0.19.4 on routes with index_select (deepspeed_release.SPARSE_MOE_DISPATCH_VERSION)."""
    old = resolve_job(MDS, {"LLMPERF_DEEPSPEED_VERSION": "0.19.3"})[1]
    new = resolve_job(MDS, {"LLMPERF_DEEPSPEED_VERSION": "0.19.4"})[1]
    assert old.deepspeed_moe_dense_dispatch and not new.deepspeed_moe_dense_dispatch
    quadratic = 2 * 2 * K * T * T + 4 * K * T * (K * T / 8)
    assert act.mlp_terms(old)[0] - act.mlp_terms(new)[0] == pytest.approx(quadratic)

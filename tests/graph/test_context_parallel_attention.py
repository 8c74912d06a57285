"""Fused attention under context parallelism: the rank's s/cp queries against all s keys, priced as that work."""

import pytest

from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import llama3_8b
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict.dispatch import op_id, predict_op_times

H100 = load_cluster("dgx-h100")


def _attention(cp: int):
    cfg = llama3_8b(tp=1, cp=cp, dp=8 // cp, global_batch_size=8 // cp)
    graph = build_graph(cfg, H100)
    block = next(b for b in graph.stages[0].chunks[0].blocks if b.name.startswith("dense_layer"))
    return cfg, graph, [op for op in block.fwd if op.op_class == "attention"]


def _dims_flops(op) -> float:
    """What a fitted profile reads from the dims: a causal self-attention over s (profile/features.py)."""
    d = op.dims
    return 4.0 * d["b"] * d["heads"] * d["s"] ** 2 * d["head_dim"] * 0.5


@pytest.mark.parametrize("cp", [2, 4])
def test_each_step_is_the_work_its_dims_describe_and_all_steps_the_rank_share(cp: int) -> None:
    cfg, _, steps = _attention(cp)
    assert len(steps) == cp and len({op.name for op in steps}) == cp
    s, heads, d = cfg.model.seq_length, cfg.model.num_attention_heads, cfg.model.kv_channels
    rank_flops = 4.0 * (s // cp) * s * heads * d * 0.5  # micro-batch 1: s/cp queries x s keys, causal half
    assert sum(op.flops for op in steps) == pytest.approx(rank_flops)
    for op in steps:
        assert op.dims["s"] == s // cp and op.flops == pytest.approx(_dims_flops(op))


def test_without_cp_one_op_as_before() -> None:
    _, _, ops = _attention(1)
    assert [op.name for op in ops] == ["attn.core"]


def test_fitted_profile_prices_cp_attention_near_half_of_cp1() -> None:
    """CP 2 halves a rank's attention FLOPs; one op over s/cp was priced as a quarter (a fitted profile reads dims)."""
    times = {}
    for cp in (1, 2):
        cfg, graph, ops = _attention(cp)
        seconds = predict_op_times(graph, H100, cfg.precision).seconds
        times[cp] = sum(seconds[op_id(op)] for op in ops)
    assert 0.4 < times[2] / times[1] < 0.7


def test_an_implausible_mfu_is_flagged() -> None:
    """api.IMPLAUSIBLE_MFU: a prediction above any published run's MFU says so (the CP bug once predicted 94 %)."""
    from dataclasses import replace

    from llmperf_hook import api

    cfg = llama3_8b(tp=1, cp=1, dp=8, global_batch_size=8)
    plain = api.predict_config(cfg, H100)
    assert plain.mfu < api.IMPLAUSIBLE_MFU and not any("predicted MFU" in w for w in plain.warnings)
    # a GPU whose stated peak is a quarter of what its profile runs at (GEMMs priced no faster than that peak:
    # predict/roofline.py sustained_math_floor_s, at an efficiency of 1 here)
    quarter = {k: v / 4 for k, v in H100.gpu.peak_flop_per_s.items()}
    # (0.99, not 1: an efficiency of 1 marks a measured peak, whose bound is that peak, api.mfu_bound)
    fast = replace(H100, gpu=replace(H100.gpu, peak_flop_per_s=quarter, gemm_efficiency=0.99))
    flagged = api.predict_config(cfg, fast)
    assert flagged.mfu > api.IMPLAUSIBLE_MFU and any("above what any published training run" in w for w in flagged.warnings)

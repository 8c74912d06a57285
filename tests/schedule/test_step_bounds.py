"""max stage compute <= step time <= sum of all op and collective times; breakdown sums to the step."""

from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.api import predict_config
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict.dispatch import op_id, predict_op_times
from llmperf_hook.predict.host_issue import host_issue_s

CLUSTER = load_cluster("dgx-h100")


def _sum_of_all_op_times(cfg) -> float:
    """Upper bound: every op and collective of every stage and micro-batch run back to back."""
    graph = build_graph(cfg, CLUSTER)
    sec = predict_op_times(graph, CLUSTER, cfg.precision).seconds
    m = graph.num_microbatches
    total = 0.0
    for stage in graph.stages:
        total += sum(sec[op_id(op)] for op in stage.step_ops)
        for chunk in stage.chunks:
            for block in chunk.blocks:
                ops = block.fwd + block.bwd
                # every op's time plus the host's time to issue it (the launch queue never exceeds their sum)
                total += m * block.count * (sum(sec[op_id(op)] for op in ops)
                                            + host_issue_s(ops, CLUSTER.host_overhead_per_op_s))
    if graph.p2p is not None:
        total += sec[op_id(graph.p2p)] * m * 2 * (len(graph.stages) - 1) * graph.vpp
    return total


@settings(max_examples=25, deadline=None)
@given(tp=st.sampled_from([1, 2, 8]), pp=st.sampled_from([1, 2, 4]), vpp=st.sampled_from([1, 2]),
       dp=st.sampled_from([1, 2, 8]), mbs=st.integers(1, 4), groups=st.integers(1, 3),
       recompute=st.sampled_from(["none", "selective", "full"]), overlap=st.booleans(), zero=st.integers(0, 3))
def test_step_time_bounds(tp, pp, vpp, dp, mbs, groups, recompute, overlap, zero) -> None:
    vpp = vpp if pp > 1 else 1
    m = pp * groups
    cfg = make_config(num_layers=8 * vpp * 2, hidden_size=2048, num_attention_heads=16, seq_length=2048, tp=tp,
                      pp=pp, vpp=vpp, dp=dp, micro_batch_size=mbs, global_batch_size=mbs * dp * m,
                      sequence_parallel=tp > 1, recompute=recompute,
                      framework="deepspeed" if zero and pp == 1 else "megatron",
                      optimizer_kw=dict(zero_stage=zero if pp == 1 else 0, overlap_grad_reduce=overlap,
                                        distributed_optimizer=zero > 0 and pp > 1))
    est = predict_config(cfg, CLUSTER)
    max_compute = max(s.compute_s for s in est.stages)
    assert max_compute <= est.step_time_s * (1 + 1e-9)
    assert est.step_time_s <= _sum_of_all_op_times(cfg) * (1 + 1e-9)
    assert abs(sum(est.breakdown.values()) - est.step_time_s) < 1e-9 * est.step_time_s + 1e-12
    assert 0 < est.mfu < 1


def test_overlap_grad_reduce_never_slower() -> None:
    base = dict(num_layers=16, hidden_size=4096, num_attention_heads=32, tp=8, dp=16, global_batch_size=64)
    plain = predict_config(make_config(**base), CLUSTER)
    overlapped = predict_config(make_config(**base, optimizer_kw=dict(overlap_grad_reduce=True)), CLUSTER)
    assert overlapped.step_time_s < plain.step_time_s
    assert overlapped.breakdown.get("comm_dp_grad", 0) < plain.breakdown["comm_dp_grad"]


def test_detail_timeline_has_every_pass() -> None:
    cfg = make_config(num_layers=8, hidden_size=1024, num_attention_heads=16, pp=4, dp=2, global_batch_size=16)
    est = predict_config(cfg, CLUSTER, detail=True)
    passes = [e for e in est.timeline if e.name in ("F", "B")]
    assert len(passes) == 2 * 4 * cfg.batch.num_microbatches
    assert max(e.end_s for e in est.timeline) <= est.step_time_s + 1e-9


def test_host_bound_passes_for_tiny_layers() -> None:
    from dataclasses import replace

    cfg = make_config(num_layers=24, hidden_size=256, num_attention_heads=4, seq_length=256, tp=8, dp=1,
                      global_batch_size=8)
    fast_host = predict_config(cfg, replace(CLUSTER, host_overhead_per_op_s=0.0))
    slow_host = predict_config(cfg, replace(CLUSTER, host_overhead_per_op_s=100e-6))
    assert slow_host.step_time_s > fast_host.step_time_s
    assert slow_host.breakdown["host_overhead"] > 0 and "host_overhead" not in fast_host.breakdown


@settings(max_examples=25, deadline=None)
@given(tp=st.sampled_from([1, 2, 4]), cp=st.sampled_from([1, 2]), ep=st.sampled_from([1, 2, 4]),
       pp=st.sampled_from([1, 2]), precision=st.sampled_from(["bf16", "fp16", "fp8", "fp32"]),
       backend=st.sampled_from(["flash", "unfused"]), recompute=st.sampled_from(["none", "selective", "full"]),
       tp_overlap=st.booleans())
def test_moe_cp_fp8_layouts_predict_within_bounds(tp, cp, ep, pp, precision, backend, recompute, tp_overlap) -> None:
    dp = 4
    cfg = make_config(num_layers=4 * pp, hidden_size=1024, num_attention_heads=16, num_query_groups=4,
                      seq_length=2048, tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, micro_batch_size=1,
                      global_batch_size=dp * pp * 2, sequence_parallel=tp > 1, recompute=recompute,
                      precision=precision, attention_backend=backend,
                      model_kw=dict(num_experts=8, moe_router_topk=2, swiglu=True, moe_layer_freq=2),
                      optimizer_kw=dict(distributed_optimizer=True, tp_comm_overlap=tp_overlap))
    est = predict_config(cfg, CLUSTER)
    assert max(s.compute_s for s in est.stages) <= est.step_time_s * (1 + 1e-9)
    assert est.step_time_s <= _sum_of_all_op_times(cfg) * (1 + 1e-9)
    assert est.memory.peak_bytes_per_gpu > 0 and 0 < est.mfu < 1

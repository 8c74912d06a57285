"""The host (CPU) issue model of predict/host_issue.py as counted from Megatron-DeepSpeed / DeepSpeed sources
(collective calls, the per-micro-batch prologue after DeepSpeed's device sync), the op timeline that lays ops
out on it, and tune's surrogate, which must follow it on host-bound layouts."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.api import predict_config
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict import host_issue
from llmperf_hook.predict.dispatch import op_id, predict_op_times
from llmperf_hook.schedule.op_timeline import pass_op_events
from llmperf_hook.tune import surrogate
from llmperf_hook.tune.candidate import candidate_of
from llmperf_hook.tune.candidates import candidates_from_list

A100 = load_cluster("dgx-a100")


def _op(name: str, phase: str = "fwd", coll: bool = False, overlap: bool = False) -> Op:
    c = Collective(group="tp", group_size=2, ranks_per_node=2) if coll else None
    return Op(name, "allreduce" if coll else "gemm", phase, {"bytes": 1} if coll else {"m": 1, "n": 1, "k": 1},
              collective=c, tags={"overlap": "cp"} if overlap else {})


def _small_gpt(tp: int, mbs: int, gbs: int = 8, layers: int = 12):
    """An S24-like job: GPT hidden 1024, seq 1024, fp16, full recompute, Megatron-DeepSpeed (ZeRO-0)."""
    return make_config(num_layers=layers, hidden_size=1024, num_attention_heads=16, seq_length=1024, tp=tp,
                       dp=1, micro_batch_size=mbs, global_batch_size=gbs, precision="fp16", recompute="full",
                       framework="megatron-deepspeed", attention_backend="unfused")


def test_collective_calls_cost_host_time_side_stream_ones_do_not() -> None:
    ops = [_op("a"), _op("ar", coll=True), _op("b", "bwd"), _op("cp", coll=True, overlap=True)]
    assert host_issue.pass_host_s(ops, per_op_s=1.0) == 1 + host_issue.COLLECTIVE_CALL_UNITS + 2
    # compute-only count kept for callers that bound the step by op times + compute issue
    assert host_issue.host_issue_s(ops, per_op_s=1.0) == 3


def test_prologue_only_on_the_pass_that_starts_a_micro_batch() -> None:
    first = [_op("embedding.lookup"), _op("embedding.dropout")]
    backward = [_op("embedding.lookup", "bwd")]
    assert host_issue.pass_host_s(first, per_op_s=1.0) == host_issue.MICROBATCH_PROLOGUE_UNITS + 2
    assert host_issue.pass_host_s(backward, per_op_s=1.0) == 2
    # the GPU idles through the prologue (the queue was drained by the device sync): a long kernel starts after it
    got = host_issue.queued_pass_s(first, lambda o: 1.0, per_op_s=0.01)
    assert abs(got - ((host_issue.MICROBATCH_PROLOGUE_UNITS + 1) * 0.01 + 2.0)) < 1e-12


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["fwd", "recompute", "bwd"]), st.booleans(), st.booleans(),
                          st.floats(0.0, 1.0)), min_size=1, max_size=12), st.floats(0.0, 0.3))
def test_queue_between_max_and_sum_of_gpu_and_host(spec, per_op_s) -> None:
    ops = [_op(f"o{i}", phase, coll, side and coll) for i, (phase, coll, side, _) in enumerate(spec)]
    secs = {id(op): t for op, (_, _, _, t) in zip(ops, spec)}
    gpu = sum(secs[id(op)] for op in ops if "overlap" not in op.tags)
    host = host_issue.pass_host_s(ops, per_op_s)
    got = host_issue.queued_pass_s(ops, lambda o: secs[id(o)], per_op_s)
    assert max(gpu, host) - 1e-9 <= got <= gpu + host + 1e-9


def test_tp_layer_adds_six_collective_calls_per_micro_batch() -> None:
    """2 all-reduce calls per pass (attention projection, FC2) in forward, recompute and backward (source count)."""
    def layer_host_s(tp: int) -> float:
        block = build_graph(_small_gpt(tp, 1), A100).stages[0].chunks[0].blocks[1]
        return (host_issue.pass_host_s(block.fwd, 1.0) + host_issue.pass_host_s(block.bwd, 1.0))

    assert layer_host_s(1) == 52
    assert layer_host_s(2) - layer_host_s(1) == 6 * host_issue.COLLECTIVE_CALL_UNITS


def test_host_bound_plateau_of_the_a100_preset() -> None:
    """The 57 us unit reproduces S24's host-bound plateau: ~3.0 ms per layer and micro-batch at TP 1, ~3.4 at TP 2."""
    def per_layer_s(tp: int) -> float:
        t12, t24 = (predict_config(_small_gpt(tp, 1, gbs=4, layers=n), A100).step_time_s for n in (12, 24))
        return (t24 - t12) / 12 / 4
    assert 2.8e-3 < per_layer_s(1) < 3.2e-3
    assert 3.2e-3 < per_layer_s(2) < 3.6e-3


def test_op_timeline_starts_ops_when_issued_and_ends_with_the_queue() -> None:
    cfg = _small_gpt(2, 1)
    graph = build_graph(cfg, A100)
    seconds = dict(predict_op_times(graph, A100, cfg.precision).seconds)
    block = graph.stages[0].chunks[0].blocks[1]
    per_op = A100.host_overhead_per_op_s
    events = pass_op_events([(block.fwd, 1)], 0.0, 0, 0, seconds, False, per_op)
    queued = host_issue.queued_pass_s(block.fwd, lambda op: seconds[op_id(op)], per_op)
    assert abs(max(e.end_s for e in events) - queued) < 1e-12
    issued = 0.0
    for op, ev in zip(block.fwd, events):
        issued += per_op * host_issue.op_host_units(op)
        assert ev.start_s >= issued - 1e-12
    back_to_back = pass_op_events([(block.fwd, 1)], 0.0, 0, 0, seconds, False)
    assert max(e.end_s for e in back_to_back) < queued


def _surrogate_s(cfg, cluster) -> float:
    return float(surrogate.estimate_step_time(cfg, cluster, candidates_from_list((candidate_of(cfg),)).columns)[0])


def _surrogate_and_full(cfgs, cluster):
    est = np.array([_surrogate_s(c, cluster) for c in cfgs])
    full = np.array([predict_config(c, cluster).step_time_s for c in cfgs])
    return est, full


def test_surrogate_follows_the_host_floor_on_small_layers() -> None:
    """At a fixed global batch, micro-batch 2 halves the host-bound micro-batches: the full model and the
    surrogate agree on the order, and without host cost the surrogate's floor disappears."""
    cfgs = [_small_gpt(1, 1, gbs=8), _small_gpt(1, 2, gbs=8)]
    est, full = _surrogate_and_full(cfgs, A100)
    assert full[1] < full[0] and est[1] < est[0]
    no_host = replace(A100, host_overhead_per_op_s=0.0)
    assert all(_surrogate_s(c, no_host) < e for c, e in zip(cfgs, est))
    floor = 8 * A100.host_overhead_per_op_s * (12 * 52 + host_issue.MICROBATCH_PROLOGUE_UNITS)
    assert est[0] >= floor


def test_surrogate_charges_tp_calls_on_host_bound_layers() -> None:
    """A tiny model is host-bound at TP 1 and TP 2: more TP only adds collective calls to issue."""
    cfgs = [_small_gpt(1, 1, gbs=8), _small_gpt(2, 1, gbs=8)]
    est, full = _surrogate_and_full(cfgs, A100)
    assert full[1] > full[0] * 0.98
    host_gap = 8 * 12 * 6 * A100.host_overhead_per_op_s
    assert est[1] - est[0] > 0.5 * host_gap

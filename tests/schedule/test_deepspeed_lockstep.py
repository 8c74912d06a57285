"""DeepSpeed PipelineEngine's lock-step schedule (deepspeed/runtime/pipe/schedule.py TrainSchedule): blocking
exchanges between neighbours at the start of each step."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict.dispatch import op_id, predict_op_times
from llmperf_hook.schedule.compose import compose_step
from llmperf_hook.schedule.pipeline import rank_program, simulate_lockstep, simulate_pipeline


@settings(max_examples=60, deadline=None)
@given(pp=st.integers(1, 10), m=st.integers(1, 30),
       times=st.lists(st.tuples(st.floats(0.1, 3.0), st.floats(0.1, 6.0)), min_size=10, max_size=10))
def test_free_transfers_give_at_least_the_1f1b_step(pp: int, m: int, times: list[tuple[float, float]]) -> None:
    # Same order as Megatron's 1F1B; a blocking send also waits for its receiver, so with free transfers a stage
    # never ends earlier than under 1F1B's one-sided dependencies, and uniform stages end exactly when they do.
    fwd, bwd = [t[0] for t in times[:pp]], [t[1] for t in times[:pp]]
    lock = simulate_lockstep(fwd, bwd, 0.0, m)
    plain = simulate_pipeline([[f] for f in fwd], [[b] for b in bwd], 0.0, m)
    assert all(a >= b - 1e-9 for a, b in zip(lock.end_s, plain.end_s))
    assert lock.busy_s == pytest.approx(plain.busy_s)
    uniform = simulate_lockstep([fwd[0]] * pp, [bwd[0]] * pp, 0.0, m)
    assert uniform.end_s == pytest.approx(simulate_pipeline([[fwd[0]]] * pp, [[bwd[0]]] * pp, 0.0, m).end_s)


@settings(max_examples=30, deadline=None)
@given(pp=st.integers(1, 8), m=st.integers(1, 20))
def test_each_stage_runs_megatrons_1f1b_order(pp: int, m: int) -> None:
    result = simulate_lockstep([1.0] * pp, [2.5] * pp, 0.05, m, record=True)
    assert len(result.events) == 2 * pp * m
    for rank in range(pp):
        mine = sorted((e for e in result.events if e[0] == rank), key=lambda e: e[4])
        assert [(e[1], e[2], e[3]) for e in mine] == rank_program(rank, m, pp, 1)


def test_two_stages_one_microbatch_by_hand() -> None:
    # Step 0: stage 0 forward (1). Step 1: RecvActivation (x), stage 1 forward (2). Step 2: stage 1 backward (4).
    # Step 3: RecvGrad (x), stage 0 backward (3). Step = 1 + x + 2 + 4 + x + 3.
    result = simulate_lockstep([1.0, 2.0], [3.0, 4.0], 0.25, 1)
    assert result.end_s[0] == pytest.approx(10.5)


@settings(max_examples=30, deadline=None)
@given(pp=st.integers(3, 10), m=st.integers(1, 30), x=st.floats(0.0, 0.5))
def test_a_middle_stage_spends_four_transfers_per_microbatch(pp: int, m: int, x: float) -> None:
    # SendGrad + RecvActivation before each forward, RecvGrad + SendActivation before each backward, on the
    # stage's own stream; the first forward has no gradient to send back and the last backward no activation
    # left to send.
    result = simulate_lockstep([1.0] * pp, [3.0] * pp, x, m)
    assert result.end_s[1] >= m * 4.0 + (4 * m - 2) * x - 1e-9
    assert max(result.end_s) >= max(simulate_pipeline([[1.0]] * pp, [[3.0]] * pp, x, m).end_s) - 1e-9


def _engine_graph():  # type: ignore[no-untyped-def]
    cfg = make_config(num_layers=16, hidden_size=4096, num_attention_heads=32, seq_length=2048, tp=2, pp=8, dp=8,
                      micro_batch_size=2, global_batch_size=256, precision="fp16", framework="megatron-deepspeed")
    cfg = dataclasses.replace(cfg, deepspeed_pipeline_engine=True)
    cluster = load_cluster("vtrain-a100")
    graph = build_graph(cfg, cluster)
    return cfg, graph, dict(predict_op_times(graph, cluster, cfg.precision).seconds)


def test_pipeline_engine_pays_its_blocking_exchanges() -> None:
    # Stages are tp x dp = 16 ranks apart on 8-GPU nodes: every send crosses the network and holds the stream.
    cfg, graph, seconds = _engine_graph()
    assert graph.p2p is not None
    transfer = seconds[op_id(graph.p2p)]
    assert transfer > 0
    step = compose_step(graph, seconds, cfg)
    assert sum(step.breakdown.values()) == pytest.approx(step.step_time_s, rel=1e-6)
    assert step.breakdown["pipeline_p2p"] > 0
    free = compose_step(graph, {**seconds, op_id(graph.p2p): 0.0}, cfg)
    # The first stage, which ends the step, receives every gradient and sends every activation on its stream.
    assert step.step_time_s - free.step_time_s >= 2 * graph.num_microbatches * transfer * 0.99

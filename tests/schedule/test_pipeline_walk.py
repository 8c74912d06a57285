"""The schedule walk of schedule/pipeline.py gives what its definition gives, bit for bit (H143 made it faster).

The reference below is the simulation as the module docstring states it, on the compiled schedule's per-id tables:
a pass starts when its rank is free (its previous pass ended, or at 0) and its input has arrived (its dependency
ended, plus the send/recv where it crosses ranks). The walk the module runs (sentinel end slots instead of the -1
tests, both the priced and the free-p2p step in one walk) must agree exactly, not approximately: `tune` ranks
candidates by these numbers and `predict` prints them.
"""

from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.schedule.pipeline import compiled_schedule, simulate_pipeline, simulate_pipeline_and_free


def reference_end_s(fwd_s: list[list[float]], bwd_s: list[list[float]], p2p_s: float, m: int,
                    group: int | None) -> tuple[float, ...]:
    pp, vpp = len(fwd_s), len(fwd_s[0])
    sched = compiled_schedule(pp, m, vpp, group if vpp > 1 else None)
    table = [t for r in range(pp) for t in (*fwd_s[r], *bwd_s[r])]
    end = [0.0] * len(sched.prev)
    for e in sched.order:
        t = end[sched.prev[e]] if sched.prev[e] >= 0 else 0.0
        if sched.dep[e] >= 0:
            t = max(t, end[sched.dep[e]] + (p2p_s if sched.cross[e] else 0.0))
        end[e] = t + table[sched.slot[e]]
    return tuple(end[sched.offset[r] + len(sched.programs[r]) - 1] for r in range(pp))


durations = st.floats(0.0, 3.0, allow_nan=False)


@st.composite
def schedules(draw):
    pp, vpp = draw(st.integers(1, 6)), draw(st.integers(1, 3))
    group = draw(st.integers(pp, 2 * pp)) if vpp > 1 else None
    m = draw(st.integers(1, 20)) if vpp == 1 else group * draw(st.integers(1, 3))
    fwd = [[draw(durations) for _ in range(vpp)] for _ in range(pp)]
    bwd = [[draw(durations) for _ in range(vpp)] for _ in range(pp)]
    return fwd, bwd, m, group


@settings(max_examples=150, deadline=None)
@given(case=schedules(), p2p_s=st.floats(0.0, 1.0, allow_nan=False))
def test_walk_equals_the_definition_exactly(case, p2p_s: float) -> None:
    fwd, bwd, m, group = case
    assert simulate_pipeline(fwd, bwd, p2p_s, m, group_size=group).end_s == reference_end_s(fwd, bwd, p2p_s, m, group)


@settings(max_examples=150, deadline=None)
@given(case=schedules(), p2p_s=st.floats(0.0, 1.0, allow_nan=False), record=st.booleans())
def test_one_walk_gives_both_steps_of_two_simulations(case, p2p_s: float, record: bool) -> None:
    """compose._simulate's pair (the step, the step with free send/recv for the p2p line) in one walk."""
    fwd, bwd, m, group = case
    priced, free = simulate_pipeline_and_free(fwd, bwd, p2p_s, m, record=record, group_size=group)
    assert priced == simulate_pipeline(fwd, bwd, p2p_s, m, record=record, group_size=group)
    alone = simulate_pipeline(fwd, bwd, 0.0, m, group_size=group)
    assert (free.end_s, free.busy_s) == (alone.end_s, alone.busy_s)  # without p2p the free step is the step itself


def test_free_is_the_step_itself_without_p2p() -> None:
    priced, free = simulate_pipeline_and_free([[1.0]] * 4, [[2.0]] * 4, 0.0, 8)
    assert priced is free


def test_chunks_that_share_their_blocks_are_priced_once(monkeypatch) -> None:
    """compose_step prices each distinct blocks tuple once (graph/build.build_chunk shares one per layer mix): GPT-3
    175B at PP 16 with 2 virtual stages has 32 chunks and 4 distinct blocks tuples; every stage's passes equal
    pricing its own chunks."""
    from llmperf_hook.api import load_cluster
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.graph.sample_configs import gpt3_175b
    from llmperf_hook.predict.dispatch import predict_op_times
    from llmperf_hook.schedule import compose

    cluster = load_cluster("dgx-a100")
    cfg = gpt3_175b(tp=8, pp=16, vpp=2, dp=8, global_batch_size=1536, sequence_parallel=True,
                    optimizer_kw=dict(distributed_optimizer=True))
    graph = build_graph(cfg, cluster)
    seconds = dict(predict_op_times(graph, cluster, cfg.precision).seconds)
    host_s, tp_overlap = cluster.host_overhead_per_op_s, cfg.optimizer.tp_comm_overlap
    priced, own_pass = [], compose.chunk_pass
    monkeypatch.setattr(compose, "chunk_pass", lambda chunk, *args: priced.append(chunk) or own_pass(chunk, *args))
    step = compose.compose_step(graph, seconds, cfg, host_per_op_s=host_s)
    chunks = [c for s in graph.stages for c in s.chunks]
    assert len(chunks) == 32 and len(priced) == 2 * len({id(c.blocks) for c in chunks}) == 8
    for stage, timing in zip(graph.stages, step.stages):
        assert timing.fwd_s == sum(own_pass(c, seconds, tp_overlap, False, host_s).total_s for c in stage.chunks)
        assert timing.bwd_s == sum(own_pass(c, seconds, tp_overlap, True, host_s).total_s for c in stage.chunks)

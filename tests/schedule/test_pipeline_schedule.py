"""Properties of the simulated micro-batch schedule (DESIGN.md "Tests")."""

from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.schedule.pipeline import rank_program, simulate_pipeline


@settings(max_examples=60, deadline=None)
@given(pp=st.integers(1, 12), m=st.integers(1, 48), tf=st.floats(0.1, 5.0), tb=st.floats(0.1, 5.0))
def test_1f1b_bubble_fraction_uniform_stages(pp: int, m: int, tf: float, tb: float) -> None:
    result = simulate_pipeline([[tf]] * pp, [[tb]] * pp, 0.0, m)
    step = max(result.end_s)
    bubble = step - m * (tf + tb)
    # Narayanan et al. 2021, Sec. 2.2: bubble fraction (pp - 1) / (m + pp - 1) of the step.
    assert abs(bubble / step - (pp - 1) / (m + pp - 1)) < 1e-9


@settings(max_examples=40, deadline=None)
@given(pp=st.integers(2, 8), groups=st.integers(1, 4), vpp=st.integers(2, 4), tf=st.floats(0.1, 2.0),
       tb=st.floats(0.1, 4.0))
def test_interleaving_divides_bubble_by_virtual_stages(pp: int, groups: int, vpp: int, tf: float, tb: float) -> None:
    m = pp * groups  # Megatron's interleaved schedule runs micro-batches in groups of pp
    plain = max(simulate_pipeline([[tf]] * pp, [[tb]] * pp, 0.0, m).end_s) - m * (tf + tb)
    inter = simulate_pipeline([[tf / vpp] * vpp] * pp, [[tb / vpp] * vpp] * pp, 0.0, m)
    bubble = max(inter.end_s) - m * (tf + tb)
    assert abs(bubble - plain / vpp) < 1e-6 * max(1.0, plain)


@settings(max_examples=40, deadline=None)
@given(pp=st.integers(1, 8), m=st.integers(1, 24), vpp=st.integers(1, 3), p2p=st.floats(0.0, 1.0))
def test_every_pass_runs_once_and_order_is_valid(pp: int, m: int, vpp: int, p2p: float) -> None:
    if vpp > 1:
        m = pp * (1 + m % 3)  # interleaving needs m % pp == 0 (Megatron)
    result = simulate_pipeline([[1.0] * vpp] * pp, [[2.0] * vpp] * pp, p2p, m, record=True)
    assert len(result.events) == 2 * pp * vpp * m
    for r in range(pp):
        program = rank_program(r, m, pp, vpp)
        assert sorted(program) == sorted({(k, c, i) for k in "FB" for c in range(vpp) for i in range(m)})
    # p2p delays never shorten the step
    assert max(result.end_s) >= max(simulate_pipeline([[1.0] * vpp] * pp, [[2.0] * vpp] * pp, 0.0, m).end_s) - 1e-9


def test_unequal_stages_slowest_stage_sets_the_pace() -> None:
    fast, slow = [[1.0]] * 3, [[1.5]]
    result = simulate_pipeline(fast + slow, [[2.0]] * 3 + [[3.0]], 0.0, 16)
    assert max(result.end_s) >= 16 * 4.5


def test_1f1b_warmup_counts_match_megatron() -> None:
    program = rank_program(0, 8, 4, 1)
    assert [p[0] for p in program[:4]] == ["F", "F", "F", "F"]  # pp - 1 warm-up forwards, then 1F1B
    assert program[4] == ("B", 0, 0)
    last = rank_program(3, 8, 4, 1)
    assert [p[0] for p in last[:2]] == ["F", "B"]


def test_interleaved_with_ragged_microbatches_is_a_config_error() -> None:
    import pytest

    from llmperf_hook.errors import ConfigError

    with pytest.raises(ConfigError, match="cannot run 5 micro-batches in groups of 4"):
        simulate_pipeline([[1.0, 1.0]] * 4, [[2.0, 2.0]] * 4, 0.0, 5)
    with pytest.raises(ConfigError, match="groups of 4"):  # last group of 2 < PP 4
        simulate_pipeline([[1.0, 1.0]] * 4, [[2.0, 2.0]] * 4, 0.0, 10, group_size=4)


@settings(max_examples=30, deadline=None)
@given(pp=st.integers(2, 6), vpp=st.integers(2, 3), extra=st.integers(0, 6), m_extra=st.integers(0, 12))
def test_microbatch_groups_follow_megatrons_schedule_table(pp: int, vpp: int, extra: int, m_extra: int) -> None:
    """--microbatch-group-size-per-virtual-pipeline-stage N: the forward order is Megatron's get_schedule_table,
    the warm-up (pp - rank - 1) * 2 + (vpp - 1) * N, and every pass runs once."""
    from megatron.core.pipeline_parallel.schedules import get_schedule_table

    group = pp + extra
    m = group + m_extra
    if 0 < m % group < pp:
        m += pp - m % group  # Megatron refuses a last group smaller than PP
    table = [(c, i) for i, c in get_schedule_table(m, vpp, group)]
    for r in range(pp):
        program = rank_program(r, m, pp, vpp, group)
        assert [(c, i) for k, c, i in program if k == "F"] == table
        warmup = m * vpp if m == pp else min(m * vpp, (pp - r - 1) * 2 + (vpp - 1) * group)
        assert all(k == "F" for k, _, _ in program[:warmup])
    result = simulate_pipeline([[1.0] * vpp] * pp, [[2.0] * vpp] * pp, 0.1, m, record=True, group_size=group)
    assert len(result.events) == 2 * pp * vpp * m

"""predict/rank_jitter.py: a synchronised step waits for its slowest rank. The expected maximum of n normals, the
jitter read from a rank pair's per-step times (profile/cpu_rank_transport.py), its place in the framework-cost file
and in CPU predictions (predict/cpu_framework.py)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.predict.cpu_framework import (FILE_NAME, CpuFrameworkCost, apply_cpu_framework_cost, cost_label,
                                                find_cpu_framework_cost, op_cost_parts, synchronised_ranks)
from llmperf_hook.predict.rank_jitter import expected_max_standard_normal, jitter_cv, straggler_factor
from llmperf_hook.profile import cpu_framework_readings as cfr
from llmperf_hook.profile.cpu_rank_transport import STEP_COLUMNS, fit_transport, step_pairs

COST = CpuFrameworkCost(2e-5, 1.0, 5e-5, 4e-9, rank_jitter_cv=0.08)


def test_the_expected_maximum_of_n_standard_normals_is_the_order_statistic() -> None:
    # David & Nagaraja (2003); Tippett (1925): e_2 = 1 / sqrt(pi), e_4 = 1.02938, e_8 = 1.42360
    assert expected_max_standard_normal(1) == 0.0
    assert expected_max_standard_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-9)
    assert expected_max_standard_normal(4) == pytest.approx(1.02938, abs=1e-5)
    assert expected_max_standard_normal(8) == pytest.approx(1.42360, abs=1e-5)
    assert straggler_factor(0.08, 1) == 1.0 and straggler_factor(0.0, 8) == 1.0
    assert straggler_factor(0.08, 2) == pytest.approx(1 + 0.08 / math.sqrt(math.pi))


def test_the_jitter_of_a_pair_is_what_the_ranks_do_not_share() -> None:
    rng = random.Random(6)
    drift = [rng.uniform(0.05, 0.15) for _ in range(20000)]  # the whole machine's speed: both ranks alike
    own = [(t * (1 + rng.gauss(0, 0.07)), t * (1 + rng.gauss(0, 0.07))) for t in drift]
    assert jitter_cv(own) == pytest.approx(0.07, rel=0.03)
    assert jitter_cv([(t, t) for t in drift]) == 0.0  # shared drift: nobody waits
    # the pair's expected max over its mean is what the normal order statistic says
    ratio = sum(max(p) for p in own) / sum(sum(p) / 2 for p in own)
    assert ratio == pytest.approx(straggler_factor(jitter_cv(own), 2), rel=0.005)
    assert jitter_cv([]) is None


def _pair_rows(steps0: list[float], steps1: list[float]) -> dict:
    row = lambda steps: [[1e6, 3, 1e-3, sorted(steps)[len(steps) // 2], *steps]]  # noqa: E731
    return {"single": [[0.0, 3, 1e-4, 0.05, *steps0]], "pair": [row(steps0), row(steps1)]}


def test_the_transport_reading_keeps_each_step_and_the_file_pools_them_over_readings() -> None:
    a, b = [0.050, 0.060, 0.055], [0.055, 0.050, 0.055]
    raw = _pair_rows(a, b)
    assert step_pairs(raw) == list(zip(a, b))
    assert fit_transport(raw)["step_jitter_cv"] == pytest.approx(jitter_cv(list(zip(a, b))))
    old = {"single": [[0.0, 3, 1e-4, 0.05]], "pair": [[r[0][:STEP_COLUMNS]] for r in raw["pair"]]}
    assert "step_jitter_cv" not in fit_transport(old)  # rows written before the term: none
    raws = [{"transport": raw}, {"transport": _pair_rows(b, a)}]
    med = cfr.median_raw([{**_reading_base(), **r} for r in raws])["transport"]
    assert sorted(step_pairs(med)) == sorted(list(zip(a, b)) + list(zip(b, a)))  # pooled, not medianed


def _reading_base() -> dict:
    return {"tiny_s": [1e-3, 2e-3], "fwd_bwd_s": [0.01], "optimizer_s": [[1e-3, 5e-4]],
            "bias": {"ratio": 1.0, "samples": [{"isolated_s": 1e-3}]}}


def test_a_synchronised_step_pays_the_slowest_rank_and_collectives_keep_the_comm_model() -> None:
    gemm = Op("g", "gemm", "fwd", {"m": 64, "n": 64, "k": 64})
    ar = Op("ar", "allreduce", "step", {"bytes": 1 << 20}, collective=Collective("dp", 2, 2))
    one, two = op_cost_parts(gemm, 1e-3, COST, 2, 1), op_cost_parts(gemm, 1e-3, COST, 2, 2)
    assert "jitter" not in one and two["jitter"] == pytest.approx(0.08 / math.sqrt(math.pi) * sum(one.values()))
    assert op_cost_parts(ar, 3e-3, COST, 2, 2) == {"comm": 3e-3}
    unmeasured = CpuFrameworkCost(2e-5, 1.0, 5e-5, 4e-9)
    assert op_cost_parts(gemm, 1e-3, unmeasured, 2, 2) == one  # a file without the term: as before
    assert synchronised_ranks([gemm, ar]) == 2 and synchronised_ranks([gemm]) == 1
    assert cost_label(COST, [gemm, ar]) == "+cpu-framework+rank-jitter x1.045"
    assert cost_label(COST, [gemm]) == cost_label(unmeasured, [gemm, ar]) == "+cpu-framework"


def _home(tmp_path: Path, cv: float | None) -> Path:
    d = tmp_path / "profiles" / "cpu-t"
    d.mkdir(parents=True)
    (d / "profile.json").write_text("{}")
    entry = {"per_unit_s": 2e-5, "compute_scale": 1.0, "optimizer_per_tensor_s": 5e-5, "optimizer_per_param_s": 4e-9,
             "rank_transport": {"per_byte_s": 8e-10, **({} if cv is None else {"step_jitter_cv": cv})}}
    (d / FILE_NAME).write_text(json.dumps({"dtypes": {"fp32": entry}}))
    return tmp_path


def test_the_term_is_read_from_the_framework_file_and_a_bad_value_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.errors import ProfileError

    monkeypatch.setenv("LLMPERF_HOME", str(_home(tmp_path / "a", 0.075)))
    assert find_cpu_framework_cost("cpu-t", "fp32").rank_jitter_cv == 0.075
    monkeypatch.setenv("LLMPERF_HOME", str(_home(tmp_path / "b", None)))
    assert find_cpu_framework_cost("cpu-t", "fp32").rank_jitter_cv == 0.0
    monkeypatch.setenv("LLMPERF_HOME", str(_home(tmp_path / "c", -0.1)))
    with pytest.raises(ProfileError, match="step_jitter_cv"):
        find_cpu_framework_cost("cpu-t", "fp32")


def test_only_the_non_collective_part_of_a_two_rank_step_grows() -> None:
    from llmperf_hook.predict.dispatch import op_id

    ops = [Op("g", "gemm", "fwd", {"m": 64, "n": 64, "k": 64}),
           Op("ar", "allreduce", "step", {"bytes": 1 << 20}, collective=Collective("dp", 2, 2))]
    base = {op_id(op): 1e-3 for op in ops}
    with_term = apply_cpu_framework_cost(base, ops, COST, op_id)
    without = apply_cpu_framework_cost(base, ops, CpuFrameworkCost(2e-5, 1.0, 5e-5, 4e-9), op_id)
    assert with_term[op_id(ops[1])] == without[op_id(ops[1])] == 1e-3
    assert with_term[op_id(ops[0])] == pytest.approx(straggler_factor(0.08, 2) * without[op_id(ops[0])])


def _graph(argv: list[str]):
    from llmperf_hook.api import build_graph, resolve_job
    from llmperf_hook.hardware.spec import ClusterSpec, HardwareSpec, NetworkTier

    tier = NetworkTier(2e9, 5e-5)
    cluster = ClusterSpec("c", HardwareSpec("cpu-t", {"fp32": 3e10}, 5e9, 1 << 34), 8, tier, tier)
    return build_graph(resolve_job(argv, {})[1], cluster)


def _megatron(ranks: int, *layout: str) -> list[str]:
    return ["torchrun", "--nproc-per-node", str(ranks), "pretrain_gpt.py", "--num-layers", "4", "--hidden-size",
            "256", "--num-attention-heads", "4", "--seq-length", "128", "--max-position-embeddings", "128",
            "--micro-batch-size", "2", "--global-batch-size", str(4 * ranks), "--vocab-size", "1024", *layout]


@pytest.mark.parametrize("ranks,layout", [(1, ()), (2, ()), (4, ("--tensor-model-parallel-size", "2")),
                                          (4, ("--pipeline-model-parallel-size", "2")),
                                          (8, ("--tensor-model-parallel-size", "2", "--context-parallel-size", "2")),
                                          (8, ("--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size",
                                               "2"))])
def test_every_rank_of_the_job_is_waited_for_not_only_the_largest_group(ranks: int, layout: tuple[str, ...]) -> None:
    """TP 2 x DP 2: a rank waits for its TP peer inside the step, which waits for its own DP peer: the step ends at
    the slowest of the four (E[max of 4]), not of one group of two (R85)."""
    assert synchronised_ranks(_graph(_megatron(ranks, *layout)).all_ops()) == ranks


def test_a_one_rank_job_or_a_file_without_the_term_prices_no_jitter_on_a_real_graph(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.predict.dispatch import op_id

    times = {}
    for name, cv in (("with", 0.08), ("without", None)):
        monkeypatch.setenv("LLMPERF_HOME", str(_home(tmp_path / name, cv)))
        cost = find_cpu_framework_cost("cpu-t", "fp32")
        for ranks in (1, 2):
            ops = _graph(_megatron(ranks)).all_ops()
            times[name, ranks] = (ops, apply_cpu_framework_cost({op_id(op): 1e-3 for op in ops}, ops, cost, op_id))
    assert times["with", 1][1] == times["without", 1][1]  # one rank waits for nobody
    ops, with_term = times["with", 2]
    without = times["without", 2][1]
    factor = straggler_factor(0.08, 2)
    for op in ops:
        grown = 1.0 if op.collective is not None else factor
        assert with_term[op_id(op)] == pytest.approx(grown * without[op_id(op)]), op.name
    assert any(op.collective is not None for op in ops) and any(op.collective is None for op in ops)


def test_a_gpu_job_prices_no_jitter_beside_a_cpu_file_that_has_it(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.api import predict_command

    argv = _megatron(8, "--tensor-model-parallel-size", "2")
    steps = {}
    for name, cv in (("with", 0.08), ("none", None)):
        home = _home(tmp_path / name, cv) if cv is not None else tmp_path / name
        monkeypatch.setenv("LLMPERF_HOME", str(home))
        estimate = predict_command(argv, {}, cluster="dgx-h100").estimate
        assert not any("jitter" in label or "cpu-framework" in label for label in estimate.predictor.values())
        steps[name] = estimate.step_time_s
    assert steps["with"] == steps["none"]

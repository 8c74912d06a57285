"""The framework cost's per-op-unit reading times its two tiny steps in interleaved pairs
(cpu_framework.paired_difference_s), and the readings are combined on the median of the paired differences
(cpu_framework_readings.median_raw): a burst of the machine that lands in one block of steps moves a difference
of block medians, not the median of pairs."""

from __future__ import annotations

import statistics

import pytest

from llmperf_hook.profile import cpu_framework as cf
from llmperf_hook.profile import cpu_framework_readings as cfr

SMALL_S, LARGE_S, SLOW = 1.3e-3, 7.5e-3, 1.4
"""The tiny pair's steps on this machine (bf16, 27 Nov) and a co-runner's slowdown of a step's CPU time."""


class Machine:
    """A fake CPU clock and two steps that advance it; calls numbered from 0 and those in `burst` run SLOW x."""

    def __init__(self, burst: range) -> None:
        self.now_s, self.calls, self.burst = 0.0, 0, burst

    def clock(self) -> float:
        return self.now_s

    def step(self, seconds: float):
        def run() -> None:
            self.now_s += seconds * (SLOW if self.calls in self.burst else 1.0)
            self.calls += 1
        return run


def test_a_burst_over_a_third_of_the_pairs_leaves_the_paired_difference_exact() -> None:
    pairs = 31
    # after the warm-up pair (calls 0, 1), pair i is calls 2 + 2i and 3 + 2i: a burst of 10 consecutive pairs
    machine = Machine(range(2 + 2 * 10, 2 + 2 * 20))
    small_s, diff_s = cf.paired_difference_s(machine.step(SMALL_S), machine.step(LARGE_S), pairs, machine.clock)
    assert small_s == pytest.approx(SMALL_S)
    assert diff_s == pytest.approx(LARGE_S - SMALL_S)


def test_the_same_burst_in_block_timing_moves_the_difference() -> None:
    """What the pairing replaces: 15 steps of the small model, then 15 of the large (cf._median_s each, a warm-up
    step before each block); a burst over the last 12 of the 32 steps (about a third, as above) lands in the large
    block and moves the difference by the whole slowdown and more."""
    machine = Machine(range(20, 32))
    small_s = cf._median_s(machine.step(SMALL_S), 15, machine.clock)  # calls 0-15
    large_s = cf._median_s(machine.step(LARGE_S), 15, machine.clock)  # calls 16-31
    assert (large_s - small_s) / (LARGE_S - SMALL_S) == pytest.approx((SLOW * LARGE_S - SMALL_S) / (LARGE_S - SMALL_S))
    assert (large_s - small_s) / (LARGE_S - SMALL_S) > SLOW


def test_the_readings_combine_on_the_median_of_the_paired_differences() -> None:
    """Each reading keeps [small, small + paired difference]; across readings the difference's median is taken, not
    a difference of the two medians (which mixes readings: here 3.5 ms instead of 4 ms)."""
    readings = [{"tiny_s": [1e-3, 5e-3]}, {"tiny_s": [2e-3, 5.5e-3]}, {"tiny_s": [3e-3, 9e-3]}]
    raws = [{**r, "fwd_bwd_s": [1.0], "optimizer_s": [[1.0, 1.0]],
             "bias": {"ratio": 1.0, "samples": [{"shape": [1, 2, 3, 4], "isolated_s": 1.0, "predicted_s": 1.0}]}}
            for r in readings]
    small_s, large_s = cfr.median_raw(raws)["tiny_s"]
    assert small_s == pytest.approx(2e-3)
    assert large_s - small_s == pytest.approx(statistics.median([4e-3, 3.5e-3, 6e-3]))


class FakeIsolated:
    """cf.IsolatedDifference without a profile: each round adds one sample, seconds() is 3 ms."""

    made: list = []

    def __init__(self, dtype: str, hardware_name: str, small, large) -> None:
        self.rounds = 0
        FakeIsolated.made.append(self)

    def sample_round(self) -> None:
        self.rounds += 1

    def seconds(self) -> float:
        return 3e-3


def test_a_reading_times_the_tiny_pair_with_the_pairing_and_its_isolated_ops_between_the_pairs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """_InProcess.reading takes its tiny times from paired_difference_s (TINY_PAIRS pairs), with a round of the
    difference's isolated ops after every TINY_PAIRS // ISOLATED_REPS pairs (IsolatedDifference.sample_round)."""
    calls = []

    def paired(small, large, pairs, clock=None, between=None, every=0):
        calls.append((pairs, every))
        for _ in range(pairs // every):
            between()
        return 1e-3, 6e-3

    FakeIsolated.made = []
    monkeypatch.setattr(cf, "paired_difference_s", paired)
    monkeypatch.setattr(cf, "_median_s", lambda fn, reps=cf.REPS, clock=None: 2e-2)
    monkeypatch.setattr(cf, "measure_profile_bias", lambda *a: {"ratio": 1.0, "samples": []})
    monkeypatch.setattr(cf, "IsolatedDifference", FakeIsolated)
    local = object.__new__(cfr._InProcess)
    local.dtype, local.tiny, local.steps, local.optimizers = "fp32", (None, None), [None], [(None, None)]
    raw = local.reading("cpu-x")
    assert calls == [(cfr.TINY_PAIRS, cfr.TINY_PAIRS // cf.ISOLATED_REPS)]
    assert [m.rounds for m in FakeIsolated.made] == [cf.ISOLATED_REPS]
    assert raw["tiny_s"] == pytest.approx([1e-3, 7e-3])
    assert raw["tiny_isolated_diff_s"] == 3e-3


def test_the_rounds_between_the_pairs_are_not_timed_and_follow_every_few_pairs() -> None:
    machine = Machine(range(0))
    rounds = []

    def between() -> None:  # a round of isolated samples: a long stretch of the clock outside any pair
        rounds.append(machine.calls)
        machine.now_s += 1.0

    small_s, diff_s = cf.paired_difference_s(machine.step(SMALL_S), machine.step(LARGE_S), 31, machine.clock,
                                             between=between, every=6)
    assert (small_s, diff_s) == pytest.approx((SMALL_S, LARGE_S - SMALL_S))
    assert rounds == [2 + 2 * 6 * k for k in range(1, 6)]  # after pairs 6, 12, ..., 30 (calls 0-1: warm-up)


TINY = ({"compute_s": 1.1e-3, "units": 51, "bytes": 1.6e6, "params": 46_048},
        {"compute_s": 6.3e-3, "units": 291, "bytes": 3.2e6, "params": 147_680})
"""The tiny pair's graph as the bf16 profile predicts it (27 Nov): 5.2 ms of extrapolated compute in the difference."""


def test_the_per_unit_cost_subtracts_the_measured_isolated_ops_not_the_scaled_prediction() -> None:
    """Both terms of step 1's difference measured: the per-unit cost no longer moves with compute_scale (each
    reading's isolated-op ratio on other shapes, 0.75-0.93 in ten readings at load 0.7), which it did by -15 us per
    +0.18 of scale when the scaled prediction of ops outside the profile's range was subtracted."""
    step_diff_s, isolated_s = 7.5e-3, 3.5e-3
    measured = [cf.per_unit_from_difference(1.3e-3, 1.3e-3 + step_diff_s, *TINY, scale, isolated_diff_s=isolated_s)
                for scale in (0.75, 0.93)]
    assert measured[0] == measured[1] == pytest.approx((step_diff_s - isolated_s) / 240)
    predicted = [cf.per_unit_from_difference(1.3e-3, 1.3e-3 + step_diff_s, *TINY, scale) for scale in (0.75, 0.93)]
    assert predicted[0] - predicted[1] == pytest.approx(0.18 * 5.2e-3 / 240)


def test_the_file_keeps_the_isolated_difference_its_per_unit_cost_was_fitted_with() -> None:
    """median_raw carries the readings' median isolated difference (summarize writes it next to tiny_samples), so a
    kept file refits to the same per-unit cost (benchmarks/testbed_refit.median_times)."""
    raws = [{"tiny_s": [1e-3, 8e-3], "tiny_isolated_diff_s": x, "fwd_bwd_s": [1.0], "optimizer_s": [[1.0, 1.0]],
             "bias": {"ratio": 1.0, "samples": []}} for x in (3e-3, 3.6e-3, 3.4e-3)]
    assert cfr.median_raw(raws)["tiny_isolated_diff_s"] == pytest.approx(3.4e-3)
    assert "tiny_isolated_diff_s" not in cfr.median_raw([{**r, "tiny_isolated_diff_s": None} for r in raws])



def test_the_isolated_difference_samples_the_ops_the_large_model_issues_beyond_the_small(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 1's isolated ops are the layer ops the 9-layer graph issues beyond the 1-layer one, each distinct op
    sampled ISOLATED_REPS times, a round of every op at a time (median: a burst outvoted) and counted as often as
    the difference issues it; ops both graphs issue once (embedding, loss) cancel and are not sampled. A backward op
    is sampled as a backward."""
    from llmperf_hook.graph.op import Op
    from llmperf_hook.profile import op_sampler

    dims = {"m": 16, "n": 96, "k": 32}
    gemm_f, gemm_b = Op("qkv", "gemm", "fwd", dims, 1.0, 1.0), Op("qkv", "gemm", "bwd", dims, 1.0, 1.0)
    embed = Op("embedding", "embedding", "fwd", {"tokens": 16, "hidden": 32, "vocab": 1024}, 1.0, 1.0)
    graphs = {cf.TINY_LAYERS[0]: [(embed, 1, 0.0), (gemm_f, 4, 0.0), (gemm_b, 4, 0.0)],
              cf.TINY_LAYERS[1]: [(embed, 1, 0.0), (gemm_f, 36, 0.0), (gemm_b, 36, 0.0)]}
    monkeypatch.setattr(cf, "_predicted_ops", lambda shape, dtype, hw: (graphs[shape], 0.0))
    seconds = {"fwd": iter([10e-6, 90e-6, 11e-6, 12e-6, 9e-6]), "bwd": iter([20e-6, 21e-6, 200e-6, 22e-6, 19e-6])}
    sampled = []

    def sample_op(op_class, dims, phase, dtype, device, target_s=0.05):
        sampled.append((op_class, phase))
        return op_sampler.Timing(next(seconds[phase]), 5, 0.0)

    monkeypatch.setattr(op_sampler, "sample_op", sample_op)
    diff_s = cf.isolated_difference_s("bf16", "cpu-x", *cf.TINY_LAYERS)
    assert diff_s == pytest.approx(32 * 11e-6 + 32 * 21e-6)
    assert sorted(sampled) == [("gemm", "bwd")] * cf.ISOLATED_REPS + [("gemm", "fwd")] * cf.ISOLATED_REPS

def test_a_reading_whose_box_ends_during_the_bias_shapes_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each part of a reading starts only within its box (OutOfTime between parts), and a reading whose box ended
    during its last part, the bias shapes, is not kept."""
    import time

    monkeypatch.setattr(cf, "paired_difference_s", lambda small, large, pairs, clock=None, between=None, every=0:
                        (1e-3, 6e-3))
    monkeypatch.setattr(cf, "_median_s", lambda fn, reps=cf.REPS, clock=None: 2e-2)
    monkeypatch.setattr(cf, "measure_profile_bias", lambda *a: time.sleep(0.05) or {"ratio": 1.0, "samples": []})
    monkeypatch.setattr(cf, "IsolatedDifference", FakeIsolated)
    local = object.__new__(cfr._InProcess)
    local.dtype, local.tiny, local.steps, local.optimizers = "fp32", (None, None), [None], [(None, None)]
    with pytest.raises(cfr.OutOfTime):
        local.reading("cpu-x", end_s=time.perf_counter() + 0.02)

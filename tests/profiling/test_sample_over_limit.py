"""A shape far slower than its estimate does not spend the --budget: op_sampler.measure stops after its first call when
the calls it needs would pass the time it was given, and the sampler takes that class at the pace seen for the rest of
the run. On an AVX2-only EPYC one bf16 GEMM backward (ATen's fallback, ~78 s a call) ran its 7 calls in 549 s of a
--budget 4 profile whose sampling had 74 s left (/work/notes/h182.md)."""

from __future__ import annotations

import time

import pytest

from llmperf_hook.profile import op_sampler, plan, sampler
from llmperf_hook.profile.features import RooflineConstants

RC = RooflineConstants(1e11, 1e10, 1, 4)
SLOW_CALL_S = 0.3


def _busy(seconds: float) -> None:
    """CPU work (the sampler's clock is the process's CPU time)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_measurement_whose_calls_would_pass_its_limit_stops_after_the_first() -> None:
    calls = []
    with pytest.raises(op_sampler.OverLimit, match=r"first call took .* 7 calls would take") as over:
        op_sampler.measure(lambda: calls.append(_busy(SLOW_CALL_S)), "cpu", limit_s=1.0)
    assert len(calls) == 1 and over.value.call_s >= SLOW_CALL_S * 0.9
    calls.clear()
    timing = op_sampler.measure(lambda: calls.append(None), "cpu", limit_s=1.0)  # within its limit: as before
    assert timing.num_reps >= 5 and len(calls) == timing.num_reps + 2


def test_the_sampler_stops_a_shape_far_slower_than_its_estimate_and_takes_its_class_at_that_pace(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Three GEMM backward shapes estimated at ~20 ms each: the first is fast, the second takes SLOW_CALL_S a call
    (7 calls would end far past the 1 s deadline): one call, no sample; the third, of the same class, is then
    estimated at that pace and not started."""
    shapes = {64: 0.0, 65: SLOW_CALL_S, 66: SLOW_CALL_S}  # m -> CPU seconds a call
    calls: list[int] = []

    def runner(op_class, dims, bwd, dtype, device):
        m = int(dims["m"])
        return lambda: calls.append(m) or _busy(shapes[m])

    monkeypatch.setattr(op_sampler, "make_runner", runner)
    monkeypatch.setattr(sampler, "OVER_DEADLINE_S", 0.1)
    specs = [plan.SampleSpec("gemm", "bwd", {"m": m, "n": 64, "k": 64}, "design") for m in shapes]
    op_sampler.cpu_clock()  # torch imported before the deadline's clock starts
    deadline, recorded = sampler.SamplingDeadline(None, {}, fixed_s=time.perf_counter() + 1.0), []
    req = sampler.ProfileRequest(device="cpu", budget_min=1.0, dtype="bf16")
    assert sampler._measure_all(specs, deadline, req, RC, lambda spec, t: recorded.append(spec.dims["m"])) == 1
    assert recorded == [64] and calls.count(65) == 1 and 66 not in calls
    roofline_s = sampler._roofline_s(specs[1], RC)
    assert deadline.stopped[("gemm", "bwd")] == pytest.approx(SLOW_CALL_S / roofline_s, rel=0.5)
    assert "note: gemm bwd {'m': 65, 'n': 64, 'k': 64} not measured: its first call took" in capsys.readouterr().err

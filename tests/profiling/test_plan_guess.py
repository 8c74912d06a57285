"""The plan's cost and the sampling deadline before this device has measured a class: the plan says which part of
its cost is a guess, and the deadline check learns each class's slowdown from the run's own samples."""

import time

import numpy as np
import pytest

from llmperf_hook.profile import op_sampler, plan, sampler
from llmperf_hook.profile.features import RooflineConstants

RC = RooflineConstants(1e11, 1e10, 1, 4)


def _specs(op_class: str, n: int) -> list[plan.SampleSpec]:
    return [s for s in plan.design_specs((op_class,), plan.CPU_RANGES, n) if s.phase == "fwd"]


def test_a_fresh_plan_says_its_cost_is_a_guess() -> None:
    cost = plan.plan_cost(_specs("softmax", 8) + _specs("gelu", 8), RC)
    assert cost.guessed == ("softmax/fwd", "gelu/fwd") and cost.guess_factor == plan.ROOFLINE_SLOWDOWN
    assert "a guess for 2 class/direction(s)" in cost.describe() and "nothing sampled" in cost.describe()


def test_a_class_not_measured_yet_takes_the_devices_median_slowdown() -> None:
    """A device whose measured classes run 10-30x their roofline: an unmeasured class is not taken at 2x."""
    known = {("softmax", "fwd"): 10.0, ("layernorm", "fwd"): 20.0, ("gemm", "fwd"): 30.0}
    gelu = _specs("gelu", 8)
    cost = plan.plan_cost(gelu, RC, known)
    assert cost.guessed == ("gelu/fwd",) and cost.guess_factor == pytest.approx(20.0)
    assert cost.device_minutes > plan.plan_cost(gelu, RC).device_minutes
    assert "the median of the 3 this device has measured" in cost.describe()
    assert plan.plan_cost(_specs("softmax", 8), RC, known).guessed == ()  # all measured: no guess said


def test_sampling_stops_before_the_deadline_once_a_class_proves_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each sample takes 0.3 s, ~1000x its roofline: at the 2x guess the next one always seemed to fit, and the last
    ran past the deadline. The run's own samples now set the estimate."""
    def sample_op(op_class, dims, phase, dtype, device, target_s=0.05, limit_s=float("inf")):
        time.sleep(0.3)
        return op_sampler.Timing(0.3 / 7, 7, 0.0)  # 7 repetitions in the 0.3 s

    monkeypatch.setattr(op_sampler, "sample_op", sample_op)
    req = sampler.ProfileRequest(device="cpu", budget_min=1.0, dtype="fp32")
    specs = [plan.SampleSpec("gelu", "fwd", {"elements": 8192.0}, "design") for _ in range(20)]
    deadline, recorded = time.perf_counter() + 1.0, []
    measured = sampler._measure_all(specs, deadline, req, RC, lambda spec, t: recorded.append(t))
    # 3 samples end by 0.9 s; a 4th (the 2x guess's) would end at 1.2 s. The count is the check; the clock gets
    # slack for sleeps overshooting on a loaded 2-core machine.
    assert 1 <= measured <= 3 and time.perf_counter() <= deadline + 0.25, measured
    assert np.isclose(recorded[0], 0.3 / 7)

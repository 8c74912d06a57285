"""The plan line says what this --budget is expected to measure of the shapes it plans (sampler.expected_run), and the
summary what ran beside it: `--budget 0.3 --for` a GPT job planned 917 shapes, '1.4 device-minutes', and measured the
136 first fits (28 Nov), which the plan line never said; `--budget 0.6` expected 120 and measured 52 at load 9."""

from __future__ import annotations

import re
import time
from types import SimpleNamespace

from llmperf_hook.commands.profile import _sampled_in
from llmperf_hook.profile import plan
from llmperf_hook.profile.budget import plan_budget
from llmperf_hook.profile.sampler import SamplingDeadline, describe_expected, expected_run
from tests.profiling.test_plan import RC

SPECS = plan.fit_first(plan.design_specs(("gemm", "layernorm"), plan.CPU_RANGES, 32), 8)


def test_a_budget_with_no_time_left_measures_the_first_fits_only() -> None:
    budget = plan_budget(0.2, time.perf_counter() - 30.0, 0.0, True)  # the start-up took 30 s of its 12
    count, seconds, past = expected_run(SPECS, SamplingDeadline(budget, {}), RC, {})
    assert (count, past) == (4 * 8, 4 * 8) and seconds > 0  # 2 classes x 2 directions x 8 shapes
    line = describe_expected((count, seconds, past), len(SPECS))
    assert line.startswith(f"this --budget measures about 32 of them (about {seconds:.0f} s, 32 of them first-fit "
                           f"shapes past its sampling deadline; a longer --budget"), line


def test_a_long_budget_measures_them_all() -> None:
    run = expected_run(SPECS, SamplingDeadline(None, {}, fixed_s=time.perf_counter() + 1e6), RC, {})
    assert run[0] == len(SPECS) and run[2] == 0
    assert describe_expected(run, len(SPECS)).startswith("this --budget measures them all (about ")


def test_the_summary_says_when_fewer_ran_than_planned() -> None:
    ends = (("start-up, torch and the peaks", 10.0), ("sampling", 24.6))
    few = SimpleNamespace(phase_ends_s=ends, expected_measured=120, num_measured=52)
    line = _sampled_in(few)
    assert line.startswith(" in 14.6 s of sampling, where the plan expected about 120: the shapes took longer than "
                           "its estimates (load "), line
    assert _sampled_in(SimpleNamespace(phase_ends_s=ends, expected_measured=120, num_measured=110)) == \
        " in 14.6 s of sampling"


def test_fits_that_started_late_say_it() -> None:
    """'fitting ran 42 s past its share' of a --for run whose fits took 14 s: the first fits' sampling and the start-up
    had spent the share before fitting began (28 Nov, load 7)."""
    import numpy as np

    from llmperf_hook.profile import profile_fit
    from llmperf_hook.profile.build_profile import Samples

    m, n, k = (np.random.default_rng(0).integers(16, 512, 12).astype(float) for _ in range(3))
    groups = {("gemm", "fwd", "fp32"): Samples("gemm", "fwd", {"m": m, "n": n, "k": k}, 2 * m * n * k / 1e11)}
    _, _, notes = profile_fit._fit_groups(groups, {"fp32": RC}, "fp32", time.perf_counter() - 5.0)
    said = [re.match(r"fitting ran (\d+) s past its share of the --budget \(it started 5 s past it, the phases "
                     r"before it having run over, and took (\d+) s\)", note) for note in notes]
    assert any(m and abs(int(m[1]) - 5 - int(m[2])) <= 1 for m in said), notes  # its own time: LightGBM's import


def test_none_expected_is_said_as_none() -> None:
    assert describe_expected((0, 0.0, 0), 48).startswith("this --budget measures none of them (no sampling time left")

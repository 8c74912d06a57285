"""refine/own_scales.py: an instrumented configuration's own scale is its whole step's ratio shrunk as one reading,
so refinement never moves it past the run it was calibrated on."""

from __future__ import annotations

import math
import random

import pytest

from llmperf_hook.refine.own_scales import own_log_scales
from llmperf_hook.refine.peer_wait import WAIT_CONFIG_SD_PRIOR
from llmperf_hook.refine.recalibrate import fit_key_calibration
from llmperf_hook.refine.shrinkage import Priors, group_runs, posterior, Variances

TESTBED = Priors(0.097, 0.136, "the testbed profile's (session 16)", sd_moment=0.095)
"""The priors the 15:38 testbed record's profile gave (held-out rms 13.6 %, shared 9.7 %, the moment 9.5 %)."""


def _row(job: str, fingerprint: str, predicted: float, measured: float, wall_per_cpu: float = 1.0,
         observation_sd: float = 0.0) -> tuple:
    """A quiet run as observation_store.runs_for_key gives it (wall_per_cpu > 1: several ranks, its wait measured);
    a contended one (observation sd > 0) assumed its wait."""
    w = math.log(wall_per_cpu)
    return (job, fingerprint, predicted, measured, None, observation_sd, 0.0, (), w, w != 0.0 and not observation_sd)


def test_a_two_rank_run_matching_its_prediction_in_total_stays_on_it() -> None:
    """The testbed's 15:38 record, configuration 1: predicted 70.35 ms, its calibration run 69.89 ms of which CPU
    61.04 ms (x0.868 of the prediction) and wall / CPU x1.145. Shrunk apart, the CPU part lost more than the wait
    and refine predicted x1.026 (+3.3 % against the run); as one reading it lies between 1 and x0.993."""
    row = _row("j", "c1", 0.07035, 0.06989, 0.06989 / 0.06104)
    cal = fit_key_calibration("h", "c", "fw", [row], TESTBED)[0]
    own = cal.own_scale("c1")
    assert own.measured_scale == pytest.approx(0.06989 / 0.07035)
    assert own.measured_scale <= own.step_time_scale <= 1.0
    assert own.wait_log_scale == pytest.approx(math.log(0.06989 / 0.06104))


def test_one_run_keeps_lambda_of_its_ratio_with_the_waits_prior_added() -> None:
    """One run: lambda y, lambda = prior / (prior + reading); the reading is the machine's run-to-run spread (sd_run
    and the moment), the prior the profile's held-out steps and, for a run that read a wait, the wait's."""
    y = math.log(1.2)
    reading = 0.05 ** 2 + 0.095 ** 2
    step_prior = 0.097 ** 2 + 0.136 ** 2
    wait_prior = 0.097 ** 2 + WAIT_CONFIG_SD_PRIOR ** 2
    one = fit_key_calibration("h", "c", "fw", [_row("j", "a", 0.05, 0.06)], TESTBED)[0]
    two = fit_key_calibration("h", "c", "fw", [_row("j", "a", 0.05, 0.06, 1.1)], TESTBED)[0]
    assert math.log(one.own_scale("a").step_time_scale) == pytest.approx(y * step_prior / (step_prior + reading))
    lam = (step_prior + wait_prior) / (step_prior + wait_prior + reading)
    assert math.log(two.own_scale("a").step_time_scale) == pytest.approx(y * lam, rel=1e-6)


@pytest.mark.parametrize("observation_sd", [0.0, 0.07])
def test_refinement_never_moves_a_configuration_past_its_own_run(observation_sd: float) -> None:
    """Any one run, whatever its CPU part and wait, quiet or contended (a quiet-equivalent reading, its wait
    assumed): its own scale lies between the prediction (1) and the run."""
    rng = random.Random(6)
    for _ in range(200):
        total, ratio = math.exp(rng.uniform(-0.4, 0.4)), math.exp(rng.uniform(0.0, 0.3))
        row = _row("j", "a", 0.05, 0.05 * total, ratio, observation_sd)
        scale = fit_key_calibration("h", "c", "fw", [row], TESTBED)[0].own_scale("a").step_time_scale
        assert min(1.0, total) - 1e-12 <= scale <= max(1.0, total) + 1e-12


def test_one_rank_configurations_get_the_same_posterior_as_the_shared_fit() -> None:
    """Without any wait the whole step is the CPU part: the own scales are refine/shrinkage.posterior's E[b + c_f]
    (the rule before the wait was split off), for several configurations and repeats."""
    rows = [_row("1", "a", 0.05, 0.055), _row("2", "a", 0.05, 0.058), _row("3", "b", 0.02, 0.019),
            _row("4", "c", 0.08, 0.07)]
    v = Variances(0.097, 0.136, 0.05, "test", 0.095)
    expected = posterior(group_runs([r[:4] for r in rows]), v).config_log_scale
    assert own_log_scales(rows, v, None) == pytest.approx(expected)


def test_a_contended_two_rank_run_is_shrunk_as_one_reading_too() -> None:
    """A contended run's quiet-equivalent reading (CPU time x an assumed x1.10) equal to its prediction: shrinking
    its CPU part (-0.095) and adding the assumed ratio back gave x1.036, past the run; as one reading it stays at 1.
    Its reading is noisier than a quiet run's (the observation sd), so it keeps less of the same ratio."""
    on_it = fit_key_calibration("h", "c", "fw", [_row("c", "a", 0.050, 0.050, 1.10, observation_sd=0.07)], TESTBED)[0]
    assert on_it.apply(0.050, "a") == pytest.approx(0.050)
    contended, quiet = (fit_key_calibration("h", "c", "fw", [_row("j", "a", 0.050, 0.060, 1.10, sd)], TESTBED)[0]
                        for sd in (0.07, 0.0))
    assert 0.050 < contended.apply(0.050, "a") < quiet.apply(0.050, "a") < 0.060
    assert "whole step weighted as one reading" in contended.describe("a")
    # its wait was assumed, not measured, and goes to no other configuration: the notes name none
    assert contended.own_scale("a").wait_log_scale == 0.0 and "wait for each other" not in contended.describe("a")
    assert "its ranks' wait for each other x1.100" in quiet.describe("a")


def test_a_run_without_a_fingerprint_stands_alone_and_gets_no_own_scale() -> None:
    cal = fit_key_calibration("h", "c", "fw", [_row("j", None, 0.05, 0.06, 1.1), _row("k", "a", 0.05, 0.055)],
                              TESTBED)[0]
    assert [c.fingerprint for c in cal.config_scales] == ["a"] and cal.num_configs == 2

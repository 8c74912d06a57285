"""refine/prior_scale.py: the profile's priors are doubted (an epsilon-contaminated prior, its scale by ML-II) only
when the runs contradict them; a deviation they explain is shrunk exactly as before."""

from __future__ import annotations

import math
import random

import pytest

from llmperf_hook.refine.prior_scale import (CONTAMINATION, _log_marginal_of_scale, averaged_posterior,
                                             scale_mixture, scaled)
from llmperf_hook.refine.recalibrate import fit_key_calibration
from llmperf_hook.refine.shrinkage import Priors, Variances, group_runs, posterior

TODAY = Priors(0.081, 0.041, "the 21:22 record's profile (held-out rms 4.1 %, drift 11.4 %)", sd_moment=0.080)
"""The priors of the testbed's 21:22 record of 27 Nov 2026 (its profile 4-52 % slow: /work/notes/testbed18.txt)."""
QUIET = Priors(0.097, 0.136, "the 15:38 record's profile", sd_moment=0.095)


def _row(ratio: float, fingerprint: str = "a", job: str = "j") -> tuple:
    """A quiet one-rank run measured `ratio` x its prediction, as observation_store.runs_for_key gives it."""
    return (job, fingerprint, 0.05, 0.05 * ratio, None, 0.0, 0.0, (), 0.0, False)


def _own_fraction(ratio: float, priors: Priors, contamination: float = CONTAMINATION) -> float:
    cal = fit_key_calibration("h", "c", "fw", [_row(ratio)], priors, contamination)[0]
    return math.log(cal.own_scale("a").step_time_scale) / math.log(ratio)


def _lambda0(priors: Priors) -> float:
    prior = priors.sd_shared ** 2 + priors.sd_config ** 2
    return prior / (prior + 0.05 ** 2 + priors.sd_moment ** 2)


@pytest.mark.parametrize("ratio", [1.02, 0.95, 1.10, 0.88])
def test_a_deviation_the_priors_explain_is_shrunk_exactly_as_before(ratio: float) -> None:
    """|y| inside sqrt(prior + reading) (0.13 for these priors): s_hat = 1, the normal-normal lambda, as without."""
    assert _own_fraction(ratio, TODAY) == pytest.approx(_lambda0(TODAY), rel=1e-9)
    assert _own_fraction(ratio, TODAY) == pytest.approx(_own_fraction(ratio, TODAY, 0.0), rel=1e-12)


def test_the_instrumented_run_of_a_far_off_profile_is_nearly_taken_in_full() -> None:
    """The 21:22 record: config 9's run read x1.693 its prediction (0.53 in log, four sd of prior and reading). The
    profile's priors alone kept x1.29 of it (lambda 0.48), so the user re-running it was told 24 % too fast; doubted,
    it keeps over 0.9 of its log-ratio, and never passes the run."""
    assert _own_fraction(1.693, TODAY, 0.0) == pytest.approx(_lambda0(TODAY))
    kept = _own_fraction(1.693, TODAY)
    assert 0.9 < kept < 1.0


def test_the_others_get_the_shared_part_in_the_profiles_proportion() -> None:
    """Under the contamination every prior variance is scaled alike, so the shared part a configuration without runs
    gets tends to sd_shared^2 / (sd_shared^2 + sd_config^2) of the mean log-ratio (0.80 for these priors), from
    0.38 with the profile's priors alone."""
    alone = fit_key_calibration("h", "c", "fw", [_row(1.693)], TODAY, 0.0)[0].shared_weight
    doubted = fit_key_calibration("h", "c", "fw", [_row(1.693)], TODAY)[0].shared_weight
    limit = TODAY.sd_shared ** 2 / (TODAY.sd_shared ** 2 + TODAY.sd_config ** 2)
    assert alone < 0.4 and 0.7 < doubted < limit


def test_the_kept_fraction_grows_with_the_conflict_and_stays_between_prediction_and_run() -> None:
    rng = random.Random(157)
    for priors in (TODAY, QUIET):
        fractions = [_own_fraction(math.exp(y), priors) for y in (0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)]
        assert fractions == sorted(fractions) and fractions[0] == pytest.approx(_lambda0(priors))
        for _ in range(100):
            ratio = math.exp(rng.uniform(-1.0, 1.0))
            scale = fit_key_calibration("h", "c", "fw", [_row(ratio)], priors)[0].own_scale("a").step_time_scale
            assert min(1.0, ratio) - 1e-12 <= scale <= max(1.0, ratio) + 1e-12


def test_the_ml2_scale_of_one_reading_is_the_positive_part_moment_estimate() -> None:
    """One configuration: s_hat = max(1, (y^2 - D) / Sigma0) (to the grid's resolution)."""
    v = Variances(0.081, 0.041, 0.05, "test", 0.080)
    prior, reading = 0.081 ** 2 + 0.041 ** 2, 0.05 ** 2 + 0.080 ** 2
    for y in (0.3, 0.53, 0.9):
        configs = group_runs([("j", "a", 1.0, math.exp(y))])
        mix = scale_mixture(configs, v)
        assert mix.scales[1] == pytest.approx((y * y - reading) / prior, rel=0.04)
        assert sum(mix.weights) == pytest.approx(1.0)


def test_contamination_weight_follows_the_bayes_factor() -> None:
    """Posterior odds = prior odds x m(y | s_hat) / m(y | 1): near 1 at five sd, small at two."""
    v = Variances(0.081, 0.041, 0.05, "test", 0.080)
    total = math.sqrt(0.081 ** 2 + 0.041 ** 2 + 0.05 ** 2 + 0.080 ** 2)
    far = scale_mixture(group_runs([("j", "a", 1.0, math.exp(5 * total))]), v)
    near = scale_mixture(group_runs([("j", "a", 1.0, math.exp(2 * total))]), v)
    assert far.weights[1] > 0.99 and near.weights[1] < 0.3
    # the 21:22 run (four sd): its Bayes factor ~500 outweighs the prior odds of any epsilon from 0.01 up
    today = group_runs([("j", "a", 1.0, 1.693)])
    assert [round(scale_mixture(today, v, e).weights[1], 2) for e in (0.01, 0.1, 0.5)] == [0.83, 0.98, 1.0]


def test_several_configurations_use_the_joint_likelihood_and_average_the_posteriors() -> None:
    """Two configurations share b, so their readings are correlated: the ML-II scale uses the joint normal, and the
    posterior is the mixture of the two components' normal-normal posteriors."""
    v = Variances(0.081, 0.041, 0.05, "test", 0.080)
    configs = group_runs([("1", "a", 1.0, 1.7), ("2", "b", 1.0, 1.6)])
    mix = scale_mixture(configs, v)
    assert len(mix.scales) == 2 and mix.weights[1] > 0.9
    post = averaged_posterior(configs, mix)
    parts = [posterior(configs, scaled(v, s)) for s in mix.scales]
    for f in ("a", "b"):
        assert post.config_log_scale[f] == pytest.approx(sum(w * p.config_log_scale[f]
                                                             for w, p in zip(mix.weights, parts)))
    assert post.shared_weight * post.shared_log_scale == pytest.approx(
        sum(w * p.shared_weight * p.shared_log_scale for w, p in zip(mix.weights, parts)))


def test_the_marginal_likelihood_is_the_normal_density_of_prior_times_s_plus_reading_noise() -> None:
    """log m(y | s) - log m(y | 1), m(y | s) = N(y; 0, s Sigma0 + D), against the bivariate density written out."""
    prior, reads, y = [[0.02, 0.007], [0.007, 0.03]], [0.004, 0.009], [0.3, -0.1]

    def exact(s: float) -> float:
        a, b, c = s * prior[0][0] + reads[0], s * prior[0][1], s * prior[1][1] + reads[1]
        det = a * c - b * b
        return -0.5 * math.log(det) - 0.5 * (y[0] ** 2 * c - 2 * y[0] * y[1] * b + y[1] ** 2 * a) / det

    log_marginal = _log_marginal_of_scale(y, prior, reads)
    for s in (1.0, 2.5, 40.0):
        assert log_marginal(s) - log_marginal(1.0) == pytest.approx(exact(s) - exact(1.0), abs=1e-12)


def test_the_user_is_told_when_and_how_far_the_priors_were_doubted() -> None:
    """refine's variances note (printed with the calibration): nothing for a deviation the priors explain; for the
    21:22 run, the contamination's probability before and after the runs and the widened standard deviations."""
    assert "doubted" not in fit_key_calibration("h", "c", "fw", [_row(1.05)], TODAY)[1]
    cal, source = fit_key_calibration("h", "c", "fw", [_row(1.693)], TODAY)
    assert "the profile's priors doubted" in source and "rose from 10% to 9" in source
    assert f"shared 8.1% -> {cal.sd_shared:.1%}" in source and cal.sd_shared > 0.3

"""refine/transfer.py: what one configuration's calibration carries to another, by their cost mix and the
profile's evidence; and the run's own evidence (its steps' spread, the machine's moment) in refine/shrinkage.py."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from llmperf_hook.refine import observation_store as store
from llmperf_hook.refine.calibration import Calibration, ConfigScale, find_calibration
from llmperf_hook.refine.recalibrate import fit_key_calibration, recalibrate
from llmperf_hook.refine.shrinkage import (ConfigRuns, Priors, Variances, median_sampling_sd, posterior,
                                          priors_from_errors)
from llmperf_hook.refine.transfer import conditional_weights, correlation, cost_shares, mix_sd

Z1_2R = {"compute": 0.020, "optimizer": 0.008, "comm_dp_grad": 0.001, "host_overhead": 0.0005, "calibration": 0.003}


def _config(precision: str, ranks: int = 2, zero: int = 1) -> dict:
    return {"precision": precision, "world_size": ranks, "zero_stage": zero, "num_layers": 2, "hidden_size": 128,
            "micro_batch_size": 2}


def test_cost_terms_are_split_by_dtype_ranks_and_zero_stage() -> None:
    bf16 = cost_shares(Z1_2R, _config("bf16"))
    terms = dict(bf16)
    assert set(terms) == {"compute/bf16/2 ranks", "optimizer/bf16/zero 1", "comm_dp_grad/2 ranks", "host_overhead"}
    assert sum(terms.values()) == pytest.approx(1.0)  # the calibration component is no cost term
    assert correlation(bf16, bf16) == pytest.approx(1.0)
    fp32 = cost_shares(Z1_2R, _config("fp32"))  # other op models and engine costs: only comm and host shared
    assert 0 < correlation(bf16, fp32) < 0.01
    one_rank = cost_shares({"compute": 0.02, "optimizer": 0.008}, _config("bf16", ranks=1))
    assert "compute/bf16/1 ranks" in dict(one_rank)  # the concurrent-rank slowdown is measured per rank count
    assert 0 < correlation(bf16, one_rank) < 0.5  # only the optimizer term in common
    assert cost_shares(None, _config("bf16")) == () and correlation((), bf16) == 0.0
    damaged = cost_shares({**Z1_2R, "compute": math.inf, "pipeline_bubble": math.nan}, _config("bf16"))
    assert "compute/bf16/2 ranks" not in dict(damaged) and all(0 < v < 1 for _, v in damaged)
    recomputed = cost_shares({**Z1_2R, "compute": 0.015, "recompute": 0.005}, _config("bf16"))
    assert [t for t, _ in recomputed] == [t for t, _ in bf16]  # the same forward ops again: the compute term
    assert [v for _, v in recomputed] == pytest.approx([v for _, v in bf16])
    # the step's host wait (compose._breakdown host_optimizer_step) is the same engine's: the optimizer term
    split = cost_shares({**Z1_2R, "optimizer": 0.006, "host_optimizer_step": 0.002}, _config("bf16"))
    assert [t for t, _ in split] == [t for t, _ in bf16]
    assert [v for _, v in split] == pytest.approx([v for _, v in bf16])


def test_without_mix_evidence_the_conditional_is_the_shrinkage_of_one_run() -> None:
    """R = identity (sd_mix 0): one run of f transfers k = sd_shared^2 / (sd_shared^2 + sd_config^2 + v) to any
    other configuration, as refine/shrinkage.py's normal-normal model."""
    s, c, v, y = 0.09, 0.136, 0.05 ** 2, 0.3
    alpha = conditional_weights([y], [v], [()], s, c)
    assert s ** 2 * alpha[0] == pytest.approx(s ** 2 / (s ** 2 + c ** 2 + v) * y)


def test_a_similar_configuration_gets_more_only_when_cost_terms_carry_biases() -> None:
    inst = cost_shares(Z1_2R, _config("bf16"))
    similar, other = cost_shares(Z1_2R, _config("bf16")), cost_shares(Z1_2R, _config("fp32"))
    scale = ConfigScale("f", 1.3, 1.35, 1, alpha=4.0, shares=inst)
    with_mix = Calibration("h", "c", "fw", 1.35, 1, shared_weight=0.3, num_configs=1, config_scales=(scale,),
                           sd_config=0.13, sd_mix=0.1)
    assert with_mix.apply(0.01, "g", similar) > with_mix.apply(0.01, "g", other) > 0.01 * 1.35 ** 0.3 * 0.999
    assert with_mix.apply(0.01, "g", other) == pytest.approx(with_mix.apply(0.01, "g", ()), rel=2e-3)
    no_mix = Calibration("h", "c", "fw", 1.35, 1, shared_weight=0.3, num_configs=1, config_scales=(scale,),
                         sd_config=0.13)
    assert no_mix.apply(0.01, "g", similar) == pytest.approx(0.01 * 1.35 ** 0.3)
    assert with_mix.apply(0.01, "f", other) == pytest.approx(0.013)  # its own scale, whatever the mix


def test_mix_sd_is_the_spread_between_term_groups_beyond_the_spread_within() -> None:
    within = [-0.1, 0.0, 0.1]
    apart = [e + m for m in (-0.3, 0.0, 0.3) for e in within]
    terms = [t for t in ("a", "b", "c") for _ in within]
    assert mix_sd(apart, terms) == pytest.approx(math.sqrt((0.3 ** 2 * 3 * 2 / 2 - 0.01) / 3), rel=1e-6)
    assert mix_sd(within * 3, terms) == 0.0  # groups alike: nothing carried by the mix
    assert mix_sd(apart, ["a"] * 9) == 0.0 and mix_sd(apart, terms[:-1]) == 0.0


def test_a_run_whose_steps_scatter_weighs_less() -> None:
    tight = [0.050, 0.051, 0.049, 0.050, 0.0505, 0.0495] * 4
    scattered = [0.040, 0.060, 0.045, 0.058, 0.050, 0.065] * 4
    assert 0 < median_sampling_sd(tight) < 0.01 < median_sampling_sd(scattered)
    assert median_sampling_sd([0.05, 0.06]) == 0.0
    priors = Priors(0.1, 0.13, "test")
    shared = {}
    for name, steps in (("tight", tight), ("scattered", scattered)):
        row = ("j", "f", 0.04, 0.05, None, 0.0, median_sampling_sd(steps), ())
        shared[name] = fit_key_calibration("h", "c", "fw", [row], priors)[0].apply(0.04, "g")
    assert 0.04 < shared["scattered"] < shared["tight"] < 0.05


def test_the_runs_moment_is_not_carried_to_other_configurations() -> None:
    """Half the step drift is the run's moment's level: it adds to the run's variance and leaves sd_shared, so
    one run transfers less than with the whole drift shared (session 11), and the sd_moment says how much."""
    errors = [0.1, -0.1, 0.05, -0.05, 0.02, -0.02, 0.08, -0.08, 0.0]
    now = priors_from_errors(errors, 0.134, 0, "f")
    assert now.sd_moment == pytest.approx(0.134 / math.sqrt(2))
    mean_se2 = now.sd_shared ** 2 - now.sd_moment ** 2
    assert 0 <= mean_se2 < 1e-3
    row = ("j", "f", 0.04, 0.05, None, 0.0, 0.0, ())
    k_now = fit_key_calibration("h", "c", "fw", [row], now)[0].shared_weight
    whole = Priors(math.sqrt(mean_se2 + 0.134 ** 2), now.sd_config, "session 11")
    assert k_now < fit_key_calibration("h", "c", "fw", [row], whole)[0].shared_weight
    assert "moment" in now.source


def test_shares_alpha_and_sd_mix_survive_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    conn = store.connect()
    shares = cost_shares(Z1_2R, _config("bf16"))
    import json

    store.record_run(conn, {"job_id": "j1", "hardware": "my-cpu", "cluster": "c", "framework": "deepspeed",
                            "measured_step_time_s": 0.04, "uncalibrated_step_time_s": 0.03,
                            "config_fingerprint": "a" * 16, "sampling_sd": 0.02, "cost_shares_json": json.dumps(shares)})
    (row,) = store.runs_for_key(conn, "my-cpu", "c", "deepspeed")
    assert row[6] == 0.02 and row[7] == shares
    cal, _ = recalibrate(conn, "my-cpu", "c", "deepspeed")
    store.save_calibration(conn, replace(cal, sd_mix=0.07))  # this CPU's priors give sd_mix 0: a non-default one
    conn.close()
    stored = find_calibration("my-cpu", "c", "deepspeed")
    (own,) = stored.config_scales
    assert own.shares == shares and own.alpha == pytest.approx(cal.config_scales[0].alpha) and own.alpha > 0
    assert stored.sd_mix == pytest.approx(0.07)


def test_repeats_at_other_moments_are_not_counted_as_run_spread_twice() -> None:
    """Two runs of one configuration differ by the run spread and the machine's moment together: pooled with
    the prior, sd_run stays the run's part (the moment is added to each reading once, in the posterior)."""
    from llmperf_hook.refine.shrinkage import SD_RUN_PRIOR, ConfigRuns, estimate_variances

    d = math.sqrt(2 * (SD_RUN_PRIOR ** 2 + 0.09 ** 2))  # a typical difference of two such runs
    runs = [ConfigRuns("f", (0.1 - d / 2, 0.1 + d / 2), 0.01, 0.011)]
    assert estimate_variances(runs, 0.13, "p", 0.09, sd_moment=0.09).sd_run == pytest.approx(SD_RUN_PRIOR, rel=1e-6)
    assert estimate_variances(runs, 0.13, "p", 0.09).sd_run > 0.07  # without the moment it is all run spread


def test_the_shared_weight_stays_a_fraction_when_correlated_biases_cancel_mu() -> None:
    """With sd_mix > 0, configurations of similar mix whose ratios nearly cancel (mu ~ 0) put the posterior b on
    the other side of mu: b / mu was -14.8 here, printed as 'shrunk 1580%'. k stays in [0, 1]."""
    fp32 = (("compute/fp32/2 ranks", 0.9), ("optimizer/fp32/zero 1", 0.1))
    bf16 = (("compute/bf16/2 ranks", 0.9), ("optimizer/bf16/zero 1", 0.1))
    fp32b = (("compute/fp32/2 ranks", 0.8), ("optimizer/fp32/zero 1", 0.2))
    configs = [ConfigRuns("a", (0.10,), 1.0, 1.0, (), (), fp32), ConfigRuns("b", (-0.10,), 1.0, 1.0, (), (), bf16),
               ConfigRuns("c", (0.001,), 1.0, 1.0, (), (), fp32b)]
    for sd_mix in (0.0, 0.1, 0.15):
        post = posterior(configs, Variances(0.1, 0.15, 0.05, "", 0.05, sd_mix))
        assert 0.0 <= post.shared_weight <= 1.0

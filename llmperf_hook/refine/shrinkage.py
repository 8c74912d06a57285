"""How much of what instrumented runs measured transfers to configurations nobody ran: empirical Bayes.

The log-ratio of a run of configuration j (measured / uncalibrated predicted step time) is modelled as

    y_ij = b + c_j + e_ij,    b ~ N(0, sd_shared^2),  c_j ~ N(0, sd_config^2),  e_ij ~ N(0, sd_run^2)

b is what every configuration of this (hardware, cluster, framework) shares (the machine, the framework's
overheads, a profile taken at another clock), c_j what belongs to configuration j alone (an operator shape
the profile predicts badly, a layout's communication), e_ij the run-to-run drift of one configuration.
With one run, b and c_j cannot be told apart; the posterior mean of b (normal-normal model, e.g. Gelman et
al., Bayesian Data Analysis, 3rd ed., section 5.4, eq. 5.17 with a known prior mean 0) is

    E[b | y] = k * mu,   mu = sum_j w_j ybar_j / sum_j w_j,   w_j = 1 / (sd_config^2 + sd_run^2 / n_j),
    k = sum_j w_j / (sum_j w_j + 1 / sd_shared^2)                       (one run: k = sd_shared^2 / (sd_shared^2 + sd_config^2 + sd_run^2))

and a configuration with runs of its own gets E[b + c_f | y]: the same model with the other configurations'
posterior of b (mean m, variance V) as the prior of b, lambda = (V + sd_config^2) / (V + sd_config^2 + sd_run^2 / n_f),
E = m + lambda (ybar_f - m). More runs and more configurations -> less shrinkage. A run whose reading is noisier
than the run-to-run spread (a contended CPU run calibrated from its CPU time, refine/contention.py: extra log sd
s_i) weighs 1 / (sd_run^2 + s_i^2): ybar_j is the precision-weighted mean and sd_run^2 / n_j becomes
1 / sum_i 1 / (sd_run^2 + s_i^2) everywhere above.

Where the variances come from (never from the benchmark's rows), `variance_priors`:
- A profile measured on the machine itself with its step cost (a CPU profile: framework_overhead.json,
  profile/cpu_framework.py) has measured whole steps, and every one of them predicted by the cost refitted
  without it (cpu_framework.step_holdout_log_errors; 54 steps for the testbed's fp32 + bf16). sd_config is their
  root mean square (what a step the profile never saw is off by); sd_shared what they leave for a bias common to
  every job, their mean and its standard error, plus how far the machine's speed moves from the profile's
  (machine_drift_sd: the reference workload's readings while profiling, and each stored run's in-job reading
  against the profile's), in quadrature. Testbed profile of 26 Nov 08:34: held-out steps rms 8.9 %, mean
  +0.3 % +- 1.2 %, readings sd 3.1 %: sd_shared 3.4 %, one run's k 0.10; refitted 18:13: 7.0 %, +0.3 % +- 1.0 %,
  1.3 %: 1.7 %, k 0.04 before any run's reading joins. With the cross-cluster prior below k was 0.50, and one
  configuration's own error (config 1: +15.6 %) moved the eleven others by half of it.
- Any other profile (a shipped or GPU one, sampled op by op): sd_shared SD_SHARED_PRIOR, documented below (one
  cluster cannot estimate the spread between clusters); sd_config the profile's own held-out op error (median
  over its op models of holdout_mape, as a normal standard deviation: x sqrt(pi/2)), else SD_CONFIG_NO_PROFILE.
- With >= 2 configurations in the store, sd_config is pooled with their measured spread (scaled-inverse-chi^2
  posterior point estimate, the prior worth PRIOR_DOF).
- sd_run: SD_RUN_PRIOR, pooled with the spread between runs of the same configuration in the store.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

SD_SHARED_PRIOR = 0.10
"""Prior standard deviation of the shared log-bias b. Source: docs/model.md's validation table (26 Nov, session
2): the mean signed errors of the six public sources, each one cluster + framework setup, are +1.0, -21.4,
+0.5, -4.5, -6.1, +3.2 %: their root mean square is 9.4 % (a shared bias of about 0.1 in log)."""
SD_CONFIG_NO_PROFILE = 0.15
"""sd_config when the hardware has no fitted profile (roofline only). Source: docs/model.md, the H100 / H200
roofline-only step MAPE 14.7 / 13.2 % on eight runs each (as a log standard deviation, ~0.15)."""
SD_RUN_PRIOR = 0.05
"""Prior run-to-run standard deviation of one configuration's log step time. Source: bench_cpu_testbed.py
--drift-check (2026-11-26): stdev of log step CPU time over 10 interleaved runs of one configuration
0.049-0.056. On a quiet GPU node runs repeat closer; the prior then only makes the calibration cautious."""
PRIOR_DOF = 1.0
"""Degrees of freedom the prior variances are worth against the store's data (one pseudo-observation)."""
HALF_NORMAL = math.sqrt(math.pi / 2)
"""E|x| = sd * sqrt(2 / pi) for a normal x: a mean absolute (log) error times this is its standard deviation."""


@dataclass(frozen=True)
class ConfigRuns:
    """One configuration's runs in the store."""

    fingerprint: str
    """refine/config_fingerprint.py (a run without one stands alone under 'job:<id>')."""
    log_ratios: tuple[float, ...]
    """log(measured / uncalibrated predicted) of each run."""
    predicted_s: float
    """Geometric mean of the runs' uncalibrated predictions."""
    measured_s: float
    """Geometric mean of the runs' measured step times."""
    observation_sds: tuple[float, ...] = ()
    """Per run, the extra log standard deviation of its reading beyond the run-to-run spread (a contended CPU
    run calibrated from its CPU time: refine/contention.py); empty or 0: a quiet run."""

    def extra_variances(self) -> tuple[float, ...]:
        return tuple((self.observation_sds[i] if i < len(self.observation_sds) else 0.0) ** 2
                     for i in range(len(self.log_ratios)))

    def mean_and_variance(self, sd_run: float) -> tuple[float, float]:
        """(precision-weighted mean log-ratio, its variance): each run weighs 1 / (sd_run^2 + its extra
        variance); quiet runs alone give the plain mean and sd_run^2 / n."""
        weights = [1.0 / (sd_run ** 2 + extra) for extra in self.extra_variances()]
        total = sum(weights)
        return sum(w * y for w, y in zip(weights, self.log_ratios)) / total, 1.0 / total


@dataclass(frozen=True)
class Variances:
    sd_shared: float
    """Prior standard deviation of the shared log-bias (SD_SHARED_PRIOR)."""
    sd_config: float
    """Standard deviation of a configuration's own log-bias."""
    sd_run: float
    """Run-to-run standard deviation of one configuration's log step time."""
    source: str
    """Where sd_config and sd_run came from, for the notes."""


@dataclass(frozen=True)
class Posterior:
    shared_log_scale: float
    """Weighted mean log-ratio mu of the configurations (unshrunk)."""
    shared_weight: float
    """k: the fraction of mu that transfers to a configuration without runs (1 - shrinkage)."""
    config_log_scale: dict[str, float]
    """E[b + c_f | y] per fingerprint with runs."""


def group_runs(runs: Sequence[tuple]) -> list[ConfigRuns]:
    """(job id, fingerprint, predicted, measured[, observation sd]) rows -> one ConfigRuns per fingerprint, in
    first-seen order."""
    groups: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for job_id, fingerprint, p, m, *rest in runs:
        if p > 0 and m > 0:
            groups[fingerprint or f"job:{job_id}"].append((p, m, float(rest[0]) if rest and rest[0] else 0.0))
    return [ConfigRuns(f, tuple(math.log(m / p) for p, m, _ in pm),
                       math.exp(statistics.fmean(math.log(p) for p, _, _ in pm)),
                       math.exp(statistics.fmean(math.log(m) for _, m, _ in pm)),
                       tuple(sd for _, _, sd in pm)) for f, pm in groups.items()]


def estimate_variances(configs: Sequence[ConfigRuns], sd_config_prior: float, prior_source: str,
                       sd_shared: float = SD_SHARED_PRIOR) -> Variances:
    """Priors pooled with the store's spread: within configurations for sd_run, between them for sd_config."""
    # the run-to-run spread from quiet readings only (a contended one's extra noise has its own variance)
    quiet = [[y for y, extra in zip(c.log_ratios, c.extra_variances()) if extra == 0.0] for c in configs]
    within = [(y - statistics.fmean(ys)) ** 2 for ys in quiet for y in ys]
    dof_run = sum(max(len(ys) - 1, 0) for ys in quiet)
    var_run = (PRIOR_DOF * SD_RUN_PRIOR ** 2 + sum(within)) / (PRIOR_DOF + dof_run)
    source = f"sd_config prior {sd_config_prior:.3f} ({prior_source})"
    var_config = sd_config_prior ** 2
    if len(configs) >= 2:
        means = [c.mean_and_variance(math.sqrt(var_run))[0] for c in configs]
        noise = statistics.fmean(c.mean_and_variance(math.sqrt(var_run))[1] for c in configs)
        spread = max(statistics.variance(means) - noise, 0.0)
        dof = len(configs) - 1
        var_config = (PRIOR_DOF * var_config + dof * spread) / (PRIOR_DOF + dof)
        source += f", pooled with the spread of {len(configs)} configurations' ratios ({math.sqrt(spread):.3f})"
    if dof_run:
        source += f"; sd_run pooled with {dof_run} repeat(s) of a configuration"
    return Variances(sd_shared, math.sqrt(var_config), math.sqrt(var_run), source)


def posterior(configs: Sequence[ConfigRuns], v: Variances) -> Posterior:
    """The posterior means of the module docstring's model."""
    moments = {c.fingerprint: c.mean_and_variance(v.sd_run) for c in configs}
    weights = {f: 1.0 / (v.sd_config ** 2 + var) for f, (_, var) in moments.items()}
    means = {f: mean for f, (mean, _) in moments.items()}
    total = sum(weights.values())
    mu = sum(weights[f] * means[f] for f in means) / total
    k = total / (total + 1.0 / v.sd_shared ** 2)
    own = {}
    for c in configs:
        f = c.fingerprint
        rest = total - weights[f]
        var_b = 1.0 / (rest + 1.0 / v.sd_shared ** 2)  # posterior of b from the other configurations
        mean_b = var_b * sum(weights[g] * means[g] for g in means if g != f)
        prior = var_b + v.sd_config ** 2
        lam = prior / (prior + moments[f][1])
        own[f] = mean_b + lam * (means[f] - mean_b)
    return Posterior(mu, k, own)


def sd_config_prior(hardware: str) -> tuple[float, str]:
    """(sd, source): the hardware's fitted profile's held-out error (the user's profile first, as predictions
    use it), else SD_CONFIG_NO_PROFILE. Never raises: an unreadable profile counts as none."""
    try:
        from llmperf_hook.predict.fitted import profile_dirs

        for directory in profile_dirs(hardware):
            path = directory / "profile.json"
            if not path.is_file():
                continue
            models = json.loads(path.read_text()).get("models") or []
            errors = [float(m["holdout_mape"]) for m in models if isinstance(m.get("holdout_mape"), (int, float))]
            if errors:
                mape = statistics.median(errors)
                return mape * HALF_NORMAL, (f"median held-out error {mape:.1%} of the {len(errors)} op models of "
                                            f"profile {directory}")
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    return SD_CONFIG_NO_PROFILE, "no fitted profile: the roofline-only step error of docs/model.md"


@dataclass(frozen=True)
class Priors:
    """The prior standard deviations of a hardware's calibration, before the store's runs are pooled in."""

    sd_shared: float
    """Of the shared log-bias b."""
    sd_config: float
    """Of a configuration's own log-bias c_j."""
    source: str
    """Where both came from, for the notes."""


def variance_priors(hardware: str, run_readings: Sequence[tuple[float, int]] = ()) -> Priors:
    """The module docstring's priors for `hardware`: from its profile's measured steps where it has them (the
    machine's drift also from `run_readings`, (hook reference reading s, ranks on the machine) of the store's
    runs), else SD_SHARED_PRIOR and sd_config_prior. Never raises."""
    try:
        from llmperf_hook.predict.fitted import profile_dirs

        for directory in profile_dirs(hardware):
            if (directory / "profile.json").is_file():
                priors = measured_step_priors(directory, run_readings)
                if priors is not None:
                    return priors
                break
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        pass
    sd, source = sd_config_prior(hardware)
    return Priors(SD_SHARED_PRIOR, sd, f"{source}; shared-bias prior {SD_SHARED_PRIOR:.0%} across clusters")


MIN_SD = 1e-3
"""Numerical floor of a measured standard deviation (the posterior divides by its square)."""
MIN_HELD_OUT_STEPS = 8
"""Fewer held-out steps than this (a framework file of one dtype without DeepSpeed) do not make a spread."""


def measured_step_priors(directory, run_readings: Sequence[tuple[float, int]] = ()) -> Priors | None:
    """Priors from the held-out steps of the framework file in the profile `directory` and the machine's speed
    drift (machine_drift_sd); None without enough held-out steps."""
    from llmperf_hook.profile.cpu_framework import FILE_NAME, step_holdout_log_errors

    path = directory / FILE_NAME
    if not path.is_file():
        return None
    errors = step_holdout_log_errors(json.loads(path.read_text()))
    if len(errors) < MIN_HELD_OUT_STEPS:
        return None
    rms = math.sqrt(statistics.fmean(e * e for e in errors))
    mean, se = statistics.fmean(errors), statistics.stdev(errors) / math.sqrt(len(errors))
    drift, n_readings = machine_drift_sd(directory, run_readings)
    sd_shared = max(math.sqrt(mean ** 2 + se ** 2 + drift ** 2), MIN_SD)
    return Priors(sd_shared, rms, f"{len(errors)} held-out steps of {path} (rms {rms:.1%}, mean {mean:+.1%} +- "
                                  f"{se:.1%}) and the machine's speed drift from {n_readings} reference reading(s) "
                                  f"(sd {drift:.1%}): shared-bias prior {sd_shared:.1%}")


def machine_drift_sd(directory, run_readings: Sequence[tuple[float, int]] = ()) -> tuple[float, int]:
    """(sd, readings): how far this machine's speed moves from the profile's, in log, by the reference workload
    (instrument/reference_speed.py): the profile's own readings alone about their mean (n - 1 degrees of
    freedom) pooled with each run's in-job reading against the profile's reading for as many copies at once
    (its ranks on this machine; one degree each, a persistent offset since profiling counts in full). (0, n)
    with fewer than two degrees of freedom."""
    from llmperf_hook.instrument.reference_speed import PROFILE_FILE_NAME, profile_reference_cpu_s, readings_in

    path = directory / PROFILE_FILE_NAME
    doc = json.loads(path.read_text()) if path.is_file() else {}
    alone = [math.log(r.cpu_s) for r in readings_in(doc.get("readings")) if r.concurrent == 1 and r.cpu_s > 0]
    squares = [(x - statistics.fmean(alone)) ** 2 for x in alone]
    dof = max(len(alone) - 1, 0)
    for reading_s, ranks in run_readings:
        base = profile_reference_cpu_s(doc, max(int(ranks or 1), 1)) or profile_reference_cpu_s(doc, 1)
        if base and reading_s and reading_s > 0:
            squares.append(math.log(reading_s / base) ** 2)
            dof += 1
    n = len(squares)
    return (math.sqrt(sum(squares) / dof), n) if dof >= 2 else (0.0, n)

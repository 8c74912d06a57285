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
E = m + lambda (ybar_f - m). More runs and more configurations -> less shrinkage.

Where the variances come from (never from the benchmark's rows):
- sd_shared: SD_SHARED_PRIOR, documented below; one cluster cannot estimate the spread between clusters.
- sd_config: the hardware profile's own held-out error (median over its op models of holdout_mape, as a
  normal standard deviation: x sqrt(pi/2)), else SD_CONFIG_NO_PROFILE; with >= 2 configurations in the store,
  pooled with their measured spread (scaled-inverse-chi^2 posterior point estimate, the prior worth PRIOR_DOF).
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


def group_runs(runs: Sequence[tuple[str, str | None, float, float]]) -> list[ConfigRuns]:
    """(job id, fingerprint, predicted, measured) rows -> one ConfigRuns per fingerprint, in first-seen order."""
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for job_id, fingerprint, p, m in runs:
        if p > 0 and m > 0:
            groups[fingerprint or f"job:{job_id}"].append((p, m))
    return [ConfigRuns(f, tuple(math.log(m / p) for p, m in pm),
                       math.exp(statistics.fmean(math.log(p) for p, _ in pm)),
                       math.exp(statistics.fmean(math.log(m) for _, m in pm))) for f, pm in groups.items()]


def estimate_variances(configs: Sequence[ConfigRuns], sd_config_prior: float, prior_source: str) -> Variances:
    """Priors pooled with the store's spread: within configurations for sd_run, between them for sd_config."""
    within = [(y - statistics.fmean(c.log_ratios)) ** 2 for c in configs for y in c.log_ratios]
    dof_run = sum(len(c.log_ratios) - 1 for c in configs)
    var_run = (PRIOR_DOF * SD_RUN_PRIOR ** 2 + sum(within)) / (PRIOR_DOF + dof_run)
    source = f"sd_config prior {sd_config_prior:.3f} ({prior_source})"
    var_config = sd_config_prior ** 2
    if len(configs) >= 2:
        means = [statistics.fmean(c.log_ratios) for c in configs]
        noise = statistics.fmean(var_run / len(c.log_ratios) for c in configs)
        spread = max(statistics.variance(means) - noise, 0.0)
        dof = len(configs) - 1
        var_config = (PRIOR_DOF * var_config + dof * spread) / (PRIOR_DOF + dof)
        source += f", pooled with the spread of {len(configs)} configurations' ratios ({math.sqrt(spread):.3f})"
    if dof_run:
        source += f"; sd_run pooled with {dof_run} repeat(s) of a configuration"
    return Variances(SD_SHARED_PRIOR, math.sqrt(var_config), math.sqrt(var_run), source)


def posterior(configs: Sequence[ConfigRuns], v: Variances) -> Posterior:
    """The posterior means of the module docstring's model."""
    weights = {c.fingerprint: 1.0 / (v.sd_config ** 2 + v.sd_run ** 2 / len(c.log_ratios)) for c in configs}
    means = {c.fingerprint: statistics.fmean(c.log_ratios) for c in configs}
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
        lam = prior / (prior + v.sd_run ** 2 / len(c.log_ratios))
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

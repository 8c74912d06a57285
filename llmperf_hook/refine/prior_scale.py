"""How far off the profile's own accuracy claims are, learned from the runs when they contradict them.

refine/shrinkage.py shrinks what instrumented runs measured (log measured / predicted step time) toward the
prediction with the priors the profile gives: the shared bias b ~ N(0, sd_shared^2) and each configuration's own
c_j ~ N(0, sd_config^2), from its held-out steps and the machine's step-time drift (8-14 % on the CPU testbed). They
say how far a sound profile can be off. When the profile is not sound (the testbed's 21:22 record of 27 Nov 2026:
its framework cost measured under another load, every configuration 4-52 % slow, config 9's calibration run x1.69 =
0.53 in log, four standard deviations of prior and reading noise together), a normal prior overrules the data at
any size of deviation (the posterior mean is linear in y): refine kept x1.38 of that run's x1.69 on its own
configuration, and told the user who re-runs the very configuration they measured that it is 33 % faster than it is.

So the profile's prior is taken as right with probability 1 - epsilon, and wrong by an unknown scale otherwise: an
epsilon-contaminated prior whose contamination is chosen by type-II maximum likelihood (Berger & Berliner, "Robust
Bayes and empirical Bayes analysis with epsilon-contaminated priors", Annals of Statistics 14, 1986; Berger,
Statistical Decision Theory and Bayesian Analysis, 2nd ed., 1985, section 4.7):

    pi = (1 - epsilon) N(0, Sigma0) + epsilon N(0, s_hat Sigma0)
    Sigma0 = the profile's prior covariance of the configurations' mean log-ratios ybar (shared + own,
             refine/transfer.py); D their reading variances (ConfigRuns.mean_and_variance)
    s_hat  = argmax over s >= 1 of m(ybar | s) = N(ybar; 0, s Sigma0 + D)

For one configuration s_hat = max(1, (ybar^2 - D) / Sigma0), the positive-part moment estimate of a prior variance
(Efron & Morris, "Data analysis using Stein's estimator and its generalizations", JASA 70, 1975; Morris,
"Parametric empirical Bayes inference: theory and applications", JASA 78, 1983), the profile's own measure as its
floor. The posterior is the mixture of the two normal posteriors, the contamination's weighted by its posterior
odds, epsilon / (1 - epsilon) times the Bayes factor m(ybar | s_hat) / m(ybar | 1). A deviation the priors and
the reading noise explain (ybar^2 <= Sigma0 + D) has s_hat = 1 and is shrunk exactly as before; at two standard
deviations of prior and reading together (a quiet record's disturbed run) the factor is ~2 and the result moves
little; at four or more (the 21:22 record's x1.69) it is ~500 and the run's own configuration keeps ~96 % of its
log-ratio, while the others get the shared part in the profile's proportion sd_shared^2 / (sd_shared^2 +
sd_config^2) of it. The reading noise (sd_run, sd_moment) is not scaled: it is the machine's, measured apart; nor
is the wait of multi-rank runs (refine/peer_wait.py), read apart with its own data.

A heavy-tailed prior in place of the mixture (s ~ scaled-inverse-chi^2(PRIOR_DOF, 1) truncated to s >= 1, every
posterior mean averaged over p(s | y) on a grid) also resolves the conflict (O'Hagan & Pericchi, Braz. J. Probab.
Stat. 26, 2012), but its tail raises every deviation's weight: a 2 % deviation kept 0.85 of its log-ratio instead of
the profile's 0.71 (testbed priors), a change of the prior where nothing contradicted it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from llmperf_hook.refine.shrinkage import ConfigRuns, Posterior, Variances, posterior
from llmperf_hook.refine.transfer import correlation_matrix, covariance

CONTAMINATION = 0.1
"""epsilon: the prior probability that the profile's accuracy claims do not hold for the runs (the machine or the
framework changed since it was measured, a cost it prices wrong): one profile in ten, a belief, not a fit. What it
decides is little: a deviation the priors explain has s_hat = 1 (no contamination to weigh), and one of four
standard deviations of prior and reading noise has a Bayes factor ~500 that outweighs any epsilon from 0.01 to 0.5
(the 21:22 run's contamination weight 0.83 at 0.01, 0.98 at 0.1, 0.998 at 0.5); in between, the testbed replay of
27 Nov's eight records moves by a few tenths of a point from epsilon 0.05 to 0.2 (/work/notes/h157.md)."""
GRID_POINTS = 240
"""Points of the log-spaced grid over s on which the ML-II scale is found: ~3 % apart in s at s_hat ~ 30 (21:22's
run), which moves the kept fraction s P / (s P + D) by ~0.1 %; the replay's figures are the same at 600 points."""
GRID_SPAN = 100.0
"""The grid reaches GRID_SPAN times the largest s one configuration's reading points to (ybar^2 / Sigma0_jj)."""


@dataclass(frozen=True)
class ScaleMixture:
    """The posterior over the two priors: the profile's (s = 1) and the contamination's (s = s_hat)."""

    scales: tuple[float, ...]
    """(1, s_hat); (1,) where nothing contradicts the profile (s_hat = 1) or epsilon is 0."""
    weights: tuple[float, ...]
    """Their posterior probabilities (sum 1)."""
    variances: tuple[Variances, ...]
    """The Variances under each: prior standard deviations times sqrt(s), reading noise as it was."""
    mean_scale: float
    """E[s | y]."""
    epsilon: float = CONTAMINATION
    """The prior probability of the contamination that the weights update."""


def scaled(v: Variances, s: float) -> Variances:
    """`v` with its prior standard deviations (shared, own, and the part the cost mix carries) times sqrt(s)."""
    r = math.sqrt(s)
    return replace(v, sd_shared=v.sd_shared * r, sd_config=v.sd_config * r, sd_mix=v.sd_mix * r)


def scale_mixture(configs: Sequence[ConfigRuns], v: Variances, epsilon: float = CONTAMINATION) -> ScaleMixture:
    """The module docstring's posterior over the profile's prior and its ML-II contamination, for these
    configurations' readings."""
    if epsilon <= 0.0:
        return ScaleMixture((1.0,), (1.0,), (v,), 1.0, epsilon)
    moments = [c.mean_and_variance(math.hypot(v.sd_run, v.sd_moment)) for c in configs]
    means, reads = [m for m, _ in moments], [var for _, var in moments]
    r = correlation_matrix([c.shares for c in configs])
    prior = [[v.sd_shared ** 2 + covariance(v.sd_config, v.sd_mix, r[i][j], i == j) for j in range(len(means))]
             for i in range(len(means))]
    log_marginal = _log_marginal_of_scale(means, prior, reads)
    peak = max([1.0] + [m * m / prior[i][i] for i, m in enumerate(means) if prior[i][i] > 0])
    step = math.log(GRID_SPAN * peak) / (GRID_POINTS - 1)
    s_hat = max((math.exp(i * step) for i in range(GRID_POINTS)), key=log_marginal)  # ML-II over s >= 1
    if s_hat <= 1.0:
        return ScaleMixture((1.0,), (1.0,), (v,), 1.0, epsilon)
    # posterior odds of the contamination: prior odds times the Bayes factor m(y | s_hat) / m(y | 1)
    log_odds = math.log(epsilon / (1.0 - epsilon)) + log_marginal(s_hat) - log_marginal(1.0)
    w = 1.0 / (1.0 + math.exp(-log_odds)) if log_odds > -700 else 0.0
    return ScaleMixture((1.0, s_hat), (1.0 - w, w), (v, scaled(v, s_hat)), 1.0 - w + w * s_hat, epsilon)


def _log_marginal_of_scale(means: Sequence[float], prior: Sequence[Sequence[float]],
                           reads: Sequence[float]) -> Callable[[float], float]:
    """s -> log N(ybar; 0, s Sigma0 + D) up to a constant in s (the Bayes factor and the argmax need no more).
    With A = D^-1/2 Sigma0 D^-1/2 = Q diag(lam) Q^T, s Sigma0 + D = D^1/2 Q diag(1 + s lam) Q^T D^1/2: one
    eigendecomposition, then O(n) per s (a Cholesky per grid point took 2.7 s at 60 configurations)."""
    import numpy as np

    d = np.sqrt(np.asarray(reads, dtype=float))  # D > 0: every reading has the run's spread (>= shrinkage.MIN_SD)
    lam, q = np.linalg.eigh(np.asarray(prior, dtype=float) / np.outer(d, d))
    lam = np.clip(lam, 0.0, None)  # Sigma0 is a covariance: a negative eigenvalue is rounding
    z2 = (q.T @ (np.asarray(means, dtype=float) / d)) ** 2
    return lambda s: float(-0.5 * np.sum(np.log1p(s * lam)) - 0.5 * np.sum(z2 / (1.0 + s * lam)))


def averaged_posterior(configs: Sequence[ConfigRuns], mix: ScaleMixture) -> Posterior:
    """shrinkage.posterior averaged over p(s | y): mu and the configurations' own scales as means; k such that k mu
    is the mean of k_s mu_s (what a configuration without runs gets, exp(k mu)); alpha as E[s alpha_s] / E[s], so
    that the calibration's stored variances (scaled by E[s]) times alpha carry the mean of what each s carries."""
    posts = [posterior(configs, v) for v in mix.variances]
    mu = sum(w * p.shared_log_scale for w, p in zip(mix.weights, posts))
    shared = sum(w * p.shared_weight * p.shared_log_scale for w, p in zip(mix.weights, posts))
    k = min(max(shared / mu, 0.0), 1.0) if abs(mu) > 1e-12 else posts[0].shared_weight
    own = {f: sum(w * p.config_log_scale[f] for w, p in zip(mix.weights, posts)) for f in posts[0].config_log_scale}
    alpha = {f: sum(w * s * p.alpha[f] for w, s, p in zip(mix.weights, mix.scales, posts)) / mix.mean_scale
             for f in posts[0].alpha}
    return Posterior(mu, k, own, alpha)


def mean_variances(v: Variances, mix: ScaleMixture) -> Variances:
    """The variances a calibration records: `v` scaled by E[s | y], with a note for the user where the runs raised
    them by 5 % or more (less changes no figure the notes print): what the runs showed, what was applied, why."""
    if mix.mean_scale < 1.05:
        return scaled(v, mix.mean_scale)
    r = math.sqrt(mix.mean_scale)
    note = (f"; the profile's priors doubted: the runs lie further from the predictions than these priors and the "
            f"reading noise allow, so the chance that the priors do not hold here rose from {mix.epsilon:.0%} to "
            f"{mix.weights[-1]:.0%}, and their variances are taken x{mix.mean_scale:.2f} on average (standard "
            f"deviations: shared {v.sd_shared:.1%} -> {v.sd_shared * r:.1%}, configuration {v.sd_config:.1%} -> "
            f"{v.sd_config * r:.1%}; refine/prior_scale.py)")
    return replace(scaled(v, mix.mean_scale), source=v.source + note)

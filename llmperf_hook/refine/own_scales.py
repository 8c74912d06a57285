"""An instrumented configuration's own calibration: its whole step, shrunk as one reading.

The prediction of a step is one claim, its wall time. A multi-rank CPU run reads it in two parts, its ranks' CPU
time and the wall beyond it (refine/peer_wait.py: y = y_cpu + w), but the prediction makes no claim that the first
is its whole step: its collectives (the comm model's time C, 8.4 of the testbed's configuration 1's 70.4 ms) are
what the multi-rank runs spend beyond their CPU time (to about 1 % on the five testbed records of 27 Nov 2026:
benchmarks/testbed_parts.rank_excess). A correct prediction reads y_cpu = -log(P / (P - C)) and w = +log(P / (P -
C)), so the two parts' errors are anti-correlated errors of one quantity, and priors centred at 0 for each claim a
split the prediction never made (CPU = predicted wall and wall = CPU). On the 15:38 record, configuration 1's
calibration run read CPU x0.868 and wait x1.145 of a prediction it matched in total (x0.993); shrunk apart, each
toward 0 with its own noise (the CPU part with the machine's 10.7 %, the wait with 2.8 %), the CPU part lost more
than the wait and refinement moved the configuration past the one run it was calibrated on: x1.026 (+0.7 ->
+3.3 %).

Here the configuration's own scale is the posterior of its whole-step log-ratio y_f = b + c_f [+ b_w + d_f],
read with the whole step's reading noise: that of its CPU time (sd_run and the machine's moment, refine/
shrinkage.py), since wall and CPU time move together from run to run (rms 0.111 both over the testbed records'
240 runs, H119 finding 1). Its prior adds the parts' priors: the profile's held-out whole steps (sd_shared,
sd_config, measured at one rank) and, for a configuration whose runs read a wait, the ranks' wait for each other
(peer_wait: b_w ~ N(0, sd_shared_w^2), d_f ~ N(0, sd_config_w^2)), which no held-out step measured. The posterior
mean is the Gaussian conditional of refine/transfer.py over the instrumented configurations' mean whole-step
log-ratios: E[y_f | y] = k_f^T K^-1 y, K = prior covariance + diag(reading variances). With one run of one
configuration that is lambda y, lambda = prior / (prior + reading): the result lies between the prediction and
the measurement, never beyond it. The split stays for configurations without runs (refine/calibration.apply):
the wait is a different quantity there, carried to multi-rank configurations only.

A run whose ranks waited for a core (refine/contention.py) reads its quiet-equivalent whole step: its CPU time
times a quiet run's wall / CPU ratio, whose spread is in its observation sd. It is shrunk as one reading like a
quiet run's, with the wait's prior where it has several ranks. Shrinking its CPU part alone and adding the assumed
ratio back (d1b6f1d, for a configuration with only such runs) kept the split: a 2-rank contended reading equal to
its prediction, x1.10 assumed, was refined to x1.036, past the run it came from.
"""

from __future__ import annotations

import math
from typing import Sequence

from llmperf_hook.refine.peer_wait import WAIT_CONFIG_SD_PRIOR, PeerWait
from llmperf_hook.refine.shrinkage import ConfigRuns, Variances, group_runs
from llmperf_hook.refine.transfer import correlation_matrix, covariance, solve


def config_key(job_id: str, fingerprint: str | None) -> str:
    """The configuration a run is grouped under (shrinkage.group_runs: a run without a fingerprint alone)."""
    return fingerprint or f"job:{job_id}"


def own_log_scales(rows: Sequence[tuple], v: Variances, wait: PeerWait | None) -> dict[str, float]:
    """log step_time_scale per configuration with runs, from rows as recalibrate reads them (job, fingerprint,
    predicted, measured, text, observation sd, sampling sd, shares, w, measured w): the module docstring's
    posterior of its whole step."""
    configs = group_runs([(j, f, p, m, sd, ss, sh) for j, f, p, m, _, sd, ss, sh, *_ in rows])
    waited = {config_key(j, f) for j, f, *_, w, measured in rows if w or measured}  # a reading with a wait in it
    reading = math.hypot(v.sd_run, v.sd_moment)
    moments = [c.mean_and_variance(reading) for c in configs]
    prior = prior_covariance(configs, v, wait, waited)
    k = [[prior[i][j] + (moments[i][1] if i == j else 0.0) for j in range(len(configs))] for i in range(len(configs))]
    alpha = solve(k, [m for m, _ in moments])
    return {c.fingerprint: sum(p * a for p, a in zip(prior[i], alpha)) for i, c in enumerate(configs)}


def averaged_own_log_scales(rows: Sequence[tuple], weights: Sequence[float], variances: Sequence[Variances],
                            wait: PeerWait | None) -> dict[str, float]:
    """own_log_scales averaged over the profile's prior scale s (refine/prior_scale.py: the posterior weight of
    each s and its variances): E[E[y_f | s, y] | y]."""
    out: dict[str, float] = {}
    for w, v in zip(weights, variances):
        for fingerprint, log_scale in own_log_scales(rows, v, wait).items():
            out[fingerprint] = out.get(fingerprint, 0.0) + w * log_scale
    return out


def prior_covariance(configs: Sequence[ConfigRuns], v: Variances, wait: PeerWait | None,
                     waited: set[str]) -> list[list[float]]:
    """Cov(y_i, y_j) before any reading: the shared bias, the configurations' own biases (correlated by their cost
    mix, refine/transfer.py), and between two configurations whose readings hold a wait, the wait's shared and own
    parts."""
    sd_shared_w = wait.sd_shared if wait else v.sd_shared
    sd_config_w = wait.sd_config if wait else WAIT_CONFIG_SD_PRIOR
    r = correlation_matrix([c.shares for c in configs])
    both = [[a.fingerprint in waited and b.fingerprint in waited for b in configs] for a in configs]
    return [[v.sd_shared ** 2 + covariance(v.sd_config, v.sd_mix, r[i][j], i == j)
             + (sd_shared_w ** 2 + (sd_config_w ** 2 if i == j else 0.0) if both[i][j] else 0.0)
             for j in range(len(configs))] for i in range(len(configs))]

"""The part of a multi-rank CPU step its ranks spend waiting for each other, calibrated apart from the rest.

An instrumented CPU run reads two things per step: its wall time and its ranks' CPU time (run_records: the
slowest rank's, getrusage). Their log-ratio splits the run's measured / predicted log-ratio y in two parts:

    y = log(CPU / predicted) + log(wall / CPU) = y_cpu + w

w is the time the slowest rank is off its core inside the step: blocked in gloo's collectives for the peer (the
ranks drift apart between two collectives: the slowest rank's CPU per step is 2-8 % over the mean rank's) and for
the transfer's bytes and wake-ups. One rank has nobody to wait for: w = 0. On the testbed (bench_cpu_testbed.py
--parts) the wall beyond the slowest rank's CPU, 3-16 ms per step, is about the comm model's predicted collective
time (2-10 ms; ZeRO-3's 24 ms over-predicted); the 2-rank steps' excess over the prediction is in their CPU
time, 7-31 % over the model's non-collective time at the one-rank configurations' level. So the split is not a
claim that the prediction lacks w; it is where the noise is. The two parts differ in what one run can tell:
- y_cpu carries the machine's speed at the run's moment: the testbed's CPU time per step moves 11.1 % (rms of
  log(run / median of the configuration's other runs), 240 runs of the four testbed records of 27 Nov 2026,
  05:46-11:20 UTC, benchmarks/bench_cpu_testbed.py) from one run to the next, the same as its wall time
  (11.1 %): so refine/shrinkage.py's run and moment variances are y_cpu's, and it is fitted there as before.
- w moves WAIT_RUN_SD_PRIOR (2.8 %) between runs of one configuration: a run measures its configuration's wait
  well, and it differs little between configurations (WAIT_CONFIG_SD_PRIOR, 2.9 %, around a mean of 0.10 in
  log: x1.105) because it is the same gloo on the same cores. Shrunk with y_cpu's variances (the whole step's
  10.7 % reading noise), an instrumented 2-rank configuration kept 0.71 of its w: its own prediction stayed
  ~3 % low, and its w reached the other 2-rank configurations at the weight of the machine's level (0.24).
So w gets the same normal-normal model as refine/shrinkage.py (w_ij = b_w + d_j + e_ij) with its own variances:
b_w ~ N(0, sd_shared^2) (what every multi-rank configuration of the key shares and the prediction's whole step
does not say: the prior of any shared bias), d_j ~ N(0, WAIT_CONFIG_SD_PRIOR^2), e_ij ~ N(0, WAIT_RUN_SD_PRIOR^2),
both pooled with the store's own spread (shrinkage.estimate_variances). A multi-rank configuration without runs
gets E[b_w] = k_w mu_w, a one-rank configuration none. A configuration with runs does not add its parts' posteriors
(session 15 did: its CPU part lost more to shrinkage than its wait, and a run that matched its prediction in
total was moved past itself): the two parts' errors are anti-correlated errors of one prediction, so its whole
step is shrunk as one reading, with the wait's prior variance (b_w, d_f) added to its step's (refine/own_scales.py).
A contended run (refine/contention.py) measures no wait: its reading is its CPU time times an assumed quiet
ratio, which leaves its CPU part as well (so a configuration run both ways does not count a wait twice); its own
configuration shrinks its whole reading like a quiet run's (refine/own_scales.py).
What w is: the wait BEYOND what the run's prediction priced, log(wall / CPU) - log(P / (P - C)), C its
collectives (priced_wait_log: the comm_* share of its predicted step). Until session 17 it was the whole
log(wall / CPU): that beat w less the priced collectives on the four records then, but only as a proxy. The
prediction already prices C as the ranks' wait (the testbed's wall beyond CPU time matches it to ~1 %,
bench_cpu_testbed.py --parts), so the whole ratio counted C twice for every other multi-rank configuration
(k_w x ~0.10), which made up for the 2-rank CPU time the profile did not price (+0.09..+0.21 in log). The profile now
prices it (gloo's transport CPU per wire byte, profile/cpu_rank_transport.py); the records' 2-rank CPU excess fell
to +0.040/+0.109/+0.035/+0.020/-0.010/+0.005, while the whole ratio still added ~+0.085. Replayed on the six records
of 27 Nov (every run as the calibration run; the predictions made again with the term), the others' MAPE median
with the whole ratio / beyond the priced wait: 11.9/14.3, 9.3/11.0, 10.0/10.5, 6.8/7.1, 9.6/7.8, 10.8/10.8 %; worst
choice 21.3/21.3, 15.4/15.4, 13.6/15.0, 9.9/10.5, 19.0/15.8, 16.7/12.8 %. The whole ratio still wins where a
residual 2-rank CPU excess is left for it to cover (07:00's +0.11), and loses where the prediction is right
(15:38, 17:18): the residual is a cost to price, not a wait to carry (/work/notes/h139.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from llmperf_hook.refine.contention import CPU_INFLATION_LOG, ramp
from llmperf_hook.refine.shrinkage import estimate_variances, group_runs, posterior

WAIT_RUN_SD_PRIOR = 0.028
"""Run-to-run standard deviation of one configuration's log(wall / CPU) per step: the rms of log(run / median of
its configuration's other runs) over the 160 runs of the eight 2-rank configurations in the four testbed records
of 27 Nov 2026 (05:46, 07:00, 08:51, 11:20 UTC; 24 timed steps each, one thread per rank, load 1.1-1.7);
`bench_cpu_testbed.py --parts RECORD...` recomputes it (testbed_parts.run_spread). A noise measure of the
machine, as shrinkage.SD_RUN_PRIOR, not a fit of any prediction error."""
WAIT_CONFIG_SD_PRIOR = 0.029
"""Standard deviation between configurations of their mean log(wall / CPU): the eight 2-rank configurations'
spread in each of the same four records (0.024, 0.033, 0.027, 0.032), pooled (around means of 0.096-0.109);
testbed_parts.pooled_config_spread recomputes it."""


@dataclass(frozen=True)
class PeerWait:
    """The fitted wait of a key's multi-rank runs."""

    log_scale: float
    """mu_w: the multi-rank configurations' precision-weighted mean log(wall / CPU) (unshrunk)."""
    weight: float
    """k_w: the fraction of mu_w a multi-rank configuration without runs gets."""
    sd_shared: float = 0.0
    """The prior standard deviation of b_w the fit used."""
    sd_config: float = WAIT_CONFIG_SD_PRIOR
    """The standard deviation of d_j the fit used (WAIT_CONFIG_SD_PRIOR pooled with the store's spread)."""


def priced_wait_log(shares: Sequence[tuple[str, float]]) -> float:
    """log(P / (P - C)): the wait the run's prediction priced itself, C its collectives (the comm_* terms' share of
    the predicted step, refine/transfer.cost_shares); 0 without shares."""
    comm = sum(share for term, share in shares if term.startswith("comm"))
    return -math.log(1.0 - comm) if 0.0 < comm < 1.0 else 0.0


def wait_log(reading_s: float, measured_s: float, wall_per_cpu: float | None, world_size: int | None,
             device: str | None = "cpu", contended: bool = False, priced_log: float = 0.0) -> tuple[float, bool]:
    """(w, measured) of one run, w less `priced_log` (priced_wait_log: the wait its prediction priced): a quiet CPU
    run of several ranks measured w = log(wall / CPU per step); a contended one's reading (refine/contention.py:
    its CPU time less the contention's share, times an assumed quiet wall / CPU ratio) holds that assumed ratio,
    which is taken out of its CPU part as well but observes no wait (measured False); (0, False) for one rank, a
    GPU run, a run without CPU time, and a quiet run whose ranks spent more CPU than wall time: several threads per
    rank (getrusage counts all of the process's), a parallelism that a negative w would carry to other
    configurations as a wait and put back into their CPU part."""
    if device != "cpu" or (world_size or 1) < 2 or not wall_per_cpu or wall_per_cpu < 1.0:
        return 0.0, False
    if not contended:
        return math.log(wall_per_cpu) - priced_log, True
    cpu_s = measured_s / wall_per_cpu
    return math.log(reading_s / cpu_s) + ramp(wall_per_cpu) * CPU_INFLATION_LOG - priced_log, False


def fit_peer_wait(rows: Sequence[tuple[str, float]], sd_shared: float) -> PeerWait | None:
    """The posterior of the module docstring from (fingerprint, measured w) of each quiet multi-rank run; None
    without one."""
    runs = [(f"wait{i}", fingerprint, 1.0, math.exp(w)) for i, (fingerprint, w) in enumerate(rows)]
    if not runs:
        return None
    configs = group_runs(runs)
    v = estimate_variances(configs, WAIT_CONFIG_SD_PRIOR, "peer wait", sd_shared, sd_run_prior=WAIT_RUN_SD_PRIOR)
    post = posterior(configs, v)
    return PeerWait(post.shared_log_scale, post.shared_weight, v.sd_shared, v.sd_config)

"""The straggler cost of synchronised ranks: a step waits at its collectives for the slowest rank.

Each rank's step time jitters from step to step (the OS, caches, memory bandwidth, gloo's threads). The ranks of a
data-parallel group meet at the step's collectives, so a synchronised step costs the expected MAXIMUM of the ranks'
step times, not their mean. With n ranks whose step times are independent normals of mean T and standard deviation
cv x T:

    E[max of n] = T (1 + cv x e_n),   e_n = E[max of n standard normals] = n int x phi(x) Phi(x)^(n-1) dx

(the expected largest order statistic: H. A. David and H. N. Nagaraja, Order Statistics, 3rd ed., Wiley 2003,
sections 3.1 and 4.2; e_2 = 1 / sqrt(pi) = 0.5642, e_4 = 1.0294, e_8 = 1.4236, the values of L. H. C. Tippett,
Biometrika 17 (1925) 364-387). One rank waits for nobody: e_1 = 0.

What cv is: the per-rank, step-to-step spread that the OTHER ranks do not share (a slowdown of the whole machine moves
every rank alike and no one waits). From two synchronised ranks' per-step CPU times a and b: d = (a - b) / mean, and
E|d| = 2 cv / sqrt(pi) for independent normals, so cv = sqrt(pi) / 2 x mean |d| (profile/cpu_rank_transport.py reads
it with the framework cost, on the pair of ranks that measures gloo's transport). GPU clusters: 0 unless measured.

Measured on the CPU testbed's quiet records of 28 Nov 2026 (10:36 and 13:33, the per-rank per-step CPU times of the
eight 2-rank configurations, 24 timed steps per run): cv 0.026-0.120 per configuration (median ~0.08). At n = 2 the
estimate needs no normal: max(a, b) = (a + b) / 2 + |a - b| / 2 for any a and b, so 1 + cv / sqrt(pi) = 1 + mean |d| / 2
is the pair's mean max over mean whatever the distribution (on the records within 0.003 per configuration: that is
this identity, not a test of the normal). For n > 2, e_n is the normal's and was never measured (2 cores); the records'
d are heavier-tailed than a normal (pooled per dtype, which mixing configurations also does: kurtosis 3.7-5.2, mean |d|
/ sd 0.68-0.77 against the normal's 0.80), so E[max of 4 or 8] is likely above 1 + cv e_n (R85). The step is priced
once per step: the testbed's wall beyond the slowest rank's CPU is the priced collectives' time (x0.93-1.03 of slowest
CPU + priced collectives on both records), so the waits at a step's intermediate collectives (ZeRO-1/2's reduction,
norm and gather) add nothing visible beyond the step-level maximum; that band is wider than the jitter itself, so it
does not rule such waits out (ZeRO-2/3 under gradient accumulation meet every micro-batch, DeepSpeed engine.py
allreduce_gradients; no testbed configuration does). Which ranks a step waits for:
cpu_framework.synchronised_ranks (every rank its groups link it to). Pure math; no torch.
"""

from __future__ import annotations

import math
from functools import lru_cache

QUADRATURE_POINTS = 4000
"""Midpoint rule over [-8, 8] standard deviations: e_2 to 1e-9 of 1 / sqrt(pi)."""


@lru_cache(maxsize=64)
def expected_max_standard_normal(n: int) -> float:
    """e_n: the expected maximum of n independent standard normals (0 for n <= 1)."""
    if n <= 1:
        return 0.0
    lo, hi = -8.0, 8.0
    h = (hi - lo) / QUADRATURE_POINTS
    total = 0.0
    for i in range(QUADRATURE_POINTS):
        x = lo + (i + 0.5) * h
        pdf = math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        cdf = 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))
        total += x * pdf * cdf ** (n - 1)
    return n * total * h


def straggler_factor(cv: float, ranks: int) -> float:
    """E[max over `ranks` synchronised ranks] / mean step: 1 + cv x e_n (1 for one rank or cv 0)."""
    return 1.0 + max(0.0, cv) * expected_max_standard_normal(ranks)


def jitter_cv(pairs: list[tuple[float, float]]) -> float | None:
    """cv from two synchronised ranks' step times [(a, b), ...]: sqrt(pi) / 2 x mean |a - b| / ((a + b) / 2);
    None without a usable pair."""
    d = [abs(a - b) / (0.5 * (a + b)) for a, b in pairs if a > 0 and b > 0]
    return math.sqrt(math.pi) / 2.0 * sum(d) / len(d) if d else None

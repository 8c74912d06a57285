"""How much of one configuration's measured bias transfers to another: what their predicted steps are made of.

refine/shrinkage.py models a run's log-ratio (measured / predicted) of configuration j as b + c_j + e: b shared by
every configuration of the (hardware, cluster, framework), c_j the configuration's own bias, e the run's drift.
Treating c_i and c_j as independent says an instrumented configuration teaches nothing about a configuration
that runs the same ops at the same precision, and as much about one at another precision as about itself. But
c_j is what the profile's cost terms get wrong for j, and j's predicted step is a sum of those terms:

    log(measured_j / predicted_j) ~= sum_t s_jt delta_t        s_jt = share of term t in j's predicted step

(first order in the terms' log errors delta_t). Terms fitted separately err independently; with equal variances
Cov(c_i, c_j) is proportional to sum_t s_it s_jt, and with Var(c_j) = sd_config^2 (what the profile's held-out
steps measured, whatever j's mix) the correlation of two configurations' own biases is the cosine of their share
vectors:

    rho_ij = s_i . s_j / (|s_i| |s_j|)        1 for the same mix, 0 for configurations sharing no term

The terms are the predicted breakdown's components, split by what each separately fitted cost model covers:
  compute (with recompute, the forward ops run again, and the pipeline bubble, idle compute time): one op model
    per (op class, direction, dtype) (profile/build_profile.py), so compute at bf16 and at fp32 are different
    terms; on a CPU the concurrent-rank slowdown is measured per rank count (profile/cpu_framework.py), so the
    rank count is part of the term too;
  optimizer: the optimizer step and the framework's ZeRO engine per (dtype, ZeRO stage) (cpu_framework's
    deepspeed_step per stage and dtype; Adam per dtype);
  each communication component (comm_*): the comm model per collective and group size (world size);
  host_overhead: one per-op figure per cluster (shared by every configuration).
Given the instrumented configurations' mean log-ratios y (variances v_f of their own runs), the posterior mean of
another configuration's log-ratio is the Gaussian conditional (Rasmussen & Williams, Gaussian Processes for
Machine Learning, 2006, eq. 2.23-2.25):

    E[y_j | y] = k_j^T K^-1 y,   K = sd_shared^2 J + sd_config^2 R + diag(v),   k_j = sd_shared^2 + sd_config^2 rho_j

With R the identity (no shares known, or configurations sharing no term) this is exactly the normal-normal
shrinkage of refine/shrinkage.py: the shared part sd_shared^2 1^T K^-1 y = k mu.

How much of sd_config the terms carry is measured, not assumed: a configuration's bias is also what its own
shapes get wrong (an operator shape the profile predicts badly), independent of any other configuration's.
So sd_config^2 = sd_mix^2 + sd_own^2, and two different configurations covary by sd_mix^2 rho only. sd_mix is the
term-level part of the profile's held-out steps' errors (mix_sd: their spread between the groups of steps that
exercise one term, over and above the spread within a group): for the CPU testbed's 54 held-out steps (fp32 and
bf16 forward+backward, DeepSpeed engine steps per ZeRO stage) the ten groups' means differ by sd 0.029 while the
steps within a group scatter by 0.148, so sd_mix is 0: what one configuration's run shows about its own bias
does not carry to another by its mix. A profile without grouped held-out steps has sd_mix 0 (independent).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

Shares = tuple[tuple[str, float], ...]


def cost_shares(breakdown: Mapping[str, Any] | None, config: Mapping[str, Any] | None) -> Shares:
    """The share of each cost term (module docstring) in a predicted step, from its breakdown (seconds by
    component) and resolved configuration (explain JSON); () when either is missing or empty."""
    if not isinstance(breakdown, Mapping) or not isinstance(config, Mapping):
        return ()
    dtype, ranks, zero = config.get("precision"), config.get("world_size"), config.get("zero_stage")
    terms: dict[str, float] = {}
    for key, seconds in breakdown.items():
        if (key == "calibration" or isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                or not 0 < seconds < math.inf):  # an edited prediction.json's NaN / Infinity is no share
            continue
        term = _term(str(key), dtype, ranks, zero)
        terms[term] = terms.get(term, 0.0) + float(seconds)
    total = sum(terms.values())
    return tuple(sorted((t, s / total) for t, s in terms.items())) if total > 0 else ()


def _term(key: str, dtype: Any, ranks: Any, zero: Any) -> str:
    # recompute re-runs the forward ops (Megatron --recompute-*): the same op models as compute
    if key in ("compute", "recompute", "pipeline_bubble"):
        return f"compute/{dtype}/{ranks} ranks"
    if key in ("optimizer", "host_optimizer_step"):  # the step's host loop is the same engine's (compose._breakdown)
        return f"optimizer/{dtype}/zero {zero}"
    if key.startswith("comm"):
        return f"{key}/{ranks} ranks"
    return key


def correlation(a: Shares, b: Shares) -> float:
    """rho of the module docstring: the cosine of two share vectors (0 when either is unknown)."""
    if not a or not b:
        return 0.0
    bd = dict(b)
    dot = sum(s * bd.get(t, 0.0) for t, s in a)
    norm = math.sqrt(sum(s * s for _, s in a) * sum(s * s for _, s in b))
    return dot / norm if norm > 0 else 0.0


def correlation_matrix(shares: Sequence[Shares]) -> list[list[float]]:
    """R for the instrumented configurations (1 on the diagonal; distinct configurations without shares: 0)."""
    return [[1.0 if i == j else correlation(a, b) for j, b in enumerate(shares)] for i, a in enumerate(shares)]


def solve(matrix: Sequence[Sequence[float]], rhs: Sequence[float]) -> list[float]:
    """x with matrix x = rhs (Gaussian elimination with partial pivoting; K is symmetric positive definite, a
    few dozen configurations at most)."""
    n = len(rhs)
    a = [list(map(float, row)) + [float(r)] for row, r in zip(matrix, rhs)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, n):
            f = a[r][col] / a[col][col]
            a[r] = [x - f * y for x, y in zip(a[r], a[col])]
    x = [0.0] * n
    for r in reversed(range(n)):
        x[r] = (a[r][n] - sum(a[r][c] * x[c] for c in range(r + 1, n))) / a[r][r]
    return x


def covariance(sd_config: float, sd_mix: float, rho: float, same: bool) -> float:
    """Cov(c_i, c_j): sd_config^2 for the same configuration, sd_mix^2 rho for two others (module docstring)."""
    return sd_config ** 2 if same else min(sd_mix, sd_config) ** 2 * rho


def conditional_weights(means: Sequence[float], variances: Sequence[float], shares: Sequence[Shares],
                        sd_shared: float, sd_config: float, sd_mix: float = 0.0) -> list[float]:
    """alpha = K^-1 y of the module docstring, one per instrumented configuration."""
    r = correlation_matrix(shares)
    n = len(means)
    k = [[sd_shared ** 2 + covariance(sd_config, sd_mix, r[i][j], i == j) + (variances[i] if i == j else 0.0)
          for j in range(n)] for i in range(n)]
    return solve(k, means)


def transferred_log_scale(alpha: Sequence[float], shares: Sequence[Shares], target: Shares, sd_shared: float,
                          sd_config: float, sd_mix: float = 0.0, own: int | None = None) -> float:
    """E[y_target | y] = k_target^T alpha; `own` is the index of the target among the instrumented
    configurations (itself: sd_config^2), None for a configuration without runs."""
    return sum((sd_shared ** 2 + covariance(sd_config, sd_mix, correlation(s, target), i == own)) * a
               for i, (s, a) in enumerate(zip(shares, alpha)))


def mix_sd(errors: Sequence[float], terms: Sequence[str]) -> float:
    """sd_mix: the standard deviation of a cost term's own error, from held-out steps grouped by the term they
    exercise (one-way random effects, method of moments: (MSB - MSW) / n0, Searle, Casella & McCulloch, Variance
    Components, 1992, section 3.5; 0 when the groups differ no more than their steps do)."""
    groups: dict[str, list[float]] = {}
    for e, t in zip(errors, terms):
        groups.setdefault(t, []).append(e)
    n, g = len(errors), len(groups)
    if g < 2 or n <= g or len(terms) != n:
        return 0.0
    grand = sum(errors) / n
    msb = sum(len(v) * (sum(v) / len(v) - grand) ** 2 for v in groups.values()) / (g - 1)
    msw = sum((x - sum(v) / len(v)) ** 2 for v in groups.values() for x in v) / (n - g)
    n0 = (n - sum(len(v) ** 2 for v in groups.values()) / n) / (g - 1)
    return math.sqrt(max(msb - msw, 0.0) / n0)

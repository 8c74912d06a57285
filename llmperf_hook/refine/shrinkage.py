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
  every job, their mean and its standard error, plus how far the machine's whole steps move between the
  profile's measurement and later runs (step_drift_sd: STEP_DRIFT_SD_PRIOR, the shift between two of seven
  profiles' measurements of the same reference steps on this machine, root mean square 13.4 % over their 21
  pairs, worth its 6 degrees of freedom, pooled with the profile's own earlier measurements of its steps), in
  quadrature. Session 8 took that drift from the reference workload's readings instead (1.3-3.1 %: k
  0.04-0.10), which do not track the step-time drift; its benchmark runs had every configuration 8-23 % fast
  after a machine-wide shift, and the calibration moved the others by 4 % of a run's ratio. Session 9 took the
  drift as the sd of one measurement's level (9.5 %, and each re-measurement's shift d as d^2 / 2), worth one
  pseudo-observation: but b is the shift between two levels (the profile's and the run's), whose variance is
  twice a level's, and two re-measurements that happened to agree (-3.5, -3.8 %) then outweighed the seven
  profiles 2 : 1 (sd_shared 6.0 %): the testbed's 21:48 run, every configuration 4-30 % fast, kept x1.168 of
  its calibration run's x1.225 on that configuration and 0.33 of it on the others. With the shift's variance
  and the prior's degrees of freedom, the same profile (21:48: held-out rms 6.9 %, mean +0.2 % +- 0.9 %,
  re-measured twice): drift sqrt((6 x 0.134^2 + 0.038^2 + 0.035^2) / 8) = 11.8 %, sd_shared 11.8 %, one quiet
  run's k = 0.0139 / (0.0139 + 0.0048 + 0.0025) = 0.66 and its own configuration keeps 0.88 of its log ratio.
  Session 12: that drift is the shift between two levels of the machine, the profile's and the run's moment's,
  each with half its variance. Only the profile's is in every later prediction (its numbers are fixed); the
  run's moment is gone when the machine moves, as transient for the next run of any configuration, its own
  included, as the run's own drift: so sd_shared takes drift^2 / 2 and every run's reading sd_moment^2 =
  drift^2 / 2 beside sd_run^2 (Variances.sd_moment). Session 11's testbed run showed why: config 9's
  calibration run sat 13.5 % above its two measurement passes, and the whole drift in b carried x1.39^0.45 to
  the eleven others (13.9 % after, 7.1 % before). The 03:02 profile (rms 13.6 %, drift 13.0 %): one quiet run's k
  0.45 -> 0.23, its own configuration keeps 0.71 of its log ratio (was 0.88; sd_run 5 %, no sampling error).
- The run's median step has its own sampling error (median_sampling_sd: its steps' scatter and count), added to
  the run's variance: ~1 % for 24 tight steps, more for few or scattered ones. A contended run's is its CPU
  times' beyond what its contention spread already holds (refine/contention.py), so it is not counted twice.
- Configurations' own biases covary by their cost mix as far as the profile's held-out steps show a cost term
  erring as a whole (refine/transfer.py, sd_mix); independent otherwise, as in the formulas above.
- Any other profile (a shipped or GPU one, sampled op by op): sd_shared SD_SHARED_PRIOR, documented below (one
  cluster cannot estimate the spread between clusters); sd_config the profile's own held-out op error (median
  over its op models of holdout_mape, as a normal standard deviation: x sqrt(pi/2)), else SD_CONFIG_NO_PROFILE.
- With >= 2 configurations in the store, sd_config is pooled with their measured spread (scaled-inverse-chi^2
  posterior point estimate, the prior worth PRIOR_DOF).
- sd_run: SD_RUN_PRIOR (5 %: how far one run's median step lies from its configuration's, measured between
  quiet 24-step runs of the same configuration on the 2-core CPU testbed machine), pooled with the spread
  between runs of the same configuration in the store.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Sequence

SD_SHARED_PRIOR = 0.10
"""Prior standard deviation of the shared log-bias b. Source: docs/model.md's validation table (26 Nov, session
2): the mean signed errors of the six public sources, each one cluster + framework setup, are +1.0, -21.4,
+0.5, -4.5, -6.1, +3.2 %: their root mean square is 9.4 % (a shared bias of about 0.1 in log)."""
SD_CONFIG_NO_PROFILE = 0.15
"""sd_config when the hardware has no fitted profile (roofline only). Source: docs/model.md, the H100 / H200
roofline-only step MAPE 14.7 / 13.2 % on eight runs each (as a log standard deviation, ~0.15)."""
SD_RUN_PRIOR = 0.05
"""Prior run-to-run standard deviation of one configuration's log step time: launched twice, unchanged, on the
same machine, two runs' measured step times (each run's median over its 24 timed steps) differ by about 5 % x
sqrt(2) in log; a single run sits about 5 % (0.05 in log) from that configuration's typical step time.

Where the 5 % was measured: this project's 2-core CPU machine on 2026-11-26, by benchmarks/bench_cpu_testbed.py
(the twelve DeepSpeed configurations of examples/cpu-testbed/train_gpt.py, ZeRO 0-3, 1-2 ranks, fp32/bf16, one
thread per rank), which measures every configuration in two passes minutes apart. Over the seven benchmark
outputs with 24 timed steps per run, the 60 (output, configuration) pairs whose two passes were both quiet (not
flagged CONTENDED) give 60 log differences d; a difference of two runs has variance 2 sd^2, so
sd = sqrt(mean(d^2) / 2) = 0.051 (each output alone: 0.019 to 0.090). `bench_cpu_testbed.py --rescore LOGS`
recomputes it from such outputs (logged_run_spread). Two cross-checks from the same machine agree: the quiet
calibration runs against the median of their configuration's two passes (14 differences, 0.061), and
--drift-check's step CPU times (8 timed steps, load 1-5: 0.049-0.056). On a quiet GPU node runs repeat closer;
this prior then only makes the calibration cautious, and the store's own repeats of a configuration take over
(estimate_variances pools them, the prior worth PRIOR_DOF)."""
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
    sampling_sds: tuple[float, ...] = ()
    """Per run, the sampling standard deviation of its median step in log (median_sampling_sd of its timed
    steps); empty or 0: not known."""
    shares: tuple[tuple[str, float], ...] = ()
    """The cost terms' shares of its predicted step (refine/transfer.cost_shares; () when not known)."""

    def extra_variances(self) -> tuple[float, ...]:
        return tuple((self.observation_sds[i] if i < len(self.observation_sds) else 0.0) ** 2
                     for i in range(len(self.log_ratios)))

    def mean_and_variance(self, sd_run: float) -> tuple[float, float]:
        """(precision-weighted mean log-ratio, its variance): each run weighs 1 / (sd_run^2 + its extra
        variance + its median's sampling variance); quiet runs of known-tight steps alone give about the plain
        mean and sd_run^2 / n."""
        sampling = [(self.sampling_sds[i] if i < len(self.sampling_sds) else 0.0) ** 2
                    for i in range(len(self.log_ratios))]
        weights = [1.0 / (sd_run ** 2 + extra + s) for extra, s in zip(self.extra_variances(), sampling)]
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
    sd_moment: float = 0.0
    """Standard deviation of the machine's level at one run's moment (measured_step_priors): in every run's
    reading, in no later run's."""
    sd_mix: float = 0.0
    """The part of sd_config that cost terms carry from one configuration to another (refine/transfer.py)."""


@dataclass(frozen=True)
class Posterior:
    shared_log_scale: float
    """Weighted mean log-ratio mu of the configurations (unshrunk)."""
    shared_weight: float
    """k: the fraction of mu that transfers to a configuration without runs (1 - shrinkage)."""
    config_log_scale: dict[str, float]
    """E[b + c_f | y] per fingerprint with runs."""
    alpha: dict[str, float] = field(default_factory=dict)
    """K^-1 y per fingerprint with runs (refine/transfer.py): what a configuration without runs gets from each."""


def group_runs(runs: Sequence[tuple]) -> list[ConfigRuns]:
    """(job id, fingerprint, predicted, measured[, observation sd[, sampling sd[, shares]]]) rows -> one
    ConfigRuns per fingerprint, in first-seen order (its shares: the last run's that has them)."""
    groups: dict[str, list[tuple]] = defaultdict(list)
    for job_id, fingerprint, p, m, *rest in runs:
        if p > 0 and m > 0:
            observation_sd, sampling_sd, shares = (*rest, None, None, None)[:3]
            groups[fingerprint or f"job:{job_id}"].append(
                (p, m, float(observation_sd or 0.0), float(sampling_sd or 0.0), tuple(shares or ())))
    return [ConfigRuns(f, tuple(math.log(m / p) for p, m, *_ in pm),
                       math.exp(statistics.fmean(math.log(r[0]) for r in pm)),
                       math.exp(statistics.fmean(math.log(r[1]) for r in pm)),
                       tuple(r[2] for r in pm), tuple(r[3] for r in pm),
                       next((r[4] for r in reversed(pm) if r[4]), ())) for f, pm in groups.items()]


def median_sampling_sd(step_times_s: Sequence[float]) -> float:
    """Sampling standard deviation of the median of a run's step times, in log: sqrt(pi / 2) x sd / sqrt(n) (the
    asymptotic variance of a sample median of a normal, pi sd^2 / (2 n)), sd from the median absolute deviation
    (x 1.4826, robust to the few slow steps a run has). A run of tight steps adds ~1 % to the run-to-run spread;
    few steps, or steps scattered by a disturbed machine, add more. 0 for fewer than 3 steps."""
    logs = [math.log(t) for t in step_times_s if t and t > 0]
    if len(logs) < 3:
        return 0.0
    mid = statistics.median(logs)
    sd = 1.4826 * statistics.median(abs(x - mid) for x in logs)
    return HALF_NORMAL * sd / math.sqrt(len(logs))


def estimate_variances(configs: Sequence[ConfigRuns], sd_config_prior: float, prior_source: str,
                       sd_shared: float = SD_SHARED_PRIOR, sd_moment: float = 0.0, sd_mix: float = 0.0,
                       sd_run_prior: float = SD_RUN_PRIOR) -> Variances:
    """Priors pooled with the store's spread: within configurations for sd_run (prior `sd_run_prior`), between
    them for sd_config."""
    # the run-to-run spread from quiet readings only (a contended one's extra noise has its own variance)
    quiet = [[y for y, extra in zip(c.log_ratios, c.extra_variances()) if extra == 0.0] for c in configs]
    within = [(y - statistics.fmean(ys)) ** 2 for ys in quiet for y in ys]
    dof_run = sum(max(len(ys) - 1, 0) for ys in quiet)
    # repeats at other moments scatter by the run's spread and the machine's moment together: the pooled total
    # less the moment's part is the run's (sd_moment stays the profile's measure of it)
    var_total = (PRIOR_DOF * (sd_run_prior ** 2 + sd_moment ** 2) + sum(within)) / (PRIOR_DOF + dof_run)
    var_run = max(var_total - sd_moment ** 2, MIN_SD ** 2)
    source = f"sd_config prior {sd_config_prior:.3f} ({prior_source})"
    var_config = sd_config_prior ** 2
    if len(configs) >= 2:
        reading = math.sqrt(var_run + sd_moment ** 2)
        means = [c.mean_and_variance(reading)[0] for c in configs]
        noise = statistics.fmean(c.mean_and_variance(reading)[1] for c in configs)
        spread = max(statistics.variance(means) - noise, 0.0)
        dof = len(configs) - 1
        var_config = (PRIOR_DOF * var_config + dof * spread) / (PRIOR_DOF + dof)
        source += f", pooled with the spread of {len(configs)} configurations' ratios ({math.sqrt(spread):.3f})"
    if dof_run:
        source += f"; sd_run pooled with {dof_run} repeat(s) of a configuration"
    return Variances(sd_shared, math.sqrt(var_config), math.sqrt(var_run), source, sd_moment, sd_mix)


def posterior(configs: Sequence[ConfigRuns], v: Variances) -> Posterior:
    """The posterior means of the module docstring's model, the configurations' own biases correlated by their
    cost mix (refine/transfer.py; independent where no shares are known, as the module docstring's formulas)."""
    from llmperf_hook.refine.transfer import conditional_weights, transferred_log_scale

    moments = [c.mean_and_variance(math.hypot(v.sd_run, v.sd_moment)) for c in configs]
    shares = [c.shares for c in configs]
    alpha = conditional_weights([m for m, _ in moments], [var for _, var in moments], shares, v.sd_shared,
                                v.sd_config, v.sd_mix)
    weights = [1.0 / (v.sd_config ** 2 + var) for _, var in moments]
    mu = sum(w * m for w, (m, _) in zip(weights, moments)) / sum(weights)
    shared = v.sd_shared ** 2 * sum(alpha)  # the posterior mean of b
    k = shared / mu if abs(mu) > 1e-12 else sum(weights) / (sum(weights) + 1.0 / v.sd_shared ** 2)
    # k is a fraction of mu (Calibration.apply raises the shared fit to it; the notes print 1 - k as shrinkage):
    # correlated biases (sd_mix > 0) can put the posterior b on the other side of a near-zero mu, a ratio of any
    # size or sign, so it is held in [0, 1] (without correlation it is there already)
    k = min(max(k, 0.0), 1.0)
    own = {c.fingerprint: transferred_log_scale(alpha, shares, c.shares, v.sd_shared, v.sd_config, v.sd_mix, own=i)
           for i, c in enumerate(configs)}
    return Posterior(mu, k, own, dict(zip((c.fingerprint for c in configs), alpha)))


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
    sd_moment: float = 0.0
    """Of the machine's level at one run's moment, transient (measured_step_priors; 0: not measured)."""
    sd_mix: float = 0.0
    """Of a cost term's own error, carried between configurations by their mix (refine/transfer.mix_sd)."""


def variance_priors(hardware: str, run_readings: Sequence[tuple[float, int]] = ()) -> Priors:
    """The module docstring's priors for `hardware`: from its profile's measured steps where it has them, else
    SD_SHARED_PRIOR and sd_config_prior. Never raises. `run_readings` (the store's runs' reference readings) are
    accepted and not used (measured_step_priors)."""
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


STEP_DRIFT_SD_PRIOR = 0.134
"""Prior standard deviation of how far this machine's whole steps move, in log, between the profile's
measurement and a later run: the SAME reference steps (forward+backward of the 11 reference GPTs, DeepSpeed
engine steps at ZeRO 0-3; 27-54 per file) measured by seven framework-cost profiles of this 2-core machine on
26 Nov 2026 (04:41, 04:52, 07:00, 09:54, 13:24, 13:37, 18:13 UTC; method unchanged since 04:42): each file's
shared level (its mean log time over the 27 steps all seven have, minus their mean) -0.122 .. +0.167, standard
deviation 0.096; the shift between two of them (what separates a profile from a later run) has root mean
square 0.134 over the 21 pairs (= sqrt(2) x 0.094: a difference of two levels). Step times, not the reference
workload's readings (which did not track the step-time drift: bench_cpu_testbed.py --drift-check), and never
the testbed benchmark's rows."""
DRIFT_PRIOR_DOF = 6.0
"""Degrees of freedom STEP_DRIFT_SD_PRIOR is worth: the variance of seven measured levels (7 - 1)."""


def measured_step_priors(directory, run_readings: Sequence[tuple[float, int]] = ()) -> Priors | None:
    """Priors from the held-out steps of the framework file in the profile `directory` (sd_config; their mean
    and its standard error for sd_shared) and the machine's step-time drift (step_drift_sd), in quadrature;
    None without enough held-out steps. `run_readings` (the runs' reference readings) are accepted for the
    callers and not used: the reference does not track the step-time drift."""
    from llmperf_hook.profile.cpu_framework import FILE_NAME, step_holdout_log_errors

    path = directory / FILE_NAME
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    errors = step_holdout_log_errors(doc)
    if len(errors) < MIN_HELD_OUT_STEPS:
        return None
    drift, n_shifts = step_drift_sd(doc)
    return priors_from_errors(errors, drift, n_shifts, str(path), holdout_terms(doc, len(errors)))


def holdout_terms(doc: dict, num_errors: int) -> list[str]:
    """The cost term each of cpu_framework.step_holdout_log_errors' steps exercises, in its order: a dtype's
    forward+backward rows ('compute/<dtype>'), its DeepSpeed engine steps per stage ('optimizer/<dtype>/zero
    <stage>'); [] when the count differs from `num_errors` (a step it dropped as not finite)."""
    terms: list[str] = []
    for dtype, entry in (doc.get("dtypes") or {}).items():
        rows = entry.get("samples") or []
        terms += [f"compute/{dtype}"] * (len(rows) if len(rows) > 2 else 0)
        for zero, stage in (entry.get("deepspeed_step") or {}).items():
            engine = stage.get("samples") or []
            terms += [f"optimizer/{dtype}/zero {zero}"] * (len(engine) if len(engine) > 2 else 0)
    return terms if len(terms) == num_errors else []


def priors_from_errors(errors: Sequence[float], drift: float, n_shifts: int, path: str,
                       terms: Sequence[str] = ()) -> Priors:
    """measured_step_priors from its inputs: the held-out steps' log errors (and the cost term each exercises),
    and the step-time drift (pure; the testbed benchmark's --replay recomputes the priors from the inputs it
    recorded)."""
    from llmperf_hook.refine.transfer import mix_sd

    rms = math.sqrt(statistics.fmean(e * e for e in errors))
    mean, se = statistics.fmean(errors), statistics.stdev(errors) / math.sqrt(len(errors))
    # the drift is the shift between two levels of the machine: the profile's (fixed in its numbers, in every
    # prediction: shared) and the run's moment's (gone when the machine moves: a later run has its own), each
    # with half its variance
    level, mix = drift / math.sqrt(2.0), min(mix_sd(errors, terms), rms)
    sd_shared = max(math.sqrt(mean ** 2 + se ** 2 + level ** 2), MIN_SD)
    return Priors(sd_shared, rms, f"{len(errors)} held-out steps of {path} (rms {rms:.1%}, mean {mean:+.1%} +- "
                                  f"{se:.1%}) and the machine's step-time drift (sd {drift:.1%}: the prior "
                                  f"{STEP_DRIFT_SD_PRIOR:.1%} between re-measured profile steps, worth "
                                  f"{DRIFT_PRIOR_DOF:g} of them, pooled with {n_shifts} re-measurement(s) of this "
                                  f"profile's own), half of it the profile's level: shared-bias prior "
                                  f"{sd_shared:.1%}; the other half the run's moment's, {level:.1%} in every run's "
                                  f"reading; of sd_config, {mix:.1%} carried between configurations by their cost "
                                  f"mix (refine/transfer.py)", sd_moment=level, sd_mix=mix)


def step_drift_sd(doc: dict) -> tuple[float, int]:
    """(sd, shifts): how far the machine's whole steps move between two measurements (the profile's and a later
    run's), in log. The framework file keeps the steps of the measurements it replaced (cpu_framework.
    carried_history): each earlier measurement's shared shift d (mean log ratio over the steps both measured) is
    one such move, so d^2 estimates its variance, pooled with STEP_DRIFT_SD_PRIOR worth DRIFT_PRIOR_DOF."""
    from llmperf_hook.profile.cpu_framework import measured_steps

    now = measured_steps(doc)
    shifts = []
    for entry in doc.get("history") or []:
        then = entry.get("steps") if isinstance(entry, dict) else None
        common = [k for k in now if isinstance(then, dict) and isinstance(then.get(k), (int, float)) and then[k] > 0]
        if len(common) >= MIN_HELD_OUT_STEPS:
            shifts.append(statistics.fmean(math.log(now[k] / then[k]) for k in common))
    var = (DRIFT_PRIOR_DOF * STEP_DRIFT_SD_PRIOR ** 2 + sum(d * d for d in shifts)) / (DRIFT_PRIOR_DOF + len(shifts))
    return math.sqrt(var), len(shifts)

"""Refinement replayed on a testbed record: every run of every configuration taken in turn as the one
calibration run, with the refine code of this tree, and the distribution of what it does.

For the choice (configuration k, its run r): refine's own fit (refine/recalibrate.fit_key_calibration) on that one
run, with the priors the record's profile gave (record["priors"]), exactly as `llmperf refine` fits a fresh store
after one instrumented run (a run whose ranks waited for a core is read from its CPU time, refine/contention.py,
at the benchmark's quiet limit). k is then scored against the median of its OTHER runs (independent of r), every
other configuration against the median of its measurement runs. 12 configurations x P passes = 60 choices for a
5-pass record; the real calibration runs of the rotation are among them (printed apart). k is also scored against
the run itself: refine should land between the prediction and the run it was calibrated on, never past it.

Strategies beside refine's: the run's full ratio on every configuration (refine before shrinkage), refine with
the configurations' own biases independent (no cost mix known: refine/transfer.py's R = identity, the rule before
session 12), and refine with the whole log(wall / CPU) as the ranks' wait (not beyond the collectives the
prediction priced: the rule before session 17, refine/peer_wait.py). "Harm" is a choice whose other
configurations' MAPE got worse than before refinement.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable

from testbed_configs import QUIET_WALL_PER_CPU
from testbed_parts import config_ranks

Rule = Callable[[dict, int, dict, list[float]], list[float]]


def _pct(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas


def refine_rule(with_mix: bool, session11: bool = False, peer_wait: bool = True, raw_wait: bool = False,
                contamination: float | None = None) -> Rule:
    """After-refinement predictions of the twelve from one calibration run, by refine's own fit; `session11`:
    with the priors of session 11's rule (the whole step drift in the shared bias, no run-moment part, no
    sampling error of the run's median, independent configurations); `peer_wait` False: the whole ratio shrunk
    as one, the ranks' wait for each other not fitted apart (refine/peer_wait.py; the rule before session 15);
    `raw_wait`: the wait read as the whole log(wall / CPU), not beyond what the prediction priced (the rule
    before session 17, refine/peer_wait.priced_wait_log); `contamination` 0: the profile's priors taken as right
    whatever the run reads (refine/prior_scale.py; the rule before H157), None: refine's own epsilon."""
    def rule(record: dict, k: int, run: dict, before: list[float]) -> list[float]:
        from llmperf_hook.refine.calibration import Calibration
        from llmperf_hook.refine.peer_wait import priced_wait_log, wait_log
        from llmperf_hook.refine.recalibrate import fit_key_calibration

        configs = record["configs"]
        fps, shares = _fingerprints(configs), [_shares(c) if with_mix else () for c in configs]
        ranks = [config_ranks(c) if peer_wait and not session11 else 1 for c in configs]
        measured, obs_sd, sampling_sd = calibration_reading(record, k, run)
        wall_per_cpu = run["measured_s"] / run["cpu_s"] if run.get("cpu_s") else None
        priced = 0.0 if raw_wait or session11 else priced_wait_log(_shares(configs[k]))
        wait = wait_log(measured, run["measured_s"], wall_per_cpu, ranks[k], contended=obs_sd > 0, priced_log=priced)
        row = (run.get("job_id", "replay"), fps[k], before[k], measured, None, obs_sd,
               0.0 if session11 else sampling_sd, shares[k], *wait)
        priors = session11_priors(record) if session11 else record_priors(record)
        extra = {} if contamination is None else {"contamination": contamination}
        cal: Calibration = fit_key_calibration("replay", "replay", "replay", [row], priors, **extra)[0]
        return [cal.apply(p, fps[i], shares[i], ranks[i]) for i, p in enumerate(before)]
    return rule


def multi_rank_bias(record: dict, k: int, run: dict, before: list[float]) -> list[float]:
    """A comparison, not refine's rule: the run's whole-step log-ratio y = b + [multi] b_m + c_k + e, the wait taken
    as the prediction priced it (its collectives; testbed_parts.rank_excess: the multi-rank wall / CPU is that to
    about 1 %), b_m the multi-rank configurations' shared excess with the prior of any shared bias (sd_shared, as
    peer_wait's b_w); each configuration gets its Gaussian conditional (one run: cov(y_j, y_k) y / var(y_k))."""
    from llmperf_hook.refine.shrinkage import SD_RUN_PRIOR

    pri, multi = record_priors(record), [config_ranks(c) > 1 for c in record["configs"]]
    measured, obs_sd, sampling_sd = calibration_reading(record, k, run)
    reading = SD_RUN_PRIOR ** 2 + pri.sd_moment ** 2 + obs_sd ** 2 + sampling_sd ** 2

    def cov(j: int) -> float:
        return (pri.sd_shared ** 2 + (pri.sd_shared ** 2 if multi[j] and multi[k] else 0.0)
                + (pri.sd_config ** 2 if j == k else 0.0))

    alpha = math.log(measured / before[k]) / (cov(k) + reading)
    return [p * math.exp(cov(j) * alpha) for j, p in enumerate(before)]


def record_priors(record: dict) -> Any:
    """The priors refine would take from the record's profile now: the profile's held-out steps and drift as the
    record saved them (priors["framework_doc_steps"]), else the priors the record's run printed."""
    from llmperf_hook.refine.shrinkage import Priors, priors_from_errors

    pri = record["priors"]
    if pri.get("holdout_errors"):
        return priors_from_errors(pri["holdout_errors"], pri["drift"], pri["drift_shifts"], pri["source_file"],
                                  pri.get("holdout_terms", ()))
    return Priors(pri["sd_shared"], pri["sd_config"], pri["source"], pri.get("sd_moment", 0.0))


def session11_priors(record: dict) -> Any:
    """Session 11's priors from the record's inputs: sd_shared = sqrt(mean^2 + se^2 + drift^2), nothing else."""
    from llmperf_hook.refine.shrinkage import Priors

    pri = record["priors"]
    errors = pri.get("holdout_errors")
    if not errors:
        return Priors(pri["sd_shared"], pri["sd_config"], pri["source"])
    mean, se = statistics.fmean(errors), statistics.stdev(errors) / math.sqrt(len(errors))
    return Priors(math.sqrt(mean ** 2 + se ** 2 + pri["drift"] ** 2),
                  math.sqrt(statistics.fmean(e * e for e in errors)), "session 11")


def full_ratio(record: dict, k: int, run: dict, before: list[float]) -> list[float]:
    scale = calibration_reading(record, k, run)[0] / before[k]
    return [p * scale for p in before]


def calibration_reading(record: dict, k: int, run: dict) -> tuple[float, float, float]:
    """(step time refine calibrates from, its extra observation sd, its median's sampling sd), as refine_run reads
    them: a contended run's quiet-equivalent CPU reading at the benchmark's limit (as testbed_runs.instrumented_run
    sets it), its CPU times' sampling sd beyond the contention spread (0 in records without per-step CPU times),
    else its measured step and its wall times' sampling sd."""
    from llmperf_hook.refine.contention import contended_step, sampling_sd_beyond_contention
    from llmperf_hook.refine.shrinkage import median_sampling_sd

    ranks = int(record["configs"][k]["config"].get("world_size") or 1)
    limit = QUIET_WALL_PER_CPU[min(ranks, 2)]
    if run.get("cpu_s") and run["measured_s"] / run["cpu_s"] > limit:
        step = contended_step(run["measured_s"] / run["cpu_s"], run["cpu_s"], ranks, limit)
        cpu_sd = median_sampling_sd(run.get("cpu_step_times_s") or ())
        return step.step_time_s, step.observation_sd, sampling_sd_beyond_contention(step, cpu_sd)
    return run["measured_s"], 0.0, median_sampling_sd(run.get("step_times_s") or ())


def _fingerprints(configs: list[dict]) -> list[str | None]:
    from llmperf_hook.refine.config_fingerprint import fingerprint_from_config_json

    return [fingerprint_from_config_json(c.get("config")) for c in configs]


def _shares(config: dict) -> tuple:
    from llmperf_hook.refine.transfer import cost_shares

    return cost_shares(config.get("breakdown"), config.get("config"))


def replay(record: dict, measured: list[dict], before: list[float], rule: Rule) -> list[dict[str, Any]]:
    """One row per (k, run of k): k's error against its other runs, the others' errors after and before."""
    out = []
    for k in range(len(before)):
        runs = [r for r in record["runs"] if r["config"] == k]
        for r in runs if len(runs) > 1 else ():  # k's reference is the median of its other runs
            rest = [x["measured_s"] for x in runs if x is not r]
            after = rule(record, k, r, before)
            others = [i for i in range(len(before)) if i != k]
            reading = calibration_reading(record, k, r)[0]  # what refine calibrated from
            out.append({"k": k, "pass": r["pass"], "calibration": bool(r.get("calibration")),
                        "own": _pct(after[k], statistics.median(rest)),
                        "own_run": _pct(after[k], reading), "own_run_before": _pct(before[k], reading),
                        "own_before": _pct(before[k], statistics.median(rest)),
                        "others": statistics.fmean(abs(_pct(after[i], measured[i]["measured_s"])) for i in others),
                        "others_before": statistics.fmean(abs(_pct(before[i], measured[i]["measured_s"])) for i in others)})
    return out


def _q(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(int(q * len(s)), len(s) - 1)]


def summary(rows: list[dict]) -> str:
    own = [abs(r["own"]) for r in rows]
    oth = [r["others"] for r in rows]
    harm = [r["others"] - r["others_before"] for r in rows]
    # past its own run: refinement moved the configuration beyond the one run it was calibrated on
    past = sum(r["own_run"] * r["own_run_before"] < 0 and abs(r["own_run"]) > 0.05 for r in rows)
    return (f"on its own run |err| median {statistics.median(abs(r['own_run']) for r in rows):4.1f} % (past it: "
            f"{past}/{len(rows)}); "
            f"instrumented |err| median {statistics.median(own):4.1f} % mean {statistics.fmean(own):4.1f} % p90 "
            f"{_q(own, 0.9):4.1f} % (<= 3 %: {sum(e <= 3 for e in own)}/{len(own)}); others MAPE median "
            f"{statistics.median(oth):4.1f} % mean {statistics.fmean(oth):4.1f} % p90 {_q(oth, 0.9):4.1f} % max "
            f"{max(oth):4.1f} % (<= 8 %: {sum(e <= 8 for e in oth)}/{len(oth)}); others worse than before in "
            f"{sum(h > 0 for h in harm)}/{len(harm)} (mean {statistics.fmean(harm):+.1f} points, worst {max(harm):+.1f})")


def report_replay(record: dict, measured: list[dict], before: list[float]) -> None:
    """The distribution over every choice of calibration run, per strategy, and refine's per configuration."""
    rules = {"refine (cost-mix transfer)": refine_rule(True), "refine, own biases independent": refine_rule(False),
             "refine, ranks' wait not apart": refine_rule(True, peer_wait=False),
             "refine, the whole wall / CPU as wait": refine_rule(True, raw_wait=True),
             "refine, the profile's priors only": refine_rule(True, contamination=0.0),
             "session 11's refine": refine_rule(False, session11=True), "full ratio on every configuration": full_ratio,
             "wait as priced, multi-rank bias": multi_rank_bias}
    results = {name: replay(record, measured, before, rule) for name, rule in rules.items()}
    rows = results["refine (cost-mix transfer)"]
    print(f"\n[replay] every run of every configuration as the one calibration run ({len(rows)} choices), this "
          f"tree's refine; before refinement: others MAPE median {statistics.median(r['others_before'] for r in rows):.1f} %, "
          f"instrumented |err| median {statistics.median(abs(r['own_before']) for r in rows):.1f} %")
    for name, res in results.items():
        print(f"  {name:36s} {summary(res)}")
    for row in (r for r in rows if r["calibration"]):
        print(f"  recorded calibration run of config {row['k']} (pass {row['pass'] + 1}), this tree's refine: on its "
              f"own run {row['own_run']:+.1f} % (before {row['own_run_before']:+.1f} %), against its other runs "
              f"{row['own']:+.1f} % (before {row['own_before']:+.1f} %); others MAPE {row['others']:.1f} % (before "
              f"{row['others_before']:.1f} %)")
    print("  per configuration (refine, cost-mix transfer; medians over its runs): instrumented err / others MAPE "
          "(before)")
    for k in range(len(before)):
        mine = [r for r in rows if r["k"] == k]
        print(f"   {k:2d} {record['configs'][k]['label']:34s} {statistics.median(r['own'] for r in mine):+6.1f} % "
              f"(before {statistics.median(r['own_before'] for r in mine):+6.1f} %)  others "
              f"{statistics.median(r['others'] for r in mine):5.1f} % ({mine[0]['others_before']:.1f} %)  worst others "
              f"{max(r['others'] for r in mine):5.1f} %  runs {len(mine)}")



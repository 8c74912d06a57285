"""Refit one (hardware, cluster, framework) calibration from every usable run of it in the store.

    runs (store) -> configurations (fingerprints) -> variances -> posterior -> Calibration (store)
                 -> the profile's priors doubted where the runs contradict them (refine/prior_scale.py)
                 -> the multi-rank runs' wait for their peers (refine/peer_wait.py) -> the same, with its own variances

The shared part is fitted on one point per configuration (the geometric mean of its runs), so a configuration
instrumented ten times does not outvote nine others run once: scale only (the posterior's weighted mean mu), or
scale + per-step overhead where refine/calibration.fit_calibration finds >= 3 configurations of different
sizes support one. It transfers to configurations without runs with the posterior weight k
(refine/shrinkage.py); each instrumented configuration keeps its own posterior ratio.
"""

from __future__ import annotations

import json
import math
import sqlite3
import statistics
from typing import Any, Sequence

from llmperf_hook.refine import observation_store as store
from llmperf_hook.refine.calibration import Calibration, ConfigScale, fit_calibration
from llmperf_hook.refine.config_fingerprint import describe_config
from llmperf_hook.refine.own_scales import averaged_own_log_scales
from llmperf_hook.refine.peer_wait import fit_peer_wait
from llmperf_hook.refine.prior_scale import CONTAMINATION, averaged_posterior, mean_variances, scale_mixture
from llmperf_hook.refine.shrinkage import ConfigRuns, Priors, estimate_variances, group_runs, variance_priors


def recalibrate(conn: sqlite3.Connection, hardware: str, cluster: str, framework: str) -> tuple[Calibration | None, str]:
    """(the refitted calibration, where its variances came from), stored; (None, "") when the key has no usable
    run (a stored calibration of it is left as it is). The runs are read and the calibration written under one
    write lock (BEGIN IMMEDIATE): refines finishing at once each fit every run stored before them, and the last
    one written has them all (two refines could otherwise each save a fit that missed the other's run)."""
    began = not conn.in_transaction
    if began:
        conn.execute("BEGIN IMMEDIATE")
    try:
        result = _refit(conn, hardware, cluster, framework)
        if began and conn.in_transaction:
            conn.commit()
        return result
    except BaseException:
        if began and conn.in_transaction:
            conn.rollback()
        raise


def _refit(conn: sqlite3.Connection, hardware: str, cluster: str, framework: str) -> tuple[Calibration | None, str]:
    runs = store.runs_for_key(conn, hardware, cluster, framework)
    if not runs:
        return None, ""
    priors = variance_priors(hardware, store.reference_readings_for_key(conn, hardware, cluster, framework))
    cal, source = fit_key_calibration(hardware, cluster, framework, runs, priors)
    store.save_calibration(conn, cal)
    return cal, source


def fit_key_calibration(hardware: str, cluster: str, framework: str, runs: Sequence[tuple], priors: Priors,
                        contamination: float = CONTAMINATION) -> tuple[Calibration, str]:
    """The calibration of one key from its runs (rows as observation_store.runs_for_key returns them) and the
    hardware's variance priors, which fail with prior probability `contamination` (refine/prior_scale.py; 0: the
    priors as given); pure (benchmarks/bench_cpu_testbed.py --replay calls it on recorded runs)."""
    # the ranks' wait for each other (refine/peer_wait.py) is fitted apart for the configurations without runs: the
    # rest, the CPU part, as before
    rows = [(*r[:8], *(r[8:10] if len(r) > 9 else (0.0, False))) for r in runs]
    configs = group_runs([(j, f, p, m * math.exp(-w), sd, ss, sh) for j, f, p, m, _, sd, ss, sh, w, _ in rows])
    variances = estimate_variances(configs, priors.sd_config, priors.source, priors.sd_shared, priors.sd_moment,
                                   priors.sd_mix)
    # the profile's priors up to a scale that the runs inform where they contradict them (refine/prior_scale.py);
    # the wait keeps the prior's shared sd: its runs read it apart, with their own data
    mix = scale_mixture(configs, variances, contamination)
    post = averaged_posterior(configs, mix)
    waits = [(f, w, measured) for _, f, *_, w, measured in rows]
    wait = fit_peer_wait([(f, w) for f, w, measured in waits if measured], priors.sd_shared)
    scale, overhead = _shared_fit(configs, post.shared_log_scale)
    labels = {f: describe_config(_config(text)) for _, f, _, _, text, *_ in runs if f}
    # its own configuration's scale: the whole step shrunk as one reading (refine/own_scales.py)
    kept = averaged_own_log_scales(rows, mix.weights, mix.variances, wait)
    variances = mean_variances(variances, mix)
    own = tuple(_own_scale(c, kept[c.fingerprint], waits, labels.get(c.fingerprint, ""), post.alpha)
                for c in configs if not c.fingerprint.startswith("job:"))  # a run without one stands alone
    cal = Calibration(hardware, cluster, framework, scale, len(runs), overhead, shared_weight=post.shared_weight,
                      num_configs=len(configs), config_scales=own, sd_config=variances.sd_config,
                      sd_run=variances.sd_run, sd_shared=variances.sd_shared, sd_mix=variances.sd_mix,
                      wait_log_scale=wait.log_scale if wait else 0.0, wait_weight=wait.weight if wait else 0.0)
    return cal, variances.source


def _own_scale(c: ConfigRuns, log_scale: float, waits: Sequence[tuple[str | None, float, bool]], label: str,
               alpha: dict[str, float]) -> ConfigScale:
    """An instrumented configuration's calibration from its CPU-part runs `c` and its runs' (fingerprint, w,
    measured) `waits`: measured, the geometric mean of its whole readings (CPU part + the wait in each); its wait
    for the notes, the mean its quiet runs measured (a contended run's is assumed, and no other configuration
    gets it: refine/peer_wait.py)."""
    mine = [(w, measured) for f, w, measured in waits if f == c.fingerprint]
    quiet = [w for w, measured in mine if measured]
    return ConfigScale(c.fingerprint, math.exp(log_scale),
                       math.exp(statistics.fmean(c.log_ratios) + statistics.fmean(w for w, _ in mine)),
                       len(c.log_ratios), label, alpha.get(c.fingerprint, 0.0), c.shares,
                       statistics.fmean(quiet) if quiet else 0.0)


def _shared_fit(configs: list[ConfigRuns], mu: float) -> tuple[float, float]:
    """(scale, overhead) of the shared part: exp(mu), or the affine fit over the configurations' means."""
    scale, overhead = fit_calibration([c.predicted_s for c in configs], [c.measured_s for c in configs])
    return (scale, overhead) if overhead > 0 else (math.exp(mu), 0.0)


def _config(text: Any) -> dict | None:
    try:
        doc = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None

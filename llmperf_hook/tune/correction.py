"""Learn, during one search, how the full model differs from the closed-form surrogate.

After each batch of full predictions, log(full / surrogate) of step time and of peak memory is fitted as a
ridge-regularised linear function of the layout (log2 of each degree, recompute mode, optimizer sharding,
log2 of the micro-batch count). The corrected estimates order the next batch, and the residual spread of
the fit sets how far the stopping rule must stay from the K-th best full prediction. This is the
surrogate-assisted search of Jones et al. 1998 ("Efficient global optimization", J. Global Optim. 13) in its
simplest form: linear model, lower confidence bound = corrected estimate x exp(-z * sigma).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from llmperf_hook.tune.candidate import RECOMPUTE_CODES

RIDGE = 0.3
"""Ridge penalty on the (standardised-scale) coefficients: keeps early fits, from a few points, near 'no correction'."""
MIN_SIGMA = 0.08
"""Floor of the residual spread: the fit sees only visited layouts, and unvisited ones were off by 11 % (a 7B model
on 16 A100s: tp2 pp1 cp2 sp mbs8 estimated 3.67 s, predicted 3.28 s, the true best, missed with a 0.02 floor). Log units."""


def layout_features(cols: Mapping[str, np.ndarray], world: int, global_batch: int) -> np.ndarray:
    """One row per candidate: intercept, log2 degrees, recompute / optimizer indicators, log2 micro-batches
    (and log2 EP / expert TP when the table varies them)."""
    tp, pp, cp, mbs = (cols[k].astype(np.float64) for k in ("tp", "pp", "cp", "mbs"))
    dp = np.maximum(world // (tp * pp * cp), 1)
    num_mb = np.maximum(global_batch // (mbs * dp), 1)
    rc, zero = cols["rc"], cols["zero"]
    feats = [np.ones_like(tp), np.log2(tp), np.log2(pp), np.log2(cols["vpp"]), np.log2(cp), cols["sp"],
             np.log2(mbs), np.log2(num_mb), rc == RECOMPUTE_CODES["selective"], rc == RECOMPUTE_CODES["full"],
             rc == RECOMPUTE_CODES["block"], cols["distopt"], zero == 1, zero == 2, zero == 3]
    # Expert layout terms only where the table varies them (MoE searches): a constant column would add a
    # parameter to the residual spread's degrees of freedom and change dense searches for nothing.
    if "ep" in cols and cols["ep"].size and np.ptp(cols["ep"]) > 0:
        feats.append(np.log2(cols["ep"].astype(np.float64)))
    if "etp" in cols and np.any(cols["etp"] != cols["tp"]):
        feats.append(np.log2(cols["etp"].astype(np.float64)))
    return np.stack([np.asarray(f, dtype=np.float64) for f in feats], axis=1)


@dataclass(frozen=True)
class Correction:
    """log(full / surrogate) = features @ coef, with residual spread sigma (log units)."""

    coef: np.ndarray
    sigma: float

    def factor(self, feats: np.ndarray) -> np.ndarray:
        return np.exp(feats @ self.coef)


def no_correction(num_features: int) -> Correction:
    return Correction(np.zeros(num_features), sigma=0.25)


def fit_correction(feats: np.ndarray, log_ratio: np.ndarray) -> Correction:
    """Ridge least squares (intercept unpenalised); sigma from leave-one-out-like inflated residuals."""
    n, k = feats.shape
    if n < 4:
        return Correction(np.r_[np.median(log_ratio) if n else 0.0, np.zeros(k - 1)], sigma=0.25)
    penalty = RIDGE * np.eye(k)
    penalty[0, 0] = 0.0
    coef = np.linalg.solve(feats.T @ feats + penalty, feats.T @ log_ratio)
    resid = log_ratio - feats @ coef
    # In-sample residuals understate the error on unseen candidates; inflate by n / (n - effective params).
    dof = max(n - min(k, n - 1), 1)
    sigma = float(np.sqrt(np.sum(resid**2) / dof))
    return Correction(coef, max(sigma, MIN_SIGMA))

"""Samples -> fitted profile (models + metadata), shared by the sampler and the shipped-profile script.

One regressor per (op class, direction) over the contract dims, trained on every sample of that class (e.g.
one GEMM regressor from all five linear files), target log(time / (roofline + floor)). The recipe, every
choice made on an inner split of the training rows only (never on a test split):
- floor: 0, half the fastest sample, or the fitted intercept of t = a * roofline + b (intercept_floor_s);
  for the classes of hinge.HINGE_TERMS (embedding), then the fitted hinge min(a + b u, c + d w) in place of
  roofline + floor;
- loss: L1, L2 or Huber on the log ratio; then whether a linear baseline under the trees helps
  (fit.fit_linear_baseline), then whether linear leaves (LightGBM linear trees, L2) do, then (from
  LARGE_SET_ROWS) 31 leaves per tree;
- optional dims (features.OPTIONAL_DIMS) are trained both known and UNKNOWN (with_unknown_rows);
- the saved model averages 5 boosters when fewer than 2,000 rows train it (fit.BAG_BELOW_ROWS).
The held-out error stored in the metadata comes from a separate fit on 80 % of the samples; the saved model
uses them all.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

from llmperf_hook.predict.gemm_alignment import unaligned_sample_count
from llmperf_hook.profile.features import OPTIONAL_FEATURES, UNKNOWN, RooflineConstants, build_features, schema_hash
from llmperf_hook.profile.fit import MORE_LEAVES, NUM_LEAVES, FittedRegressor, Loss, fit_regressor
from llmperf_hook.profile.hinge import Hinge, fit_hinge, hinge_terms, priced_s
from llmperf_hook.profile.profile_io import ModelEntry


@dataclass(frozen=True)
class Samples:
    """Measured times of one op class and direction, as contract dims."""

    op_class: str
    phase: str
    """"fwd" | "bwd"."""
    dims: Mapping[str, np.ndarray]
    time_s: np.ndarray


def pool(sets: Sequence) -> Samples:
    """Concatenate sample sets of the same op class and phase (e.g. linear1..4 + linear_final)."""
    first = sets[0]
    dims = {k: np.concatenate([np.asarray(s.dims[k], dtype=np.float64) for s in sets]) for k in first.dims}
    return Samples(first.op_class, first.phase, dims, np.concatenate([np.asarray(s.time_s) for s in sets]))


def _timed_dims(s: Samples) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(dims, seconds) of the rows with a positive finite time and finite dims: the rows every fit trains on, and
    whose dims make its train_ranges. A NaN dim (a store row written by hand or by another tool: JSON takes NaN)
    made np.min of the range NaN, which every later comparison reads as inside, so extrapolation went unsaid."""
    keep = np.isfinite(s.time_s) & (s.time_s > 0)
    for v in s.dims.values():
        keep &= np.isfinite(np.asarray(v, dtype=np.float64))
    return {k: v[keep] for k, v in s.dims.items()}, s.time_s[keep]


def training_xy(s: Samples, rc: RooflineConstants) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], np.ndarray]:
    """(features, log(time/roofline), feature names, roofline_s); rows with a non-positive time are dropped."""
    dims, time_s = _timed_dims(s)
    block = build_features(s.op_class, s.phase == "bwd", dims, rc)
    return block.matrix, np.log(time_s / block.roofline_s), block.names, block.roofline_s


def training_terms(s: Samples) -> np.ndarray | None:
    """The hinge's (u, w) columns of the rows training_xy keeps (hinge.hinge_terms), or None for other classes."""
    return hinge_terms(s.op_class, _timed_dims(s)[0])


FLOOR_FRACTIONS = (0.0, 0.5)
"""Candidate fixed floors, as fractions of the fastest sample: launch and tail latency that the roofline lacks."""
LOSSES: tuple[Loss, ...] = ("l1", "l2", "huber")
"""Candidate losses (fit.Loss); l1 first, so a tie keeps the robust one. Huber (fit.HUBER_DELTA) as a third
candidate: inner error (20 % of each 25 % operator-benchmark training split, test rows unused) over the 74
(file, direction) rows 2.58 -> 2.56 % mean, 17 rows > 1 % lower, 6 higher (A100 GEMM fwd linear1 3.67 -> 3.50 %,
linear3 3.38 -> 3.22 %, linear_final 3.97 -> 3.84 %; A100 flash attention keeps L2, unchanged); Huber in place
of L2 loses A100 flash attention (6.93 -> 7.14 %)."""


def _mape(pred_log: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.abs(np.exp(pred_log - y) - 1.0)))


def unknown_columns(names: Sequence[str]) -> tuple[int, ...]:
    """Indices of the features computed from optional dims (features.OPTIONAL_FEATURES)."""
    return tuple(i for i, n in enumerate(names) if n in OPTIONAL_FEATURES)


def with_unknown_rows(x: np.ndarray, y: np.ndarray, cols: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Training rows plus a copy of those that know the optional dims with them set UNKNOWN: the regressor then
    answers an op without them (e.g. from a graph or a sampler that gives only `params`) with the best estimate
    from the required dims alone instead of extrapolating from a value it never saw."""
    if not cols:
        return x, y
    known = np.flatnonzero((x[:, list(cols)] != UNKNOWN).any(axis=1))
    if known.size == 0:
        return x, y
    copy = x[known].copy()
    copy[:, list(cols)] = UNKNOWN
    return np.vstack([x, copy]), np.concatenate([y, y[known]])


def intercept_floor_s(t: np.ndarray, roof: np.ndarray) -> float:
    """Fixed time b of t = a * roof + b (relative least squares over the rows), as a floor on the roofline
    scale: b / a, within [0, 0.95 x the fastest sample]. The alpha of an alpha-beta fit: launch, optimizer
    bookkeeping or synchronisation that does not grow with the work (e.g. ~2.5 ms of an A100 Adam step)."""
    w = 1.0 / t
    (a, b), *_ = np.linalg.lstsq(np.column_stack([roof * w, w]), t * w, rcond=None)
    return float(np.clip(b / a, 0.0, 0.95 * t.min())) if a > 0 else 0.0


Choice = tuple[float, Loss, bool, bool, int]
"""(floor_s, loss, linear baseline, linear leaves, leaves per tree) of fit_with_floor's search."""
LARGE_SET_ROWS = 1000
"""Training sets from this size (validated on one 20 % split) also try fit.MORE_LEAVES per tree."""
MIN_GAIN_FOR_SIZE = 0.10
"""Linear leaves and MORE_LEAVES make a model 2-7x larger on disk (coefficients per leaf, twice the leaves), so
they are kept only where they lower the inner error by at least this share (GH200 embedding forward: 1.66 ->
1.42 %, GH200 flash attention forward 0.81 -> 0.67 %; most classes gain 0-5 %, which would not pay for the
profile size: configs/profiles is 2.6 MiB, 2.0 MiB of it the A100 and GH200 profiles)."""


def fit_with_floor(x: np.ndarray, t: np.ndarray, roof: np.ndarray, prefer: str = "lightgbm",
                   seed: int = 0, unknown_cols: Sequence[int] = (),
                   terms: np.ndarray | None = None) -> tuple[FittedRegressor, float]:
    """Fit log(t / (roof + floor)); the floor (FLOOR_FRACTIONS of the fastest sample, or the fitted intercept)
    and the loss (LOSSES) are chosen by cross-validation inside (x, t) only (3 folds below 1,000 samples, one
    20 % split above). A small-kernel floor (e.g. ~70 us of a GH200 GEMM backward) is then part of the
    normaliser instead of a slope the trees would have to approximate leaf by leaf. Then a linear baseline and
    linear leaves are each kept if they lower the same cross-validated error. `unknown_cols`: features of
    optional dims, trained known and UNKNOWN (with_unknown_rows). `terms` (training_terms, hinge classes only):
    the hinge normaliser, refitted inside each fold, replaces roofline + floor where it lowers that error by
    MIN_GAIN_FOR_SIZE (flat in one term beyond the samples, it extrapolates less safely than the roofline; inner
    gains on full data: GH200 embedding fwd 12 %, kept; GH200 bwd 8 %, A100 fwd / bwd 5 / 2 %, and the H100
    sampler's folder A fwd 5 %, whose hinge scored its other folder's shapes worse, 7.3 -> 11.8 % MAPE >= 100 us:
    not kept); the returned regressor then carries it (FittedRegressor.hinge, floor 0)."""
    floors = sorted({f * float(t.min()) for f in FLOOR_FRACTIONS} | {intercept_floor_s(t, roof)})
    best: Choice = (floors[0], LOSSES[0], False, False, NUM_LEAVES)
    if len(t) >= 30:
        perm = np.random.default_rng(seed + 101).permutation(len(t))
        folds = np.array_split(perm, 3) if len(t) < LARGE_SET_ROWS else [perm[: len(t) // 5]]

        def cv(choice: Choice) -> float:
            return float(np.mean([_fold_error(x, t, roof, choice, val, prefer, unknown_cols) for val in folds]))

        grid: list[Choice] = [(floor, loss, False, False, NUM_LEAVES) for loss in LOSSES for floor in floors]
        errors = [cv(g) for g in grid]
        best, best_error = grid[int(np.argmin(errors))], min(errors)
        # The linear baseline, then linear leaves, then (large sets) bigger trees are tried on top of the choice
        # so far: one more CV each, not a grid. Linear leaves and leaf counts are LightGBM's (not the fallback's).
        candidates = [(lambda b: (b[0], b[1], True, False, b[4]), 0.0)]
        if prefer != "sklearn":
            candidates.append((lambda b: (b[0], "l2", b[2], True, b[4]), MIN_GAIN_FOR_SIZE))
            if len(t) >= LARGE_SET_ROWS:
                candidates.append((lambda b: (*b[:4], MORE_LEAVES), MIN_GAIN_FOR_SIZE))
        for make, min_gain in candidates:
            choice = make(best)
            error = cv(choice)
            if error < (1.0 - min_gain) * best_error:
                best, best_error = choice, error
        if terms is not None:
            hinge_error = float(np.mean([_hinge_fold_error(x, t, terms, best, val, prefer, unknown_cols)
                                         for val in folds]))
            if hinge_error < (1.0 - MIN_GAIN_FOR_SIZE) * best_error:
                hinge = fit_hinge(terms, t)
                return _fit_final(x, t, hinge.time_s(terms), (0.0, *best[1:]), prefer, unknown_cols, hinge), 0.0
    return _fit_final(x, t, roof, best, prefer, unknown_cols), best[0]


def _fit_final(x: np.ndarray, t: np.ndarray, roof: np.ndarray, choice: Choice, prefer: str,
               unknown_cols: Sequence[int], hinge: Hinge | None = None) -> FittedRegressor:
    floor, loss, base, linear, leaves = choice
    xa, ya = with_unknown_rows(x, np.log(t / (roof + floor)), unknown_cols)
    reg = fit_regressor(xa, ya, prefer, loss, bagged=True, baseline=base, skip_cols=unknown_cols, linear=linear,
                        leaves=leaves)
    return reg if hinge is None else replace(reg, hinge=hinge)


def _hinge_fold_error(x: np.ndarray, t: np.ndarray, terms: np.ndarray, choice: Choice, val: np.ndarray,
                      prefer: str, unknown_cols: Sequence[int]) -> float:
    """_fold_error with the hinge (fitted on the fold's training rows only) as the normaliser, floor 0."""
    train = np.setdiff1d(np.arange(len(t)), val)
    norm = fit_hinge(terms[train], t[train]).time_s(terms)
    return _fold_error(x, t, norm, (0.0, *choice[1:]), val, prefer, unknown_cols)


def _fold_error(x: np.ndarray, t: np.ndarray, roof: np.ndarray, choice: Choice, val: np.ndarray,
                prefer: str, unknown_cols: Sequence[int] = ()) -> float:
    floor, loss, base, linear, leaves = choice
    train = np.setdiff1d(np.arange(len(t)), val)
    y = np.log(t / (roof + floor))
    xa, ya = with_unknown_rows(x[train], y[train], unknown_cols)
    reg = fit_regressor(xa, ya, prefer, loss, baseline=base, skip_cols=unknown_cols, linear=linear, leaves=leaves)
    return _mape(reg.predict(x[val]), y[val])


def predict_with_floor(reg: FittedRegressor, floor_s: float, x: np.ndarray, roof: np.ndarray,
                       terms: np.ndarray | None = None, bwd: bool = False,
                       rc: RooflineConstants | None = None) -> np.ndarray:
    """Seconds: (roofline + floor), or the regressor's hinge of `terms` where it carries one, x exp(model). With
    `rc` (and the direction `bwd`), a hinge model is priced as the predictor prices it (hinge.priced_s: never
    below moving its own rows at the datasheet bandwidth); without, the hinge alone (its inner-split fits)."""
    ratio = np.exp(reg.predict(x))
    if reg.hinge is None:
        return (roof + floor_s) * ratio
    if rc is None:
        return reg.hinge.time_s(terms) * ratio
    return priced_s(reg.hinge, terms, ratio, bwd, rc.dtype_bytes, rc.memory_bandwidth_bytes_per_s)


MAPE_FLOOR_S = 1e-6
"""Smallest time a held-out sample's error is divided by. CUDA events resolve about 0.5 us (CUDA Runtime API,
cudaEventElapsedTime) and one torch op dispatched from Python takes microseconds on a CPU, so a sample timed
faster than 1 us is the timer's noise: dividing by it (a 1 ns glitch) made one sample dominate the mean, and the
shipped-model rule (fit_shipped_profiles.MAX_SHIPPED_HOLDOUT_MAPE) and refine's shrinkage read that mean."""


def holdout_mape(s: Samples, rc: RooflineConstants, prefer: str, floor_s: float = 0.0, seed: int = 0,
                 loss: Loss = "l1", baseline: bool = False, linear: bool = False,
                 leaves: int = NUM_LEAVES, hinge: bool = False) -> float | None:
    """MAPE on a 20 % hold-out of a fit on the other 80 % (with the floor, loss, baseline and, `hinge`, the hinge
    normaliser the full fit chose; the hinge refitted on the 80 %)."""
    x, y, names, roof = training_xy(s, rc)
    if len(y) < 10:
        return None
    t = roof * np.exp(y)
    perm = np.random.default_rng(seed).permutation(len(y))
    test, train = perm[: len(y) // 5], perm[len(y) // 5:]
    cols = unknown_columns(names)
    norm = roof + floor_s
    if hinge:
        terms = training_terms(s)
        norm = fit_hinge(terms[train], t[train]).time_s(terms)
    xa, ya = with_unknown_rows(x[train], np.log(t[train] / norm[train]), cols)
    reg = fit_regressor(xa, ya, prefer, loss, bagged=True, baseline=baseline, skip_cols=cols, linear=linear,
                        leaves=leaves)
    predicted = norm[test] * np.exp(reg.predict(x[test]))
    return float(np.mean(np.abs(predicted - t[test]) / np.maximum(t[test], MAPE_FLOOR_S)))


def fit_samples(s: Samples, rc: RooflineConstants, dtype: str, prefer: str = "lightgbm",
                with_holdout: bool = True) -> tuple[ModelEntry, str]:
    x, y, names, roof = training_xy(s, rc)
    reg, floor = fit_with_floor(x, roof * np.exp(y), roof, prefer, unknown_cols=unknown_columns(names),
                                terms=training_terms(s))
    ext = "txt.gz" if reg.model_format == "lightgbm-text" else "json"
    entry = ModelEntry(
        op_class=s.op_class, phase=s.phase, dtype=dtype, file=f"{s.op_class}.{s.phase}.{dtype}.{ext}",
        model_format=reg.model_format,
        sha256="", schema_hash=schema_hash(s.op_class, s.phase == "bwd"), feature_names=names,
        train_ranges={k: (float(v.min()), float(v.max())) for k, v in _timed_dims(s)[0].items()}, num_samples=len(y),
        holdout_mape=holdout_mape(s, rc, prefer, floor, loss=reg.loss, baseline=reg.baseline is not None,
                                  linear=reg.linear_leaves, leaves=reg.num_leaves, hinge=reg.hinge is not None)
        if with_holdout else None, floor_s=floor,
        baseline=reg.baseline, hinge=None if reg.hinge is None else reg.hinge.as_tuple(),
        unaligned_samples=unaligned_sample_count(s.op_class, _timed_dims(s)[0]))
    return entry, reg.text


def library_versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in ("llmperf_hook", "numpy", "lightgbm", "scikit-learn", "torch"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out

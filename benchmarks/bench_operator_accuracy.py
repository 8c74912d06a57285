"""Hold-out accuracy of the operator regressors on the public samples, next to the authors' own regressors.

    OMP_NUM_THREADS=1 python benchmarks/bench_operator_accuracy.py [--data ../shared/data/op-samples] [--train-fraction 0.25]
        [--design random|maximin|mixed|config|adaptive|adaptive-maximin] [--inner] [--seed 0] [--random-only]
        [--groups gemm attention ...] [--hardware a100-sxm4-80gb ...] [--tp-column] [--no-rerun]

For every GPU, operator file and direction: MAPE on (a) a random 20 % test split and (b) an extrapolation split
(test = the samples at the largest hidden size or sequence length; train on the others), each trained on at
most `--train-fraction` of ALL samples of the fit group, averaged over 3 random draws, with the exact recipe of the shipped profiles (one
regressor per op class over the contract dims, e.g. one GEMM regressor for all five linear files, one Adam
regressor for the three pipeline-stage files; floor, loss and linear baseline chosen inside the training rows;
5 bagged boosters below 2,000 training rows; the embedding's hinge normaliser where the inner split keeps it,
profile/hinge.py, priced as `predict` prices it, floor included: hinge.priced_s; build_profile's docstring).
Samples faster than the datasheet peak are dropped; a group with a majority of such samples, or a streaming step
(Adam) whose time does not grow with its parameters (shipped.corrupt_reason), is reported as corrupt. For the
optimizer, the note gives the error when the ops carry only `params` (without the optional dims layers /
embedding_params).
Reference: `Best_error%` in NVIDIA<GPU>.csv (the authors' best of random forest / XGBoost on their own split,
with far more training samples). `repeat`: how far repeated measurements of the same per-rank shape lie from
their median; `floor` = sqrt(2) x repeat, the MAPE a perfect predictor of each shape's mean time would still
have (for Gaussian repeats in pairs |t - median| = |e1 - e2| / 2 and E|e1 - e2| = sqrt(2) E|e|). The repeats of
a shape come from other configurations of the authors' sweep, mostly other runs (the same per-rank shape from
another TP degree or micro-batch): in file order a repeat lies 131 / 1,149 / 2,669 rows (10th / 50th / 90th
percentile) from its nearest twin in the A100 flash-attention file (runs of about 105 rows), 227 / 669 / 1,087
in the 1,755-row GEMM and embedding files. So the floor holds most of the run-to-run drift too (A100 flash
attention: runs whose mean error sits -12 % to +9 % apart, a spread no shape feature can predict).
The summary says, for each row that misses the reference or the target (floor_note): its noise floor, the model
part of our error beyond it (model_part: errors add in quadrature) and the model part the goal allows; a goal
below the floor is one no predictor of the shape reaches on these samples.
Rows that do not beat the reference, or miss the GEMM / flash-attention target, at `--train-fraction` are
evaluated again with the reference's own share of training data (`REFERENCE_TRAIN_FRACTION`, the authors' 80/20
split): like for like with the reference, and whether more data would reach the target; `run drift` then
says how much of their error follows the run they were measured in rather than their shape: run_drift (file
neighbours), and `same-run drift` (sibling_drift): the correlation of a row's error with the error of rows
measured in the same configuration of the authors' sweep, the other GEMM files' shapes (A100 GEMM forward at
80 %: r = 0.34-0.49) and the other direction of the same CSV row (A100 flash attention: r = 0.90), with the
error left once that shared part is taken off.
`--inner`: a column with the inner-CV MAPE (INNER_SHARE of each random draw's training rows held out, the test
rows unused), the figure a change to the fitting recipe is judged on; the test columns only report it.
`--design maximin`: the training rows are the greedy farthest-point subset of the non-test rows in log-dims
space (plan.maximin_subset, the profiler's choice of WHICH shapes to measure) instead of a random subset;
`--design mixed`: half of them maximin (covers the corners), half random (follows the density of the space).
`--design config`: the training rows dealt round-robin over the authors' sweep configurations (CONFIG_COLUMNS;
plan.config_stratified_subset), every configuration measured once before any twice, so each run of a group that
pools files of the same runs (five GEMMs, baddbmm + bmm, stage Adam) is seen in training; a random subset where
each row is its own configuration. Measured, not the default: A100 GEMM fwd linear1/2/3/4/final 3.20 / 2.62 /
3.08 / 2.67 / 3.47 % (random) -> 2.98 / 2.44 / 2.82 / 2.63 / 3.51 % on the benchmark's draws, 3.29 / 2.45 / 2.94 /
2.80 / 3.51 -> 3.35 / 2.58 / 3.00 / 2.59 / 3.31 % on seed 1's: within the +-0.2 points a row moves between draws;
the whole benchmark 70/74 rows beat the reference (random 72/74), GH200 GEMM worse (linear2 bwd 2.92 -> 3.63 %).
`--design adaptive`: the rows chosen as `llmperf profile` chooses shapes (plan.py): ADAPTIVE_SEED_SHARE of the
budget at random (`adaptive-maximin`: maximin), then ADAPTIVE_ROUNDS rounds adding the pool rows where the
sampler's committee of bootstrap regressors disagrees most (adaptive.most_uncertain, the function
sampler._adaptive_specs calls; only the chosen rows' times are read). Paired with the random design: the same
test rows and the same first half of the training rows (adaptive_split). Measured, not the default. On the
benchmark's draws (seed 0), all 74 rows: 71/74 beat the reference (random 72/74: GH200 cross-entropy bwd 8.74
-> 11.77 % against 11.38), mean 2.50 -> 2.45 %, 49 rows lower, 24 higher; A100 GEMM fwd linear1 / linear3 /
linear_final 3.20 / 3.08 / 3.47 -> 3.06 / 3.02 / 3.45 % (still over 3 %), baddbmm fwd 6.79 -> 6.15 %; but A100
flash attention 6.64 / 6.99 -> 6.78 / 7.04 %, GH200 embedding fwd 1.92 -> 2.71 %, GH200 GEMM fwd linear4 /
linear_final 1.53 / 1.48 -> 1.71 / 1.68 %. `--seed 1`, A100 GEMM to GELU (28 rows): mean 3.22 -> 3.14 %, 14
lower, 11 higher, flash attention 6.52 / 6.78 -> 6.62 / 6.87 %. The committee disagrees most where repeats of
a shape scatter (bootstrap variance there is the noise, not a gap in coverage), so where noise is the error
(flash attention, embedding, cross-entropy) the rounds buy repeats of noisy shapes at the expense of the rest.
A maximin seed (`adaptive-maximin`) did better on seed 0 (A100 flash attention 6.62 / 6.92 %, GH200 embedding
bwd / fwd 1.74 / 1.89 % vs random 1.87 / 1.92 %) but not on seed 1 (6.55 / 6.81 % vs 6.52 / 6.78; embedding
1.70 / 2.07 % vs 2.08 / 1.89 %). The inner column cannot rank designs: it holds out rows of the chosen set, and
an adaptive set is rich in the rows the committee found hard (seed 0: 2.58 -> 2.93 % mean).
`--design distinct`: the random design's own order with every repeat of an already chosen shape (same contract
dims) skipped until each shape is in (distinct_subset; a profiler times a shape once). Measured, not the
default, on seeds 1 and 2 (paired: same test rows, same random order): A100 flash attention fwd 6.81 -> 6.99 %,
bwd 6.59 -> 6.52 %; GH200 embedding fwd 2.01 -> 2.06 %, bwd 2.06 -> 1.92 %; A100 GEMM fwd (seed 1) linear1 /
2 / 3 / 4 / final 3.29 / 2.45 / 2.94 / 2.80 / 3.51 -> 3.15 / 2.53 / 2.98 / 2.75 / 3.49 %: within the +-0.2
points a row moves between draws, none of the rows that miss reaches its goal.
Tried, not a design here: training rows drawn with probability roofline^-a (a profiler knows a shape's roofline
before timing it; short GEMMs repeat within 0.5 % and step between cuBLAS kernels, long ones scatter 4 %,
bench_operator_noise.py). A100 GEMM fwd linear1..4, final, seed 0: a = 0.25: 3.20 / 2.62 / 3.08 / 2.67 / 3.47 ->
3.21 / 2.56 / 3.05 / 2.62 / 3.77 %, a = 0.5: 3.28 / 2.60 / 3.10 / 2.72 / 3.80 % (the long test rows lose support).
Tried, not a design here: training rows dealt round-robin over the weight-shape lines (GEMM (n, k), attention
(heads, head_dim): a profiler times each weight of a job at several token counts; config_stratified_subset over
those keys). A100 GEMM fwd linear1..4, final, seed 0: 3.20 / 2.62 / 3.08 / 2.67 / 3.47 -> 2.78 / 2.82 / 2.89 /
2.57 / 3.45 %, flash attention fwd 6.99 -> 6.78 %; seed 1: 3.29 / 2.45 / 2.94 / 2.80 / 3.51 -> 3.16 / 3.04 / 3.17
/ 2.76 / 3.34 %, 6.78 -> 7.01 %; bwd 6.64 -> 6.66 %, 6.52 -> 6.45 %: the draws' noise. Allocated in proportion
to each line's rows instead (systematic sample), seed 0: 3.14 / 2.52 / 2.89 / 2.75 / 3.53 %, 6.98 %.
Why A100 GEMM forward and flash attention stay over issue 4's 3 % / 6 % (H201, seed 0): trained on 80 % instead
of 25 % (3.2x the rows) the random split is still 2.74 / 2.41 / 2.65 / 2.23 / 3.15 % (linear1..4, final) and flash
attention 6.62 % fwd / 6.43 % bwd, so the rows sit near what the shapes allow, not short of data. On one draw's
test rows that have a twin (the same shape measured in another configuration), the mean of the OTHER twins
(leave-one-out, from all the samples) misses flash attention by 8.07 / 7.54 % (fwd / bwd; the model 6.68 /
6.37 % on the same rows): with one twin each that is sqrt(2) x the single-measurement noise, i.e. 5.7 / 5.3 %, the
floor column; linear_final 3.72 % (model 3.78 %). Flash attention's test errors follow the TP degree of the run
(median error mp 1 / 2 / 4 / 8 / 16: +1.0 / +2.8 / -4.4 / -3.3 / -2.3 % fwd), which the per-rank shape does not
carry; taking each (mp, b) run's median error off the test rows themselves (an oracle) still leaves 6.40 / 6.00 %.
Also tried (fit.py hyperparameters, flash fwd and GEMM fwd, 25 %): learning rate 0.05 with 600 rounds 6.99 ->
7.05 %, GEMM fwd -0.01..-0.04 points; min_data_in_leaf 10: 6.96 %, GEMM fwd -0.05..+0.01 points.
`--tp-column` (H209, tried, not shipped): log2 of the sampled run's TP degree (the files' mp; a job's TP is
known at predict time) appended to the GEMM and flash-attention features. 25 %, seed 0, before -> after. Inner
CV (the decision figure): A100 GEMM fwd linear1..4, final 3.50 / 2.35 / 3.22 / 3.05 / 3.84 -> 3.52 / 2.30 / 3.31
/ 3.05 / 3.88 %, bwd 3.33 / 0.98 / 2.16 / 2.11 / 3.03 -> 3.35 / 0.98 / 2.21 / 2.07 / 2.94 %, flash fwd / bwd
6.93 / 6.66 -> 6.84 / 6.53 %; GH200 GEMM fwd 2.31 / 1.65 / 2.04 / 1.66 / 1.52 -> 2.28 / 1.64 / 2.07 / 1.65 / 1.47
%, bwd 2.54 / 3.78 / 1.98 / 1.89 / 1.70 -> 2.29 / 3.56 / 1.86 / 1.79 / 1.61 %, flash fwd 1.44 -> 1.49 %. Random
split: A100 GEMM fwd 3.20 / 2.62 / 3.08 / 2.67 / 3.47 -> 3.12 / 2.56 / 3.01 / 2.63 / 3.40 %, bwd linear1 2.91 ->
3.14 %, flash 6.99 / 6.64 -> 6.98 / 6.53 %; GH200 GEMM bwd 2.18 / 2.92 / 1.66 / 1.70 / 1.57 -> 2.12 / 3.06 / 1.79 /
1.76 / 1.58 % (linear2 over 3 %). Extrapolation split: A100 flash fwd / bwd 6.82 / 6.55 -> 7.17 / 6.70 %, A100
GEMM fwd 3.30 / 3.59 / 2.86 / 3.12 / 3.08 -> 3.35 / 3.44 / 2.92 / 3.09 / 3.21 %, GH200 GEMM bwd 2.04 / 2.79 /
1.67 / 2.05 / 1.58 -> 2.01 / 3.06 / 1.68 / 2.16 / 1.63 %, GH200 flash fwd 0.87 -> 1.02 %. Whole held-out runs
(benchmarks/bench_tp_degree.py) show why: the random split's gains come from rows of the same run, and little
carries to a run the fit never saw (A100 flash fwd 7.06 -> 7.05 %, bwd 6.53 -> 6.45 %, GH200 flash fwd 1.90 -> 1.91 %, A100 GEMM fwd 3.20 -> 3.14 %,
GH200 GEMM bwd 2.35 -> 2.39 %). The A100 flash runs' median errors follow mp (mp 1 / 2 / 4 / 8 / 16, micro-batch 4 /
8: +1.1 / +1.4, +3.5 / +1.4, -3.6 / -5.2, -3.5 / -2.9, -4.7 / -0.7 %), and most of it stays with the column (+1.6 /
+2.6, +3.0 / -0.7, -2.5 / -4.7, -3.7 / -1.0, -2.4 / +1.1 %); the GEMM runs have no offset to learn (within +-0.7 %).
`--no-rerun`: both splits, without the rerun of the misses at the reference's share.
`--seed`: the draws' seed (0 = the figures above); `--random-only`: only the random split, no extrapolation
split and no rerun of the misses (the figures above; each group draws from its own generator of that seed).
`--groups` / `--hardware`: only these fit groups (shipped.FIT_GROUPS) / shipped GPUs, to explore a change on the
rows it is about; each group draws from its own generator, so a subset prints exactly the figures of the full run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmperf_hook.profile.adaptive import pool_adaptive_subset  # noqa: E402
from llmperf_hook.profile.build_profile import (Samples, fit_with_floor, pool, predict_with_floor,  # noqa: E402
                                                training_terms, training_xy, unknown_columns)
from llmperf_hook.profile.features import OPTIONAL_DIMS, UNKNOWN  # noqa: E402
from llmperf_hook.profile.plan import config_stratified_subset, maximin_subset  # noqa: E402
from llmperf_hook.profile.public_samples import SampleSet, read_reference_errors  # noqa: E402
from llmperf_hook.profile.shipped import FIT_GROUPS, SHIPPED, ShippedHardware, corrupt_reason, load_group, plausible_mask  # noqa: E402

GEMM_TARGET, FLASH_TARGET = 0.03, 0.06
REFERENCE_TRAIN_FRACTION = 0.8
"""The share of the samples the authors' regressors were trained on (80/20 split)."""
SEEDS = 3
"""Each split is drawn this many times and the MAPEs averaged (one split alone varies by about +-0.5 points)."""
INNER_SHARE = 0.2
"""`--inner`: share of each random draw's training rows held out to judge a change to the fitting recipe."""
INNER_SEED = 1000
"""Seed of the inner hold-out of draw d: INNER_SEED + d (its own generator, so the test draws do not move)."""


def _raw(sets: list[SampleSet], key: str) -> np.ndarray:
    return np.concatenate([s.raw.get(key, np.full(len(s.time_s), np.nan)) for s in sets])


def extrapolation_test_mask(sets: list[SampleSet]) -> np.ndarray:
    """Samples at the largest hidden size or the largest sequence length of the group (or most layers/params)."""
    mask = np.zeros(sum(len(s.time_s) for s in sets), dtype=bool)
    for key in ("dim", "l", "encoders"):
        col = _raw(sets, key)
        if np.isfinite(col).any():
            mask |= col == np.nanmax(col)
    if not mask.any():
        params = _raw(sets, "params")
        mask = params >= np.quantile(params, 0.8)
    return mask


def repeatability(s: Samples, source: np.ndarray) -> dict[str, float]:
    """Per file: mean |t - median| / median over samples whose contract dims were measured more than once
    (e.g. the same per-rank GEMM from two TP degrees): the noise floor no regressor can beat."""
    keys = np.column_stack([s.dims[k] for k in sorted(s.dims)])
    _, inverse, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    med = np.zeros(len(counts))
    for g in np.flatnonzero(counts > 1):
        med[g] = np.median(s.time_s[inverse == g])
    dup = counts[inverse] > 1
    ape = np.where(dup, np.abs(s.time_s / np.where(dup, med[inverse], 1.0) - 1.0), np.nan)
    return {src: float(np.nanmean(ape[source == src])) for src in np.unique(source[dup])}


def split(n: int, test: np.ndarray, frac: float, rng: np.random.Generator,
          points: np.ndarray | None = None, maximin_share: float = 1.0,
          configs: np.ndarray | None = None, xy: tuple[np.ndarray, np.ndarray] | None = None,
          shapes: np.ndarray | None = None) -> np.ndarray:
    """Training rows outside `test`, at most frac * n of them: random, or `maximin_share` of them maximin over
    `points` (when given) and the rest random among the remaining rows, or (`configs` given) dealt round-robin
    over the sweep configurations (plan.config_stratified_subset), or (`xy` given: features, log time ratio)
    adaptively (adaptive_split), or (`shapes` given) distinct_subset over the rows' contract dims."""
    pool_idx = np.flatnonzero(~test)
    if shapes is not None:
        perm = rng.permutation(pool_idx)
        return perm[distinct_subset(shapes[perm], int(frac * n))]
    if xy is not None:
        return adaptive_split(pool_idx, min(int(frac * n), len(pool_idx)), xy, rng, points)
    if configs is not None:
        num = min(int(frac * n), len(pool_idx))
        return pool_idx[config_stratified_subset(configs[pool_idx], num, rng)]
    if points is None:
        return rng.permutation(pool_idx)[: int(frac * n)]
    num = min(int(frac * n), len(pool_idx))
    picked = pool_idx[maximin_subset(points[pool_idx], int(maximin_share * num), int(rng.integers(1 << 30)))]
    rest = rng.permutation(np.setdiff1d(pool_idx, picked))[: num - len(picked)]
    return np.concatenate([picked, rest])


def distinct_subset(shapes: np.ndarray, num: int) -> np.ndarray:
    """Positions of `num` rows of `shapes` ([rows, dims], already in random order): the first row of each
    distinct shape in that order, then (when there are fewer distinct shapes than `num`) the other rows in
    order. `--design distinct`: a profiler measures a shape once, so none of its budget goes to a repeat of a
    shape it already timed; the random design spends a share on repeats (the same per-rank GEMM from two TP
    degrees, the same tokens from two micro-batch and sequence splits)."""
    _, first = np.unique(shapes, axis=0, return_index=True)
    firsts = np.sort(first)
    rest = np.setdiff1d(np.arange(len(shapes)), firsts)
    return np.concatenate([firsts, rest])[:num]


ADAPTIVE_SEED_SHARE = 0.5
"""`--design adaptive`: share of the training budget drawn before the first fit (random rows; maximin ones with
`--design adaptive-maximin`); the rest comes in ADAPTIVE_ROUNDS equal rounds where the committee disagrees."""
ADAPTIVE_ROUNDS = 3


def adaptive_split(pool_idx: np.ndarray, num: int, xy: tuple[np.ndarray, np.ndarray], rng: np.random.Generator,
                   points: np.ndarray | None = None) -> np.ndarray:
    """`num` rows of `pool_idx` chosen as `llmperf profile` chooses shapes: ADAPTIVE_SEED_SHARE of them first
    (random, or maximin over `points` when given: the space-filling design), then adaptive.pool_adaptive_subset
    (the sampler's disagreement rule) over the rest of the pool, reading only the chosen rows' times. `rng`
    draws exactly what the random design draws (one permutation of the pool; the random seed rows are its
    first ones), the rest comes from a generator seeded by that permutation: every design then gets the same
    test rows in every draw, and the comparison with the random design is paired."""
    order = rng.permutation(pool_idx)
    own = np.random.default_rng(order[:16].tolist())
    num_seed = int(ADAPTIVE_SEED_SHARE * num)
    seed_rows = order[:num_seed] if points is None \
        else pool_idx[maximin_subset(points[pool_idx], num_seed, int(own.integers(1 << 30)))]
    return pool_adaptive_subset(xy[0], xy[1], pool_idx, seed_rows, num, ADAPTIVE_ROUNDS, own)


CONFIG_COLUMNS = ("mp", "b", "l", "dim", "h", "encoders")
"""Raw columns naming one configuration of the authors' sweep (TP degree, micro-batch, sequence, hidden size,
heads, layers): the rows of a group that share them were measured in the same run (e.g. the five GEMMs of one
layer size, or the three pipeline-stage Adam steps of one model)."""


def config_keys(sets: list[SampleSet]) -> np.ndarray:
    """[rows, columns] of the group's configuration columns (CONFIG_COLUMNS that every file of it has)."""
    cols = [c for c in CONFIG_COLUMNS if all(c in x.raw for x in sets)]
    rows = sum(len(x.time_s) for x in sets)
    return np.column_stack([_raw(sets, c) for c in cols]) if cols else np.zeros((rows, 0))


def evaluate(s: Samples, train: np.ndarray, test: np.ndarray, rc,
             extra: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """The shipped recipe (floor chosen inside the training rows) trained on `train`: APE on `test`, and APE
    on `test` with the optional dims withheld (what an op that carries only the required dims gets; None for
    classes without optional dims). `extra`: a feature column appended to the shipped ones (`--tp-column`)."""
    x, y, names, roof = training_xy(s, rc)
    x = x if extra is None else np.column_stack([x, extra])
    t, cols, terms = roof * np.exp(y), unknown_columns(names), training_terms(s)
    reg, floor = fit_with_floor(x[train], t[train], roof[train], unknown_cols=cols, terms=_rows(terms, train))
    priced = dict(terms=_rows(terms, test), bwd=s.phase == "bwd", rc=rc)
    ape = np.abs(predict_with_floor(reg, floor, x[test], roof[test], **priced) / t[test] - 1.0)
    if not cols or (x[:, list(cols)] == UNKNOWN).all():
        return ape, None
    bare = x[test].copy()
    bare[:, list(cols)] = UNKNOWN
    return ape, np.abs(predict_with_floor(reg, floor, bare, roof[test], **priced) / t[test] - 1.0)


def _rows(terms: np.ndarray | None, rows: np.ndarray) -> np.ndarray | None:
    """The hinge's (u, w) columns of `rows` (build_profile.training_terms; None for classes without a hinge)."""
    return None if terms is None else terms[rows]


def inner_split(train: np.ndarray, draw: int) -> tuple[np.ndarray, np.ndarray]:
    """(fit rows, validation rows): INNER_SHARE of a training split held out, drawn apart from the test draws."""
    perm = np.random.default_rng(INNER_SEED + draw).permutation(train)
    num_val = int(round(len(perm) * INNER_SHARE))
    return perm[num_val:], perm[:num_val]


def _per_source(ape: np.ndarray, src: np.ndarray, sets: list[SampleSet]) -> dict[str, float]:
    return {x.source: float(ape[src == x.source].mean()) for x in sets if (src == x.source).any()}


def bench_group(hw: ShippedHardware, sets: list[SampleSet], frac: float, ref: dict, rng,
                design: str = "random", extrap: bool = True, inner: bool = False,
                tp_column: bool = False) -> list[tuple]:
    """Rows (file, phase, random-split MAPE, extrapolation MAPE, reference, training share, note, repeat,
    inner-CV MAPE) of one fit group. `extrap=False` draws the extrapolation splits (same random draws after
    them) without fitting them; their MAPE is then None. `inner=True` also fits each random draw's training
    rows without INNER_SHARE of them and measures those (test rows unused): the figure a change to the recipe
    is judged on; None otherwise. `tp_column`: log2 of the run's TP degree (the files' mp column) appended as a
    feature (tried, not shipped: module docstring); groups without an mp column are fitted as shipped."""
    s = pool(sets)
    keep = plausible_mask(s, hw.roofline)
    source = np.concatenate([[x.source] * len(x.time_s) for x in sets])
    phase_ref = "dur" if "optimizer" in sets[0].source else s.phase
    reason = corrupt_reason(s, hw.roofline)
    if reason is not None:
        return [(x.source, s.phase, None, None, ref.get((x.source, phase_ref)), 0.0, f"corrupt: {reason}", None,
                 None) for x in sets]
    s = Samples(s.op_class, s.phase, {k: v[keep] for k, v in s.dims.items()}, s.time_s[keep])
    sets_kept_source, n = source[keep], int(keep.sum())
    ext_test = extrapolation_test_mask(sets)[keep]
    points = np.log2(np.column_stack([np.maximum(s.dims[k], 1.0) for k in sorted(s.dims)])) \
        if design in ("maximin", "mixed", "adaptive-maximin") else None
    configs = config_keys(sets)[keep] if design == "config" else None
    shapes = np.column_stack([s.dims[k] for k in sorted(s.dims)]) if design == "distinct" else None
    xy = training_xy(s, hw.roofline)[:2] if design.startswith("adaptive") else None
    extra = np.log2(_raw(sets, "mp"))[keep] if tp_column and all("mp" in x.raw for x in sets) else None
    per_seed: dict[str, list[dict[str, float]]] = {"random": [], "extrap": [], "bare": [], "inner": []}
    for draw in range(SEEDS):
        rand_test = np.zeros(n, dtype=bool)
        rand_test[rng.permutation(n)[: n // 5]] = True
        for tag, test in (("random", rand_test), ("extrap", ext_test)):
            if tag == "extrap" and not extrap and xy is not None:  # the same rng use as adaptive_split, no fits
                train = split(n, test, frac, rng)
            else:
                train = split(n, test, frac, rng, points, 0.5 if design == "mixed" else 1.0, configs, xy, shapes)
            if tag == "extrap" and not extrap:
                continue
            if tag == "random" and inner:
                fit_rows, val = inner_split(train, draw)
                per_seed["inner"].append(_per_source(evaluate(s, fit_rows, val, hw.roofline, extra)[0],
                                                     sets_kept_source[val], sets))
            (ape, bare), src = evaluate(s, train, np.flatnonzero(test), hw.roofline, extra), sets_kept_source[test]
            per_seed[tag].append({x.source: float(ape[src == x.source].mean()) for x in sets if (src == x.source).any()})
            if tag == "random" and bare is not None:
                per_seed["bare"].append({x.source: float(bare[src == x.source].mean()) for x in sets
                                         if (src == x.source).any()})
    r_frac = min(int(frac * n), int((~ext_test).sum())) / len(keep)  # of ALL the group's samples, corrupt ones included
    noise = repeatability(s, sets_kept_source)
    rows = []
    for x in sets:
        rm, em, im = (float(np.mean([d[x.source] for d in per_seed[t]]))
                      if per_seed[t] and all(x.source in d for d in per_seed[t]) else None
                      for t in ("random", "extrap", "inner"))
        note = f"dropped {1 - keep.mean():.1%} beating peak" if keep.mean() < 1 else ""
        if per_seed["bare"]:
            bare = float(np.mean([d[x.source] for d in per_seed["bare"] if x.source in d]))
            note = "; ".join(filter(None, [note, f"{bare:.2%} without the optional dims {OPTIONAL_DIMS[s.op_class]}"]))
        rows.append((x.source, s.phase, rm, em, ref.get((x.source, phase_ref)), r_frac, note, noise.get(x.source), im))
    return rows


def _pct(v: float | None) -> str:
    return "   n/a" if v is None or not np.isfinite(v) else f"{v * 100:5.2f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "op-samples")
    ap.add_argument("--train-fraction", type=float, default=0.25)
    ap.add_argument("--design", choices=("random", "maximin", "mixed", "config", "adaptive", "adaptive-maximin", "distinct"),
                    default="random", help="how the training rows are chosen among the non-test rows")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random draws (test rows, training rows)")
    ap.add_argument("--random-only", action="store_true",
                    help="only the random split: no extrapolation split, no rerun of the misses at the reference's "
                         "share (to compare designs over several --seed draws)")
    ap.add_argument("--inner", action="store_true",
                    help="also print the inner-CV MAPE (INNER_SHARE of each training split held out, test rows "
                         "unused): judge changes to the fitting recipe on it, never on the test columns")
    ap.add_argument("--tp-column", action="store_true",
                    help="append log2 of the sampled run's TP degree (mp) as a feature (tried, not shipped)")
    ap.add_argument("--no-rerun", action="store_true",
                    help="no rerun of the misses at the reference's share (both splits are still printed)")
    ap.add_argument("--groups", nargs="+", choices=tuple(FIT_GROUPS), default=tuple(FIT_GROUPS),
                    help="only these fit groups (default: all)")
    ap.add_argument("--hardware", nargs="+", choices=tuple(SHIPPED), default=tuple(SHIPPED),
                    help="only these shipped GPUs (default: all)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    summary = []
    for hw in (SHIPPED[name] for name in args.hardware):
        ref = read_reference_errors(args.data / hw.folder / "operator")
        print(f"\n== {hw.name} ({hw.folder}) — train on <= {args.train_fraction:.0%} of each group's samples "
              f"({args.design} training rows)")
        print(f"{'group':18s} {'file':32s} {'dir':4s} {'random20':>8s} {'extrap':>8s} {'ref':>8s} {'repeat':>7s} "
              f"{'floor':>7s} {'train':>6s} " + (f"{'inner':>7s} " if args.inner else "") + " verdict")
        for group in (g for g in FIT_GROUPS if g in args.groups):
            for phase, sets in sorted(load_group(args.data, hw, group).items()):
                for row in bench_group(hw, sets, args.train_fraction, ref, np.random.default_rng(args.seed),
                                       args.design, extrap=not args.random_only, inner=args.inner,
                                       tp_column=args.tp_column):
                    source, ph, rm, em, rf, tf, note, rep, im = row
                    better = rm is not None and rf is not None and rm < rf
                    verdict = ("beats ref" if better else "worse than ref" if rm is not None and rf is not None
                               else "") + (f"; {note}" if note else "")
                    floor = None if rep is None else np.sqrt(2.0) * rep
                    print(f"{group:18s} {source:32s} {ph:4s} {_pct(rm):>8s} {_pct(em):>8s} {_pct(rf):>8s} "
                          f"{_pct(rep):>7s} {_pct(floor):>7s} {tf:6.1%} " + (f"{_pct(im):>7s} " if args.inner else "")
                          + f" {verdict}")
                    summary.append((hw.name, group, source, ph, rm, em, rf, floor, im))
    _print_summary(summary)
    if args.inner:
        inner = [r[8] for r in summary if r[8] is not None and r[6] is not None]
        print(f"  inner CV: mean MAPE {np.mean(inner) * 100:.2f}% over the {len(inner)} (file, direction) rows with a "
              f"reference")
    if not (args.random_only or args.no_rerun):
        _print_at_reference_share(args.data, summary)
    print(f"\n(benchmark wall time {time.perf_counter() - t0:.0f} s)")


TARGETS = {"gemm": GEMM_TARGET, "attention": FLASH_TARGET}
DRIFT_NEIGHBOURS = 7
"""Test rows taken on each side of a row, in the order of its sample file, to estimate the drift of the run it
was measured in (the files list each sweep's shapes run after run)."""


DRIFT_MIN_CORR = 0.2
"""Below this correlation the neighbours' mean is mostly their own noise: no drift is reported."""


def _test_errors(hw: ShippedHardware, sets: list[SampleSet], rng) -> "Errors":
    """(log error, file, run key) of the test rows, in file order, of one fit on 80 % random rows. The run key
    is the row's raw configuration columns (mp, b, l, dim, h): the files of one group measured the same
    configurations, and one configuration's ops (e.g. its five GEMMs) ran in the same run."""
    s = pool(sets)
    keep = plausible_mask(s, hw.roofline)
    s = Samples(s.op_class, s.phase, {k: v[keep] for k, v in s.dims.items()}, s.time_s[keep])
    source = np.concatenate([[x.source] * len(x.time_s) for x in sets])[keep]
    cols = [c for c in ("mp", "b", "l", "dim", "h") if all(c in x.raw for x in sets)]
    keys = np.column_stack([_raw(sets, c) for c in cols])[keep] if cols else np.zeros((int(keep.sum()), 0))
    x, y, names, roof = training_xy(s, hw.roofline)
    t, perm, terms = roof * np.exp(y), rng.permutation(len(y)), training_terms(s)
    test, train = np.sort(perm[: len(y) // 5]), perm[len(y) // 5:]
    reg, floor = fit_with_floor(x[train], t[train], roof[train], unknown_cols=unknown_columns(names),
                                terms=_rows(terms, train))
    pred = predict_with_floor(reg, floor, x[test], roof[test], _rows(terms, test), s.phase == "bwd", hw.roofline)
    return np.log(pred / t[test]), source[test], keys[test]


def run_drift(hw: ShippedHardware, sets: list[SampleSet], rng,
              errors: "Errors | None" = None) -> dict[str, tuple[float, float]]:
    """Per file: (correlation of a test row's log error with the mean log error of its DRIFT_NEIGHBOURS test
    neighbours on each side in file order, MAPE left once that mean is taken off). Neighbours in a file share
    their run's TP degree and micro-batch, not their shape (each run sweeps sequence lengths and hidden sizes),
    so a correlation well above 0 is mostly drift from run to run (clocks, another GPU), which no regressor of
    the shape can predict; the part due to a model error shared by one TP degree's shapes is an upper bound
    on what better features could still gain. One fit on 80 % random rows (`errors`: _test_errors' answer)."""
    err, source, _ = _test_errors(hw, sets, rng) if errors is None else errors
    out = {}
    for src in np.unique(source):
        e = err[source == src]
        window = np.ones(2 * DRIFT_NEIGHBOURS + 1)
        window[DRIFT_NEIGHBOURS] = 0.0
        drift = np.convolve(e, window, "same") / np.convolve(np.ones_like(e), window, "same")
        out[str(src)] = (float(np.corrcoef(e, drift)[0, 1]), float(np.mean(np.abs(np.exp(e - drift) - 1.0))))
    return out


Errors = tuple[np.ndarray, np.ndarray, np.ndarray]
"""(log error, file, run key) of test rows (_test_errors)."""


def sibling_drift(mine: Errors, theirs: Errors | None = None) -> dict[str, tuple[float, float, int]]:
    """Per file: (r, MAPE left without the same-run part, number of pairs). r is the correlation of the log
    errors of sibling pairs measured in the same run (same run key): with `theirs` None, a test row and a test
    row of ANOTHER file of the group (the QKV, MLP and LM-head GEMMs of one layer size: different n and k, so
    what their errors share is the state of the run, clocks or power, not a shape the regressor could learn);
    with `theirs` the other direction's test rows, the same file's row of the same configuration (the F_dur
    and B_dur of one CSV row come from the same profiled iterations; same shape, so a shape both models miss
    also counts: an upper bound on the run's share). Under e = run + rest with independent parts, r is the
    run's share of the error variance (intraclass correlation) and the error left without it scales by
    sqrt(1 - r) (the file's MAPE times that); subtracting a sibling's error instead would add its noise."""
    err_a, src_a, key_a = mine
    err_b, src_b, key_b = mine if theirs is None else theirs
    keys, run = np.unique(np.vstack([key_a, key_b]), axis=0, return_inverse=True)
    run_a, run_b = run.reshape(-1)[: len(err_a)], run.reshape(-1)[len(err_a):]
    e_a, e_b = err_a - err_a.mean(), err_b - err_b.mean()
    out = {}
    for src in np.unique(src_a):
        rows = np.flatnonzero(src_a == src)
        partner = (src_b != src) if theirs is None else (src_b == src)
        pairs = [(i, j) for i in rows for j in np.flatnonzero(partner & (run_b == run_a[i]))]
        if len(pairs) < 20:
            continue
        ia, jb = (np.array(v) for v in zip(*pairs))
        r = float(np.corrcoef(e_a[ia], e_b[jb])[0, 1])
        mape = float(np.mean(np.abs(np.exp(err_a[rows]) - 1.0)))
        out[str(src)] = (r, mape * np.sqrt(1.0 - min(max(r, 0.0), 1.0)), len(pairs))
    return out


def _missed(r: tuple) -> bool:
    """A row worse than the reference, or over its group's target (GEMM, flash attention)."""
    worse = r[4] is not None and r[6] is not None and r[4] >= r[6]
    return worse or (r[4] is not None and r[1] in TARGETS and r[4] > TARGETS[r[1]])


def _print_at_reference_share(data: Path, summary: list[tuple]) -> None:
    """The rows that miss (worse than the reference or over target), trained on the reference's share of the
    samples instead: whether 3x more training data would close the gap, or the data's noise bounds the error;
    then how much of their error the run they were measured in explains (run_drift, sibling_drift)."""
    missed = {(r[0], r[1], r[3]) for r in summary if _missed(r)}
    if missed:
        print(f"\nRows that miss, trained on {REFERENCE_TRAIN_FRACTION:.0%} of the samples (the reference's share):")
    for name, group, phase in sorted(missed):
        hw = SHIPPED[name]
        ref = read_reference_errors(data / hw.folder / "operator")
        by_phase = load_group(data, hw, group)
        rows = bench_group(hw, by_phase[phase], REFERENCE_TRAIN_FRACTION, ref, np.random.default_rng(0), extrap=False)
        errors = _test_errors(hw, by_phase[phase], np.random.default_rng(0))
        drift, files = run_drift(hw, by_phase[phase], None, errors), sibling_drift(errors)
        other = [p for p in by_phase if p != phase]
        directions = sibling_drift(errors, _test_errors(hw, by_phase[other[0]], np.random.default_rng(0))) \
            if other else {}
        for source, ph, rm, _, rf, tf, _, _, _ in rows:
            if not any(r[0] == name and r[2] == source and r[3] == ph and _missed(r) for r in summary):
                continue
            verdicts = [] if rf is None else [f"vs ref {_pct(rf).strip()}: {'beats' if rm < rf else 'worse'}"]
            if group in TARGETS:
                verdicts.append(f"target {TARGETS[group]:.0%}: {'met' if rm <= TARGETS[group] else 'NOT met'}")
            corr, rest = drift.get(source, (float("nan"), float("nan")))
            shared = f"{_pct(rest).strip()} without it" if corr >= DRIFT_MIN_CORR else "none"
            print(f"  {name} {source} {ph} trained on {tf:.0%}: ours {_pct(rm).strip()} ({'; '.join(verdicts)}); "
                  f"run drift (error vs file neighbours' r = {corr:.2f}): {shared}"
                  + _sibling_note("the same configuration's rows in the other files", files.get(source))
                  + _sibling_note(f"the same rows' {other[0] if other else ''} error", directions.get(source)))


def _sibling_note(what: str, sib: tuple[float, float, int] | None) -> str:
    """The same-run part of a row's error (sibling_drift), when it has siblings."""
    if sib is None:
        return ""
    corr, rest, num_pairs = sib
    left = f"~{_pct(rest).strip()} without it" if corr >= DRIFT_MIN_CORR else "none"
    return f"; same-run drift (error vs {what}, {num_pairs} pairs, r = {corr:.2f}): {left}"


def model_part(mape: float, floor: float) -> float:
    """The part of a MAPE beyond the data's noise floor: sqrt(mape^2 - floor^2). For independent Gaussian log
    errors (model error + repeat noise) the MAPE is proportional to the standard deviation, so the two add in
    quadrature; 0 when the MAPE is at or below the floor."""
    return float(np.sqrt(max(mape * mape - floor * floor, 0.0)))


def floor_note(mape: float, floor: float | None, goal: float, goal_name: str) -> str:
    """What the noise floor says about a row that misses `goal` (a target or the reference's error): the floor
    (the MAPE a perfect predictor of each shape's mean time keeps, bench_group's `floor`), our error's model
    part beyond it (model_part), and the model part `goal` would allow: none when the floor alone reaches it,
    i.e. the goal is below what any predictor of the shape can do on these samples."""
    if floor is None or not np.isfinite(floor):
        return "no repeated shapes: noise floor unknown"
    if floor >= goal:
        return (f"noise floor {_pct(floor).strip()} >= the {goal_name} {_pct(goal).strip()}: no predictor of the shape "
                f"reaches it on these samples")
    return (f"noise floor {_pct(floor).strip()}; model part of our error {_pct(model_part(mape, floor)).strip()}, "
            f"the {goal_name} allows {_pct(model_part(goal, floor)).strip()}")


def _print_summary(summary: list[tuple]) -> None:
    rated = [r for r in summary if r[4] is not None and r[6] is not None]
    beats = [r for r in rated if r[4] < r[6]]
    print(f"\nSummary: beats the reference on {len(beats)}/{len(rated)} (file, direction) rows with a reference.")
    for label, group, target in (("GEMM", "gemm", GEMM_TARGET), ("flash attention", "attention", FLASH_TARGET)):
        vals = [(r[0], r[2], r[3], r[4], r[7]) for r in summary if r[1] == group and r[4] is not None]
        worst = max(vals, key=lambda v: v[3]) if vals else None
        if worst:
            print(f"  {label}: worst random-split MAPE {worst[3] * 100:.2f}% ({worst[0]} {worst[1]} {worst[2]}); "
                  f"target <= {target:.0%}: {'met' if worst[3] <= target else 'NOT met'}")
            for v in sorted(vals, key=lambda v: -v[3]):
                if v[3] > target:
                    print(f"    over target: {v[0]} {v[1]} {v[2]} {v[3] * 100:.2f}% "
                          f"({floor_note(v[3], v[4], target, 'target')})")
    for r in rated:
        if r[4] >= r[6]:
            print(f"  not better than reference: {r[0]} {r[2]} {r[3]} ours {r[4] * 100:.2f}% vs {r[6] * 100:.2f}% "
                  f"({floor_note(r[4], r[7], r[6], 'reference')})")


if __name__ == "__main__":
    main()

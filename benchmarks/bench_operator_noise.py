"""Where the error of an operator row lives: our hold-out MAPE next to the samples' own noise floor, by duration.

    OMP_NUM_THREADS=1 python benchmarks/bench_operator_noise.py [--data ../shared/data/op-samples] [--seed 0]
        [--rows a100-sxm4-80gb:gemm:fwd ...]

bench_operator_accuracy gives one noise floor per file (sqrt(2) x the mean distance of repeated shapes from their
median). The repeats do not scatter alike at every duration: on the A100 GEMM forward samples a shape measured
twice agrees within 0.35 % (mean distance from the median) below 0.6 ms and within 2.8 % above 8.7 ms, as clocks
lowered under the board's power limit would make it (A100-SXM4: 400 W, datasheet; the longer a GEMM runs at full
load, the more its time follows the clock state of its run). One floor per file then mixes a part of the error
that no predictor of the shape removes (long kernels) with one that better modelling or more samples could
(short ones). This benchmark fits the operator benchmark's recipe on the same draws (bench_operator_accuracy.
bench_group's random split: SEEDS draws of the same seed, `--train-fraction` of the samples) and prints, per
quintile of the measured duration, our test MAPE and the floor of the repeats in that quintile.
Measured (seed 0, 25 %; ours / floor): A100 GEMM fwd, all five files: 3.05 / 0.50 % (26-638 us), 2.33 / 0.59,
2.69 / 1.48, 3.37 / 3.18, 4.06 / 3.95 % (8.7-138 ms): the long GEMMs are at the floor, the model part of the
miss is in the short ones; linear_final 5.43 / 0.41 % in its shortest quintile (88 of its 91 rows there are TP 8
and 16 LM heads, n = 6,400 and 3,200, where cuBLAS changes kernel along k: m 2,048 x n 3,200 runs at 248 TFLOP/s
up to k 4,096, at 205 from 4,608 to 6,656 and at 266 from 7,168; a random quarter of the 13 k values of such a
line does not locate the steps). A100 flash attention fwd 0.9-2.5 points above the floor (5.3-6.5 %) in every
quintile, bwd 0.5-2.3 (4.8-6.2 %). GH200 embedding bwd: 2.21 / 0.98 and 2.11 / 1.14 % in the two shortest
quintiles (66-137 us), 1.63-1.73 / 1.10-1.30 % in the middle ones, 1.09 / 0.86 % in the longest.
Node occupancy (node_occupancy_effect): a per-rank shape measured in a run whose TP group filled the node
(Perlmutter: mp >= 4 of its 4 A100) against the same shape from a run with idle GPUs beside it (mp 1-2). A100
flash attention fwd / bwd: +4.03 / +3.71 % (median of 254 pairs), yet the floor within each occupancy is 5.66 /
5.30 % against 5.75 / 5.42 % pooled: the runs of one occupancy scatter as much. GEMM fwd / bwd: -0.04 / +0.01 %
(1,710 pairs). As a feature (log2 min(mp, 4)), A100 flash attention 6.99 / 6.64 -> 6.85 / 6.62 % (seed 0):
not kept, the dims contract of an op has no occupancy and a training job fills its nodes anyway.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_operator_accuracy import SEEDS, _rows, extrapolation_test_mask, split  # noqa: E402

from llmperf_hook.hardware.load import load_cluster  # noqa: E402
from llmperf_hook.profile.build_profile import (Samples, fit_with_floor, pool, predict_with_floor,  # noqa: E402
                                                training_terms, training_xy, unknown_columns)
from llmperf_hook.profile.shipped import SHIPPED, ShippedHardware, load_group, plausible_mask  # noqa: E402

NUM_BINS = 5
"""Duration quantiles the rows are cut into."""
DEFAULT_ROWS = ("a100-sxm4-80gb:gemm:fwd", "a100-sxm4-80gb:attention:fwd", "a100-sxm4-80gb:attention:bwd",
                "gh200-96gb:embedding:bwd")
"""The rows of issue 4 that miss their goal at 25 % of the samples."""


def duration_edges(time_s: np.ndarray, num_bins: int = NUM_BINS) -> np.ndarray:
    """num_bins + 1 edges at the quantiles of the measured times; the last one just above the slowest sample."""
    edges = np.quantile(time_s, np.linspace(0.0, 1.0, num_bins + 1))
    edges[-1] = np.nextafter(edges[-1], np.inf)
    return edges


def repeat_floor_by_bin(time_s: np.ndarray, shapes: np.ndarray, edges: np.ndarray,
                        among: np.ndarray | None = None) -> np.ndarray:
    """Per duration bin: sqrt(2) x mean |t / median - 1| over the samples whose shape (rows of `shapes`) was
    measured more than once, the median taken over all of that shape's samples (bench_operator_accuracy's floor,
    for pairs the MAPE of a perfect predictor of each shape's mean time), averaged over the samples in `among`
    (a file of the group; all when None). NaN where a bin holds no repeat."""
    _, inverse, counts = np.unique(shapes, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    log_t = np.log(time_s)
    median = np.array([np.median(log_t[inverse == g]) for g in range(len(counts))])
    dev = np.abs(np.exp(log_t - median[inverse]) - 1.0)
    repeated = (counts[inverse] > 1) & (True if among is None else among)
    return np.array([np.sqrt(2.0) * dev[repeated & inside].mean() if (repeated & inside).any() else np.nan
                     for inside in _bins(time_s, edges)])


def mape_by_bin(ape: np.ndarray, time_s: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Mean of `ape` per duration bin of `time_s` (NaN for an empty bin)."""
    return np.array([ape[inside].mean() if inside.any() else np.nan for inside in _bins(time_s, edges)])


def _bins(time_s: np.ndarray, edges: np.ndarray) -> list[np.ndarray]:
    return [(time_s >= lo) & (time_s < hi) for lo, hi in zip(edges[:-1], edges[1:])]


def node_occupancy_effect(time_s: np.ndarray, shapes: np.ndarray, full_node: np.ndarray) -> tuple[float, int]:
    """(median of t_full / t_partial - 1, number of pairs) over every pair of samples of the same shape (rows of
    `shapes`) where one was measured with the node full (`full_node`: the run's TP group occupied every GPU of
    the node) and the other with idle GPUs beside it; (nan, 0) without such pairs. The contract dims of an op
    are those of one rank, so the two are repeats to a regressor: a median away from 0 is a part of the repeat
    noise floor that the node's occupancy (power, cooling or host CPU shared by its GPUs) explains."""
    _, inverse = np.unique(shapes, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    log_t, ratios = np.log(time_s), []
    for g in np.unique(inverse[full_node]):
        same = inverse == g
        full, partial = log_t[same & full_node], log_t[same & ~full_node]
        ratios.append((full[:, None] - partial[None, :]).ravel())
    pairs = np.concatenate(ratios) if ratios else np.zeros(0)
    return (float(np.expm1(np.median(pairs))), len(pairs)) if len(pairs) else (float("nan"), 0)


def full_node_mask(hw: ShippedHardware, sets: list) -> np.ndarray | None:
    """Per sample the benchmark scores (plausible_samples): whether its run's TP degree (`mp` of the files) filled
    the GPUs of a node of the cluster (configs/clusters: perlmutter 4); None where the files carry no `mp` or a
    node holds one GPU (vista), so the occupancy never varies."""
    per_node = load_cluster(hw.cluster).gpus_per_node
    if per_node <= 1 or not all("mp" in x.raw for x in sets):
        return None
    keep = plausible_mask(pool(sets), hw.roofline)
    return np.concatenate([x.raw["mp"] for x in sets])[keep] >= per_node


def plausible_samples(hw: ShippedHardware, sets: list) -> tuple[Samples, np.ndarray]:
    """The group's samples the operator benchmark scores (shipped.plausible_mask) and the file of each."""
    s = pool(sets)
    keep = plausible_mask(s, hw.roofline)
    source = np.concatenate([[x.source] * len(x.time_s) for x in sets])[keep]
    return Samples(s.op_class, s.phase, {k: v[keep] for k, v in s.dims.items()}, s.time_s[keep]), source


def holdout_errors(hw: ShippedHardware, sets: list, s: Samples, frac: float,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(APE, row of `s`) of the test rows of bench_group's SEEDS random draws, with its rng use (each draw's
    extrapolation split drawn, not fitted), so the figures are those of bench_operator_accuracy's random column."""
    x, y, names, roof = training_xy(s, hw.roofline)
    t, terms, n = roof * np.exp(y), training_terms(s), len(y)
    ext_test = extrapolation_test_mask(sets)[plausible_mask(pool(sets), hw.roofline)]
    apes, rows = [], []
    for _ in range(SEEDS):
        test = np.zeros(n, dtype=bool)
        test[rng.permutation(n)[: n // 5]] = True
        train = split(n, test, frac, rng)
        split(n, ext_test, frac, rng)
        reg, floor = fit_with_floor(x[train], t[train], roof[train], unknown_cols=unknown_columns(names),
                                    terms=_rows(terms, train))
        idx = np.flatnonzero(test)
        pred = predict_with_floor(reg, floor, x[idx], roof[idx], _rows(terms, idx), s.phase == "bwd", hw.roofline)
        apes.append(np.abs(pred / t[idx] - 1.0))
        rows.append(idx)
    return np.concatenate(apes), np.concatenate(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "op-samples")
    ap.add_argument("--train-fraction", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", nargs="*", default=list(DEFAULT_ROWS), help="hardware:group:phase")
    args = ap.parse_args()
    for spec in args.rows:
        name, group, phase = spec.split(":")
        hw = SHIPPED[name]
        sets = load_group(args.data, hw, group)[phase]
        s, source = plausible_samples(hw, sets)
        ape, rows = holdout_errors(hw, sets, s, args.train_fraction, np.random.default_rng(args.seed))
        shapes, edges = np.column_stack([s.dims[k] for k in sorted(s.dims)]), duration_edges(s.time_s)
        print(f"\n== {name} {group} {phase}: test MAPE (ours) / repeat noise floor, per duration quintile")
        print(f"{'file':14s} " + " ".join(f"{lo * 1e6:>9.0f} us+  " for lo in edges[:-1]))
        for src in [None] + (sorted(set(source)) if len(set(source)) > 1 else []):
            mine = np.ones(len(rows), dtype=bool) if src is None else source[rows] == src
            ours = mape_by_bin(ape[mine], s.time_s[rows][mine], edges)
            floor = repeat_floor_by_bin(s.time_s, shapes, edges, None if src is None else source == src)
            print(f"{src or 'all':14s} " + " ".join(f"{o * 100:5.2f}/{f * 100:5.2f}% " for o, f in zip(ours, floor)))
        _print_occupancy(hw, sets, s, shapes)


def _print_occupancy(hw: ShippedHardware, sets: list, s: Samples, shapes: np.ndarray) -> None:
    """The node-occupancy part of the repeat noise (node_occupancy_effect), and the floor left within each
    occupancy (the floor of the repeats that share it)."""
    full = full_node_mask(hw, sets)
    if full is None:
        return
    ratio, num_pairs = node_occupancy_effect(s.time_s, shapes, full)
    if num_pairs == 0:
        return
    one_bin = duration_edges(s.time_s, 1)
    pooled = repeat_floor_by_bin(s.time_s, shapes, one_bin)[0]
    within = repeat_floor_by_bin(s.time_s, np.column_stack([shapes, full]), one_bin)[0]
    print(f"node occupancy: the same shape measured with its TP group filling the node / with idle GPUs beside it: "
          f"{ratio * 100:+.2f}% (median of {num_pairs} pairs); repeat floor {pooled * 100:.2f}% pooled, "
          f"{within * 100:.2f}% within each occupancy")


if __name__ == "__main__":
    main()

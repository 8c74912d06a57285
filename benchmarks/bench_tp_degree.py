"""Does the sampled run's tensor-parallel degree predict operator time on runs the regressor never saw?

    OMP_NUM_THREADS=1 python benchmarks/bench_tp_degree.py [--data ../shared/data/op-samples]
        [--rows a100-sxm4-80gb:attention:fwd ...]

Each (mp, b) configuration of the public samples' sweep is one run (its own job, nodes and clocks), and the
run's TP degree `mp` is not in the per-rank shape. The random 20 % split of bench_operator_accuracy.py shares
runs between training and test rows, so a feature naming the run can learn each run's drift from its training
rows and look useful there without predicting anything about a new job. This check holds out whole runs: fold k
of the len(mp values) folds holds out run (mp_k, b_0), (mp_k+1, b_1), ... (one per b value), so the held-out
run's siblings with the same mp and another b are in training but the run itself is not. The training rows are
25 % of all the group's rows, drawn at random from the other runs (seed 0), fitted with the shipped recipe
(build_profile.fit_with_floor, corrupt rows dropped as bench_operator_accuracy drops them). Printed per row:
held-out-run MAPE without and with log2(mp) as the last feature column (appended as features.build_features
appends its own columns; the shipped features have no such column), and the median log error (%) of each
held-out run, without and with it: if the TP degree drove the time, each mp's runs would share an offset and the
column would remove it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmperf_hook.profile.build_profile import (Samples, fit_with_floor, pool, predict_with_floor,  # noqa: E402
                                                training_xy, unknown_columns)
from llmperf_hook.profile.public_samples import SampleSet  # noqa: E402
from llmperf_hook.profile.shipped import (SHIPPED, ShippedHardware, corrupt_reason, load_group,  # noqa: E402
                                          plausible_mask)

TRAIN_FRACTION = 0.25
DEFAULT_ROWS = ("a100-sxm4-80gb:attention:fwd", "a100-sxm4-80gb:attention:bwd", "gh200-96gb:attention:fwd",
                "a100-sxm4-80gb:gemm:fwd", "gh200-96gb:gemm:bwd")


def raw_column(sets: list[SampleSet], key: str) -> np.ndarray:
    return np.concatenate([s.raw[key] for s in sets])


def run_folds(mp: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
    """Test masks: fold k holds out run (mps[(k + j) % len(mps)], bs[j]) for every b value bs[j]."""
    mps, bs = np.unique(mp), np.unique(b)
    return [np.logical_or.reduce([(mp == mps[(k + j) % len(mps)]) & (b == bv) for j, bv in enumerate(bs)])
            for k in range(len(mps))]


def held_out_errors(s: Samples, hw: ShippedHardware, folds: list[np.ndarray],
                    extra: np.ndarray | None) -> np.ndarray:
    """Log error (predicted / measured) of every row, each from the fold that held its run out."""
    x, y, names, roof = training_xy(s, hw.roofline)
    if extra is not None:
        x = np.column_stack([x, extra])
    t, n = roof * np.exp(y), len(y)
    err, rng = np.full(n, np.nan), np.random.default_rng(0)
    for test in folds:
        train = rng.permutation(np.flatnonzero(~test))[: int(TRAIN_FRACTION * n)]
        reg, floor = fit_with_floor(x[train], t[train], roof[train], unknown_cols=unknown_columns(names))
        rows = np.flatnonzero(test)
        err[rows] = np.log(predict_with_floor(reg, floor, x[rows], roof[rows]) / t[rows])
    return err


def per_run(err: np.ndarray, mp: np.ndarray, b: np.ndarray) -> str:
    return " ".join(f"mp{int(m)}:" + "/".join(f"{np.median(err[(mp == m) & (b == bv)]) * 100:+.1f}"
                                              for bv in np.unique(b)) for m in np.unique(mp))


def check(data: Path, row: str) -> None:
    name, group, phase = row.split(":")
    hw = SHIPPED[name]
    sets = load_group(data, hw, group)[phase]
    s = pool(sets)
    if corrupt_reason(s, hw.roofline) is not None:
        print(f"{row}: corrupt ({corrupt_reason(s, hw.roofline)})")
        return
    keep = plausible_mask(s, hw.roofline)
    s = Samples(s.op_class, s.phase, {k: v[keep] for k, v in s.dims.items()}, s.time_s[keep])
    mp, b = raw_column(sets, "mp")[keep], raw_column(sets, "b")[keep]
    folds = run_folds(mp, b)
    for tag, extra in (("without mp", None), ("with log2 mp", np.log2(mp))):
        err = held_out_errors(s, hw, folds, extra)
        print(f"{row} {tag:12s} held-out-run MAPE {np.mean(np.abs(np.exp(err) - 1.0)) * 100:5.2f}%; median log "
              f"error % per run (b = {'/'.join(f'{v:g}' for v in np.unique(b))}): {per_run(err, mp, b)}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "op-samples")
    ap.add_argument("--rows", nargs="+", default=DEFAULT_ROWS, help="hardware:group:phase")
    args = ap.parse_args()
    for row in args.rows:
        check(args.data, row)


if __name__ == "__main__":
    main()

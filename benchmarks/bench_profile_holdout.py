"""The shipped H100 operator profile scored on operator samples it never saw, measured on another H100 machine.

    python benchmarks/bench_profile_holdout.py [--profile configs/profiles/h100-sxm5-80gb]
        [--holdout measurements/h100-sxm5-80gb-2026-11-26-b] [--train measurements/h100-sxm5-80gb-2026-11-26]

The profile was fitted (benchmarks/fit_measured_profile.py) from --train's samples: `llmperf profile --for` a
Megatron GPT-70B job and the testbed job. The hold-out samples are the sampler's own run on a second lent H100,
hours later, `--for` a Llama-3-8B-like job (GQA 32/8, SwiGLU, RMSNorm, RoPE, seq 8192, TP2), so most shapes are new:
other hidden sizes, GQA ratios, SwiGLU / RMSNorm / RoPE widths. Shapes also present in --train are left out.
Per operator and direction:
  MAPE          mean |predicted / measured - 1| over the new shapes;
  >=100us       the same over shapes that take at least 100 us (the ops that make up a training step; below it
                an element-wise kernel's time is the host's launch path, which differs between machines);
  weighted      sum |predicted - measured| / sum measured: the error in the time these ops add up to;
  outside       how many shapes lie outside the profile's sampled range in some dimension (extrapolated).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fit_measured_profile import load_samples  # noqa: E402

from llmperf_hook.profile.features import REQUIRED_DIMS  # noqa: E402
from llmperf_hook.profile.predictor import FittedProfile  # noqa: E402

STEP_OP_FLOOR_S = 100e-6
"""Shapes at or above this time count as step-making ops in the >=100us column."""


def shape_keys(samples, op_class: str) -> list[tuple[float, ...]]:
    return list(zip(*(samples.dims[k] for k in REQUIRED_DIMS[op_class])))


def score(profile: FittedProfile, key: tuple[str, str, str], hold, train) -> dict | None:
    op_class = key[0]
    if not profile.supports(*key):
        return None
    seen = set(shape_keys(train, op_class)) if train is not None else set()
    new = np.array([k not in seen for k in shape_keys(hold, op_class)])
    if not new.any():
        return None
    dims = {k: v[new] for k, v in hold.dims.items()}
    measured = hold.time_s[new]
    predicted = profile.predict_class_s(*key, dims)
    err = np.abs(predicted / measured - 1)
    entry = profile._entries[profile._key(*key)]
    outside = np.zeros(len(measured), dtype=bool)
    for k in REQUIRED_DIMS[op_class]:
        lo, hi = entry.train_ranges.get(k, (-np.inf, np.inf))
        outside |= (dims[k] < lo) | (dims[k] > hi)
    big = measured >= STEP_OP_FLOOR_S
    return {"n": int(new.sum()), "of": len(hold.time_s), "mape": err.mean(), "big_n": int(big.sum()),
            "big_mape": err[big].mean() if big.any() else float("nan"),
            "weighted": np.abs(predicted - measured).sum() / measured.sum(), "outside": int(outside.sum()),
            "abs_err_s": np.abs(predicted - measured).sum(), "measured_s": measured.sum(), "err": err, "big": big}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=str(ROOT / "configs" / "profiles" / "h100-sxm5-80gb"))
    ap.add_argument("--holdout", default=str(ROOT / "measurements" / "h100-sxm5-80gb-2026-11-26-b"))
    ap.add_argument("--train", default=str(ROOT / "measurements" / "h100-sxm5-80gb-2026-11-26"))
    args = ap.parse_args()
    profile = FittedProfile(Path(args.profile))
    hold, train = load_samples(Path(args.holdout)), load_samples(Path(args.train))
    print(f"profile {args.profile} on {args.holdout} (shapes also in {args.train} left out)")
    print(f"{'operator':14s} {'dir':3s} {'new':>9s} {'MAPE':>7s} {'>=100us':>13s} {'weighted':>9s} {'outside':>7s}")
    rows = []
    for key, s in sorted(hold.items()):
        row = score(profile, key, s, train.get(key))
        if row is None:
            print(f"{key[0]:14s} {key[1]:3s}  no model or no new shape")
            continue
        rows.append(row)
        big = f"{row['big_mape'] * 100:6.1f}% n={row['big_n']:<3d}" if row["big_n"] else f"{'-':>13s}"
        print(f"{key[0]:14s} {key[1]:3s} {row['n']:4d}/{row['of']:<4d} {row['mape'] * 100:6.1f}% {big} "
              f"{row['weighted'] * 100:8.1f}% {row['outside']:7d}")
    err = np.concatenate([r["err"] for r in rows])
    big = np.concatenate([r["big"] for r in rows])
    weighted = sum(r["abs_err_s"] for r in rows) / sum(r["measured_s"] for r in rows)
    print(f"all: {len(err)} new shapes, MAPE {err.mean() * 100:.1f}% (median {np.median(err) * 100:.1f}%); "
          f"{big.sum()} shapes >= 100 us: MAPE {err[big].mean() * 100:.1f}%; time-weighted {weighted * 100:.1f}%")


if __name__ == "__main__":
    main()

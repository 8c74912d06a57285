"""Hold-out accuracy of the collective models (alpha-beta + learned residual per layout) on the public NCCL samples.

    python benchmarks/bench_comm_accuracy.py [--data ../shared/data/op-samples] [--train-fraction 0.25]

Per cluster, collective, message-size class and layout: MAPE on a random 20 % test split, the model trained on at
most `--train-fraction` of that layout's samples (small and large messages pooled, as shipped), next to the
authors' `Best_error%` (nccl/NVIDIA<GPU>.csv). Rows whose implied bus bandwidth is physically impossible are
dropped from training and test and counted as corrupt; layouts where most rows are corrupt are reported as such.
Target: within 5 % on every layout except where the data is corrupt.

Physical proof of corruption, per layout: `corrupt` = rows whose bus bandwidth exceeds any link (comm_fit.
MAX_PLAUSIBLE_BUSBW); `disturbed` = rows more than 1.5x slower than a strictly LARGER message of the same layout
(comm_fit.disturbed: an undisturbed collective moving more bytes over the same links cannot finish sooner). A
layout with more than 5 % of such rows is reported as corrupt data; its disturbed rows stay in the training and
test rows (never dropped for missing), and `clean` gives the MAPE on its test rows that pass both checks. `floor`:
the MAPE a perfect predictor of the mean would still have under the layout's own white noise, estimated from how
much neighbouring sizes scatter (for iid Gaussian noise, mean |e_i - (e_(i-1) + e_(i+1)) / 2| = sqrt(1.5) x
mean |e|).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmperf_hook.profile.comm_fit import (DISTURBED_RATIO, CommSamples, disturbed, fit_layout, plausible,  # noqa: E402
                                           read_public_comm)
from llmperf_hook.profile.shipped import SHIPPED  # noqa: E402

TARGET = 0.05
CORRUPT_LAYOUT_SHARE = 0.05
"""A layout with more than this share of physically impossible or disturbed rows is corrupt data."""


def reference_errors(nccl_dir: Path) -> dict[tuple[str, int, int], float]:
    out = {}
    for table in nccl_dir.glob("NVIDIA*.csv"):
        if "_fp16" in table.stem:
            continue
        with table.open(newline="") as fh:
            for row in csv.DictReader(fh):
                out[(row["Function"], int(row["Nodes"]), int(row["GPUsPerNode"]))] = float(row["Best_error%"])
    return out


def local_noise(p: CommSamples) -> float:
    """Mean |t_i / mean(t_(i-1), t_(i+1)) - 1| over size-sorted plausible rows: how much neighbouring message
    sizes (a few percent apart) disagree, i.e. the data's own scatter."""
    m = plausible(p)
    order = np.argsort(p.nbytes[m])
    t = p.time_s[m][order]
    if len(t) < 3:
        return float("nan")
    return float(np.mean(np.abs(t[1:-1] / (0.5 * (t[:-2] + t[2:])) - 1.0)))


def bench_layout(parts: list[CommSamples], frac: float, rng: np.random.Generator) -> list[tuple]:
    """(size class, test MAPE, corrupt fraction, train fraction, scatter, disturbed fraction, MAPE on the test
    rows that are neither) per file of one (collective, layout)."""
    masks = [plausible(p) for p in parts]
    sizes = np.concatenate([p.nbytes[m] for p, m in zip(parts, masks)])
    times = np.concatenate([p.time_s[m] for p, m in zip(parts, masks)])
    label = np.concatenate([[p.size_class] * int(m.sum()) for p, m in zip(parts, masks)])
    slow_rows = [disturbed(p) for p in parts]
    slow = np.concatenate([d[m] for d, m in zip(slow_rows, masks)])
    n_all = sum(len(p.time_s) for p in parts)
    n = len(times)
    if n < 10:
        return [(p.size_class, None, 1.0 - float(m.mean()), 0.0, float("nan"), 0.0, None)
                for p, m in zip(parts, masks)]
    perm = rng.permutation(n)
    test, train = perm[: n // 5], perm[n // 5:][: int(frac * n_all)]
    p0 = parts[0]
    fit = fit_layout(CommSamples(p0.collective, p0.nodes, p0.gpus_per_node, sizes[train], times[train]))
    pred = fit.predict_s(sizes[test], p0.nodes * p0.gpus_per_node, p0.collective)
    ape = np.abs(pred / times[test] - 1.0)
    out = []
    for p, m, d in zip(parts, masks, slow_rows):
        sel = label[test] == p.size_class
        ok = sel & ~slow[test]
        out.append((p.size_class, float(ape[sel].mean()) if sel.any() else None, 1.0 - float(m.mean()),
                    len(train) / n_all, local_noise(p), float(d.mean()),
                    float(ape[ok].mean()) if ok.any() else None))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "op-samples")
    ap.add_argument("--train-fraction", type=float, default=0.25)
    args = ap.parse_args()
    misses: list[str] = []
    corrupt_misses: list[str] = []
    for hw in SHIPPED.values():
        nccl = args.data / hw.folder / "nccl"
        ref = reference_errors(nccl)
        groups: dict[tuple[str, int, int], list[CommSamples]] = {}
        for s in read_public_comm(nccl):
            groups.setdefault((s.collective, s.nodes, s.gpus_per_node), []).append(s)
        print(f"\n== {hw.cluster} ({hw.folder}) — train on <= {args.train_fraction:.0%} of each layout's samples")
        print(f"{'collective':20s} {'layout':>7s} {'random20':>9s} {'ref':>9s} {'scatter':>8s} {'floor':>7s} "
              f"{'corrupt':>8s} {'disturb':>8s} {'clean':>7s} {'train':>6s}  verdict")
        for (kind, nodes, gpn), parts in sorted(groups.items()):
            for size_class, mape, corrupt, tf, noise, slow, clean in bench_layout(parts, args.train_fraction,
                                                                                 np.random.default_rng(0)):
                fn = kind + ("_large" if size_class == "large" else "")
                rf = ref.get((fn, nodes, gpn))
                bad = corrupt + slow > CORRUPT_LAYOUT_SHARE
                verdict = _verdict(mape, rf, corrupt, slow)
                if "NOT" in verdict:
                    (corrupt_misses if bad else misses).append(
                        f"{hw.cluster} {fn} {nodes}x{gpn}: {mape * 100:.2f}% (neighbouring sizes scatter "
                        f"{noise * 100:.1f}%, white-noise floor {noise / np.sqrt(1.5) * 100:.1f}%"
                        + (f"; {corrupt:.1%} of rows beat the link peak, {slow:.1%} are more than "
                           f"{DISTURBED_RATIO}x slower than a larger message; {_pct(clean)} on the rest)" if bad
                           else ")"))
                print(f"{fn:20s} {nodes:>3d}x{gpn:<3d} {_pct(mape):>9s} {_pct(rf):>9s} {_pct(noise):>8s} "
                      f"{_pct(noise / np.sqrt(1.5)):>7s} {corrupt:8.1%} {slow:8.1%} {_pct(clean):>7s} {tf:6.1%}  "
                      f"{verdict}")
    print(f"\nSummary: layouts missing the {TARGET:.0%} target (excluding corrupt data): {len(misses)}")
    for m in misses:
        print(f"  {m}")
    print(f"Layouts whose data is corrupt (> {CORRUPT_LAYOUT_SHARE:.0%} of rows beat the link peak or are "
          f"disturbed) that miss it: {len(corrupt_misses)}")
    for m in corrupt_misses:
        print(f"  {m}")


def _verdict(mape: float | None, ref: float | None, corrupt: float, slow: float) -> str:
    if mape is None:
        return "corrupt: too few plausible rows"
    bad = corrupt + slow > CORRUPT_LAYOUT_SHARE
    parts = ["within 5%" if mape <= TARGET else ("NOT within 5% (corrupt data)" if bad else "NOT within 5%")]
    if ref is not None:
        parts.append("beats ref" if mape < ref else "worse than ref")
    return "; ".join(parts)


def _pct(v: float | None) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v * 100:.2f}%"


if __name__ == "__main__":
    main()

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
mean |e|). `by size`: the MAPE of the best predictor of the message size alone, estimated from each row's
neighbouring sizes (size_floor); it holds for noise that is not white too, e.g. Vista all-gather 2x1, whose rows
sit on three bandwidth levels (about 37, 46 and 62 GB/s of buffer per second) that alternate from one size to the
next. A miss is put down to `corrupt data` when the layout's flagged rows exceed 5 % and the rest is within the
target, to the `data floor` when `by size` itself misses the target (miss_cause).
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


SIZE_NEIGHBOURS = 8
"""Message sizes taken on each side of a row by size_floor (the files step sizes by 0.2-1 %)."""


def size_floor(p: CommSamples) -> float:
    """MAPE of the best predictor of the message size alone, estimated from the data: each plausible row is
    predicted by its SIZE_NEIGHBOURS neighbouring sizes on each side (itself left out) as their time per byte's
    weighted median (weights 1 / time per byte: the value that minimises the mean |prediction / t - 1| over
    them), times its own bytes. Any model of the size only (ours included) is a smoother version of this, so a
    layout whose rows sit on several bandwidth levels that alternate from one size to the next (not a function
    of the size) cannot be predicted much better than this figure, however clean each row is."""
    m = plausible(p)
    order = np.argsort(p.nbytes[m], kind="stable")
    per_byte = p.time_s[m][order] / p.nbytes[m][order]
    if len(per_byte) < 2 * SIZE_NEIGHBOURS + 1:
        return float("nan")
    ape = np.empty(len(per_byte))
    for i in range(len(per_byte)):
        near = np.concatenate([per_byte[max(0, i - SIZE_NEIGHBOURS): i], per_byte[i + 1: i + 1 + SIZE_NEIGHBOURS]])
        near.sort()
        weight = np.cumsum(1.0 / near)
        best = near[np.searchsorted(weight, 0.5 * weight[-1])]
        ape[i] = abs(best / per_byte[i] - 1.0)
    return float(ape.mean())


def bench_layout(parts: list[CommSamples], frac: float, rng: np.random.Generator) -> list[tuple]:
    """(size class, test MAPE, corrupt fraction, train fraction, scatter, disturbed fraction, MAPE on the test
    rows that are neither, size_floor) per file of one (collective, layout)."""
    masks = [plausible(p) for p in parts]
    sizes = np.concatenate([p.nbytes[m] for p, m in zip(parts, masks)])
    times = np.concatenate([p.time_s[m] for p, m in zip(parts, masks)])
    label = np.concatenate([[p.size_class] * int(m.sum()) for p, m in zip(parts, masks)])
    slow_rows = [disturbed(p) for p in parts]
    slow = np.concatenate([d[m] for d, m in zip(slow_rows, masks)])
    n_all = sum(len(p.time_s) for p in parts)
    n = len(times)
    if n < 10:
        return [(p.size_class, None, 1.0 - float(m.mean()), 0.0, float("nan"), 0.0, None, float("nan"))
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
                    float(ape[ok].mean()) if ok.any() else None, size_floor(p)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "op-samples")
    ap.add_argument("--train-fraction", type=float, default=0.25)
    args = ap.parse_args()
    misses: dict[str, list[str]] = {"": [], "corrupt data": [], "data floor": []}
    for hw in SHIPPED.values():
        nccl = args.data / hw.folder / "nccl"
        ref = reference_errors(nccl)
        groups: dict[tuple[str, int, int], list[CommSamples]] = {}
        for s in read_public_comm(nccl):
            groups.setdefault((s.collective, s.nodes, s.gpus_per_node), []).append(s)
        print(f"\n== {hw.cluster} ({hw.folder}) — train on <= {args.train_fraction:.0%} of each layout's samples")
        print(f"{'collective':20s} {'layout':>7s} {'random20':>9s} {'ref':>9s} {'scatter':>8s} {'floor':>7s} "
              f"{'by size':>8s} {'corrupt':>8s} {'disturb':>8s} {'clean':>7s} {'train':>6s}  verdict")
        for (kind, nodes, gpn), parts in sorted(groups.items()):
            for size_class, mape, corrupt, tf, noise, slow, clean, by_size in bench_layout(
                    parts, args.train_fraction, np.random.default_rng(0)):
                fn = kind + ("_large" if size_class == "large" else "")
                rf = ref.get((fn, nodes, gpn))
                cause = miss_cause(mape, corrupt, slow, clean, by_size)
                if mape is not None and mape > TARGET:
                    misses[cause].append(
                        f"{hw.cluster} {fn} {nodes}x{gpn}: {mape * 100:.2f}% (neighbouring sizes scatter "
                        f"{noise * 100:.1f}%, white-noise floor {noise / np.sqrt(1.5) * 100:.1f}%, best predictor "
                        f"of the size alone {_pct(by_size)}"
                        + (f"; {corrupt:.1%} of rows beat the link peak, {slow:.1%} are more than "
                           f"{DISTURBED_RATIO}x slower than 3 larger messages; {_pct(clean)} on the rest)"
                           if corrupt + slow > CORRUPT_LAYOUT_SHARE else ")"))
                print(f"{fn:20s} {nodes:>3d}x{gpn:<3d} {_pct(mape):>9s} {_pct(rf):>9s} {_pct(noise):>8s} "
                      f"{_pct(noise / np.sqrt(1.5)):>7s} {_pct(by_size):>8s} {corrupt:8.1%} {slow:8.1%} "
                      f"{_pct(clean):>7s} {tf:6.1%}  {_verdict(mape, rf, cause)}")
    print(f"\nSummary: layouts missing the {TARGET:.0%} target unexplained by their data: {len(misses[''])}")
    for m in misses[""]:
        print(f"  {m}")
    print(f"Layouts that miss it at their data floor (no predictor of the message size alone reaches {TARGET:.0%} "
          f"on their rows, `by size`): {len(misses['data floor'])}")
    for m in misses["data floor"]:
        print(f"  {m}")
    print(f"Layouts whose data is corrupt (> {CORRUPT_LAYOUT_SHARE:.0%} of rows beat the link peak or are "
          f"disturbed, and the rest is within {TARGET:.0%}) that miss it: {len(misses['corrupt data'])}")
    for m in misses["corrupt data"]:
        print(f"  {m}")


def miss_cause(mape: float | None, corrupt: float, slow: float, clean: float | None, by_size: float) -> str:
    """Why a layout misses the target: "corrupt data" (more than CORRUPT_LAYOUT_SHARE of its rows beat the link
    peak or are disturbed, and the test rows that are neither are within the target), "data floor" (even the
    best predictor of the message size alone, size_floor, misses the target on its rows: bandwidth levels that
    alternate between neighbouring sizes, which the disturbed rule only partly flags) or "" (unexplained)."""
    if mape is None or mape <= TARGET:
        return ""
    if corrupt + slow > CORRUPT_LAYOUT_SHARE and clean is not None and clean <= TARGET:
        return "corrupt data"
    return "data floor" if np.isfinite(by_size) and by_size > TARGET else ""


def _verdict(mape: float | None, ref: float | None, cause: str) -> str:
    if mape is None:
        return "corrupt: too few plausible rows"
    parts = ["within 5%" if mape <= TARGET else f"NOT within 5% ({cause})" if cause else "NOT within 5%"]
    if ref is not None:
        parts.append("beats ref" if mape < ref else "worse than ref")
    return "; ".join(parts)


def _pct(v: float | None) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v * 100:.2f}%"


if __name__ == "__main__":
    main()

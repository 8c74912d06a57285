"""Fit a shipped profile (configs/profiles/NAME) from operator samples we measured ourselves on a real GPU.

    python benchmarks/fit_measured_profile.py [measurements/h100-sxm5-80gb-2026-11-26] [--out configs/profiles]

The samples are `llmperf profile --device cuda` timings exported from the sampler's SQLite store into the
measurement folder (op_samples.csv + op_samples_meta.json with the device fingerprint, library versions and
the roofline measured on the device; how they were taken: benchmarks/measure_gpu.sh and the folder's README).
The fit is the sampler's own (profile/build_profile.fit_samples), so this profile equals what `llmperf profile`
wrote on the GPU, refitted with the current code. Prints each regressor's held-out error and the size.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmperf_hook.profile.build_profile import Samples, fit_samples, library_versions  # noqa: E402
from llmperf_hook.profile.features import REQUIRED_DIMS, RooflineConstants  # noqa: E402
from llmperf_hook.profile.profile_io import ProfileMeta, write_profile  # noqa: E402
from llmperf_hook.profile.sampler import MIN_SAMPLES_TO_FIT, UNFUSED_CLASSES  # noqa: E402

DEFAULT_DIR = ROOT / "measurements" / "h100-sxm5-80gb-2026-11-26"
DTYPE_ALIASES = {"fp16": "bf16"}
"""Hopper's fp16 and bf16 tensor cores have the same rate and element width (H100 datasheet: 989 TFLOP/s dense
for both), so the bf16 samples answer fp16 jobs too."""


def load_samples(folder: Path) -> dict[tuple[str, str, str], Samples]:
    rows: dict[tuple[str, str, str], list[tuple[dict, float]]] = defaultdict(list)
    with open(folder / "op_samples.csv", newline="") as f:
        for r in csv.DictReader(f):
            rows[(r["op_class"], r["phase"], r["dtype"])].append((json.loads(r["dims_json"]), float(r["time_s"])))
    out = {}
    for (cls, phase, dtype), recs in sorted(rows.items()):
        if cls not in REQUIRED_DIMS:
            continue
        dims = {k: np.asarray([float(d[k]) for d, _ in recs]) for k in REQUIRED_DIMS[cls]}
        out[(cls, phase, dtype)] = Samples(cls, phase, dims, np.asarray([t for _, t in recs]))
    return out


def fit_folder(folder: Path) -> tuple[ProfileMeta, dict[str, str]]:
    meta_in = json.loads((folder / "op_samples_meta.json").read_text())
    rooflines = {dt: RooflineConstants(**rc) for dt, rc in meta_in["roofline"].items()}
    entries, texts = [], {}
    for (cls, phase, dtype), s in load_samples(folder).items():
        if len(s.time_s) < MIN_SAMPLES_TO_FIT:
            continue
        entry, text = fit_samples(s, rooflines[dtype], dtype)
        entries.append(entry)
        texts[entry.file] = text
        print(f"  {cls:14s} {phase} n={entry.num_samples:4d} held-out MAPE {(entry.holdout_mape or 0) * 100:5.1f}%  "
              f"{len(text) / 1024:6.1f} KiB", flush=True)
    meta = ProfileMeta(
        name=meta_in["hardware_name"], roofline={dt: rooflines[dt] for dt in {e.dtype for e in entries}},
        dtype_aliases=DTYPE_ALIASES, hardware=meta_in["fingerprint"], library_versions=library_versions(),
        provenance={"samples": f"{folder.relative_to(ROOT)}/op_samples.csv: `llmperf profile --device cuda` on "
                               f"{meta_in['fingerprint']['device']} (own measurements; see that folder's README)",
                    "sampled_with": json.dumps(meta_in["library_versions"], sort_keys=True),
                    "unfused_classes": UNFUSED_CLASSES,
                    "license": "own measurements", "fitted_by": "benchmarks/fit_measured_profile.py",
                    "fitted_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        models=tuple(entries),
        notes=("Held-out errors of the small element-wise ops are dominated by launch jitter of 7-13 us kernels "
               "(their time is set by the host, not the GPU, at those sizes).",))
    return meta, texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, nargs="?", default=DEFAULT_DIR)
    ap.add_argument("--out", type=Path, default=ROOT / "configs" / "profiles")
    args = ap.parse_args()
    folder = args.folder.resolve()
    meta, texts = fit_folder(folder)
    shutil.rmtree(args.out / meta.name, ignore_errors=True)  # no model file of an earlier fit stays behind
    out = write_profile(args.out / meta.name, meta, texts)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({len(texts)} regressors, {size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()

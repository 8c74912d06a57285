"""Fit a shipped profile (configs/profiles/NAME) from operator samples we measured ourselves on real GPUs.

    python benchmarks/fit_measured_profile.py [FOLDER ...] [--out configs/profiles]

    (no FOLDER: the H100 profile from both H100 measurement folders, DEFAULT_DIRS)

Each folder holds `llmperf profile --device cuda` timings exported from the sampler's SQLite store
(op_samples.csv + op_samples_meta.json with the device fingerprint, library versions and the roofline measured
on the device; how they were taken: benchmarks/measure_gpu.sh and the folder's README). Several folders of the
same GPU (e.g. two lent machines, each sampled `--for` another job) are merged into one sample set per
(op class, direction); a folder of another GPU (device, SM count or memory differ) is refused. The fit is the
sampler's own (profile/build_profile.fit_samples), so this profile equals what `llmperf profile` would write
from the merged store, refitted with the current code. Prints each regressor's held-out error and the size.
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
from typing import Sequence

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmperf_hook.errors import ConfigError  # noqa: E402
from llmperf_hook.profile.build_profile import Samples, fit_samples, library_versions, pool  # noqa: E402
from llmperf_hook.profile.features import REQUIRED_DIMS, RooflineConstants  # noqa: E402
from llmperf_hook.profile.profile_io import (OPTIMIZER_SAMPLE_KEY, SAMPLER_ADAM_BYTES_PER_PARAM,  # noqa: E402
                                             ProfileMeta, write_profile)
from llmperf_hook.profile.sampler import MIN_SAMPLES_TO_FIT, UNFUSED_CLASSES  # noqa: E402

MEASUREMENTS = ROOT / "measurements"
DEFAULT_DIRS = (MEASUREMENTS / "h100-sxm5-80gb-2026-11-26", MEASUREMENTS / "h100-sxm5-80gb-2026-11-26-b")
"""The shipped H100 profile's samples: a Megatron GPT-70B job and the testbed (MHA) on one lent H100, a
Llama-3-8B-like job (GQA 32/8, SwiGLU, RMSNorm, RoPE, seq 8192, TP2) on another."""
SAME_GPU_KEYS = ("device", "num_sms", "memory_bytes")
"""Fingerprint fields that must agree for folders to be merged: they name the GPU. Others (CUDA, driver) may
differ between machines and are listed per folder."""
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


def read_meta(folder: Path) -> dict:
    return json.loads((folder / "op_samples_meta.json").read_text())


def check_same_gpu(folders: Sequence[Path], metas: Sequence[dict]) -> None:
    """Refuse to merge folders whose fingerprints name different GPUs (or profiles of different names)."""
    first = metas[0]
    for folder, meta in zip(folders[1:], metas[1:]):
        for key in SAME_GPU_KEYS:
            a, b = first["fingerprint"].get(key), meta["fingerprint"].get(key)
            if a != b:
                raise ConfigError(
                    f"{_rel(folder)} was measured on another GPU than {_rel(folders[0])}: fingerprint {key} {b!r} "
                    f"(its op_samples_meta.json) against {a!r}. Only samples of one GPU model are merged into a "
                    f"profile (their times are that GPU's). Fit that folder on its own, or leave it out.")
        if meta["hardware_name"] != first["hardware_name"]:
            raise ConfigError(
                f"{_rel(folder)} names profile {meta['hardware_name']!r} and {_rel(folders[0])} names "
                f"{first['hardware_name']!r} (hardware_name in op_samples_meta.json); one profile is fitted from "
                f"folders of the same hardware name. Give folders of one GPU only.")


def load_folders(folders: Sequence[Path]) -> dict[tuple[str, str, str], Samples]:
    """All folders' samples merged per (op class, direction, dtype)."""
    sets: dict[tuple[str, str, str], list[Samples]] = defaultdict(list)
    for folder in folders:
        for key, s in load_samples(folder).items():
            sets[key].append(s)
    return {key: pool(group) for key, group in sorted(sets.items())}


def merged_roofline(metas: Sequence[dict]) -> dict[str, RooflineConstants]:
    """Per dtype, the mean of the folders' measured rooflines (the target's normaliser only: the two H100
    machines measured 776 and 788 TFLOP/s bf16, 2.98 and 2.99 TB/s)."""
    out = {}
    for dtype in sorted({dt for m in metas for dt in m["roofline"]}):
        consts = [m["roofline"][dtype] for m in metas if dtype in m["roofline"]]
        out[dtype] = RooflineConstants(
            peak_flop_per_s=float(np.mean([c["peak_flop_per_s"] for c in consts])),
            memory_bandwidth_bytes_per_s=float(np.mean([c["memory_bandwidth_bytes_per_s"] for c in consts])),
            num_sms=int(consts[0]["num_sms"]), dtype_bytes=int(consts[0]["dtype_bytes"]))
    return out


def merged_fingerprint(folders: Sequence[Path], metas: Sequence[dict]) -> dict[str, str]:
    """Fields equal in every folder as they are; a field that differs lists each folder's value."""
    out = {}
    for key in sorted({k for m in metas for k in m["fingerprint"]}):
        values = [str(m["fingerprint"].get(key, "?")) for m in metas]
        out[key] = values[0] if len(set(values)) == 1 else \
            "; ".join(f"{v} ({f.name})" for f, v in zip(folders, values))
    if len(folders) > 1:
        out["measured_in"] = ", ".join(f.name for f in folders)
    return out


def _rel(folder: Path) -> str:
    try:
        return str(folder.relative_to(ROOT))
    except ValueError:
        return str(folder)


def provenance(folders: Sequence[Path], metas: Sequence[dict], counts: Sequence[int]) -> dict[str, str]:
    device = metas[0]["fingerprint"]["device"]
    samples = "; ".join(f"{_rel(f)}/op_samples.csv ({n} samples)" for f, n in zip(folders, counts))
    return {"samples": f"{samples}: `llmperf profile --device cuda` on {device} (own measurements; see each "
                       f"folder's README)" + (", merged per op class and direction" if len(folders) > 1 else ""),
            "sampled_with": json.dumps({f.name: m["library_versions"] for f, m in zip(folders, metas)},
                                       sort_keys=True),
            "roofline_measured": json.dumps({f.name: m["roofline"] for f, m in zip(folders, metas)},
                                            sort_keys=True),
            "unfused_classes": UNFUSED_CLASSES, "license": "own measurements",
            OPTIMIZER_SAMPLE_KEY: f"{SAMPLER_ADAM_BYTES_PER_PARAM:g}",  # op_sampler._optimizer's fp32 torch Adam
            "fitted_by": "benchmarks/fit_measured_profile.py",
            "fitted_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def fit_folders(folders: Sequence[Path], with_holdout: bool = True,
                verbose: bool = True) -> tuple[ProfileMeta, dict[str, str]]:
    metas = [read_meta(f) for f in folders]
    check_same_gpu(folders, metas)
    rooflines = merged_roofline(metas)
    entries, texts = [], {}
    for (cls, phase, dtype), s in load_folders(folders).items():
        if len(s.time_s) < MIN_SAMPLES_TO_FIT:
            continue
        entry, text = fit_samples(s, rooflines[dtype], dtype, with_holdout=with_holdout)
        entries.append(entry)
        texts[entry.file] = text
        if verbose:
            print(f"  {cls:14s} {phase} n={entry.num_samples:4d} held-out MAPE "
                  f"{(entry.holdout_mape or 0) * 100:5.1f}%  {len(text) / 1024:6.1f} KiB", flush=True)
    counts = [sum(1 for _ in open(f / "op_samples.csv")) - 1 for f in folders]
    meta = ProfileMeta(
        name=metas[0]["hardware_name"], roofline={dt: rooflines[dt] for dt in {e.dtype for e in entries}},
        dtype_aliases=DTYPE_ALIASES, hardware=merged_fingerprint(folders, metas),
        library_versions=library_versions(), provenance=provenance(folders, metas, counts), models=tuple(entries),
        notes=("Held-out errors of the small element-wise ops are dominated by the host's launch path of 7-13 us "
               "kernels, which differs between machines (their time is set by the host, not the GPU, at those "
               "sizes).",))
    return meta, texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", type=Path, nargs="*", default=list(DEFAULT_DIRS))
    ap.add_argument("--out", type=Path, default=ROOT / "configs" / "profiles")
    args = ap.parse_args()
    folders = [f.resolve() for f in args.folders]
    try:
        meta, texts = fit_folders(folders)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    shutil.rmtree(args.out / meta.name, ignore_errors=True)  # no model file of an earlier fit stays behind
    out = write_profile(args.out / meta.name, meta, texts)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({len(texts)} regressors, {size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()

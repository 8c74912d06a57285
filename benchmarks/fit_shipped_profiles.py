"""Fit the shipped profiles (configs/profiles/) from the public samples in ../shared/data/op-samples (MIT).

    python benchmarks/fit_shipped_profiles.py [--data ../shared/data/op-samples] [--out configs/profiles]

Operator profiles `a100-sxm4-80gb` and `gh200-96gb` (fp16, also serving bf16) and communication models for
the clusters `perlmutter` and `vista`. The CSVs are read in place, never copied; the attribution goes into
every profile's metadata. Prints what it wrote and the size.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmperf_hook.profile.build_profile import fit_samples, library_versions, pool  # noqa: E402
from llmperf_hook.profile.comm_fit import fit_cluster_comm_model  # noqa: E402
from llmperf_hook.profile.comm_model import write_comm_model  # noqa: E402
from llmperf_hook.graph.step_ops import ADAM_BYTES_PER_PARAM  # noqa: E402
from llmperf_hook.profile.profile_io import OPTIMIZER_SAMPLE_KEY, ProfileMeta, write_profile  # noqa: E402
from llmperf_hook.profile.public_samples import ATTRIBUTION  # noqa: E402
from llmperf_hook.profile.shipped import (SHIPPED, SHIPPED_GROUPS, ShippedHardware, clean, corrupt_reason,  # noqa: E402
                                          first_step_reason, load_group)


MAX_SHIPPED_HOLDOUT_MAPE = 0.15
"""A regressor that misses its own held-out samples by more than this is not shipped (same rule as comm)."""


def fit_hardware(data: Path, hw: ShippedHardware) -> tuple[ProfileMeta, dict[str, str]]:
    entries, texts, notes = [], {}, []
    for group in SHIPPED_GROUPS:
        for phase, sets in sorted(load_group(data, hw, group).items()):
            samples, dropped = clean(pool(sets), hw.roofline)
            files = "+".join(s.source for s in sets)
            if samples is None:
                reason = corrupt_reason(pool(sets), hw.roofline)
                notes.append(f"{group}/{phase}: not fitted, the samples of {files} are corrupt ({reason}); the "
                             f"roofline model is used for it")
                print(f"  {hw.name} {group:16s} {phase} NOT fitted: corrupt ({reason})")
                continue
            first_step = first_step_reason(samples)
            if first_step is not None:
                notes.append(f"{group}/{phase}: not shipped, {files}: {first_step}; the roofline model is used for it")
                print(f"  {hw.name} {group:16s} {phase} NOT shipped: {first_step}")
                continue
            if dropped > 0:
                notes.append(f"{group}/{phase}: dropped {dropped:.1%} of {files} samples that beat the peak")
            entry, text = fit_samples(samples, hw.roofline, "fp16")
            if entry.holdout_mape is not None and entry.holdout_mape > MAX_SHIPPED_HOLDOUT_MAPE:
                notes.append(f"{group}/{phase}: not shipped, held-out error {entry.holdout_mape:.0%} > "
                             f"{MAX_SHIPPED_HOLDOUT_MAPE:.0%} (the samples contradict the class's dims; roofline used)")
                print(f"  {hw.name} {group:16s} {phase} NOT shipped: held-out MAPE {entry.holdout_mape:.1%}")
                continue
            entries.append(entry)
            texts[entry.file] = text
            print(f"  {hw.name} {group:16s} {phase} n={entry.num_samples:5d} held-out MAPE "
                  f"{(entry.holdout_mape or 0) * 100:5.2f}%  {len(text) / 1024:6.1f} KiB", flush=True)
    notes.append("Fitted on fp16 samples; serves bf16 too (same tensor-core peak and element width on A100/H100).")
    meta = ProfileMeta(
        name=hw.name, roofline={"fp16": hw.roofline}, dtype_aliases={"bf16": "fp16"}, hardware=hw.fingerprint,
        library_versions=library_versions(),
        provenance={"samples": f"op-samples/{hw.folder}/operator (public)", "attribution": ATTRIBUTION,
                    "license": "MIT", "fitted_by": "benchmarks/fit_shipped_profiles.py",
                    # their optimizer files time Megatron's fused Adam (op-samples README): step_ops' 30 B
                    OPTIMIZER_SAMPLE_KEY: f"{ADAM_BYTES_PER_PARAM:g}",
                    "fitted_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        models=tuple(entries), notes=tuple(notes))
    return meta, texts


def directory_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "op-samples")
    ap.add_argument("--out", type=Path, default=ROOT / "configs" / "profiles")
    args = ap.parse_args()
    for hw in SHIPPED.values():
        meta, texts = fit_hardware(args.data, hw)
        write_profile(args.out / hw.name, meta, texts)
        print(f"wrote {args.out / hw.name} ({directory_size(args.out / hw.name) / 1024:.0f} KiB)")
        comm = fit_cluster_comm_model(args.data, hw)
        path = write_comm_model(args.out / "comm" / hw.cluster, comm)
        print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
    print(f"total {directory_size(args.out) / 1024:.0f} KiB under {args.out}")


if __name__ == "__main__":
    main()

"""Export the operator samples `llmperf profile --device cuda` stored on a GPU machine into a measurement folder.

    python benchmarks/export_measured_samples.py OUT_FOLDER --store A/store.sqlite [--store B/store.sqlite ...]
        --profile A/profiles/NAME/profile.json

Writes OUT_FOLDER/op_samples.csv (op_class, phase, dtype, dims_json, time_s, recorded_utc; the sampler's own rows
only, in the order they were recorded; op records of `run --profile-ops` windows stay out) and
op_samples_meta.json (hardware name, device fingerprint and library versions as the store recorded them, and the
roofline the sampler measured on the device, from the profile it fitted there), the two files
benchmarks/fit_measured_profile.py fits a shipped profile from. Several stores of the same device are merged (a
profile resumed under another $LLMPERF_HOME); a store of another device is refused.
"""

from __future__ import annotations

import argparse
import csv
import json
import sqlite3
import sys
from pathlib import Path

COLUMNS = ("op_class", "phase", "dtype", "dims_json", "time_s", "recorded_utc")
SAMPLER_SOURCE = "sampler"
"""The store's `source` of rows the sampler measured (llmperf_hook/profile/sampler.py)."""


def read_store(path: Path) -> tuple[list[tuple], set[tuple[str, str, str]]]:
    """The sampler's rows of one store, and the (hardware, fingerprint, library versions) they were taken with."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute(
            f"SELECT {', '.join(COLUMNS)}, hardware, fingerprint, library_versions FROM op_samples "
            "WHERE source = ? ORDER BY recorded_utc", (SAMPLER_SOURCE,)).fetchall()
    return [r[:len(COLUMNS)] for r in rows], {r[len(COLUMNS):] for r in rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--store", type=Path, action="append", required=True)
    ap.add_argument("--profile", type=Path, required=True, help="profile.json the sampler fitted on the device")
    args = ap.parse_args()
    rows, origins = [], set()
    for store in args.store:
        store_rows, store_origins = read_store(store)
        rows += store_rows
        origins |= store_origins
    if len(origins) != 1:
        sys.exit(f"the stores hold samples of {len(origins)} (hardware, device, library) origins, expected one: "
                 f"{sorted(origins)}")
    (hardware, fingerprint, versions), = origins
    roofline = json.loads(args.profile.read_text())["roofline"]
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "op_samples.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        writer.writerows(sorted(rows, key=lambda r: r[-1]))
    meta = {"hardware_name": hardware, "fingerprint": json.loads(fingerprint),
            "library_versions": json.loads(versions), "roofline": roofline,
            "roofline_note": "measured on the device by llmperf_hook.profile.local_hardware.measure_roofline: "
                             "best of 5 bf16 8192^3 GEMMs, and a 1 GiB fp32 tensor copy (read + write)"}
    (args.out / "op_samples_meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"{len(rows)} samples of {hardware} ({meta['fingerprint'].get('device')}) -> {args.out}")


if __name__ == "__main__":
    main()

"""The CPU testbed's before-refinement error with another framework-cost file, on the recorded runs: nothing run.

    python benchmarks/testbed_refit.py FRAMEWORK_OVERHEAD_JSON... [--home DIR] [--records FILE...]

bench_cpu_testbed.py's records (HOME/records/testbed-*.json) keep every run's measured step and CPU time. Each
file given (a profile's framework_overhead.json, e.g. a kept copy of an earlier fit) is scored three ways
against every record's measurements (median of each configuration's passes, testbed_report.median_pass): as
written; refitted the current way from its own median times (profile/cpu_framework_readings.summarize: one
fit of the median times, what `llmperf profile --device cpu` now writes); and one reading alone per reading
(how far one reading was). Per record: MAPE against the measured step, against the slowest rank's CPU time,
and the median signed error. The twelve are predicted in a fresh process with HOME's operator profile, comm
model and cluster file, the given framework-cost file in place of HOME's (HOME is never written).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Iterator

from testbed_configs import CLUSTER, CONFIGS
from testbed_record import _bad_input, load_record, mape, pct, reference_runs
from testbed_report import median_pass
from testbed_runs import predict_all


def measured(record: dict) -> tuple[list[int], list[float], list[float]]:
    """(the index in CONFIGS, measured step, slowest rank's CPU time) of each configuration the record measured: a
    --configs record's runs number its own configurations, not CONFIGS."""
    indices = record.get("config_indices") or list(range(len(CONFIGS)))
    runs = [median_pass(reference_runs(record, k)) for k in range(len(indices))]
    return list(indices), [m["measured_s"] for m in runs], [m["cpu_s"] for m in runs]


def home_with(home: Path, doc: dict, where: Path) -> Path:
    """A home that sees HOME's profiles, hardware and clusters, with `doc` as the testbed profile's framework cost."""
    shutil.rmtree(where, ignore_errors=True)
    profile = where / "profiles" / CLUSTER
    profile.mkdir(parents=True)
    for part in ("hardware", "clusters"):
        (where / part).symlink_to(home / part)
    for entry in (home / "profiles").iterdir():
        if entry.name != CLUSTER:
            (where / "profiles" / entry.name).symlink_to(entry)
    for f in (home / "profiles" / CLUSTER).iterdir():
        if f.name != "framework_overhead.json":
            (profile / f.name).symlink_to(f)
    from llmperf_hook.predict.cpu_framework import with_digest

    # signed anew: `doc` is the file's with other terms, and predict refuses a file whose digest does not match
    (profile / "framework_overhead.json").write_text(json.dumps(with_digest(doc)))
    return where


def load_framework_cost(path: Path) -> dict:
    """A profile's framework_overhead.json with its kept median times; exit 2 with the reason for anything else."""
    from llmperf_hook.profile.cpu_framework import FORMAT

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        _bad_input(f"{path}: not a readable JSON file ({err}); pass a profile's framework_overhead.json")
    entries = doc.get("dtypes") if isinstance(doc, dict) else None
    if (not isinstance(entries, dict) or doc.get("format") != FORMAT or not entries
            or not all(isinstance(e, dict) and "samples" in e and "tiny_samples" in e for e in entries.values())):
        _bad_input(f"{path}: not a framework-cost file ({FORMAT}) with its samples per dtype; pass a profile's "
                   f"framework_overhead.json written by `llmperf profile --device cpu`")
    return doc


def median_times(entry: dict) -> dict:
    """The median raw times a file keeps (its samples), in the form of one reading (cpu_framework_readings)."""
    return {"tiny_s": [t["fwd_bwd_s"] for t in entry["tiny_samples"]],
            "tiny_isolated_diff_s": entry.get("tiny_isolated_diff_s"),  # None in files before session 18
            "fwd_bwd_s": [r["fwd_bwd_s"] for r in entry["samples"]],
            "optimizer_s": [[r["optimizer_tensors_s"], r["optimizer_flat_s"]] for r in entry["samples"]],
            "bias": entry["profile_bias"], "concurrency": entry.get("concurrency_slowdown"),
            "engine": {z: [[r[1], r[2]] for r in st["samples"]] for z, st in entry.get("deepspeed_step", {}).items()}}


def with_terms(doc: dict, terms_of: dict) -> dict:
    out = copy.deepcopy(doc)
    for dtype, terms in terms_of.items():
        entry = out["dtypes"][dtype]
        for key, value in terms.items():
            if key == "deepspeed_step":
                for zero, stage in value.items():
                    entry[key][zero].update({k: v for k, v in stage.items() if k != "samples"})
            else:
                entry[key] = value
    return out


def variants(doc: dict, home: Path, tmp: Path) -> Iterator[tuple[str, dict]]:
    from llmperf_hook.profile.cpu_framework_readings import fixed_parts, reading_terms
    from llmperf_hook.profile.cpu_reading_plan import plan_of

    yield "as written", doc
    os.environ["LLMPERF_HOME"] = str(home_with(home, doc, tmp / "fixed"))  # the operator profile of the predictions
    yield "one fit of its median times", with_terms(doc, {
        dt: reading_terms(median_times(e), fixed_parts(dt, CLUSTER, plan_of(e)), dt) for dt, e in doc["dtypes"].items()})
    for i in range(min(len(e.get("readings") or ()) for e in doc["dtypes"].values())):
        yield f"reading {i} alone", with_terms(doc, {dt: e["readings"][i] for dt, e in doc["dtypes"].items()})


def score_cell(pred: list[float], meas: list[float], cpu: list[float]) -> str:
    """MAPE against the measured steps / against the CPU times, and the median signed error, in %."""
    errors = [pct(p, m) for p, m in zip(pred, meas)]
    return (f"{mape(errors):5.1f} / {mape([pct(p, c) for p, c in zip(pred, cpu)]):5.1f} % "
            f"({statistics.median(errors):+5.1f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--home", type=Path, default=Path.home() / ".cache" / "llmperf-cpu-testbed")
    ap.add_argument("--records", nargs="*", type=Path)
    args = ap.parse_args()
    home = args.home.expanduser().resolve()
    paths = args.records or sorted((home / "records").glob("*.json"))
    records = [(p.stem.removeprefix("testbed-"), measured(load_record(p))) for p in paths]
    files = [(path, load_framework_cost(path)) for path in args.files]  # every file checked before any prediction
    with tempfile.TemporaryDirectory() as tmp:
        for path, given in files:
            print(f"\n{path} (per record: MAPE vs measured / vs CPU time, median signed error)")
            for name, doc in variants(given, home, Path(tmp)):
                pred_all = predict_all(CONFIGS, home_with(home, doc, Path(tmp) / "eval"), Path(tmp) / "work")
                cells = [f"{rec}: {score_cell([pred_all[i] for i in indices], meas, cpu)}"
                         for rec, (indices, meas, cpu) in records]
                print(f"  {name:30s} " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()

"""The shipped H100 and H200 profiles are the fits of the committed measurements (benchmarks/fit_measured_profile.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from fit_measured_profile import load_samples  # noqa: E402

MEASURED = {"h100-sxm5-80gb": "measurements/h100-sxm5-80gb-2026-11-26",
            "h200-sxm-141gb": "measurements/h200-sxm-141gb-2026-11-26"}


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_shipped_profile_counts_match_the_measured_samples(name: str) -> None:
    samples = load_samples(ROOT / MEASURED[name])
    meta = json.loads((ROOT / "configs" / "profiles" / name / "profile.json").read_text())
    fitted = {(m["op_class"], m["phase"], m["dtype"]): m["num_samples"] for m in meta["models"]}
    assert fitted == {k: len(s.time_s) for k, s in samples.items()}
    assert f"{MEASURED[name]}/op_samples.csv" in meta["provenance"]["samples"]
    assert set(meta["provenance"]["unfused_classes"].split(",")) == {"rope", "swiglu"}
    sampled = json.loads((ROOT / MEASURED[name] / "op_samples_meta.json").read_text())
    assert sampled["hardware_name"] == meta["name"] == name
    assert meta["hardware"] == sampled["fingerprint"]


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_measured_runs_have_their_commands_and_step_records(name: str) -> None:
    runs = sorted((ROOT / MEASURED[name] / "runs").iterdir())
    assert len(runs) == 8
    for run in runs:
        session = json.loads((run / "session.json").read_text())
        assert session["argv"][0] in ("deepspeed", "python3")
        steps = [json.loads(line) for line in (run / "rank0.jsonl").read_text().splitlines()]
        timed = [r for r in steps if r["kind"] == "step" and not r["warmup"] and not r["profiled"]]
        assert len(timed) >= 6 and all(r["timer"] == "cuda_event" for r in timed)

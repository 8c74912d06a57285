"""The shipped H100 and H200 profiles are the fits of the committed measurements (benchmarks/fit_measured_profile.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from fit_measured_profile import (  # noqa: E402
    DEFAULT_DIRS, check_same_gpu, load_folders, merged_fingerprint, merged_roofline, read_meta)

from llmperf_hook.errors import ConfigError  # noqa: E402

MEASURED = {"h100-sxm5-80gb": ("measurements/h100-sxm5-80gb-2026-11-26", "measurements/h100-sxm5-80gb-2026-11-26-b"),
            "h200-sxm-141gb": ("measurements/h200-sxm-141gb-2026-11-26",)}
RUNS = {"h100-sxm5-80gb": "measurements/h100-sxm5-80gb-2026-11-26",
        "h200-sxm-141gb": "measurements/h200-sxm-141gb-2026-11-26"}


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_shipped_profile_counts_match_the_measured_samples(name: str) -> None:
    folders = [ROOT / f for f in MEASURED[name]]
    samples = load_folders(folders)
    meta = json.loads((ROOT / "configs" / "profiles" / name / "profile.json").read_text())
    fitted = {(m["op_class"], m["phase"], m["dtype"]): m["num_samples"] for m in meta["models"]}
    assert fitted == {k: len(s.time_s) for k, s in samples.items()}
    for folder in MEASURED[name]:
        assert f"{folder}/op_samples.csv" in meta["provenance"]["samples"]
    assert set(meta["provenance"]["unfused_classes"].split(",")) == {"rope", "swiglu"}
    sampled = [read_meta(f) for f in folders]
    assert {s["hardware_name"] for s in sampled} == {meta["name"]} == {name}
    assert meta["hardware"] == merged_fingerprint(folders, sampled)


def test_the_h100_profile_is_fitted_from_both_h100_folders() -> None:
    assert tuple(str(d.relative_to(ROOT)) for d in DEFAULT_DIRS) == MEASURED["h100-sxm5-80gb"]
    meta = json.loads((ROOT / "configs" / "profiles" / "h100-sxm5-80gb" / "profile.json").read_text())
    assert meta["hardware"]["measured_in"] == "h100-sxm5-80gb-2026-11-26, h100-sxm5-80gb-2026-11-26-b"
    assert set(json.loads(meta["provenance"]["sampled_with"])) == {Path(f).name for f in MEASURED["h100-sxm5-80gb"]}
    # GQA shapes (heads / kv_heads 2-8) come from the second folder only.
    attention = load_folders(list(DEFAULT_DIRS))[("attention", "fwd", "bf16")]
    assert set(attention.dims["heads"] / attention.dims["kv_heads"]) >= {1.0, 2.0, 4.0, 8.0}


def test_merging_refuses_a_folder_of_another_gpu() -> None:
    folders = [ROOT / MEASURED["h100-sxm5-80gb"][0], ROOT / MEASURED["h200-sxm-141gb"][0]]
    with pytest.raises(ConfigError, match=r"another GPU.*fingerprint device 'NVIDIA H200"):
        check_same_gpu(folders, [read_meta(f) for f in folders])


def test_merged_fingerprint_and_roofline_list_every_folder() -> None:
    folders = [Path("/x/a"), Path("/x/b")]
    metas = [{"fingerprint": {"device": "H100", "cuda": c}, "roofline": {"bf16": {
        "peak_flop_per_s": p, "memory_bandwidth_bytes_per_s": 3.0e12, "num_sms": 132, "dtype_bytes": 2}}}
        for c, p in (("12.8", 7.0e14), ("13.0", 8.0e14))]
    assert merged_fingerprint(folders, metas) == {"device": "H100", "cuda": "12.8 (a); 13.0 (b)", "measured_in": "a, b"}
    assert merged_roofline(metas)["bf16"].peak_flop_per_s == pytest.approx(7.5e14)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_measured_runs_have_their_commands_and_step_records(name: str) -> None:
    runs = sorted((ROOT / RUNS[name] / "runs").iterdir())
    assert len(runs) == 8
    for run in runs:
        session = json.loads((run / "session.json").read_text())
        assert session["argv"][0] in ("deepspeed", "python3")
        steps = [json.loads(line) for line in (run / "rank0.jsonl").read_text().splitlines()]
        timed = [r for r in steps if r["kind"] == "step" and not r["warmup"] and not r["profiled"]]
        assert len(timed) >= 6 and all(r["timer"] == "cuda_event" for r in timed)

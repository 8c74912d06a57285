"""benchmarks/testbed_refit.py refits a kept framework-cost file the way `llmperf profile --device cpu` now writes
one, and bench_hook_overhead.py's loop measures the hook in process CPU time."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import testbed_refit as refit  # noqa: E402
from test_cpu_framework_readings import _fixed, _raw  # noqa: E402

from llmperf_hook.profile import cpu_framework_readings as cfr  # noqa: E402


def test_the_median_times_a_file_keeps_refit_to_its_own_terms() -> None:
    """A file written now (one fit of the median times): its kept samples, read back as one reading and fitted,
    give its terms again, so the tool's "one fit" column is what a new profile would hold."""
    fixed, rng = _fixed(), random.Random(5)
    entry = cfr.summarize([_raw(fixed, rng, noise=0.05) for _ in range(3)], fixed, "fp32", [1.0] * 3, 10.0)
    again = cfr.reading_terms(refit.median_times(entry), fixed, "fp32")
    for key in ("per_unit_s", "per_byte_s", "optimizer_per_tensor_s", "optimizer_per_param_s", "compute_scale"):
        assert again[key] == pytest.approx(entry[key], rel=1e-9), key
    for zero, stage in again["deepspeed_step"].items():
        assert stage["per_param_s"] == pytest.approx(entry["deepspeed_step"][zero]["per_param_s"], rel=1e-9)
    doc = {"dtypes": {"fp32": entry}}
    one = refit.with_terms(doc, {"fp32": entry["readings"][0]})
    assert one["dtypes"]["fp32"]["per_unit_s"] == entry["readings"][0]["per_unit_s"]
    assert one["dtypes"]["fp32"]["deepspeed_step"]["1"]["samples"] == entry["deepspeed_step"]["1"]["samples"]
    assert doc["dtypes"]["fp32"]["per_unit_s"] == entry["per_unit_s"]  # the file given is left as it was


def test_hook_overhead_loop_reports_cpu_and_wall_costs() -> None:
    import bench_hook_overhead as bench

    cost, off, on, direct, wall = bench.hook_cost_s(2)
    assert 0 < off < 0.05 and 0 < on < 0.05 and 0 < direct < 1e-3  # CPU seconds per step of a tiny loop
    assert abs(cost - (on - off)) < 1e-12 and wall == wall


def test_a_records_configurations_are_scored_against_their_own_predictions() -> None:
    """A --configs record numbers its runs by its own configurations: run 'config' 1 of a record of CONFIGS 3 and 7
    is CONFIGS[7], scored against that prediction (paired in order, it met CONFIGS[1]'s)."""
    runs = [{"config": k, "pass": p, "measured_s": t * (1 + 0.01 * p), "cpu_s": t, "load_before": 1.0,
             "contended": False} for k, t in ((0, 0.02), (1, 0.05)) for p in range(3)]
    indices, meas, cpu = refit.measured({"config_indices": [3, 7], "configs": [{}, {}], "runs": runs})
    assert indices == [3, 7] and meas == pytest.approx([0.0202, 0.0505]) and cpu == [0.02, 0.05]
    pred_all = [0.0] * 12
    pred_all[3], pred_all[7] = 0.0202, 0.0505
    assert refit.score_cell([pred_all[i] for i in indices], meas, cpu) == "  0.0 /   1.0 % ( +0.0)"


@pytest.mark.parametrize("text, said", [("{", "not a readable JSON file"), ("[1]", "not a framework-cost file"),
                                        ('{"format": "llmperf-cpu-framework-overhead", "dtypes": {"fp32": {}}}',
                                         "with its samples per dtype")])
def test_a_file_that_is_no_framework_cost_file_exits_2_before_any_prediction(tmp_path: Path, text: str,
                                                                           said: str) -> None:
    import subprocess

    bad = tmp_path / "framework_overhead.json"
    bad.write_text(text)
    done = subprocess.run([sys.executable, str(BENCH / "testbed_refit.py"), str(bad), "--home", str(tmp_path),
                           "--records"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_home_with_other_terms_is_signed_anew(tmp_path: Path) -> None:
    """The files `llmperf profile` writes are signed (predict refuses one whose digest does not match): the homes this
    tool builds hold a signed file's doc with other terms, which must be signed again, not carry the old digest."""
    from llmperf_hook.predict.cpu_framework import digest_problem, with_digest

    home = tmp_path / "home"
    for part in ("hardware", "clusters", f"profiles/{refit.CLUSTER}"):
        (home / part).mkdir(parents=True)
    signed = with_digest({"dtypes": {"fp32": {"per_unit_s": 1e-5}}})
    doc = refit.with_terms(signed, {"fp32": {"per_unit_s": 2e-5}})
    written = refit.home_with(home, doc, tmp_path / "eval") / "profiles" / refit.CLUSTER / "framework_overhead.json"
    assert digest_problem(doc) and digest_problem(json.loads(written.read_text())) is None

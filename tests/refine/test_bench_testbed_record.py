"""benchmarks/testbed_record.py and testbed_replay.py: rotated passes, the raw record, and refinement replayed
on it for every choice of calibration run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
import testbed_configs as testbed  # noqa: E402
import testbed_record as rec  # noqa: E402
import testbed_replay as replay  # noqa: E402
import testbed_report as report  # noqa: E402
import testbed_rescore as rescore  # noqa: E402


def test_each_pass_runs_every_configuration_once_starting_elsewhere() -> None:
    orders = [rec.rotation(12, 5, p) for p in range(5)]
    assert all(sorted(o) == list(range(12)) for o in orders)
    assert [o[0] for o in orders] == [0, 2, 4, 7, 9]  # p x 12 / 5
    positions = {tuple(o.index(i) for o in orders) for i in range(12)}
    assert all(len(set(p)) == 5 for p in positions)  # no configuration always at the same point of a pass
    assert rec.calibration_pass(5) == 2 and rec.calibration_pass(1) == 0


def _record(pass_shift: list[float], run_noise: float = 0.0, cal_ratio: float | None = None) -> dict:
    """A record of the twelve predicted exactly (measured = predicted x pass shift x a run's noise), the last
    pass-2 run of configuration 0 a calibration run `cal_ratio` off."""
    configs = [{"index": i, "label": c.label(), "predicted_s": 0.01 * (i + 1),
                "breakdown": {"compute": 0.007 * (i + 1), "optimizer": 0.003 * (i + 1)},
                "config": {"precision": c.dtype, "world_size": c.ranks, "zero_stage": c.zero, "num_layers": c.layers,
                           "hidden_size": c.hidden, "micro_batch_size": c.mbs, "seq_length": c.seq}}
               for i, c in enumerate(testbed.CONFIGS)]
    runs = []
    for p, shift in enumerate(pass_shift):
        for pos, i in enumerate(rec.rotation(12, len(pass_shift), p)):
            noise = math.exp(run_noise * (1 if (i + p) % 2 else -1))
            runs.append({"config": i, "pass": p, "position": pos, "measured_s": 0.01 * (i + 1) * shift * noise,
                         "cpu_s": 0.01 * (i + 1) * shift * noise, "load_before": 1.0, "contended": False,
                         "step_times_s": [0.01 * (i + 1) * shift * noise] * 12})
    if cal_ratio is not None:
        runs.append({"config": 0, "pass": 2, "position": 0, "measured_s": 0.01 * cal_ratio, "cpu_s": 0.01 * cal_ratio,
                     "load_before": 1.0, "contended": False, "calibration": True, "store": "eval-c0",
                     "step_times_s": [0.01 * cal_ratio] * 12})
    errors = [0.1, -0.1, 0.05, -0.05, 0.12, -0.12, 0.0, 0.03, -0.03, 0.07, -0.07, 0.02]
    return {"format": rec.RECORD_FORMAT, "configs": configs, "runs": runs, "calibrations": {},
            "priors": {"sd_shared": 0.1, "sd_config": 0.14, "source": "test", "holdout_errors": errors,
                       "holdout_terms": ["compute/fp32"] * 6 + ["optimizer/fp32/zero 1"] * 6, "drift": 0.134,
                       "drift_shifts": 0, "source_file": "test"}}


def test_pass_effects_split_what_a_pass_shared_from_what_a_run_had_alone() -> None:
    shared = rec.pass_effects(_record([1.0, 1.1, 0.9, 1.05, 0.95]))
    assert shared["sd_pass"] > 0.05 and shared["sd_residual"] < 1e-9 and shared["runs"] == 60
    alone = rec.pass_effects(_record([1.0] * 5, run_noise=0.05))
    assert alone["sd_pass"] < 0.02 and alone["sd_residual"] > 0.04


def test_the_instrumented_configurations_reference_leaves_its_calibration_run_out() -> None:
    record = _record([1.0] * 5, cal_ratio=1.5)
    assert len(rec.reference_runs(record, 0)) == 5 and len(rec.reference_runs(record, 0, False)) == 6
    m = rec.summarise(rec.reference_runs(record, 0))
    assert m["measured_s"] == pytest.approx(0.01) and m["spread"] == pytest.approx(1.0)


def test_replay_scores_every_run_of_every_configuration_and_refine_does_not_spread_one_noisy_run() -> None:
    """Twelve configurations predicted exactly; configuration 0's calibration run 50 % slow (a disturbed run):
    the full ratio makes every other configuration 50 % slow, refine's transfer moves them far less, and less than
    session 11's rule did (the run's moment is not shared)."""
    record = _record([1.0] * 5, cal_ratio=1.5)
    measured = [report.median_pass(rec.reference_runs(record, i)) for i in range(12)]
    before = [c["predicted_s"] for c in record["configs"]]
    cal_run = next(r for r in record["runs"] if r.get("calibration"))
    assert replay.full_ratio(record, 0, cal_run, before)[5] == pytest.approx(before[5] * 1.5)
    rows = replay.replay(record, measured, before, replay.refine_rule(True))
    assert len(rows) == 61  # 12 x 5 measurement runs + the calibration run
    noisy = next(r for r in rows if r["k"] == 0 and r["pass"] == 2 and r["own"] > 1)
    assert noisy["others_before"] == pytest.approx(0.0) and 0 < noisy["others"] < 0.4 * 50
    old = replay.replay(record, measured, before, replay.refine_rule(False, session11=True))
    assert noisy["others"] < next(r for r in old if r["k"] == 0 and r["own"] > 1)["others"]
    quiet = [r for r in rows if r is not noisy]
    assert all(abs(r["own"]) < 1e-6 and r["others"] < 1e-6 for r in quiet)  # exact runs move nothing
    # scored on its own run too: refine moved it toward the run (-33 % before), not past it
    assert noisy["own_run_before"] == pytest.approx(100 * (1 / 1.5 - 1))
    assert noisy["own_run_before"] < noisy["own_run"] < 0
    assert "(past it: 0/61)" in replay.summary(rows)


def test_a_replay_of_a_file_that_is_no_record_exits_2_with_the_reason(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": 99}))
    for path in (bad, tmp_path / "missing.json"):
        done = subprocess.run([sys.executable, str(BENCH / "bench_cpu_testbed.py"), "--replay", str(path)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "--replay" in done.stderr and "Traceback" not in done.stderr


def test_a_replay_log_that_is_no_output_exits_2_with_the_reason(tmp_path: Path) -> None:
    """Was a traceback, exit 1: FileNotFoundError for a missing log, IndexError for a file without measurements."""
    other = tmp_path / "notes.txt"
    other.write_text("x\n")
    for flag, path in (("--replay-log", other), ("--replay-log", tmp_path / "missing.txt"),
                       ("--rescore", tmp_path / "missing.txt")):
        done = subprocess.run([sys.executable, str(BENCH / "bench_cpu_testbed.py"), "--home", str(tmp_path / "h"),
                               flag, str(path)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and flag in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("args, said", [(["--repeats", "1"], "--repeats 1"),
                                        (["--configs", "0,10", "--calibrate", "2"], "--calibrate 2"),
                                        (["--configs", "0,12"], "--configs 0,12"),
                                        (["--drift-configs", "0,12", "--drift-check", "2"], "--drift-configs 0,12"),
                                        (["--drift-configs", "one", "--spread-check", "2"], "--drift-configs"),
                                        (["--configs", "1,1"], "repeated"),
                                        (["--calibrate", "one"], "argument --calibrate: 'one': a comma-separated")])
def test_a_measurement_that_could_not_be_scored_is_refused_before_any_run(tmp_path: Path, args: list[str],
                                                                        said: str) -> None:
    """One pass leaves the instrumented configuration without a measurement run to be scored on, and a --calibrate
    index outside --configs names no configuration: both ended in an IndexError after every run had been made; a
    --configs index outside CONFIGS, after the profiling; a --drift-configs index (the configurations --drift-check and
    --spread-check run again and again) was not checked at all: an IndexError or ValueError after the profiling."""
    done = subprocess.run([sys.executable, str(BENCH / "bench_cpu_testbed.py"), "--home", str(tmp_path / "h"), *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "h").exists()


def test_a_saved_record_replays_with_its_tables(tmp_path: Path) -> None:
    record = _record([1.0, 1.02, 0.98, 1.01, 0.99], cal_ratio=1.2)
    record.update(ref_profile_s=0.0076, commit="test")
    path = rec.save_record(record, tmp_path / "r.json")
    done = subprocess.run([sys.executable, str(BENCH / "bench_cpu_testbed.py"), "--replay", str(path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "5 runs x" in done.stdout and "[replay] every run of every configuration" in done.stdout
    assert "61 choices" in done.stdout and "session 11's refine" in done.stdout
    assert "recorded calibration run of config 0 (pass 3), this tree's refine: on its own run" in done.stdout


def test_a_replayed_record_keeps_its_bound_launch() -> None:
    """A --bind-cores record replays its configurations as bound (the labels said so; replay dropped it)."""
    sys.path.insert(0, str(BENCH))
    import bench_cpu_testbed as bench

    bound = {"config_indices": [0, 3], "bind_cores": True}
    assert [c.label() for c in bench.record_configs(bound)] == [testbed.CONFIGS[i].label() + " bound" for i in (0, 3)]
    older = {"config_indices": [2], "configs": [{"label": testbed.CONFIGS[2].label() + " bound"}]}
    assert bench.record_configs(older)[0].bind and not bench.record_configs({"config_indices": [2]})[0].bind


LOG = """[measure] pass 1 of 2: 12 configurations, `llmperf run --instrument 26 --stop-after 26`
   0 L2 h128 s128 mbs2 z0 1r fp32       measured    25.08 ms (CPU   25.24 ms)  predicted    24.57 ms (  -2.0 %)  load 1.27  reference x0.949 of the profile's (hook 9.91 ms)  1 run(s)  [12 s]
   1 L2 h256 s128 mbs2 z1 2r fp32       measured    94.28 ms (CPU   83.92 ms)  predicted    73.24 ms ( -22.3 %)  load 1.21  reference x1.098 of the profile's (hook 10.29 ms)  2 run(s) CONTENDED  [15 s]

[measure] pass 2 of 2: 12 configurations, `llmperf run --instrument 26 --stop-after 26`
   0 L2 h128 s128 mbs2 z0 1r fp32       measured    22.20 ms (CPU   22.29 ms)  predicted    24.57 ms ( +10.7 %)  load 1.20  reference x1.006 of the profile's (hook 7.47 ms)  1 run(s)  [10 s]
   1 L2 h256 s128 mbs2 z1 2r fp32       measured    89.72 ms (CPU   81.86 ms)  predicted    73.24 ms ( -18.4 %)  load 1.09  reference x0.991 of the profile's (hook 8.09 ms)  1 run(s)  [13 s]

[refine] instrumenting configuration 1 (L2 h256 s128 mbs2 z1 2r fp32) with the evaluation store eval
  llmperf refine: /x/run -> /x/store.sqlite
    job 20261127T030930Z-31458: deepspeed on cpu, 2/2 ranks, 24 timed steps, measured 83.81 ms (CPU 76.07 ms per rank), load 1.10
      predicted before: 73.24 ms (-12.6% vs measured)

  #  configuration                      measured   before (err)        after (err)        reference (x profile's)
"""


def test_a_printed_output_becomes_a_record_its_calibration_run_apart() -> None:
    header = {**_record([1.0]), "runs": [], "ref_profile_s": 0.0076}
    record = rescore.record_from_log(LOG, header)
    measuring = [r for r in record["runs"] if not r.get("calibration")]
    assert [(r["config"], r["pass"], round(r["measured_s"], 7)) for r in measuring] == [
        (0, 0, 0.02508), (1, 0, 0.09428), (0, 1, 0.0222), (1, 1, 0.08972)]
    assert measuring[1]["contended"] and not measuring[0]["contended"]
    (cal,) = [r for r in record["runs"] if r.get("calibration")]
    assert cal["config"] == 1 and cal["measured_s"] == pytest.approx(0.08381) and cal["cpu_s"] == pytest.approx(0.07607)
    assert record["configs"][1]["predicted_s"] == pytest.approx(0.07324)  # as printed, not as predicted now
    assert record["configs"][5]["predicted_s"] == header["configs"][5]["predicted_s"]
    assert rec.summarise(rec.reference_runs(record, 1))["measured_s"] == pytest.approx((0.09428 + 0.08972) / 2)


def test_repredict_scores_the_recorded_runs_against_this_trees_predictions(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """--repredict: each configuration's prediction, breakdown and resolved configuration made again from --home
    (the runs, priors and calibrations as recorded), so a model change is scored on the same measurements."""
    import bench_cpu_testbed as bench

    record = _record([1.0] * 5, cal_ratio=1.2)
    seen = {}

    def fake_detail(configs, home, work):
        seen.update(home=home, n=len(configs))
        return [{"predicted_s": 2.0 * c.layers, "breakdown": {"compute": 1.0}, "config": {"world_size": c.ranks}}
                for c in configs]

    monkeypatch.setattr(bench, "predict_all_detail", fake_detail)
    out = bench.repredicted(record, tmp_path)
    assert seen == {"home": tmp_path / "eval-repredict", "n": 12}
    assert [c["predicted_s"] for c in out["configs"]] == [2.0 * c.layers for c in testbed.CONFIGS]
    assert out["configs"][3]["label"] == record["configs"][3]["label"] and out["runs"] is record["runs"]
    assert record["configs"][0]["predicted_s"] != out["configs"][0]["predicted_s"]  # the record is not rewritten

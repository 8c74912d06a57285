"""benchmarks/bench_cpu_testbed.py's summary of interleaved measurement passes (the figure the targets score):
testbed_report.py, testbed_configs.py, testbed_checks.py, testbed_rescore.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import testbed_checks as checks  # noqa: E402
import testbed_configs as testbed  # noqa: E402
import testbed_report as report  # noqa: E402
import testbed_rescore as rescore  # noqa: E402


def _run(measured: float, cpu: float, load: float, contended: bool = False) -> dict:
    return {"measured_s": measured, "cpu_s": cpu, "load_before": load, "contended": contended, "ref_now_s": 0.006}


def test_two_passes_score_their_mean_and_keep_the_spread() -> None:
    m = report.median_pass([_run(0.060, 0.050, 2.0, contended=True), _run(0.050, 0.045, 1.0)])
    assert m["measured_s"] == pytest.approx(0.055) and m["cpu_s"] == pytest.approx(0.0475)
    assert m["pass_times_s"] == [0.050, 0.060] and m["pass_spread"] == pytest.approx(1.2)
    assert m["contended"] and m["load_before"] == pytest.approx(1.5)


def test_three_passes_score_the_middle_one() -> None:
    m = report.median_pass([_run(0.07, 0.05, 1.0), _run(0.05, 0.05, 1.0), _run(0.06, 0.05, 1.0)])
    assert m["measured_s"] == 0.06 and not m["contended"]


def test_bound_configuration_passes_deepspeeds_bind_flag_to_the_launcher() -> None:
    """--bind-cores / --spread-check: the launcher option goes before the script (DeepSpeed's runner reads its own
    options there; after the script it would be the script's), and the label says so."""
    from dataclasses import replace

    cfg = replace(testbed.CONFIGS[1], bind=True)
    argv = cfg.argv(Path("ds.json"), 29500)
    assert argv.index("--bind_cores_to_rank") < argv.index(str(testbed.TRAIN_GPT)) and cfg.label().endswith("bound")
    assert "--bind_cores_to_rank" not in testbed.CONFIGS[1].argv(Path("ds.json"), 29500)


def test_log_spread_of_runs() -> None:
    assert checks.log_sd([0.05, 0.05]) == 0.0 and checks.log_sd([0.05]) != checks.log_sd([0.05])  # one run: nan
    assert checks.log_sd([0.05, 0.055]) == pytest.approx(0.0674, abs=1e-4)


def test_rescore_takes_the_last_calibration_run_or_its_quiet_equivalent() -> None:
    """--rescore: the last job of a [refine] section's head; a contended one by its quiet-equivalent."""
    job = ("    job {}: deepspeed on cpu, 2/2 ranks, 24 timed steps, measured {} ms (CPU 57.61 ms per rank), "
           "load 1.23\n      predicted after:  60.00 ms (+1.0% {})  [x1.02]\n")
    quiet, contended = "vs measured", "vs the contended run's quiet-equivalent 61.50 ms"
    head = "1\n" + job.format("a", "64.64", quiet) + job.format("b", "70.10", quiet)
    assert rescore.last_calibration_run(head) == (70.10, False)
    assert rescore.last_calibration_run(head + job.format("c", "90.00", contended)) == (61.50, True)
    assert rescore.last_calibration_run("1\n  no runs\n") is None


def test_the_scores_count_the_configurations_measured(capsys: pytest.CaptureFixture[str]) -> None:
    """--configs 0,1,2 measures three: the summary said "12 configs" whatever --configs selected."""
    measured = [report.median_pass([_run(0.05, 0.05, 1.0)]) for _ in range(3)]
    report.print_measured(testbed.CONFIGS[:3], measured, [0.055, 0.05, 0.045])
    assert "MAPE before refinement (3 configs): 6.7 %" in capsys.readouterr().out

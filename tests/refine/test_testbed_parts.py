"""benchmarks/testbed_parts.py (bench_cpu_testbed.py --parts): what moves between a record's runs, the ranks' wait
for each other, whether a reference reading tracks the runs' speed; and testbed_replay's rule with the wait apart."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
import testbed_parts as parts  # noqa: E402
import testbed_replay as replay  # noqa: E402

SPEED = [1.0, 1.2, 0.9, 1.1, 0.95]
"""The machine's speed at each of a configuration's five runs (CPU time per step x this)."""


def _run(k: int, p: int, cpu_s: float, wait: float, reference_s: float) -> dict:
    steps = {"0": [[i, cpu_s * wait, cpu_s * 0.96, False] for i in range(4)],
             "1": [[i, cpu_s * wait, cpu_s, False] for i in range(4)]}
    return {"config": k, "pass": p, "measured_s": cpu_s * wait, "cpu_s": cpu_s, "hook_reference_s": reference_s,
            "rank_steps": steps if wait > 1 else {}, "step_times_s": [cpu_s * wait] * 12}


def _record(tracking: bool) -> dict:
    """Configuration 0 one rank, 1 and 2 two ranks waiting x1.10 / x1.12 beyond their CPU time; runs at the
    machine speeds SPEED; the hook's reference reads the speed (tracking) or a fixed pattern that does not."""
    configs = [{"label": f"c{k}", "predicted_s": 0.02 * (k + 1), "breakdown": {"compute": 0.02 * (k + 1)},
                "config": {"world_size": ranks, "num_layers": 2, "hidden_size": 64 * (k + 1), "micro_batch_size": 1,
                           "precision": "fp32"}}
               for k, ranks in enumerate((1, 2, 2))]
    runs = [_run(k, p, 0.02 * (k + 1) * s, (1.0, 1.10, 1.12)[k], 0.007 * (s if tracking else (1, 0.9, 1.1, 1, 1)[p]))
            for k in range(3) for p, s in enumerate(SPEED)]
    return {"configs": configs, "runs": runs, "priors": {"sd_shared": 0.097, "sd_config": 0.136, "source": "t",
                                                         "sd_moment": 0.095}}


def test_the_spread_is_in_the_cpu_time_and_the_wait_is_steady() -> None:
    spread = parts.run_spread([_record(True)])
    assert spread["cpu"][0] > 0.09 and spread["wall"][0] == pytest.approx(spread["cpu"][0])
    assert spread["wall/cpu"][0] < 1e-9 and spread["wall"][1] == 15
    assert parts.run_spread([_record(True)], multi_rank=True)["wall"][1] == 10
    rows = parts.wait_by_config(_record(True))
    assert [r["k"] for r in rows] == [1, 2]
    assert [math.exp(r["wait"]) for r in rows] == pytest.approx([1.10, 1.12])
    assert rows[0]["skew"] == pytest.approx(1 / 0.98 - 1)  # the slowest rank's CPU over the mean rank's
    assert parts.pooled_config_spread([_record(True)]) == pytest.approx(
        math.log(1.12 / 1.10) / math.sqrt(2))


def test_a_reference_that_does_not_track_the_runs_adds_noise_when_scaled_by() -> None:
    tracks = parts.reference_tracking([_record(True)], "hook_reference_s")
    assert tracks["corr"] == pytest.approx(1.0) and tracks["scaled_variance_ratio"] < 1e-9
    blind = parts.reference_tracking([_record(False)], "hook_reference_s")
    assert blind["scaled_variance_ratio"] > 1.0
    assert parts.reference_tracking([_record(True)], "ref_now_s") is None


def test_the_replay_gives_a_two_rank_runs_wait_to_two_rank_configurations_only() -> None:
    record = _record(True)
    before = [c["predicted_s"] for c in record["configs"]]
    run = next(r for r in record["runs"] if r["config"] == 1 and r["pass"] == 0)  # at speed 1.0: y_cpu = 0
    after = replay.refine_rule(False)(record, 1, run, before)
    assert after[0] == pytest.approx(before[0])
    assert 1.08 < after[2] / before[2] < 1.10
    whole = replay.refine_rule(False, peer_wait=False)(record, 1, run, before)
    assert whole[0] > before[0] and whole[2] / before[2] < 1.05 and whole[1] < after[1]


def test_parts_of_a_file_that_is_no_record_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    done = subprocess.run([sys.executable, str(BENCH / "bench_cpu_testbed.py"), "--parts", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "not a testbed record" in done.stderr and "Traceback" not in done.stderr


def test_the_targets_resolution_is_what_the_runs_spread_allows_a_perfect_prediction() -> None:
    steady = _record(True)
    for run in steady["runs"]:
        run["measured_s"] = 0.02 * (run["config"] + 1)
    assert parts.target_resolution([steady], 4, draws=200) == (0.0, 1.0)
    typical, within = parts.target_resolution([_record(True)], 4, draws=2000)  # runs 10-20 % apart
    assert 0.02 < typical < 0.15 and within < 0.6
    assert parts.target_resolution([_record(True)], 1, draws=2000)[1] < within  # one run: coarser still


def test_the_multi_rank_excess_is_told_apart_from_the_wait_the_prediction_priced() -> None:
    """Configurations 1 and 2 predicted with 10 % of their step as collectives: their wall / CPU x1.10 / x1.12 is
    about that priced wait, and their CPU time, the prediction's other 90 % at the machine speeds, is the excess."""
    record = _record(True)
    for config in record["configs"][1:]:
        config["breakdown"] = {"compute": 0.9 * config["predicted_s"], "comm_dp_grad": 0.1 * config["predicted_s"]}
    e = parts.rank_excess(record)
    speed = math.log(sorted(SPEED)[2])  # the configurations' median run
    assert e["cpu_one"] == pytest.approx(speed)
    assert e["cpu_multi"] - e["cpu_one"] == pytest.approx(math.log(1 / 0.9))
    priced = math.log(1 / 0.9)
    assert e["wait_beyond_priced"] == pytest.approx((math.log(1.10) + math.log(1.12)) / 2 - priced)
    record["configs"] = record["configs"][:1]
    assert parts.rank_excess(record) is None


def test_the_multi_rank_bias_comparison_gives_multi_rank_configurations_twice_the_shared_part() -> None:
    """Calibrated on a two-rank run: a one-rank configuration gets b's share of its log-ratio, another two-rank one
    b's and b_m's (equal priors: twice as much); calibrated on a one-rank run, both get b's share only."""
    record = _record(True)
    before = [c["predicted_s"] for c in record["configs"]]
    two = next(r for r in record["runs"] if r["config"] == 1 and r["pass"] == 1)  # SPEED 1.2, wall x1.10
    after = [math.log(a / b) for a, b in zip(replay.multi_rank_bias(record, 1, two, before), before)]
    assert 0 < after[0] and after[2] == pytest.approx(2 * after[0]) and after[0] < after[2] < after[1]
    one = next(r for r in record["runs"] if r["config"] == 0 and r["pass"] == 1)
    after = [math.log(a / b) for a, b in zip(replay.multi_rank_bias(record, 0, one, before), before)]
    assert after[1] == pytest.approx(after[2]) and 0 < after[1] < after[0]

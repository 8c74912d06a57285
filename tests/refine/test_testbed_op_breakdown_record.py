"""benchmarks/testbed_op_breakdown.py --record: a record's runs beside the prediction's terms, and the multi-rank
excess in CPU time it shows (session 22's quiet record: /work/notes/h191.md)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
import testbed_op_breakdown as breakdown  # noqa: E402
from testbed_record import RECORD_FORMAT  # noqa: E402

TERMS_MS = {"operators": 30.0, "issue": 2.0, "traffic": 0.0, "adam": 1.0, "engine": 8.0, "transport": 3.0,
            "comm": 4.0}


def _runs(cpu_ms: list[float], wall_ms: list[float]) -> list[dict]:
    return [{"cpu_s": c / 1e3, "measured_s": w / 1e3} for c, w in zip(cpu_ms, wall_ms)]


def test_terms_sum_per_step_over_each_ops_count() -> None:
    rows = iter([(None, 2, {"operators": 1e-3, "issue": 1e-5}), (None, 1, {"engine": 4e-3, "comm": 2e-3})])
    assert breakdown.step_terms_ms(rows) == pytest.approx({"operators": 2.0, "issue": 0.02, "engine": 4.0, "comm": 2.0})


def test_cpu_is_set_against_the_prediction_less_its_collectives() -> None:
    """Collectives are the ranks' wait (wall beyond CPU), so CPU time is compared with the rest; the forward+backward's
    ratio takes the step's own terms (Adam, engine, transport) out as predicted."""
    row = breakdown.against_runs(TERMS_MS, _runs([60.0, 66.0, 63.0], [70.0, 64.0, 68.0]))
    assert row["predicted"] == pytest.approx(48.0) and row["comm"] == 4.0 and row["step_terms"] == 12.0
    assert row["fwd_bwd"] == pytest.approx(32.0)
    assert (row["cpu"], row["wall"]) == pytest.approx((63.0, 68.0))  # medians, not means
    assert row["cpu_per_non_comm"] == pytest.approx(63.0 / 44.0)
    assert row["fwd_bwd_if_step_right"] == pytest.approx((63.0 - 12.0) / 32.0)


def test_ranks_are_summarised_by_geometric_means() -> None:
    rows = [(1, {"x": 0.9}), (1, {"x": 1.1}), (2, {"x": 1.2}), (2, {"x": 1.3}), (2, {"x": 1.1})]
    means = breakdown.by_ranks(rows, "x")
    assert list(means) == [1, 2]
    assert means[1] == pytest.approx(math.sqrt(0.99)) and means[2] == pytest.approx((1.2 * 1.3 * 1.1) ** (1 / 3))


def _record(tmp_path: Path, runs: list[dict]) -> Path:
    configs = [{"index": i, "label": breakdown.CONFIGS[i].label()} for i in (0, 1)]
    path = tmp_path / "record.json"
    path.write_text(json.dumps({"format": RECORD_FORMAT, "configs": configs, "runs": runs}))
    return path


def test_a_record_is_read_without_its_calibration_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture) -> None:
    """Each configuration's measured runs only (testbed_record.reference_runs): a calibration run is a run of the
    refine step, not of the pass; a configuration without a CPU time is said, not a StatisticsError."""
    monkeypatch.setattr(breakdown, "step_ops", lambda cfg, work: iter(()))
    monkeypatch.setattr(breakdown, "step_terms_ms", lambda rows: TERMS_MS)
    runs = [{"config": 0, "cpu_s": 0.060, "measured_s": 0.070}, {"config": 0, "cpu_s": 0.066, "measured_s": 0.064},
            {"config": 0, "cpu_s": 0.9, "measured_s": 0.9, "calibration": True},
            {"config": 1, "cpu_s": None, "measured_s": 0.1}]
    breakdown.print_record(_record(tmp_path, runs), tmp_path)
    out = capsys.readouterr().out
    assert f"x{63.0 / 44.0:.3f}" in out  # the median of 60 and 66 ms, not of 60, 66 and 900
    assert "no run with a CPU time" in out


@pytest.mark.parametrize("content", ["not json", json.dumps({"format": RECORD_FORMAT, "runs": []}),
                                     json.dumps({"format": RECORD_FORMAT, "configs": [{"index": 0, "label": "other"}],
                                                 "runs": [{"config": 0, "cpu_s": 0.06, "measured_s": 0.07}]})])
def test_a_file_that_is_not_this_trees_record_exits_2(tmp_path: Path, content: str,
                                                      capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "record.json"
    path.write_text(content)
    with pytest.raises(SystemExit) as err:
        breakdown.print_record(path, tmp_path)
    assert err.value.code == 2 and str(path) in capsys.readouterr().err


def test_the_ranks_mean_cpu_is_read_per_step_beside_the_slowest_ranks() -> None:
    """The record's cpu_s is the slowest rank's per step: two ranks that take turns being slow read 70 ms there, 60 ms
    as the ranks' mean (session 22's quiet record: the 2-rank excess x1.170 by the slowest rank, x1.101 by the mean)."""
    run = {"cpu_s": 0.070, "measured_s": 0.08,
           "rank_steps": {"0": [[0, 0.5, 0.5, True], [1, 0.08, 0.05, False], [2, 0.08, 0.07, False]],
                          "1": [[0, 0.5, 0.5, True], [1, 0.08, 0.07, False], [2, 0.08, 0.05, False],
                                [3, 0.08, 0.9, False]]}}  # step 3: rank 0's record missing, not averaged
    assert breakdown.rank_mean_cpu_s(run) == pytest.approx(0.060)
    assert breakdown.rank_mean_cpu_s({"cpu_s": 0.07}) is None
    row = breakdown.against_runs(TERMS_MS, [run, {"cpu_s": 0.066, "measured_s": 0.07}])  # no rank_steps: its cpu_s
    assert row["cpu_rank_mean"] == pytest.approx(63.0) and row["rank_mean_per_non_comm"] == pytest.approx(63.0 / 44.0)

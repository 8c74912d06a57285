"""Refining one run again under another key (--hardware / --cluster / --framework) moves it: the calibration it
was fitted into before is refitted without it, or removed when no run is left to it, and its steps and op samples
are stored once. Before, the earlier key's calibration kept counting the run (num_runs, its configuration's own
scale), so the one run calibrated two clusters."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from refine_helpers import PREDICTION, write_run

from llmperf_hook.refine.refine_run import refine_run

OP = {"kind": "op", "rank": 0, "op_class": "gemm", "phase": "fwd", "dtype": "fp32", "dims": {"m": 64, "n": 64, "k": 64},
      "seconds": 1e-4, "count": 3, "torch_names": ["aten::mm"]}


def _keys(store: Path, table: str) -> list[tuple]:
    with sqlite3.connect(store) as conn:
        return sorted(conn.execute(f"SELECT hardware, cluster, framework FROM {table}").fetchall())


def _count(store: Path, sql: str) -> int:
    with sqlite3.connect(store) as conn:
        return conn.execute(sql).fetchone()[0]


def test_a_rekeyed_run_leaves_its_earlier_calibration(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite"
    run = write_run(tmp_path / "run", "j1", {0: [0.02, 0.011, 0.012, 0.011], 1: [0.02, 0.012, 0.011, 0.012]},
                    extra=json.dumps({**OP, "job_id": "j1"}) + "\n")
    refine_run(run, store_file=store)
    assert _keys(store, "refine_calibrations") == [("cpu-test", "local-cpu", "deepspeed")]
    report = refine_run(run, cluster="other-box", store_file=store)  # the same run, now for its real cluster
    assert _keys(store, "refine_calibrations") == _keys(store, "calibrations") == [("cpu-test", "other-box", "deepspeed")]
    assert _keys(store, "refine_config_scales") == [("cpu-test", "other-box", "deepspeed")]
    assert any("local-cpu" in n and "removed" in n for n in report.jobs[0].notes), report.jobs[0].notes
    refine_run(run, cluster="other-box", store_file=store)  # again: nothing left to move, nothing said
    assert _count(store, "SELECT COUNT(*) FROM refine_steps") == 8
    assert _count(store, "SELECT COUNT(*) FROM op_samples WHERE source = 'instrument:j1'") == 1


def test_the_earlier_key_is_refitted_from_its_other_runs(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite"
    other = {**PREDICTION, "config": {**PREDICTION["config"], "hidden_size": 128}, "step_time_s": 0.02}
    refine_run(write_run(tmp_path / "a", "ja", {0: [0.05, 0.04, 0.04, 0.04]}, prediction=other), store_file=store)
    run = write_run(tmp_path / "b", "jb", {0: [0.02, 0.011, 0.012, 0.011]})
    refine_run(run, store_file=store)
    with sqlite3.connect(store) as conn:
        assert conn.execute("SELECT num_runs FROM refine_calibrations").fetchall() == [(2,)]
    report = refine_run(run, hardware="cpu-test", cluster="other-box", store_file=store)
    with sqlite3.connect(store) as conn:
        rows = dict(((c, n) for c, n in conn.execute("SELECT cluster, num_runs FROM refine_calibrations")))
        scales = conn.execute("SELECT cluster, COUNT(*) FROM refine_config_scales GROUP BY cluster").fetchall()
    assert rows == {"local-cpu": 1, "other-box": 1} and sorted(scales) == [("local-cpu", 1), ("other-box", 1)]
    assert any("refitted without it" in n for n in report.jobs[0].notes), report.jobs[0].notes


def test_a_rank_file_removed_since_leaves_no_steps_behind(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite"
    run = write_run(tmp_path / "run", "j1", {0: [0.02, 0.011, 0.012], 1: [0.02, 0.012, 0.011]})
    refine_run(run, store_file=store)
    (run / "rank1.jsonl").unlink()
    refine_run(run, store_file=store)
    assert _count(store, "SELECT COUNT(*) FROM refine_steps") == 3
    assert _count(store, "SELECT COUNT(*) FROM step_observations") == 3

"""Stores opened and refitted by several processes at once (the ranks' refines, `llmperf refine` beside a job):
a new store's switch to WAL waits for another opener instead of failing 'database is locked', and a refit reads
the runs and writes the calibration under one write lock."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.refine import observation_store as store
from llmperf_hook.refine.recalibrate import recalibrate
from llmperf_hook.store import open_store


def _release_after(conn: sqlite3.Connection, seconds: float) -> threading.Thread:
    def release() -> None:
        time.sleep(seconds)
        conn.commit()

    thread = threading.Thread(target=release)
    thread.start()
    return thread


def test_opening_a_store_retries_its_setup_while_the_file_is_locked(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite answers 'database is locked' without waiting in some cases (a new store's switch to WAL while
    another process opens it): the setup runs again instead of failing the open; other errors are not retried."""
    from llmperf_hook.store import sqlite_store

    calls = []

    def flaky(self) -> None:
        calls.append(1)
        if len(calls) < 3:
            raise sqlite3.OperationalError("database is locked")
        real(self)

    real = sqlite_store.Store._set_up
    monkeypatch.setattr(sqlite_store.Store, "_set_up", flaky)
    with open_store(tmp_path / "store.sqlite") as s:  # was: UsageError 'cannot open the llmperf store'
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert len(calls) == 3

    def broken(self) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(sqlite_store.Store, "_set_up", broken)
    with pytest.raises(UsageError, match="disk I/O error"):
        open_store(tmp_path / "other.sqlite")


def _run(conn: sqlite3.Connection, job: str) -> None:
    store.record_run(conn, {"job_id": job, "hardware": "cpu-x", "cluster": "c", "framework": "deepspeed",
                            "measured_step_time_s": 0.02, "uncalibrated_step_time_s": 0.025,
                            "config_fingerprint": job * 8})


def test_a_refit_sees_the_run_another_refine_is_writing(tmp_path: Path) -> None:
    """Refine B holds the write lock with its run stored but not committed; refine A's refit waits for it and
    fits both runs (without the lock it fitted its own run alone, and could save that after B's fit)."""
    db = tmp_path / "store.sqlite"
    conn_a = store.connect(db)
    _run(conn_a, "ja")
    conn_b = sqlite3.connect(db, check_same_thread=False)
    conn_b.execute("BEGIN IMMEDIATE")
    conn_b.execute("INSERT INTO refine_runs (job_id, hardware, cluster, framework, measured_step_time_s, "
                   "uncalibrated_step_time_s, config_fingerprint, ingested_unix_s) "
                   "VALUES ('jb', 'cpu-x', 'c', 'deepspeed', 0.03, 0.025, 'jbjbjbjb', 2.0)")
    thread = _release_after(conn_b, 0.3)
    cal, _ = recalibrate(conn_a, "cpu-x", "c", "deepspeed")
    thread.join()
    conn_b.close()
    assert cal.num_runs == 2 and cal.num_configs == 2 and not conn_a.in_transaction
    conn_a.close()


def test_two_ingestions_of_one_run_at_once_never_double_its_steps(tmp_path: Path) -> None:
    """Two refines of the same run directory at once (two jobs of it ending together): the second one's delete
    and insert ran between the first one's delete and insert, and the run's steps were stored twice. Here the
    second ingestion runs exactly there (from the first one's trace callback, before its insert): it must wait for
    the first one's write lock instead (it gives up after 0.2 s here), and ingesting it again afterwards leaves
    the run's steps once."""
    path = tmp_path / "store.sqlite"
    steps = [{"step": i, "wall_time_s": 0.01, "rank": r} for r in range(2) for i in range(5)]
    first, second = store.connect(path), store.connect(path)
    second.execute("PRAGMA busy_timeout = 200")
    outcome: list[str] = []

    def between(statement: str) -> None:
        if statement.startswith("INSERT INTO step_observations") and not outcome:
            try:
                store.record_shared_steps(second, "job-1", ("h", "c", "f"), 0.01, steps)
                outcome.append("ran in between")
            except sqlite3.OperationalError as err:  # "database is locked": it waited for the first one
                second.rollback()
                outcome.append(str(err))

    first.set_trace_callback(between)
    store.record_shared_steps(first, "job-1", ("h", "c", "f"), 0.01, steps)
    first.set_trace_callback(None)
    assert outcome == ["database is locked"]
    store.record_shared_steps(second, "job-1", ("h", "c", "f"), 0.01, steps)
    for conn in (first, second):
        conn.close()
    rows = open_store(path).query_step_observations(run_id="job-1")
    assert len(rows) == len(steps) and sorted((r.rank, r.step) for r in rows) == sorted((s["rank"], s["step"]) for s in steps)

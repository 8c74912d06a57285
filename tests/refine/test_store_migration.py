"""The store's column migration under concurrent opens (refine/observation_store._add_missing_columns): a column
another process added between the first look at the table and the write lock is not added twice. CI once saw
`duplicate column name: sd_run` from four refines opening a new store at once
(tests/commands/test_round6_run_tune.py::test_refines_at_once_on_one_store_all_succeed)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from llmperf_hook.refine import observation_store as store

OLD_SCHEMA = ("CREATE TABLE refine_runs (job_id TEXT PRIMARY KEY, run_dir TEXT, hardware TEXT, cluster TEXT, "
              "framework TEXT, device TEXT, world_size INTEGER, num_timed_steps INTEGER, measured_step_time_s REAL, "
              "predicted_step_time_s REAL, uncalibrated_step_time_s REAL, peak_memory_bytes INTEGER, "
              "load_avg_1m REAL, config_json TEXT, ingested_unix_s REAL);"
              "CREATE TABLE refine_calibrations (hardware TEXT, cluster TEXT, framework TEXT, step_time_scale REAL, "
              "step_overhead_s REAL, num_runs INTEGER, fitted_unix_s REAL, PRIMARY KEY (hardware, cluster, framework));")


def _old_store(path: Path) -> Path:
    with sqlite3.connect(path) as conn:
        conn.executescript(OLD_SCHEMA)
    conn.close()
    return path


def _columns(path: Path, table: str) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def test_a_column_added_by_another_process_after_the_first_look_is_not_added_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race, made deterministic: connection A looks (all columns missing), connection B migrates the store
    completely, then A takes the write lock. A must read the columns again inside the lock and add none."""
    db = _old_store(tmp_path / "store.sqlite")
    conn_a = sqlite3.connect(db, timeout=5.0)
    real = store._missing_columns
    calls = []

    def stale_first_look(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
        found = real(conn)
        if conn is conn_a and not calls:  # A's unlocked first look: B migrates right after it
            calls.append(found)
            conn_b = sqlite3.connect(db, timeout=5.0)
            store._add_missing_columns(conn_b)
            conn_b.close()
        return found

    monkeypatch.setattr(store, "_missing_columns", stale_first_look)
    store._add_missing_columns(conn_a)  # was: sqlite3.OperationalError duplicate column name
    conn_a.close()
    assert calls and calls[0], "A's first look saw the missing columns"
    for table, columns in store.ADDED_COLUMNS.items():
        have = _columns(db, table)  # a table the old store lacks is connect()'s SCHEMA_SQL to create
        assert not have or all(have.count(name) == 1 for name, _ in columns)


def test_an_up_to_date_store_takes_no_write_lock(tmp_path: Path) -> None:
    """Opening a migrated store while another connection holds the write lock does not wait for it (the
    predict path and the ranks' refines open the store often)."""
    db = _old_store(tmp_path / "store.sqlite")
    first = sqlite3.connect(db)
    store._add_missing_columns(first)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        quick = sqlite3.connect(db, timeout=0.05)
        store._add_missing_columns(quick)  # would raise 'database is locked' had it asked for the lock
        quick.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        first.close()


def test_many_processes_migrating_one_old_store_at_once_all_succeed(tmp_path: Path) -> None:
    db = _old_store(tmp_path / "store.sqlite")
    code = ("import sys\nfrom llmperf_hook.refine import observation_store as s\n"
            "s.connect(__import__('pathlib').Path(sys.argv[1])).close()")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(db)], stderr=subprocess.PIPE, text=True)
             for _ in range(6)]
    errors = [(p.communicate(timeout=120)[1], p.returncode) for p in procs]
    assert all(code == 0 for _, code in errors), [err for err, _ in errors]
    for table, columns in store.ADDED_COLUMNS.items():
        assert all(_columns(db, table).count(name) == 1 for name, _ in columns)

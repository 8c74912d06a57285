"""Instrumented runs, their step observations, op samples and the fitted calibrations, in the SQLite store.

The tables live in the same SQLite file as the profile store ($LLMPERF_HOME/store.sqlite unless
llmperf_hook.store says otherwise) under names prefixed `refine_`, so they never collide with the profile
engineer's tables. Only the stdlib sqlite3 is used: `find_calibration` runs on the predict path.
Concurrent writers (several jobs refining at once) are serialised by SQLite's own locking (busy timeout).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from llmperf_hook.resources import llmperf_home

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS refine_runs (
    job_id TEXT PRIMARY KEY, run_dir TEXT, hardware TEXT, cluster TEXT, framework TEXT, device TEXT,
    world_size INTEGER, num_timed_steps INTEGER, measured_step_time_s REAL, predicted_step_time_s REAL,
    uncalibrated_step_time_s REAL, peak_memory_bytes INTEGER, load_avg_1m REAL, config_json TEXT,
    ingested_unix_s REAL);
CREATE TABLE IF NOT EXISTS refine_steps (
    job_id TEXT, rank INTEGER, step INTEGER, wall_time_s REAL, warmup INTEGER, profiled INTEGER,
    peak_memory_bytes INTEGER, PRIMARY KEY (job_id, rank, step));
CREATE TABLE IF NOT EXISTS refine_op_samples (
    job_id TEXT, rank INTEGER, hardware TEXT, op_class TEXT, phase TEXT, dtype TEXT, dims_json TEXT,
    seconds REAL, count INTEGER, torch_names TEXT, PRIMARY KEY (job_id, rank, op_class, phase, dtype, dims_json));
CREATE TABLE IF NOT EXISTS refine_calibrations (
    hardware TEXT, cluster TEXT, framework TEXT, step_time_scale REAL, step_overhead_s REAL, num_runs INTEGER,
    fitted_unix_s REAL, PRIMARY KEY (hardware, cluster, framework));
"""


def store_path() -> Path:
    """The shared SQLite file: the profile store's path when that module says so, else $LLMPERF_HOME/store.sqlite."""
    try:
        from llmperf_hook import store as profile_store

        for name in ("store_path", "default_store_path", "default_path"):
            fn = getattr(profile_store, name, None)
            if callable(fn):
                return Path(fn())
    except Exception:  # noqa: BLE001 - the refine tables work on their own
        pass
    return llmperf_home() / "store.sqlite"


def connect(path: Path | None = None, *, create: bool = True) -> sqlite3.Connection | None:
    """An open connection with the refine tables, or None when the file is absent and create is False."""
    db = Path(path) if path is not None else store_path()
    if not create and not db.is_file():
        return None
    db.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(db), timeout=30.0)
    conn.executescript(SCHEMA_SQL)
    return conn


def record_run(conn: sqlite3.Connection, row: Mapping[str, Any]) -> None:
    cols = ("job_id", "run_dir", "hardware", "cluster", "framework", "device", "world_size", "num_timed_steps",
            "measured_step_time_s", "predicted_step_time_s", "uncalibrated_step_time_s", "peak_memory_bytes",
            "load_avg_1m", "config_json")
    values = [row.get(c) for c in cols] + [time.time()]
    with conn:
        conn.execute(f"INSERT OR REPLACE INTO refine_runs ({', '.join(cols)}, ingested_unix_s) "
                     f"VALUES ({', '.join('?' * (len(cols) + 1))})", values)


def record_steps(conn: sqlite3.Connection, job_id: str, steps: Iterable[Mapping[str, Any]]) -> int:
    rows = [(job_id, int(s["rank"]), int(s["step"]), s.get("wall_time_s"), int(bool(s.get("warmup"))),
             int(bool(s.get("profiled"))), s.get("gpu_peak_reserved_bytes", s.get("peak_rss_bytes")))
            for s in steps]
    with conn:
        conn.executemany("INSERT OR REPLACE INTO refine_steps VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    return len(rows)


def record_op_samples(conn: sqlite3.Connection, job_id: str, hardware: str, samples: Sequence[Mapping[str, Any]]) -> int:
    rows = [(job_id, int(s.get("rank", 0)), hardware, s["op_class"], s["phase"], s.get("dtype", "fp32"),
             json.dumps(dict(s["dims"]), sort_keys=True), float(s["seconds"]), int(s.get("count", 1)),
             ",".join(s.get("torch_names", ()))) for s in samples]
    with conn:
        conn.executemany("INSERT OR REPLACE INTO refine_op_samples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return len(rows)


def runs_for_key(conn: sqlite3.Connection, hardware: str, cluster: str, framework: str) -> list[tuple[str, float, float]]:
    """(job_id, uncalibrated predicted, measured) of every ingested run of this key with both numbers."""
    cur = conn.execute("SELECT job_id, uncalibrated_step_time_s, measured_step_time_s FROM refine_runs "
                       "WHERE hardware = ? AND cluster = ? AND framework = ? AND uncalibrated_step_time_s > 0 "
                       "AND measured_step_time_s > 0 ORDER BY ingested_unix_s", (hardware, cluster, framework))
    return [(str(j), float(p), float(m)) for j, p, m in cur.fetchall()]


def save_calibration(conn: sqlite3.Connection, hardware: str, cluster: str, framework: str, scale: float,
                     overhead_s: float, num_runs: int) -> None:
    with conn:
        conn.execute("INSERT OR REPLACE INTO refine_calibrations VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (hardware, cluster, framework, scale, overhead_s, num_runs, time.time()))


def load_calibration_row(conn: sqlite3.Connection, hardware: str, cluster: str, framework: str) -> tuple | None:
    cur = conn.execute("SELECT step_time_scale, step_overhead_s, num_runs FROM refine_calibrations "
                       "WHERE hardware = ? AND cluster = ? AND framework = ?", (hardware, cluster, framework))
    return cur.fetchone()


def op_samples_for_hardware(conn: sqlite3.Connection, hardware: str) -> list[dict[str, Any]]:
    cur = conn.execute("SELECT op_class, phase, dtype, dims_json, seconds, count FROM refine_op_samples "
                       "WHERE hardware = ?", (hardware,))
    return [{"op_class": c, "phase": p, "dtype": d, "dims": json.loads(j), "seconds": s, "count": n}
            for c, p, d, j, s, n in cur.fetchall()]

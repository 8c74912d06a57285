"""Instrumented runs, their step observations, op samples and the fitted calibrations, in the SQLite store.

The shared store (llmperf_hook.store, $LLMPERF_HOME/store.sqlite) gets what it has tables for: every step of
every rank (step_observations), the `--profile-ops` samples (op_samples, source "instrument:<job id>", where
the profile fit finds them) and the calibration scale (calibrations). What it has no column for lives beside
them in the same file, in tables prefixed `refine_`: one row per run with the uncalibrated prediction the
calibration is refitted from, and the calibration's per-step overhead. Only the stdlib sqlite3 is used here
(`find_calibration` runs on the predict path). Concurrent writers are serialised by SQLite's locking (WAL).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from llmperf_hook.errors import UsageError


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
    """The shared SQLite file ($LLMPERF_HOME/store.sqlite)."""
    from llmperf_hook.store import default_store_path

    return default_store_path()


def check_writable_dir(directory: Path, what: str = "the llmperf store", origin: str | None = None) -> None:
    """`directory` exists (created if needed) and this process may write in it; else a UsageError that names the
    folder, where it came from ($LLMPERF_HOME or its default) and what to change (was an internal error such as
    FileExistsError when $LLMPERF_HOME named a file)."""
    reason = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        file = next((p for p in (directory, *directory.parents) if p.exists() and not p.is_dir()), None)
        reason = f"{str(file)!r} is a file, not a folder" if file else (err.strerror or type(err).__name__)
    if reason is None and not os.access(directory, os.W_OK | os.X_OK):
        reason = "not writable"
    if reason is not None:
        home = os.environ.get("LLMPERF_HOME")
        origin = origin or (f"$LLMPERF_HOME={home}" if home else "the default ~/.cache/llmperf ($LLMPERF_HOME is not set)")
        raise UsageError(f"cannot write {what} in {str(directory)!r} ({reason}; the folder comes from {origin}). "
                         f"Point it at a writable directory.")


def connect(path: Path | None = None, *, create: bool = True) -> sqlite3.Connection | None:
    """An open connection to the shared store with the refine tables, or None when the file is absent and
    create is False. The shared store's own tables are created by opening it through llmperf_hook.store."""
    from llmperf_hook.store import open_store

    db = Path(path) if path is not None else store_path()
    if not create and not db.is_file():
        return None
    check_writable_dir(db.parent)
    conn = open_store(db).conn
    conn.executescript(SCHEMA_SQL)
    _add_missing_columns(conn)
    return conn


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    """Stores written by an earlier version lack the later refine_runs columns."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(refine_runs)")}
    with conn:
        for name, decl in (("wall_per_cpu", "REAL"), ("usable_for_calibration", "INTEGER DEFAULT 1"),
                           ("reference_cpu_s", "REAL")):
            if name not in have:
                conn.execute(f"ALTER TABLE refine_runs ADD COLUMN {name} {decl}")


def record_shared_steps(conn: sqlite3.Connection, job_id: str, key: tuple[str, str, str] | None,
                        predicted_s: float | None, steps: Iterable[Mapping[str, Any]]) -> int:
    """Every recorded step into the shared store's step_observations (once per job: re-ingesting replaces)."""
    from llmperf_hook.store import StepObservation

    hardware, cluster, framework = key or ("unknown", "unknown", "unknown")
    obs = [StepObservation(run_id=job_id, hardware=hardware, cluster=cluster, framework=framework,
                           step=int(s["step"]), measured_s=float(s["wall_time_s"]), predicted_s=predicted_s,
                           rank=int(s["rank"]), job_key=job_id,
                           extra={"warmup": int(bool(s.get("warmup"))), "profiled": int(bool(s.get("profiled"))),
                                  "device": str(s.get("device", "")),
                                  "peak_memory_bytes": float(s.get("gpu_peak_reserved_bytes") or s.get("peak_rss_bytes") or 0)})
           for s in steps if s.get("wall_time_s") is not None]
    with conn:
        conn.execute("DELETE FROM step_observations WHERE run_id = ?", (job_id,))
    return _shared(conn).record_step_observations(obs)


def record_shared_op_samples(conn: sqlite3.Connection, job_id: str, hardware: str,
                             samples: Sequence[Mapping[str, Any]]) -> int:
    from llmperf_hook.store import OpSampleRecord

    # The profile's convention: the optimizer's step is its "fwd" model (profile_io.ModelEntry.phase).
    records = [OpSampleRecord(hardware=hardware, dtype=str(s.get("dtype", "fp32")), op_class=str(s["op_class"]),
                              phase="fwd" if s["phase"] == "step" else str(s["phase"]), dims=dict(s["dims"]),
                              time_s=float(s["seconds"]),
                              source=f"instrument:{job_id}") for s in samples]
    return _shared(conn).record_op_samples(records)


def _shared(conn: sqlite3.Connection) -> Any:
    """The shared store's API over this (already opened and migrated) connection."""
    from llmperf_hook.store import Store

    store = Store.__new__(Store)
    store.path, store.conn = None, conn
    return store


def record_run(conn: sqlite3.Connection, row: Mapping[str, Any]) -> None:
    cols = ("job_id", "run_dir", "hardware", "cluster", "framework", "device", "world_size", "num_timed_steps",
            "measured_step_time_s", "predicted_step_time_s", "uncalibrated_step_time_s", "peak_memory_bytes",
            "load_avg_1m", "config_json", "wall_per_cpu", "usable_for_calibration", "reference_cpu_s")
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
    """(job_id, uncalibrated predicted, measured) of every ingested run of this key with both numbers that
    was fit to calibrate from (see refine_run.MAX_WALL_PER_CPU)."""
    cur = conn.execute("SELECT job_id, uncalibrated_step_time_s, measured_step_time_s FROM refine_runs "
                       "WHERE hardware = ? AND cluster = ? AND framework = ? AND uncalibrated_step_time_s > 0 "
                       "AND measured_step_time_s > 0 AND COALESCE(usable_for_calibration, 1) = 1 "
                       "ORDER BY ingested_unix_s", (hardware, cluster, framework))
    return [(str(j), float(p), float(m)) for j, p, m in cur.fetchall()]


def save_calibration(conn: sqlite3.Connection, hardware: str, cluster: str, framework: str, scale: float,
                     overhead_s: float, num_runs: int) -> None:
    """Into the shared calibrations table (scale, runs) and refine_calibrations (with the overhead)."""
    with conn:
        conn.execute("INSERT OR REPLACE INTO refine_calibrations VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (hardware, cluster, framework, scale, overhead_s, num_runs, time.time()))
        conn.execute("INSERT OR REPLACE INTO calibrations VALUES (?, ?, ?, ?, ?, ?)",
                     (hardware, cluster, framework, scale, num_runs, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))


def load_calibration_row(conn: sqlite3.Connection, hardware: str, cluster: str, framework: str) -> tuple | None:
    """(scale, overhead, runs) from refine's table, else from the shared calibrations table (another writer's:
    a scale without overhead); a table the store lacks (an older or partial store) is skipped."""
    for sql in ("SELECT step_time_scale, step_overhead_s, num_runs FROM refine_calibrations "
                "WHERE hardware = ? AND cluster = ? AND framework = ?",
                "SELECT step_time_scale, 0.0, num_runs FROM calibrations "
                "WHERE hardware = ? AND cluster = ? AND framework = ?"):
        try:
            row = conn.execute(sql, (hardware, cluster, framework)).fetchone()
        except sqlite3.Error:
            row = None
        if row is not None:
            return row
    return None


def op_samples_for_hardware(conn: sqlite3.Connection, hardware: str) -> list[dict[str, Any]]:
    cur = conn.execute("SELECT op_class, phase, dtype, dims_json, seconds, count FROM refine_op_samples "
                       "WHERE hardware = ?", (hardware,))
    return [{"op_class": c, "phase": p, "dtype": d, "dims": json.loads(j), "seconds": s, "count": n}
            for c, p, d, j, s, n in cur.fetchall()]

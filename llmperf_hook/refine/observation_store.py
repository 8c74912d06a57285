"""Instrumented runs, their step observations, op samples and the fitted calibrations, in the SQLite store.

The shared store (llmperf_hook.store, $LLMPERF_HOME/store.sqlite) gets what it has tables for: every step of
every rank (step_observations), the `--profile-ops` samples (op_samples, source "instrument:<job id>", where
the profile fit finds them) and the calibration scale (calibrations). What it has no column for lives beside
them in the same file, in tables prefixed `refine_`: one row per run with the uncalibrated prediction the
calibration is refitted from and its configuration's fingerprint, the calibration's per-step overhead and
shrinkage (refine/shrinkage.py), and each instrumented configuration's own scale (refine_config_scales). A store
written by an earlier version gets the added columns on open (ADDED_COLUMNS), fingerprints from the configs its
runs saved, and its calibrations refitted with shrinkage. Only the stdlib sqlite3 is used here
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
CREATE TABLE IF NOT EXISTS refine_config_scales (
    hardware TEXT, cluster TEXT, framework TEXT, fingerprint TEXT, step_time_scale REAL, measured_scale REAL,
    num_runs INTEGER, label TEXT, PRIMARY KEY (hardware, cluster, framework, fingerprint));
"""

ADDED_COLUMNS = {
    "refine_runs": (("wall_per_cpu", "REAL"), ("usable_for_calibration", "INTEGER DEFAULT 1"),
                    ("reference_cpu_s", "REAL"), ("config_fingerprint", "TEXT"), ("calibration_step_time_s", "REAL"),
                    ("observation_sd", "REAL"), ("sampling_sd", "REAL"), ("cost_shares_json", "TEXT")),
    "refine_config_scales": (("alpha", "REAL"), ("shares_json", "TEXT"), ("wait_log_scale", "REAL")),
    "refine_calibrations": (("shared_weight", "REAL"), ("num_configs", "INTEGER"), ("sd_config", "REAL"),
                            ("sd_run", "REAL"), ("sd_shared", "REAL"), ("sd_mix", "REAL"), ("wait_log_scale", "REAL"),
                            ("wait_weight", "REAL")),
}
"""Columns added after the first release of a table: a store written by an earlier version gets them on open
(NULL: a calibration without shared_weight is one fitted before shrinkage, refitted by _migrate_calibrations)."""


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
    _migrate_calibrations(conn)
    return conn


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    """Stores written by an earlier version lack the later columns (ADDED_COLUMNS); runs stored before
    fingerprints existed get theirs from the config they saved (refine/config_fingerprint.py). Several
    processes open a new store at once (the ranks' refines, `llmperf refine` beside a job): the columns are
    added under SQLite's write lock (BEGIN IMMEDIATE), their list read again inside it, so a column another
    process added between the first look and the lock is not added twice ("duplicate column name")."""
    if _missing_columns(conn):  # unlocked first look: an up-to-date store takes no write lock
        conn.execute("BEGIN IMMEDIATE")
        try:
            for table, name, decl in _missing_columns(conn):
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
    with conn:
        _backfill_fingerprints(conn)


def _missing_columns(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """(table, column, declaration) of every ADDED_COLUMNS entry the store's tables lack."""
    out = []
    for table, columns in ADDED_COLUMNS.items():
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if have:  # an absent table (a store older than it) is SCHEMA_SQL's to create first (connect)
            out += [(table, name, decl) for name, decl in columns if name not in have]
    return out


def _backfill_fingerprints(conn: sqlite3.Connection) -> None:
    from llmperf_hook.refine.config_fingerprint import fingerprint_from_config_json

    rows = conn.execute("SELECT job_id, config_json FROM refine_runs WHERE config_fingerprint IS NULL "
                        "AND config_json IS NOT NULL").fetchall()
    for job_id, text in rows:
        try:
            fingerprint = fingerprint_from_config_json(json.loads(text))
        except (TypeError, ValueError):
            fingerprint = None
        if fingerprint:
            conn.execute("UPDATE refine_runs SET config_fingerprint = ? WHERE job_id = ?", (fingerprint, job_id))


def _migrate_calibrations(conn: sqlite3.Connection) -> None:
    """A calibration fitted before shrinkage (shared_weight NULL) is refitted from its runs, so an old store's
    one-run scale stops applying in full to every configuration."""
    keys = conn.execute("SELECT hardware, cluster, framework FROM refine_calibrations "
                        "WHERE shared_weight IS NULL").fetchall()
    if keys:
        from llmperf_hook.refine.recalibrate import recalibrate

        for hardware, cluster, framework in keys:
            recalibrate(conn, hardware, cluster, framework)
        with conn:  # a key without usable runs keeps its scale, applied in full as before
            conn.execute("UPDATE refine_calibrations SET shared_weight = 1.0 WHERE shared_weight IS NULL")


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
    return _shared(conn).replace_step_observations(job_id, obs)


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
            "load_avg_1m", "config_json", "wall_per_cpu", "usable_for_calibration", "reference_cpu_s",
            "config_fingerprint", "calibration_step_time_s", "observation_sd", "sampling_sd", "cost_shares_json")
    values = [row.get(c) for c in cols] + [time.time()]
    with conn:
        conn.execute(f"INSERT OR REPLACE INTO refine_runs ({', '.join(cols)}, ingested_unix_s) "
                     f"VALUES ({', '.join('?' * (len(cols) + 1))})", values)


def set_uncalibrated_prediction(conn: sqlite3.Connection, job_id: str, seconds: float) -> None:
    """A run's uncalibrated prediction replaced by its command predicted with refitted ops (refine/op_rebase.py);
    predicted_step_time_s keeps what was shown at launch."""
    with conn:
        conn.execute("UPDATE refine_runs SET uncalibrated_step_time_s = ? WHERE job_id = ?", (seconds, job_id))


def record_steps(conn: sqlite3.Connection, job_id: str, steps: Iterable[Mapping[str, Any]]) -> int:
    """The job's steps, replacing what an earlier refine of it stored (a rank file removed since is not kept)."""
    rows = [(job_id, int(s["rank"]), int(s["step"]), s.get("wall_time_s"), int(bool(s.get("warmup"))),
             int(bool(s.get("profiled"))), s.get("gpu_peak_reserved_bytes", s.get("peak_rss_bytes")))
            for s in steps]
    with conn:
        conn.execute("DELETE FROM refine_steps WHERE job_id = ?", (job_id,))
        conn.executemany("INSERT OR REPLACE INTO refine_steps VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    return len(rows)


def op_sample_groups(conn: sqlite3.Connection, job_id: str) -> dict[str, set[tuple[str, str, str]]]:
    """{hardware: {(op class, direction, dtype)}} of the job's op samples an earlier refine stored."""
    out: dict[str, set[tuple[str, str, str]]] = {}
    for hardware, op_class, phase, dtype in conn.execute(
            "SELECT DISTINCT hardware, op_class, phase, dtype FROM refine_op_samples WHERE job_id = ?", (job_id,)):
        out.setdefault(hardware, set()).add((op_class, phase, dtype))
    return out


def forget_op_samples(conn: sqlite3.Connection, job_id: str) -> None:
    """The job's op samples from an earlier refine, in both tables: a refine under another --hardware stores them
    again under that one, and the shared table's key holds the hardware (they stayed under the old one too)."""
    with conn:
        conn.execute("DELETE FROM refine_op_samples WHERE job_id = ?", (job_id,))
        conn.execute("DELETE FROM op_samples WHERE source = ?", (f"instrument:{job_id}",))


def record_op_samples(conn: sqlite3.Connection, job_id: str, hardware: str, samples: Sequence[Mapping[str, Any]]) -> int:
    rows = [(job_id, int(s.get("rank", 0)), hardware, s["op_class"], s["phase"], s.get("dtype", "fp32"),
             json.dumps(dict(s["dims"]), sort_keys=True), float(s["seconds"]), int(s.get("count", 1)),
             ",".join(s.get("torch_names", ()))) for s in samples]
    with conn:
        conn.executemany("INSERT OR REPLACE INTO refine_op_samples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return len(rows)


def calibrating_key(conn: sqlite3.Connection, job_id: str) -> tuple[str, str, str] | None:
    """The (hardware, cluster, framework) whose calibration an earlier refine of this job fitted it into (it is
    among that key's runs_for_key), else None."""
    row = conn.execute("SELECT hardware, cluster, framework FROM refine_runs WHERE job_id = ?", (job_id,)).fetchone()
    if row is None or None in row:
        return None
    return row if job_id in {r[0] for r in runs_for_key(conn, *row)} else None


def forget_calibration(conn: sqlite3.Connection, hardware: str, cluster: str, framework: str) -> None:
    """A key's calibration taken out of every table save_calibration writes (its last run left it)."""
    key = (hardware, cluster, framework)
    with conn:
        for table in ("refine_calibrations", "refine_config_scales", "calibrations"):
            conn.execute(f"DELETE FROM {table} WHERE hardware = ? AND cluster = ? AND framework = ?", key)


def runs_for_key(conn: sqlite3.Connection, hardware: str, cluster: str,
                 framework: str) -> list[tuple[str, str | None, float, float, str | None, float, float, tuple, float,
                                               bool]]:
    """(job_id, config fingerprint, uncalibrated predicted, measured, config JSON, observation sd, sampling sd,
    cost shares, peers' wait, whether measured) of every ingested run of this key with both numbers that may
    calibrate it (refine/peer_wait.wait_log: a multi-rank CPU run's). `measured` is what the
    calibration compares with: the measured step time, or a contended CPU run's quiet-equivalent reading
    (refine/contention.py), whose extra log standard deviation is the observation sd (0 for a quiet run). The
    sampling sd is its median step's (shrinkage.median_sampling_sd), the shares its predicted step's cost mix
    (refine/transfer.py); 0 and () for runs stored before they were recorded. Runs stored before the contention
    treatment existed as contended (usable_for_calibration 0) stay out, as then."""
    cur = conn.execute("SELECT job_id, config_fingerprint, uncalibrated_step_time_s, "
                       "COALESCE(calibration_step_time_s, measured_step_time_s), config_json, "
                       "COALESCE(observation_sd, 0.0), COALESCE(sampling_sd, 0.0), cost_shares_json, "
                       "measured_step_time_s, wall_per_cpu, world_size, device FROM refine_runs "
                       "WHERE hardware = ? AND cluster = ? AND "
                       "framework = ? AND uncalibrated_step_time_s > 0 AND measured_step_time_s > 0 "
                       "AND COALESCE(calibration_step_time_s, measured_step_time_s) > 0 "
                       "AND COALESCE(usable_for_calibration, 1) = 1 ORDER BY ingested_unix_s", (hardware, cluster, framework))
    from llmperf_hook.refine.peer_wait import priced_wait_log, wait_log

    return [(str(j), f, float(p), float(m), c, float(sd), float(ss), shares_from_json(sh),
             *wait_log(float(m), float(raw), wpc, w, dev, contended=float(sd) > 0,
                       priced_log=priced_wait_log(shares_from_json(sh))))
            for j, f, p, m, c, sd, ss, sh, raw, wpc, w, dev in cur.fetchall()]


def shares_from_json(text: Any) -> tuple:
    """Cost shares saved as JSON [[term, share], ...]; () when absent or unreadable."""
    try:
        return tuple((str(t), float(v)) for t, v in json.loads(text)) if text else ()
    except (ValueError, TypeError):
        return ()


def quiet_wall_per_cpu_for_key(conn: sqlite3.Connection, hardware: str, cluster: str, framework: str,
                               world_size: int, limit: float) -> list[float]:
    """The step wall / CPU ratios of the uncontended CPU runs (ratio <= limit) of this key with `world_size`
    ranks: how long a quiet step of as many ranks waits for its peers (refine/contention.py)."""
    cur = conn.execute("SELECT wall_per_cpu FROM refine_runs WHERE hardware = ? AND cluster = ? AND framework = ? "
                       "AND world_size = ? AND device = 'cpu' AND wall_per_cpu > 0 AND wall_per_cpu <= ?",
                       (hardware, cluster, framework, world_size, limit))
    return [float(r) for (r,) in cur.fetchall()]


def reference_readings_for_key(conn: sqlite3.Connection, hardware: str, cluster: str,
                               framework: str) -> list[tuple[float, int]]:
    """(the hook's machine-speed reading s, ranks) of every run of this key that has one (CPU runs)."""
    cur = conn.execute("SELECT reference_cpu_s, world_size FROM refine_runs WHERE hardware = ? AND cluster = ? AND "
                       "framework = ? AND reference_cpu_s > 0", (hardware, cluster, framework))
    return [(float(r), int(w or 1)) for r, w in cur.fetchall()]


def save_calibration(conn: sqlite3.Connection, cal: Any) -> None:
    """A refine/calibration.Calibration into refine_calibrations and refine_config_scales (replacing the key's
    earlier fit), and its shared scale into the shared calibrations table (another reader's: scale and runs)."""
    key = (cal.hardware, cal.cluster, cal.framework)
    with conn:
        conn.execute("INSERT OR REPLACE INTO refine_calibrations (hardware, cluster, framework, step_time_scale, "
                     "step_overhead_s, num_runs, fitted_unix_s, shared_weight, num_configs, sd_config, sd_run, "
                     "sd_shared, sd_mix, wait_log_scale, wait_weight) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                     "?, ?)",
                     (*key, cal.step_time_scale, cal.step_overhead_s, cal.num_runs, time.time(), cal.shared_weight,
                      cal.num_configs, cal.sd_config, cal.sd_run, cal.sd_shared, cal.sd_mix, cal.wait_log_scale,
                      cal.wait_weight))
        conn.execute("DELETE FROM refine_config_scales WHERE hardware = ? AND cluster = ? AND framework = ?", key)
        conn.executemany("INSERT INTO refine_config_scales (hardware, cluster, framework, fingerprint, "
                         "step_time_scale, measured_scale, num_runs, label, alpha, shares_json, wait_log_scale) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         [(*key, c.fingerprint, c.step_time_scale, c.measured_scale, c.num_runs, c.label, c.alpha,
                           json.dumps(c.shares) if c.shares else None, c.wait_log_scale)
                          for c in cal.config_scales])
        conn.execute("INSERT OR REPLACE INTO calibrations VALUES (?, ?, ?, ?, ?, ?)",
                     (*key, cal.step_time_scale, cal.num_runs, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))


def load_calibration_row(conn: sqlite3.Connection, hardware: str, cluster: str, framework: str) -> tuple | None:
    """(scale, overhead, runs) from refine's table, else from the shared calibrations table (another writer's:
    a scale without overhead); a table the store lacks (an older or partial store) is skipped. A damaged store
    (sqlite3.DatabaseError: malformed, not a database) raises, for calibration.py to say so."""
    for sql in ("SELECT step_time_scale, step_overhead_s, num_runs FROM refine_calibrations "
                "WHERE hardware = ? AND cluster = ? AND framework = ?",
                "SELECT step_time_scale, 0.0, num_runs FROM calibrations "
                "WHERE hardware = ? AND cluster = ? AND framework = ?"):
        try:
            row = conn.execute(sql, (hardware, cluster, framework)).fetchone()
        except sqlite3.OperationalError:  # no such table (or locked): nothing stored to lose
            row = None
        if row is not None:
            return row
    return None


def load_shrinkage(conn: sqlite3.Connection, hardware: str, cluster: str, framework: str) -> dict[str, Any]:
    """The shrinkage columns and the configurations' own scales of this key ({} when the store predates them:
    the calibration then applies in full, as it was fitted)."""
    key = (hardware, cluster, framework)
    try:
        row = conn.execute("SELECT shared_weight, num_configs, sd_config, sd_run FROM refine_calibrations "
                           "WHERE hardware = ? AND cluster = ? AND framework = ?", key).fetchone()
        scales = conn.execute("SELECT fingerprint, step_time_scale, measured_scale, num_runs, label FROM "
                              "refine_config_scales WHERE hardware = ? AND cluster = ? AND framework = ? "
                              "ORDER BY fingerprint", key).fetchall()
    except sqlite3.Error:
        return {}
    # the transfer columns (refine/transfer.py), then the wait (refine/peer_wait.py): absent in a store no refine
    # has opened since they came
    for later in ("alpha, shares_json", "alpha, shares_json, wait_log_scale"):
        try:
            scales = conn.execute(f"SELECT fingerprint, step_time_scale, measured_scale, num_runs, label, {later} "
                                  "FROM refine_config_scales WHERE hardware = ? AND cluster = ? AND framework = ? "
                                  "ORDER BY fingerprint", key).fetchall()
        except sqlite3.Error:
            break
    if row is None or row[0] is None:
        return {}
    out = {"shared_weight": float(row[0]), "num_configs": int(row[1] or 0), "sd_config": float(row[2] or 0.0),
           "sd_run": float(row[3] or 0.0), "config_scales": [tuple(r) for r in scales]}
    # a store the read-only predict path opens before any refine added these columns has none
    later = {name: _optional_calibration_value(conn, name, key)
             for name in ("sd_mix", "sd_shared", "wait_log_scale", "wait_weight")}
    return {**out, **{name: value for name, value in later.items() if value}}


def _optional_calibration_value(conn: sqlite3.Connection, column: str, key: tuple[str, str, str]) -> float | None:
    """A refine_calibrations column added after its first release; None when absent, NULL or 0."""
    try:
        (value,) = conn.execute(f"SELECT {column} FROM refine_calibrations WHERE hardware = ? AND cluster = ? "
                                "AND framework = ?", key).fetchone()
    except (sqlite3.Error, TypeError):
        return None
    return float(value) if value else None


def op_samples_for_hardware(conn: sqlite3.Connection, hardware: str) -> list[dict[str, Any]]:
    cur = conn.execute("SELECT op_class, phase, dtype, dims_json, seconds, count FROM refine_op_samples "
                       "WHERE hardware = ?", (hardware,))
    return [{"op_class": c, "phase": p, "dtype": d, "dims": json.loads(j), "seconds": s, "count": n}
            for c, p, d, j, s, n in cur.fetchall()]

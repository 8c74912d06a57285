"""The embedded SQLite store of everything measured: operator samples, collective samples, step observations of
instrumented runs and calibrations. Default file: $LLMPERF_HOME/store.sqlite (resources.llmperf_home()).

Writers: `llmperf profile` (op and comm samples), the instrumentation hook and `refine` (step observations,
per-op actuals as op samples with source "instrument:<run>", calibrations). Op samples are unique per
(hardware, dtype, op class, phase, dims, source): recording a shape again replaces it, which is what makes the
sampler resumable. The stdlib sqlite3 module only; WAL mode so several ranks may write at once.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from llmperf_hook.errors import UsageError
from llmperf_hook.store.location import STORE_FILE, default_store_path  # noqa: F401 (STORE_FILE re-exported)

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS op_samples (
  hardware TEXT NOT NULL, dtype TEXT NOT NULL, op_class TEXT NOT NULL, phase TEXT NOT NULL,
  dims_key TEXT NOT NULL, dims_json TEXT NOT NULL, time_s REAL NOT NULL, source TEXT NOT NULL,
  fingerprint TEXT NOT NULL DEFAULT '', library_versions TEXT NOT NULL DEFAULT '{}', recorded_utc TEXT NOT NULL,
  PRIMARY KEY (hardware, dtype, op_class, phase, dims_key, source));
CREATE TABLE IF NOT EXISTS comm_samples (
  id INTEGER PRIMARY KEY AUTOINCREMENT, cluster TEXT NOT NULL, backend TEXT NOT NULL, collective TEXT NOT NULL,
  nodes INTEGER NOT NULL, gpus_per_node INTEGER NOT NULL, nbytes REAL NOT NULL, time_s REAL NOT NULL,
  source TEXT NOT NULL, recorded_utc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS step_observations (
  id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, hardware TEXT NOT NULL, cluster TEXT NOT NULL,
  framework TEXT NOT NULL, job_key TEXT NOT NULL, rank INTEGER NOT NULL, step INTEGER NOT NULL,
  measured_s REAL NOT NULL, predicted_s REAL, extra_json TEXT NOT NULL DEFAULT '{}', recorded_utc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS calibrations (
  hardware TEXT NOT NULL, cluster TEXT NOT NULL, framework TEXT NOT NULL, step_time_scale REAL NOT NULL,
  num_runs INTEGER NOT NULL, recorded_utc TEXT NOT NULL, PRIMARY KEY (hardware, cluster, framework));
CREATE INDEX IF NOT EXISTS op_samples_by_class ON op_samples (hardware, dtype, op_class, phase);
CREATE INDEX IF NOT EXISTS steps_by_run ON step_observations (run_id);
"""


def _where(**equal: str | None) -> tuple[str, list[str]]:
    """A WHERE clause of `column = ?` for every filter given (None = no filter), with its arguments.
    Column names come from the keyword names of our own calls, never from user input."""
    given = [(col, val) for col, val in equal.items() if val is not None]
    return " AND ".join([f"{col} = ?" for col, _ in given] or ["1=1"]), [val for _, val in given]


def measured_fingerprint(fingerprint: str, library_versions: str) -> str:
    """A row's fingerprint as the sampler writes it now. Rows recorded before the measuring torch was part of it
    (local_hardware.fingerprint) name that torch in their library versions (build_profile.library_versions, taken
    as the row was measured: the same version string as torch.__version__), so it is added: a store of the same
    torch still resumes and fits its rows, and only another torch's are measured again. Other fingerprints are
    returned as they are."""
    if not fingerprint.startswith("{") or '"torch"' in fingerprint:
        return fingerprint
    try:
        fp, versions = json.loads(fingerprint), json.loads(library_versions)
    except ValueError:
        return fingerprint
    if not isinstance(fp, dict) or not isinstance(versions, dict) or "torch" not in versions:
        return fingerprint
    return json.dumps({**fp, "torch": versions["torch"]}, sort_keys=True)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def dims_key(dims: Mapping[str, float]) -> str:
    """Canonical text of a dims mapping (sorted keys, integers where integral)."""
    return json.dumps({k: (int(v) if float(v).is_integer() else float(v)) for k, v in sorted(dims.items())},
                      separators=(",", ":"))


@dataclass(frozen=True)
class OpSampleRecord:
    """One measured operator time."""

    hardware: str
    dtype: str
    op_class: str
    phase: str
    """"fwd" | "bwd" (graph/op.py phases; recompute is recorded as fwd)."""
    dims: Mapping[str, float]
    """Contract dims (graph/op.py)."""
    time_s: float
    source: str = "sampler"
    """"sampler", "instrument:<run id>", ..."""
    fingerprint: str = ""
    library_versions: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CommSampleRecord:
    """One measured collective time."""

    cluster: str
    backend: str
    """"nccl" | "gloo"."""
    collective: str
    nodes: int
    gpus_per_node: int
    nbytes: float
    time_s: float
    source: str = "sampler"


@dataclass(frozen=True)
class StepObservation:
    """One measured training step of an instrumented run (and what was predicted for it)."""

    run_id: str
    hardware: str
    cluster: str
    framework: str
    step: int
    measured_s: float
    predicted_s: float | None = None
    rank: int = 0
    job_key: str = ""
    """Identifies the configuration (e.g. a hash of the TrainingConfig) so runs of the same job group together."""
    extra: Mapping[str, float | str] = field(default_factory=dict)


@dataclass(frozen=True)
class CalibrationRecord:
    hardware: str
    cluster: str
    framework: str
    step_time_scale: float
    num_runs: int


LOCKED_RETRY_S = 30.0
"""How long opening a store retries its setup while another process holds the file (the connection's own busy
timeout, 30 s)."""


def _retry_while_locked(setup) -> None:
    """Run the idempotent `setup` again while SQLite answers 'database is locked' without waiting in its busy
    handler (switching a new store's journal mode to WAL, a WAL read upgraded to a write after another process
    wrote): four refines opening a new store at once failed 'cannot open the llmperf store ... (database is
    locked)' about one run in ten."""
    deadline = time.monotonic() + LOCKED_RETRY_S
    delay = 0.005
    while True:
        try:
            setup()
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def _disk_full(folder: Path) -> bool:
    """Whether the disk holding `folder` has less free space than one SQLite write needs (a page and its WAL frame)."""
    import shutil

    try:
        return shutil.disk_usage(folder).free < 64 * 1024
    except OSError:
        return False


class Store:
    """A connection to the store; use as a context manager or call close()."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(str(path), timeout=30.0)
            _retry_while_locked(self._set_up)
        except UsageError:  # another schema version (_set_up)
            self._abandon()
            raise
        except sqlite3.DatabaseError as err:
            self._abandon()  # a connection left open holds the file (a disk cannot be unmounted, a lock stays)
            if _disk_full(path.parent):  # 'disk I/O error' from a full disk: moving the store away would lose it
                raise UsageError(f"cannot open the llmperf store {path} ({err}): the disk holding it is full. Free "
                                 f"some space there, or set $LLMPERF_HOME to a folder on another disk (the store "
                                 f"is kept as it is).") from err
            raise UsageError(f"cannot open the llmperf store {path} ({err}); move the file away to start a new "
                             f"store, or set $LLMPERF_HOME to another directory.") from err
        except OSError as err:  # its folder cannot be created: a path through a file, no permission
            raise UsageError(f"cannot create the llmperf store {path} ({err.strerror or err}); point $LLMPERF_HOME "
                             f"(or --store) at a writable directory.") from err

    def _abandon(self) -> None:
        """Close the connection of a store that could not be set up."""
        conn = getattr(self, "conn", None)
        if conn is not None:
            conn.close()

    def _set_up(self) -> None:
        """WAL mode, the schema version checked, the tables (idempotent: run again while the file is locked)."""
        self.conn.execute("PRAGMA journal_mode=WAL")
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise UsageError(f"store {self.path} has schema version {version}, this llmperf uses {SCHEMA_VERSION}: "
                             f"upgrade llmperf_hook or point $LLMPERF_HOME elsewhere.")
        self.conn.executescript(_SCHEMA)
        self.conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def check_integrity(self) -> None:
        """Refuse a damaged store before minutes of measuring go into it. SQLite opens a truncated or overwritten
        file as long as its header is intact and fails only when a query reaches a bad page, which a profile did
        after sampling ("database disk image is malformed", an internal error), writing its samples into the
        damaged file meanwhile. quick_check reads every page once (about 5 ms for a 100 KB store)."""
        try:
            problems = [row[0] for row in self.conn.execute("PRAGMA quick_check")]
        except sqlite3.DatabaseError as err:
            problems = [str(err)]
        if problems != ["ok"]:
            raise self._damaged(problems[0].replace("\n", " ")[:200])

    def _damaged(self, what: str) -> UsageError:
        return UsageError(f"the llmperf store {self.path} is damaged ({what}): a truncated copy, or a file written "
                          f"over. Move it away (its samples cannot be trusted) to start a new store, or set "
                          f"$LLMPERF_HOME (or --store) to another one.")

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: object) -> None:
        self.close()
        if exc_type is sqlite3.DatabaseError:  # a damaged page met by a query ("malformed"): the file, not a bug
            raise self._damaged(str(exc)) from exc

    def close(self) -> None:
        self.conn.close()

    def record_op_samples(self, records: Iterable[OpSampleRecord]) -> int:
        rows = [(r.hardware, r.dtype, r.op_class, r.phase, dims_key(r.dims), dims_key(r.dims), float(r.time_s),
                 r.source, r.fingerprint, json.dumps(dict(r.library_versions), sort_keys=True), _now())
                for r in records]
        with self.conn:
            self.conn.executemany("INSERT OR REPLACE INTO op_samples VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
        return len(rows)

    def query_op_samples(self, hardware: str, dtype: str | None = None, op_class: str | None = None,
                         phase: str | None = None, source: str | None = None) -> list[OpSampleRecord]:
        where, args = _where(hardware=hardware, dtype=dtype, op_class=op_class, phase=phase, source=source)
        sql = ("SELECT hardware, dtype, op_class, phase, dims_json, time_s, source, fingerprint, library_versions "
               f"FROM op_samples WHERE {where} ORDER BY op_class, phase, dims_key")
        return [OpSampleRecord(h, d, c, p, json.loads(dj), t, s, measured_fingerprint(f, lv), json.loads(lv))
                for h, d, c, p, dj, t, s, f, lv in self.conn.execute(sql, args)]

    def sampled_keys(self, hardware: str, dtype: str, fingerprint: str | None = None,
                     source: str = "sampler") -> set[tuple[str, str, str]]:
        """{(op_class, phase, dims_key)} already in the store (those measured under `fingerprint` when given, as
        measured_fingerprint reads a row's): what a resumed sampler skips. Only rows of another fingerprint decode
        their JSON."""
        where, args = _where(hardware=hardware, dtype=dtype, source=source)
        sql = f"SELECT op_class, phase, dims_key, fingerprint, library_versions FROM op_samples WHERE {where}"
        return {(c, p, k) for c, p, k, f, lv in self.conn.execute(sql, args)
                if fingerprint is None or f == fingerprint or measured_fingerprint(f, lv) == fingerprint}

    def record_comm_samples(self, records: Iterable[CommSampleRecord]) -> int:
        rows = [(r.cluster, r.backend, r.collective, int(r.nodes), int(r.gpus_per_node), float(r.nbytes),
                 float(r.time_s), r.source, _now()) for r in records]
        with self.conn:
            self.conn.executemany("INSERT INTO comm_samples (cluster, backend, collective, nodes, gpus_per_node, "
                                  "nbytes, time_s, source, recorded_utc) VALUES (?,?,?,?,?,?,?,?,?)", rows)
        return len(rows)

    def query_comm_samples(self, cluster: str, collective: str | None = None) -> list[CommSampleRecord]:
        sql = ("SELECT cluster, backend, collective, nodes, gpus_per_node, nbytes, time_s, source FROM comm_samples "
               "WHERE cluster = ?" + (" AND collective = ?" if collective else "") + " ORDER BY id")
        args = (cluster, collective) if collective else (cluster,)
        return [CommSampleRecord(*row) for row in self.conn.execute(sql, args)]

    def record_step_observations(self, records: Iterable[StepObservation]) -> int:
        with self.conn:
            return self._insert_step_observations(records)

    def replace_step_observations(self, run_id: str, records: Iterable[StepObservation]) -> int:
        """The run's observations replaced by `records`, in one transaction: two processes ingesting the same run
        at once (two jobs of one run directory ending together, each refining it) take turns on SQLite's write
        lock, so neither can insert between the other's delete and insert (which doubled the run's rows)."""
        with self.conn:
            self.conn.execute("DELETE FROM step_observations WHERE run_id = ?", (run_id,))
            return self._insert_step_observations(records)

    def _insert_step_observations(self, records: Iterable[StepObservation]) -> int:
        rows = [(r.run_id, r.hardware, r.cluster, r.framework, r.job_key, int(r.rank), int(r.step),
                 float(r.measured_s), None if r.predicted_s is None else float(r.predicted_s),
                 json.dumps(dict(r.extra), sort_keys=True), _now()) for r in records]
        self.conn.executemany("INSERT INTO step_observations (run_id, hardware, cluster, framework, job_key, "
                              "rank, step, measured_s, predicted_s, extra_json, recorded_utc) "
                              "VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
        return len(rows)

    def query_step_observations(self, run_id: str | None = None, hardware: str | None = None,
                                cluster: str | None = None, framework: str | None = None) -> list[StepObservation]:
        where, args = _where(run_id=run_id, hardware=hardware, cluster=cluster, framework=framework)
        sql = ("SELECT run_id, hardware, cluster, framework, step, measured_s, predicted_s, rank, job_key, extra_json "
               f"FROM step_observations WHERE {where} ORDER BY id")
        return [StepObservation(*row[:9], extra=json.loads(row[9])) for row in self.conn.execute(sql, args)]

    def record_calibration(self, c: CalibrationRecord) -> None:
        with self.conn:
            self.conn.execute("INSERT OR REPLACE INTO calibrations VALUES (?,?,?,?,?,?)",
                              (c.hardware, c.cluster, c.framework, float(c.step_time_scale), int(c.num_runs), _now()))

    def query_calibration(self, hardware: str, cluster: str, framework: str) -> CalibrationRecord | None:
        row = self.conn.execute("SELECT hardware, cluster, framework, step_time_scale, num_runs FROM calibrations "
                                "WHERE hardware=? AND cluster=? AND framework=?", (hardware, cluster, framework)).fetchone()
        return CalibrationRecord(*row) if row else None

    def query_calibrations(self) -> list[CalibrationRecord]:
        sql = "SELECT hardware, cluster, framework, step_time_scale, num_runs FROM calibrations ORDER BY 1, 2, 3"
        return [CalibrationRecord(*row) for row in self.conn.execute(sql)]


def open_store(path: Path | str | None = None) -> Store:
    """Open (creating if needed) the store at `path`, default $LLMPERF_HOME/store.sqlite."""
    return Store(Path(path).expanduser() if path is not None else default_store_path())

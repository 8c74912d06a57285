"""Stage [7]: the per-rank JSONL file the recorder writes (`rank<R>.jsonl`): buffered, whole lines, one write(2)
per flush on an O_APPEND descriptor under flock, so several ranks and several jobs can append to one run
directory at once and nothing is lost or interleaved."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None  # type: ignore[assignment]


FORCE_FLUSH_FACTOR = 4
"""Waiting records, in multiples of max_buffered, past which even unfinished steps are written (synchronizing)."""


def _always() -> bool:
    return True


@dataclass(frozen=True)
class PendingLine:
    """A record built at flush time, and whether it can be built without waiting: a GPU step's time is read from
    its end event, and reading an event the GPU has not reached synchronizes the host with the whole launch
    queue. The periodic flush writes only the leading ready lines (step_timer.StepTimer.ready), so the hook never
    stalls a step that is still running; a forced flush (the N steps done, exit, failure) builds them all."""

    build: Callable[[], str]
    ready: Callable[[], bool]

    def __call__(self) -> str:
        return self.build()


class JsonlWriter:
    """Appends JSON lines to one file: each flush is a single write(2) of whole lines on an O_APPEND descriptor,
    so lines from several processes writing the same file never interleave or overwrite each other.

    Records are buffered and flushed when the hook finishes its N steps, stops the job, fails, or the
    interpreter exits (atexit), whenever `max_buffered` records are waiting, and at the first record written
    `max_age_s` or more after the oldest one waiting: a JSON encode and a write(2) per step would cost ~20-40 us,
    a visible share of a few-millisecond CPU step, while once a second is not (on a GPU that periodic flush
    writes only the steps that have finished, PendingLine, so it never synchronizes). A rank killed by a signal
    (SIGTERM's default action and SIGKILL skip atexit) loses only the records of its last second or so: without the
    age bound, `--instrument 1000` lost every step of a job killed before step 64.
    """

    def __init__(self, path: str, max_buffered: int = 64, max_age_s: float = 1.0) -> None:
        self.path = path
        self.max_buffered = max_buffered
        self.max_age_s = max_age_s
        self._fd: int | None = None
        self._pending: list[dict[str, Any]] = []
        self._oldest_s = 0.0
        """time.monotonic() when the oldest waiting record was queued."""
        self._atexit_registered = False

    def write(self, record: dict[str, Any] | Callable[[], dict[str, Any] | str], flush: bool = False) -> None:
        """Queue a record, or a function that builds it (or its JSON line) at flush time."""
        now_s = time.monotonic()
        if not self._pending:
            self._oldest_s = now_s
        self._pending.append(record)
        if not self._atexit_registered:
            import atexit

            atexit.register(self._close_at_exit)
            self._atexit_registered = True
        if flush or len(self._pending) >= FORCE_FLUSH_FACTOR * self.max_buffered:
            self.flush()
        elif len(self._pending) >= self.max_buffered or now_s - self._oldest_s >= self.max_age_s:
            self.flush(only_ready=True)
            self._oldest_s = now_s

    def flush(self, only_ready: bool = False) -> None:
        """Write the waiting records; with `only_ready`, only the leading ones whose values are already known
        (a GPU step's end event has completed: reading an unfinished one would synchronize, PendingLine)."""
        count = len(self._pending)
        if only_ready:
            count = next((i for i, r in enumerate(self._pending) if not getattr(r, "ready", _always)()), count)
        if not count:
            return
        records = [r() if callable(r) else r for r in self._pending[:count]]
        data = "".join((r if isinstance(r, str) else json.dumps(r, separators=(",", ":"))) + "\n"
                       for r in records).encode()
        self._pending = self._pending[count:]
        first = self._fd is None
        if first:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        with _exclusive(self._fd):  # the torn-line check must not see another writer's write half done
            os.write(self._fd, (self._after_torn_line() + data) if first else data)

    def after_fork_in_child(self) -> None:
        """In a forked child: drop the parent's waiting records (the parent writes them; the child would write them
        again at its flush or exit), and the child's copy of the parent's descriptor. flock locks an open file
        description, which a forked child shares with its parent, so the two would hold the lock at once; a child
        that writes opens the file itself, and takes turns with its parent like any other writer."""
        self._pending = []
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)  # the child's copy only: the parent's descriptor stays open
            except OSError:
                pass

    def _after_torn_line(self) -> bytes:
        """A newline when the file ends inside a line (a rank of an earlier job killed mid-write), so this
        process's first record starts a line of its own instead of being glued to the torn one and lost."""
        size = os.fstat(self._fd).st_size
        return b"\n" if size and os.pread(self._fd, 1, size - 1) != b"\n" else b""

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _close_at_exit(self) -> None:
        """close() at interpreter exit, where a failure (the run directory removed, unwritable, a full disk) is one
        line on stderr: an exception escaping an atexit callback prints a traceback into the job's output."""
        try:
            self.close()
        except Exception as err:  # noqa: BLE001 - never harm the job, not even at exit
            sys.stderr.write(f"llmperf hook: could not write the last records to {self.path} at exit "
                             f"({type(err).__name__}: {err}); the job's exit code is unchanged.\n")


class _exclusive:
    """flock(LOCK_EX) on `fd` for a with-block (POSIX; elsewhere nothing): the writers of one file take turns, so a
    writer checking the file's last byte never reads it while another writer's multi-page write is in progress
    (an O_APPEND write is atomic against other writes, not against a concurrent read)."""

    operation = "LOCK_EX"

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.locked = False

    def __enter__(self) -> None:
        try:
            if fcntl is not None:
                fcntl.flock(self.fd, getattr(fcntl, self.operation))
                self.locked = True
        except OSError:  # a filesystem without locks (some network mounts): write unlocked, as before
            pass

    def __exit__(self, *exc: object) -> None:
        if self.locked:
            fcntl.flock(self.fd, fcntl.LOCK_UN)


class shared_lock(_exclusive):
    """flock(LOCK_SH) for a reader of a rank file (session.py): it waits for a writer's write to complete."""

    operation = "LOCK_SH"

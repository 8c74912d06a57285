"""The job's stderr without the lines torch's profiler library prints for itself when `--profile-ops` opens and
closes its window.

torch 2.13's Kineto logs `USDT:<time> <pid>:<tid> SyncActivityProfilerHandler.cpp:52] profiler_start` (and
`profiler_stop`) on file descriptor 2 at every start and stop of a torch.profiler, whatever the Python side
asks: its Logger prints severity USDT (5, above ERROR 4) unless KINETO_LOG_LEVEL is 6 or more, which would also
silence Kineto's real errors. A job run under `llmperf run --instrument N --profile-ops K` would get two lines of
ours in its own stderr. Around the profiler's start and stop only (synchronous calls on the step path's thread),
descriptor 2 goes to a temporary file; afterwards every line written there that is not a Kineto USDT line is
written back to the job's stderr, in order, so nothing the job or Kineto (warnings, errors) wrote is lost.
"""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager
from typing import Iterator

KINETO_USDT_PREFIX = b"USDT:"


@contextmanager
def without_kineto_usdt_lines() -> Iterator[None]:
    """Run the block with descriptor 2 captured; write back all but Kineto's USDT lines. When descriptor 2 cannot
    be captured (closed, no temporary directory), the block runs as is: the lines show, nothing more."""
    _flush_python_stderr()
    capture = saved = None
    try:
        capture = tempfile.TemporaryFile()
        saved = os.dup(2)
    except OSError:
        pass
    if saved is None:  # not captured; a temporary file made before os.dup failed is not left open
        if capture is not None:
            capture.close()
        yield
        return
    with capture:
        try:
            os.dup2(capture.fileno(), 2)
            yield
        finally:
            _flush_python_stderr()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = b"".join(line for line in capture.read().splitlines(keepends=True)
                            if not line.startswith(KINETO_USDT_PREFIX))
            if kept:
                os.write(2, kept)


def _flush_python_stderr() -> None:
    """Text the job left in Python's stderr buffer goes to its descriptor before (or after) the capture."""
    try:
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a closed or replaced sys.stderr: nothing buffered to keep in order
        pass

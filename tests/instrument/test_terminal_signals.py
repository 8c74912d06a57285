"""Ctrl-C and Ctrl-\\ pressed on the terminal of `llmperf run --instrument` reach the job once, not twice."""

from __future__ import annotations

import json
import os
import pty
import select
import sys
import time
from pathlib import Path

JOB = """
import signal, sys, time
got = {signal.SIGINT: 0, signal.SIGQUIT: 0}
def count(signum, frame):
    got[signum] += 1
signal.signal(signal.SIGINT, count)
signal.signal(signal.SIGQUIT, count)
print("ready", flush=True)
end = time.time() + 3
while time.time() < end:
    time.sleep(0.05)
sys.exit(10 * got[signal.SIGINT] + got[signal.SIGQUIT])
"""


def _read_until(fd: int, marker: bytes, timeout_s: float) -> bytes:
    out, end = b"", time.time() + timeout_s
    while marker not in out and time.time() < end:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the terminal's last process is gone
                break
            if not chunk:
                break
            out += chunk
    return out


def test_keys_pressed_on_the_terminal_reach_the_job_once(tmp_path: Path, child_env: dict[str, str]) -> None:
    """The terminal sends SIGINT (Ctrl-C) and SIGQUIT (Ctrl-\\) to its whole foreground process group, the job
    included; llmperf, in that group too, must not send its own copy. It forwarded SIGQUIT anyway, so a job that
    handles it (a stack dump, a checkpoint) ran its handler twice. Exit code = 10 x SIGINTs + SIGQUITs seen."""
    job = tmp_path / "job.py"
    job.write_text(JOB)
    call = {"argv": [sys.executable, str(job)], "run_dir": str(tmp_path / "run"), "steps": 2}
    code = ("import json, os, sys\nfrom llmperf_hook.instrument.session import run_instrumented\n"
            f"kw = json.loads({json.dumps(json.dumps(call))})\n"
            "sys.exit(run_instrumented(kw.pop('argv'), env=os.environ, **kw))\n")
    pid, fd = pty.fork()
    if pid == 0:  # the session leader of a new terminal, in its foreground process group
        os.chdir(tmp_path)
        os.execve(sys.executable, [sys.executable, "-c", code], child_env)
    try:
        seen = _read_until(fd, b"ready", 60)
        assert b"ready" in seen, seen.decode(errors="replace")[-2000:]
        os.write(fd, b"\x03")
        time.sleep(0.3)
        os.write(fd, b"\x1c")
        _read_until(fd, b"\x00never", 30)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 11

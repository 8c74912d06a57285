"""DeepSpeed's CPU shared-memory all-reduce buffers: remove the ones a finished job of ours left in /dev/shm.

Every DeepSpeed job on CPU (DS_ACCELERATOR=cpu, all ranks on one machine) creates one 69 MB POSIX shared-memory
segment per rank in `shm_initialize` (deepspeed/ops/csrc/cpu/comm/shm.cpp) and never `shm_unlink`s it:

    /dev/shm/deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>     (DeepSpeed 0.19)
    /dev/shm/deepspeed_allreduce_buffer_<MASTER_ADDR>_<MASTER_PORT>_<rank>           (earlier releases)

A day of test runs filled /dev/shm. The tests that launch DeepSpeed and benchmarks/bench_cpu_testbed.py give
their job a port of their own (`--master_port`, or MASTER_PORT for a process that sets up DeepSpeed itself)
and, once the job has ended, call `remove_job_buffers` for exactly those ports. A file is removed only when
its name carries one of those ports, this user owns it, and it was written while the job ran (between
`started_unix_s` and now): a buffer of another user, of another port, or of a later job that reused the port
is never touched. The hook itself never deletes files; this is test and benchmark housekeeping only.
"""

from __future__ import annotations

import os
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

SHM_DIR = Path("/dev/shm")
"""Where Linux keeps POSIX shared-memory objects (shm_open)."""

BUFFER_PREFIX = "deepspeed_allreduce_buffer_"
"""SHM_BUFFER_NAME of shm.cpp, followed by '_'."""

CLOCK_SLACK_S = 2.0
"""Timestamps of tmpfs files and time.time() can disagree by a clock tick; a window this much wider is kept."""


def buffer_port(name: str) -> int | None:
    """The MASTER_PORT in a DeepSpeed all-reduce buffer's name (`..._<addr>_<port>_<rank>`), else None."""
    if not name.startswith(BUFFER_PREFIX):
        return None
    match = re.search(r"_(\d{1,5})_(\d+)$", name[len(BUFFER_PREFIX) - 1:])
    return int(match.group(1)) if match else None


def job_buffers(ports: Iterable[int], started_unix_s: float, ended_unix_s: float | None = None,
                shm_dir: Path = SHM_DIR) -> list[Path]:
    """The buffers a job of ours on `ports` left behind: name, owner and time window all match."""
    wanted = {int(p) for p in ports}
    ended = time.time() if ended_unix_s is None else ended_unix_s
    found = []
    try:
        entries = list(shm_dir.iterdir())
    except OSError:  # no /dev/shm (macOS): nothing to clean
        return []
    for path in entries:
        if buffer_port(path.name) not in wanted:
            continue
        try:
            st = path.lstat()
        except OSError:
            continue
        written_in_window = started_unix_s - CLOCK_SLACK_S <= st.st_mtime and st.st_ctime <= ended + CLOCK_SLACK_S
        if st.st_uid == os.getuid() and written_in_window and path.is_file():
            found.append(path)
    return sorted(found)


def remove_job_buffers(ports: Iterable[int], started_unix_s: float, ended_unix_s: float | None = None,
                       shm_dir: Path = SHM_DIR) -> list[Path]:
    """Unlink the buffers `job_buffers` finds (call after the job has ended); the paths removed."""
    removed = []
    for path in job_buffers(ports, started_unix_s, ended_unix_s, shm_dir):
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path)
    return removed


@contextmanager
def deepspeed_buffers_removed(*ports: int, shm_dir: Path = SHM_DIR) -> Iterator[None]:
    """`with deepspeed_buffers_removed(port): <run the job to its end>` removes that job's buffers afterwards,
    whether the job passed, failed or raised."""
    started = time.time()
    try:
        yield
    finally:
        remove_job_buffers(ports, started, shm_dir=shm_dir)

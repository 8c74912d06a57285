"""Which machine this process runs on, as `llmperf profile --comm` records it in a cluster file's `measured_on` and
predict matches it (api._measured_here).

A host name alone does not say it: a container's changes at each start (docker's default is the container id, a
Kubernetes pod's its pod name). The kernel's boot id (/proc/sys/kernel/random/boot_id, random(4)) is one per booted
kernel, the same in every container on that kernel and across their restarts; it changes when the machine reboots,
when the host name (outside containers) stays. So a file measured here is known by either.
"""

from __future__ import annotations

import socket
from pathlib import Path

BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")


def machine_id() -> str:
    """This machine: the kernel's boot id, else (no /proc) the host name."""
    try:
        return BOOT_ID_FILE.read_text().strip() or socket.gethostname()
    except OSError:
        return socket.gethostname()

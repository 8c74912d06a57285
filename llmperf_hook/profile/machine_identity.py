"""Which machine this process runs on, as `llmperf profile --comm` records it in a cluster file's `measured_on` and
predict matches it (api._measured_here).

A host name alone does not say it: a container's changes at each start (docker's default is the container id, a
Kubernetes pod's its pod name). The kernel's boot id (/proc/sys/kernel/random/boot_id, random(4)) is one per booted
kernel, the same in every container on that kernel and across their restarts; it changes when the machine reboots,
when the host name (outside containers) stays. So a file measured here is known by either.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")


def machine_id() -> str:
    """This machine: the kernel's boot id, else (no /proc) the host name."""
    try:
        return BOOT_ID_FILE.read_text().strip() or socket.gethostname()
    except OSError:
        return socket.gethostname()


def boot_id() -> str:
    """The kernel's boot id, "" where there is none (no /proc)."""
    try:
        return BOOT_ID_FILE.read_text().strip()
    except OSError:
        return ""


def host_identity() -> str:
    """This host as run's records name it: `hostname/boot id` (the host name alone without a boot id). A host name is
    not enough: another machine can carry the same one (a pod rescheduled to another node with a fixed name, `docker
    run --hostname`), and its pids, claims and node-local folders are not this host's."""
    boot = boot_id()
    return f"{socket.gethostname()}/{boot}" if boot else socket.gethostname()


def same_host(identity: str, other: str | None = None) -> bool:
    """Two host identities (host_identity's text; None: this host's) are one host: the same host name on the same
    booted kernel. One written before boot ids were kept (a bare name) is matched by the name alone, as then. The
    same name with another boot id is another machine, or this one before a reboot: neither's processes run here."""
    name, _, boot = identity.partition("/")
    other_name, _, other_boot = (host_identity() if other is None else other).partition("/")
    return name == other_name and (not boot or not other_boot or boot == other_boot)



def pid_namespace() -> str:
    """This process's pid namespace (`pid:[inode]`, Linux namespaces(7)), "" where there is none: containers on one
    kernel share its boot id, and may share a host name (`docker run --hostname`), but not their pids."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""

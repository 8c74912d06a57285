"""Whether a host a DeepSpeed hostfile names is this machine, as its runner reaches it.

DeepSpeed's runner gives no host name a meaning of its own (runner.py main; multinode_runner.py PDSHRunner `pdsh -w
HOSTS`, OpenMPIRunner `mpirun --host`, SlurmRunner `srun --nodelist`; only the pool built without a hostfile is called
`localhost`): each host is reached by its name, as ssh / mpirun resolve it. So a host is this machine when its name is
this machine's, or when it resolves to a loopback address or to an address of this machine's interfaces (Linux
/proc/net/fib_trie `/32 host LOCAL`, /proc/net/if_inet6). An alias only ~/.ssh/config maps, or a name that does not
resolve within RESOLVE_LIMIT_S, is not known to be this machine.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from pathlib import Path
from typing import Sequence

RESOLVE_LIMIT_S = 2.0
"""The most the look-ups of a hostfile's names take together (a name a resolver has not answered by then is not known)."""
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def this_host_among(hosts: Sequence[str]) -> str:
    """The first of `hosts` (hostfile names or addresses) that reaches this machine, "" when none does: its name,
    `localhost`, a loopback address, or an address of this machine, directly or by name resolution (all names looked
    up side by side, within RESOLVE_LIMIT_S in all)."""
    name = socket.gethostname()
    named = next((host for host in hosts if host in ("localhost", name, name.split(".")[0])), "")
    if named:
        return named
    mine, addresses = local_addresses(), _addresses_of(hosts)
    return next((host for host in hosts if any(a.is_loopback or a in mine for a in addresses.get(host, ()))), "")


def local_addresses() -> set[Address]:
    """This machine's interface addresses (Linux /proc/net); only loopback is known elsewhere."""
    found: set[Address] = set()
    try:
        last = ""
        for line in Path("/proc/net/fib_trie").read_text().splitlines():
            if "|--" in line:
                last = line.split("|--")[1].strip()
            elif "/32 host LOCAL" in line and last:
                found.add(ipaddress.ip_address(last))
    except (OSError, ValueError):
        pass
    try:
        for line in Path("/proc/net/if_inet6").read_text().splitlines():
            hex_address = line.split()[0]
            found.add(ipaddress.ip_address(":".join(hex_address[k:k + 4] for k in range(0, 32, 4))))
    except (OSError, ValueError, IndexError):
        pass
    return found


def _addresses_of(hosts: Sequence[str]) -> dict[str, set[Address]]:
    """The addresses each of `hosts` names: itself when it is one, else what getaddrinfo answers, every name on its own
    daemon thread, all within RESOLVE_LIMIT_S (a name still unanswered then, or whose thread could not start at the
    process's thread limit, adds nothing)."""
    found: dict[str, set[Address]] = {}
    names = []
    for host in dict.fromkeys(hosts):
        try:
            found[host] = {ipaddress.ip_address(host.strip("[]").split("%")[0])}
        except ValueError:
            names.append(host)
    answers: dict[str, set[Address]] = {}
    deadline = time.monotonic() + RESOLVE_LIMIT_S
    workers = []
    for name in names:
        worker = threading.Thread(target=_resolve, args=(name, answers), daemon=True)
        try:
            worker.start()
        except RuntimeError:  # "can't start new thread"
            break
        workers.append(worker)
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    return {**found, **answers.copy()}  # a late answer may still come in


def _resolve(host: str, answers: dict[str, set[Address]]) -> None:
    try:
        answers[host] = {ipaddress.ip_address(info[4][0].split("%")[0]) for info in socket.getaddrinfo(host, None)}
    except (OSError, ValueError, UnicodeError):
        pass

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
from pathlib import Path

RESOLVE_LIMIT_S = 2.0
"""The most one look-up of the hostfile's names may take (a resolver that does not answer: the name is not known)."""
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def is_this_host(host: str) -> bool:
    """`host` (a hostfile name or address) reaches this machine: its name, `localhost`, a loopback address, or an
    address of this machine, directly or by name resolution."""
    name = socket.gethostname()
    if host in ("localhost", name, name.split(".")[0]):
        return True
    return any(a.is_loopback or a in local_addresses() for a in _addresses_of(host))


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


def _addresses_of(host: str) -> set[Address]:
    """The addresses `host` names: itself when it is one, else what getaddrinfo answers within RESOLVE_LIMIT_S."""
    try:
        return {ipaddress.ip_address(host.strip("[]").split("%")[0])}
    except ValueError:
        pass
    answer: list[set[Address]] = []

    def resolve() -> None:
        try:
            answer.append({ipaddress.ip_address(info[4][0].split("%")[0]) for info in socket.getaddrinfo(host, None)})
        except (OSError, ValueError, UnicodeError):
            answer.append(set())

    worker = threading.Thread(target=resolve, daemon=True)
    worker.start()
    worker.join(RESOLVE_LIMIT_S)
    return answer[0] if answer else set()

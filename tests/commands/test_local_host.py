"""commands/local_host.this_host_among: a hostfile's names are looked up side by side within one RESOLVE_LIMIT_S in all,
and a resolver that does not answer (no DNS here) or a thread that cannot start never stops `run` (R94, H213)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Iterator

import pytest

from llmperf_hook.commands import local_host

LIMIT_S = 0.3


@pytest.fixture()
def silent_resolver(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """`slow-*` names are never answered until the test ends; `here-*` resolves to a loopback, anything else is
    unknown (no network)."""
    release = threading.Event()

    def getaddrinfo(host: str, *_args: object, **_kwargs: object) -> list:
        if host.startswith("slow-"):
            release.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        if host.startswith("here-"):
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.1.1", 0))]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(local_host, "RESOLVE_LIMIT_S", LIMIT_S)
    yield release
    release.set()


def test_silent_names_share_one_limit(silent_resolver: threading.Event) -> None:
    """20 names a resolver never answers cost one limit, not 20 (a 100-host hostfile held `run` for minutes)."""
    hosts = [f"slow-{k}" for k in range(20)]
    started = time.monotonic()
    assert not local_host.this_host_among(hosts)
    assert time.monotonic() - started < 10 * LIMIT_S
    started = time.monotonic()
    assert local_host.this_host_among([*hosts, "here-1"]) == "here-1"  # Debian's /etc/hosts: own name -> 127.0.1.1
    assert time.monotonic() - started < 10 * LIMIT_S


def test_names_and_addresses(silent_resolver: threading.Event) -> None:
    assert not local_host.this_host_among(["worker-1", "192.0.2.200", "[2001:db8::7]"])
    assert local_host.this_host_among(["worker-1", "127.0.0.2"]) == "127.0.0.2"
    assert local_host.this_host_among(["[::1]"]) == "[::1]"
    assert local_host.this_host_among(["worker-1", socket.gethostname()]) and local_host.this_host_among(["localhost"])


def test_a_thread_that_cannot_start_leaves_its_name_unknown(silent_resolver: threading.Event,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A hostfile of thousands of names may reach the process's thread limit: those names are not known, no
    traceback."""
    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    assert not local_host.this_host_among(["here-1", "worker-1"])

"""Suite-wide fixtures. This folder is on sys.path (pytest's rootdir import of a conftest without __init__.py),
so test folders import the shared helpers here by module name (`from deepspeed_shm import ...`)."""

from __future__ import annotations

import os
import socket
import time
from typing import Iterator

import pytest
from deepspeed_shm import remove_job_buffers
from hypothesis import settings

settings.register_profile("ci", derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
"""Property tests draw the same examples on every run, so the README's test command (CI's) passes or fails the
same way on the same tree (a random draw failed test_pydantic_int on 2026-11-27). HYPOTHESIS_PROFILE=default explores new
examples (random seed, example database) when hunting for bugs."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def deepspeed_port() -> Iterator[int]:
    """A free MASTER_PORT for one DeepSpeed job of the test; when the test ends (its job ended with it) the
    job's /dev/shm all-reduce buffers, named after this port, are removed (tests/deepspeed_shm.py)."""
    started = time.time()
    port = _free_port()
    yield port
    remove_job_buffers([port], started)


@pytest.fixture(scope="module")
def deepspeed_config():
    """DeepSpeed's own config class, the oracle of the ds_config tests (a test-only import: the predict path never
    imports deepspeed); DeepSpeedConfig asks the process group for its rank, which a test host has none of."""
    mp = pytest.MonkeyPatch()
    mp.setenv("DS_ACCELERATOR", "cpu")
    module = pytest.importorskip("deepspeed.runtime.config")
    mp.setattr(module.dist, "get_rank", lambda *a, **k: 0)
    yield module
    mp.undo()

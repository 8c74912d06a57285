"""Fixtures of the instrumentation tests (helpers live in instrument_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from instrument_helpers import make_child_env


@pytest.fixture
def child_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a child job: one thread, CPU DeepSpeed, a private LLMPERF_HOME, this checkout importable."""
    return make_child_env(tmp_path)

"""Locate shipped data (configs/: hardware, clusters, models, search spaces, fitted profiles).

From a source checkout it is the top-level `configs/`; after a plain `pip install .` it is installed as the
package `llmperf_hook._configs` (see pyproject.toml).
"""

from __future__ import annotations

import os
from pathlib import Path


def configs_dir() -> Path:
    checkout = Path(__file__).resolve().parent.parent / "configs"
    if checkout.is_dir():
        return checkout
    installed = Path(__file__).resolve().parent / "_configs"
    if installed.is_dir():
        return installed
    raise FileNotFoundError("llmperf_hook's shipped configs/ are missing: reinstall with `pip install .`")


def llmperf_home() -> Path:
    """User state (SQLite store, user profiles, calibrations): $LLMPERF_HOME or ~/.cache/llmperf."""
    home = os.environ.get("LLMPERF_HOME")
    return Path(home).expanduser() if home else Path.home() / ".cache" / "llmperf"

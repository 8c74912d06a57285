"""Where the store lives, without opening it: predict asks for the path on every run (is there a calibration?),
and most runs have no store at all, so this module imports neither sqlite3 nor the store's record types."""

from __future__ import annotations

from pathlib import Path

from llmperf_hook.resources import llmperf_home

STORE_FILE = "store.sqlite"


def default_store_path() -> Path:
    """$LLMPERF_HOME/store.sqlite."""
    return llmperf_home() / STORE_FILE

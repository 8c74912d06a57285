"""The embedded SQLite store (samples, step observations, calibrations): see sqlite_store.py.

    from llmperf_hook.store import open_store, OpSampleRecord, StepObservation
    with open_store() as store:            # $LLMPERF_HOME/store.sqlite
        store.record_step_observations([StepObservation(...)])

The SQLite part is imported on first use of one of its names (PEP 562 module __getattr__): `default_store_path`
(location.py) is all that a predict without a store needs.
"""

from __future__ import annotations

from typing import Any

from llmperf_hook.store.location import STORE_FILE, default_store_path  # noqa: F401

_SQLITE_NAMES = frozenset({"CalibrationRecord", "CommSampleRecord", "OpSampleRecord", "StepObservation", "Store",
                           "dims_key", "open_store"})


def __getattr__(name: str) -> Any:
    if name in _SQLITE_NAMES:
        from llmperf_hook.store import sqlite_store

        return getattr(sqlite_store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

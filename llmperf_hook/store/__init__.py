"""The embedded SQLite store (samples, step observations, calibrations): see sqlite_store.py.

    from llmperf_hook.store import open_store, OpSampleRecord, StepObservation
    with open_store() as store:            # $LLMPERF_HOME/store.sqlite
        store.record_step_observations([StepObservation(...)])
"""

from llmperf_hook.store.sqlite_store import (  # noqa: F401
    CalibrationRecord,
    CommSampleRecord,
    OpSampleRecord,
    StepObservation,
    Store,
    default_store_path,
    dims_key,
    open_store,
)

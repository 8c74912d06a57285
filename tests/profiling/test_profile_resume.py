"""Resuming `llmperf profile`: which stored shapes count as already measured."""

import json
from pathlib import Path

import pytest

from tests.profiling.conftest import TINY_NAME, TinyProfile

pytest.importorskip("torch")


def test_shapes_stored_under_another_fingerprint_are_measured_again(tiny_profile: TinyProfile,
                                                                    tiny_home: Path) -> None:
    """Samples of this name from another fingerprint (a CUDA upgrade of the same GPU, which _check_same_machine
    lets refit; or an interrupted first run with other settings) are never fitted here, so they may not count as
    done: they used to be skipped as "already stored", leaving nothing to fit (exit 2, "too few shapes").
    The session's tiny profile (tests/profiling/conftest.py) ran over the whole `--ops gemm` design stored under
    another fingerprint."""
    from llmperf_hook.profile.local_hardware import fingerprint
    from llmperf_hook.profile.sampler import MIN_SAMPLES_TO_FIT
    from llmperf_hook.store import open_store

    out = tiny_profile.output
    assert tiny_profile.returncode == 0, out[-3000:]
    assert " 0 already stored" in out and "too few shapes" not in out, out
    meta = json.loads((tiny_home / "profiles" / TINY_NAME / "profile.json").read_text())
    assert {(m["op_class"], m["phase"]) for m in meta["models"]} >= {("gemm", "fwd")}
    with open_store() as store:  # re-measured shapes replace the other fingerprint's rows: one row per shape
        rows = store.query_op_samples(TINY_NAME, "fp32", "gemm")
    ours = json.dumps(fingerprint("cpu", 1), sort_keys=True)
    keys = [(r.phase, json.dumps(r.dims, sort_keys=True)) for r in rows]
    assert len(keys) == len(set(keys)) >= len(tiny_profile.seeded_gemm_specs)
    assert sum(r.fingerprint == ours for r in rows) >= MIN_SAMPLES_TO_FIT

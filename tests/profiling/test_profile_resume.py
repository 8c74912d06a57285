"""Resuming `llmperf profile`: which stored shapes count as already measured."""

import json
from pathlib import Path

import pytest

from tests.profiling.test_cpu_profile_e2e import _run

pytest.importorskip("torch")


def test_shapes_stored_under_another_fingerprint_are_measured_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture) -> None:
    """Samples of this name from another fingerprint (a CUDA upgrade of the same GPU, which _check_same_machine
    lets refit; or an interrupted first run with other settings) are never fitted here, so they may not count as
    done: they used to be skipped as "already stored", leaving nothing to fit (exit 2, "too few shapes")."""
    from llmperf_hook.profile import plan
    from llmperf_hook.profile.local_hardware import fingerprint
    from llmperf_hook.profile.sampler import DESIGN_PER_CLASS, MIN_SAMPLES_TO_FIT
    from llmperf_hook.store import OpSampleRecord, open_store

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    other = json.dumps({**fingerprint("cpu", 1), "logical_cpus": "9999"}, sort_keys=True)
    specs = plan.fit_first(plan.design_specs(("gemm",), plan.CPU_RANGES, DESIGN_PER_CLASS), MIN_SAMPLES_TO_FIT)
    with open_store() as store:  # the whole design of --ops gemm, timed by the other fingerprint
        store.record_op_samples([OpSampleRecord("cpu-resume", "fp32", s.op_class, s.phase, s.dims, 1e-3, "sampler",
                                                other) for s in specs])
    code, out = _run(["profile", "--device", "cpu", "--budget", "0.5", "--ops", "gemm", "--name", "cpu-resume"],
                     capsys)
    assert code == 0, out
    assert " 0 already stored" in out and "too few shapes" not in out, out
    meta = json.loads((tmp_path / "profiles" / "cpu-resume" / "profile.json").read_text())
    assert {(m["op_class"], m["phase"]) for m in meta["models"]} >= {("gemm", "fwd")}
    with open_store() as store:  # re-measured shapes replace the other fingerprint's rows: one row per shape
        rows = store.query_op_samples("cpu-resume", "fp32", "gemm")
    ours = json.dumps(fingerprint("cpu", 1), sort_keys=True)
    keys = [(r.phase, json.dumps(r.dims, sort_keys=True)) for r in rows]
    assert len(keys) == len(set(keys)) >= len(specs) and sum(r.fingerprint == ours for r in rows) >= MIN_SAMPLES_TO_FIT

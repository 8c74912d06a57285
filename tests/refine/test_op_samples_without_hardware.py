"""refine of a run whose launch made no prediction (`llmperf run --instrument --profile-ops K -- python train.py`
without a model shape): its op samples have no hardware to be stored under. They were stored as hardware "unknown"
and the note advised `llmperf profile --name unknown`; now they are left out, the note says how to store them, and
`refine --hardware NAME` stores them for NAME."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.refine.refine_run import refine_run
from llmperf_hook.store import open_store
from refine_helpers import write_run

OP = ('{"kind": "op", "job_id": "j1", "rank": 0, "op_class": "gelu", "phase": "fwd", "dtype": "fp32", '
      '"dims": {"elements": 10000}, "seconds": 4e-5, "count": 4}\n')


def _run(tmp_path: Path) -> Path:
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.02, 0.02]}, prediction=None)
    with open(run / "rank0.jsonl", "a") as f:
        f.write(OP)
    return run


def test_op_samples_of_a_run_without_hardware_are_not_stored_as_unknown(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    (job,) = refine_run(_run(tmp_path)).jobs
    assert "1 op samples not stored" in job.op_refit and "--hardware NAME" in job.op_refit
    assert "--name unknown" not in job.op_refit
    with open_store(tmp_path / "home" / "store.sqlite") as store:
        assert store.query_op_samples("unknown") == []


def test_hardware_option_stores_them_for_that_hardware(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    (job,) = refine_run(_run(tmp_path), hardware="cpu-test").jobs
    assert "op samples of cpu-test stored" in job.op_refit
    with open_store(tmp_path / "home" / "store.sqlite") as store:
        assert [r.op_class for r in store.query_op_samples("cpu-test")] == ["gelu"]


@pytest.mark.parametrize("config, stored", [
    ({"gelu_approximate": "none"}, "gelu_exact"),  # the job's F.gelu is exact: the profile's gelu_exact class
    ({"gelu_approximate": "tanh"}, "gelu"),
    ({}, "gelu"),  # an explain config without the field: the default, tanh
])
def test_a_runs_gelu_samples_are_stored_under_the_jobs_variant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               config: dict, stored: str) -> None:
    """torch's profiler keeps no `approximate` of aten::gelu (its concrete inputs read None), so the variant is the
    job's, from the prediction made at launch (instrument/op_profile.by_gelu_variant)."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.02, 0.02]}, prediction={"config": config})
    with open(run / "rank0.jsonl", "a") as f:
        f.write(OP)
    refine_run(run, hardware="cpu-test")
    with open_store(tmp_path / "home" / "store.sqlite") as store:
        assert [r.op_class for r in store.query_op_samples("cpu-test")] == [stored]

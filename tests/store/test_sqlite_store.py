"""Round trips through the embedded store, resumability keys, and a clear error on a damaged file."""

import json
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.store import (CalibrationRecord, CommSampleRecord, OpSampleRecord, StepObservation, dims_key,
                                open_store)


def test_op_samples_round_trip_and_replace(tmp_path: Path) -> None:
    rec = OpSampleRecord("cpu-x", "fp32", "gemm", "fwd", {"m": 64, "n": 128, "k": 32}, 1.5e-4,
                         fingerprint="fp", library_versions={"torch": "2"})
    with open_store(tmp_path / "s.sqlite") as store:
        store.record_op_samples([rec])
        store.record_op_samples([OpSampleRecord("cpu-x", "fp32", "gemm", "fwd", {"k": 32, "n": 128, "m": 64}, 2e-4)])
        got = store.query_op_samples("cpu-x", "fp32", "gemm")
        assert len(got) == 1 and got[0].time_s == 2e-4 and got[0].dims == {"k": 32, "m": 64, "n": 128}
        assert store.sampled_keys("cpu-x", "fp32") == {("gemm", "fwd", dims_key({"m": 64, "n": 128, "k": 32}))}
        assert store.query_op_samples("cpu-x", "bf16") == []


def test_rows_fingerprinted_before_the_torch_was_part_of_it_resume_under_their_torch(tmp_path: Path) -> None:
    """A store written before the fingerprint named the measuring torch (1dbd781): its rows' torch is in their
    library versions, so under that torch they stay resumable and fittable, under another they are measured again."""
    device = {"device": "cpu-model", "machine": "x86_64", "threads": "1", "logical_cpus": "2", "clock": "wall"}
    old_fp = json.dumps(device, sort_keys=True)
    gemm = {"m": 64, "n": 128, "k": 32}
    with open_store(tmp_path / "s.sqlite") as store:
        store.record_op_samples([OpSampleRecord("cpu-x", "fp32", "gemm", "fwd", gemm, 1e-4, "sampler", old_fp,
                                                {"torch": "2.13.0+cpu", "numpy": "2.1"}),
                                 OpSampleRecord("cpu-x", "fp32", "gemm", "bwd", gemm, 2e-4, "sampler", old_fp, {})])
        same, other = ({**device, "torch": t} for t in ("2.13.0+cpu", "2.14.0+cpu"))
        same_fp, other_fp = json.dumps(same, sort_keys=True), json.dumps(other, sort_keys=True)
        assert store.sampled_keys("cpu-x", "fp32", fingerprint=same_fp) == {("gemm", "fwd", dims_key(gemm))}
        assert store.sampled_keys("cpu-x", "fp32", fingerprint=other_fp) == set()
        fps = {r.phase: r.fingerprint for r in store.query_op_samples("cpu-x", "fp32")}
        assert fps == {"fwd": same_fp, "bwd": old_fp}  # a row without a recorded torch keeps its fingerprint


def test_comm_steps_and_calibrations(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.sqlite") as store:
        store.record_comm_samples([CommSampleRecord("c", "gloo", "allreduce", 1, 2, 1024.0, 1e-5)])
        store.record_step_observations([StepObservation("run1", "h", "c", "deepspeed", 3, 0.5, 0.45, 1,
                                                        extra={"tokens": 4096})])
        store.record_calibration(CalibrationRecord("h", "c", "deepspeed", 1.1, 2))
        store.record_calibration(CalibrationRecord("h", "c", "deepspeed", 1.2, 3))
    with open_store(tmp_path / "s.sqlite") as store:  # persisted
        assert store.query_comm_samples("c")[0].nbytes == 1024.0
        step = store.query_step_observations(run_id="run1")[0]
        assert (step.step, step.measured_s, step.predicted_s, step.rank, step.extra) == (3, 0.5, 0.45, 1, {"tokens": 4096})
        assert store.query_calibration("h", "c", "deepspeed").step_time_scale == 1.2
        assert store.query_calibration("h", "c", "megatron") is None


def test_default_path_under_llmperf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    with open_store() as store:
        assert store.path == tmp_path / "home" / "store.sqlite"
    assert (tmp_path / "home" / "store.sqlite").is_file()


def test_damaged_store_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "s.sqlite"
    bad.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(UsageError, match="cannot open the llmperf store"):
        open_store(bad)


def test_store_under_a_file_is_a_usage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "home"
    blocker.write_text("a file where $LLMPERF_HOME should be a folder")
    with pytest.raises(UsageError, match="cannot create the llmperf store"):
        open_store(blocker / "store.sqlite")


def _damaged_store(tmp_path: Path) -> Path:
    """A store of a few hundred samples whose second 4 KiB page was written over (a disk or copy fault): its header
    is intact, so SQLite opens it, and only a query that reaches that page fails."""
    path = tmp_path / "damaged.sqlite"
    with open_store(path) as store:
        store.record_op_samples(OpSampleRecord("cpu-x", "fp32", "gemm", "fwd", {"m": m, "n": 64, "k": 64}, 1e-4)
                                for m in range(1, 600))
    data = bytearray(path.read_bytes())
    data[4096:8192] = b"\x55" * 4096
    path.write_bytes(bytes(data))
    return path


def test_damaged_store_is_refused_before_use(tmp_path: Path) -> None:
    """`llmperf profile` on a damaged store sampled for its whole budget, then died with an internal error
    ("database disk image is malformed") when it read the samples back to fit."""
    with open_store(_damaged_store(tmp_path)) as store, pytest.raises(UsageError, match="is damaged .*Move it away"):
        store.check_integrity()
    with open_store(tmp_path / "fine.sqlite") as store:
        store.check_integrity()  # a sound store passes


def test_a_query_that_meets_a_damaged_page_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is damaged"):
        with open_store(_damaged_store(tmp_path)) as store:
            store.query_op_samples("cpu-x")

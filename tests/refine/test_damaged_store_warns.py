"""A prediction whose $LLMPERF_HOME store cannot be read (damaged, or not a SQLite file) says that the calibrations
`llmperf refine` stored there were left out. It silently predicted without them (a refined CPU testbed job read
14.2 ms instead of its calibrated 24.5 ms after its store was truncated), while refine and profile refused that store
by name. A store that has no calibration tables yet is no problem and says nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook import api
from llmperf_hook.store import open_store

JOB = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "1024",
       "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
       "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--vocab-size", "32000"]


def _warnings(home: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, ...]:
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    return api.predict_command(JOB, {}, cluster="dgx-h100").estimate.warnings


def _truncated(home: Path) -> None:
    with open_store(home / "store.sqlite"):
        pass
    data = (home / "store.sqlite").read_bytes()
    (home / "store.sqlite").write_bytes(data[:len(data) // 2])


@pytest.mark.parametrize("damage", [lambda home: (home / "store.sqlite").write_text("not a database\n" * 500),
                                    _truncated], ids=["not-sqlite", "truncated"])
def test_unreadable_store_is_named_in_the_warnings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage) -> None:
    tmp_path.mkdir(exist_ok=True)
    damage(tmp_path)
    said = [w for w in _warnings(tmp_path, monkeypatch) if "cannot be read" in w]
    assert len(said) == 1 and "predicted without any calibration" in said[0] and str(tmp_path) in said[0], said


def test_a_store_without_calibrations_says_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_store(tmp_path / "store.sqlite"):
        pass
    assert not [w for w in _warnings(tmp_path, monkeypatch) if "llmperf store" in w]


def test_tune_names_it_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """tune shows no per-candidate warnings, so it ranked every candidate uncalibrated without a word."""
    from llmperf_hook.cli import main

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    (tmp_path / "store.sqlite").write_text("not a database\n" * 500)
    with pytest.raises(SystemExit) as ended:
        main(["tune", "--cluster", "dgx-h100", "--top", "1", "--", *JOB])
    err = capsys.readouterr().err
    assert ended.value.code in (0, None), err
    assert f"llmperf tune: warning: the llmperf store {tmp_path / 'store.sqlite'} cannot be read" in err

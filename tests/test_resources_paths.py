"""resources.py memoises what it computes from the environment (predict --batch asks several times per command),
but never past a change of the variables it reads."""

from pathlib import Path

import pytest

from llmperf_hook.resources import configs_dir, llmperf_home


def test_llmperf_home_follows_its_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "a"))
    assert llmperf_home() == tmp_path / "a"
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "b"))
    assert llmperf_home() == tmp_path / "b"
    monkeypatch.delenv("LLMPERF_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert llmperf_home() == tmp_path / "home" / ".cache" / "llmperf"


def test_configs_dir_is_the_checkouts_configs() -> None:
    assert configs_dir() == Path(__file__).resolve().parent.parent / "configs"

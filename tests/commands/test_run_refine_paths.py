"""`llmperf run --run-dir` and `llmperf refine RUN_DIR` given a path that cannot be looked up (a name longer than the
file system allows, a symbolic link loop), and both run from a working directory that was removed: a clear message
and exit 2, never an internal error (commands/folder_checks.py; R77's and note23's open items)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from llmperf_hook.cli import main

LONG = "a" * 300


def _llmperf(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as ended:
        main(list(args))
    return int(ended.value.code or 0), capsys.readouterr().err


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    (tmp_path / "train.py").write_text("")
    (tmp_path / "loop_a").symlink_to(tmp_path / "loop_b")
    (tmp_path / "loop_b").symlink_to(tmp_path / "loop_a")
    os.mkfifo(tmp_path / "fifo")
    return tmp_path


@pytest.mark.parametrize("run_dir, said", [
    (f"{LONG}", "is 300 bytes long"),
    (f"nosuch/{LONG}/x", "is 300 bytes long"),  # below a folder that does not exist yet: mkdir -p would fail late
    ("loop_a/x", "symbolic link in it leads back to itself"),
    ("a:b", "PYTHONPATH, which splits at ':'"),  # refused only after the prediction before
])
def test_run_refuses_a_run_dir_that_cannot_be_looked_up(home: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch, run_dir: str,
                                                         said: str) -> None:
    monkeypatch.chdir(home)
    code, err = _llmperf(capsys, "run", "--instrument", "1", "--run-dir", str(home / run_dir), "--", sys.executable,
                         "train.py")
    assert code == 2 and "internal error" not in err, err
    assert "cannot hold the run's records" in err and said in err
    assert not (home / "nosuch").exists()


@pytest.mark.parametrize("run_dir, said", [(LONG, "is 300 bytes long"),
                                           ("loop_a", "symbolic link in it leads back to itself"),
                                           ("fifo", "is not a folder")])  # was 'does not exist'
def test_refine_refuses_a_run_dir_that_cannot_be_looked_up(home: Path, capsys: pytest.CaptureFixture[str],
                                                           run_dir: str, said: str) -> None:
    code, err = _llmperf(capsys, "refine", str(home / run_dir))
    assert code == 2 and "internal error" not in err, err
    assert said in err


@pytest.fixture()
def removed_cwd(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    gone = home / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    monkeypatch.setenv("PWD", str(gone))
    os.rmdir(gone)
    return home


@pytest.mark.parametrize("args", [
    ("run", "--", sys.executable, "train.py"),
    ("run", "--dry-run", "--", sys.executable, "/abs/train.py"),
    ("refine", "run"),
    ("refine",),  # the newest run under ./llmperf-runs, and none recorded in $LLMPERF_HOME
])
def test_a_removed_working_directory_is_bad_input(removed_cwd: Path, capsys: pytest.CaptureFixture[str],
                                                  args: tuple[str, ...]) -> None:
    code, err = _llmperf(capsys, *args)
    assert code == 2 and "internal error" not in err, err
    assert "the working directory no longer exists" in err and str(removed_cwd / "gone") in err


def test_a_relative_llmperf_home_in_a_removed_working_directory_is_bad_input(
        removed_cwd: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """cli.main pins a relative $LLMPERF_HOME against the working directory before any command: a traceback when that
    folder was removed."""
    monkeypatch.setenv("LLMPERF_HOME", "relative-home")
    code, err = _llmperf(capsys, "refine", str(removed_cwd / "run"))
    assert code == 2 and "Traceback" not in err and "$LLMPERF_HOME='relative-home' is relative" in err, err


def test_run_refuses_a_run_dir_under_an_unknown_user_s_home(home: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`--run-dir '~name/x'` of a user this machine does not have: pathlib's expanduser raises RuntimeError (an
    internal error, exit 1, before R86)."""
    monkeypatch.chdir(home)
    code, err = _llmperf(capsys, "run", "--dry-run", "--instrument", "1", "--run-dir", "~llmperf-no-such-user/x", "--",
                         sys.executable, "train.py")
    assert code == 2 and "internal error" not in err, err
    assert "~llmperf-no-such-user" in err and "no user" in err


def test_run_refuses_the_default_run_dir_in_a_working_directory_with_a_colon(
        home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --run-dir the records go to ./llmperf-runs: a ':' in the working directory splits the hook's PYTHONPATH
    as one in --run-dir does, refused before the prediction too (a dry run printed the split path, a launch was
    refused only after predicting: R86)."""
    (home / "a:b").mkdir()
    monkeypatch.chdir(home / "a:b")
    code, err = _llmperf(capsys, "run", "--dry-run", "--instrument", "1", "--", sys.executable, str(home / "train.py"))
    assert code == 2 and "PYTHONPATH, which splits at ':'" in err and "llmperf-runs" in err, err

"""profile/staged_folder.py after a writer dies between its two renames, and with two refits racing: the old profile
comes back on the next load or write, and the files other stages add to the folder survive the last swap."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llmperf_hook.profile import staged_folder
from llmperf_hook.profile.profile_io import write_profile

from tests.profiling.test_staged_profile_write import _fit, _predict_s

KILL_BETWEEN_RENAMES = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from llmperf_hook.profile import staged_folder
    from llmperf_hook.profile.profile_io import read_model_text, read_profile_meta, write_profile
    source = Path(sys.argv[2])
    meta = read_profile_meta(source)
    texts = {entry.file: read_model_text(source, entry) for entry in meta.models}
    real_rename = os.rename
    def rename(src, dst):
        if Path(dst) == Path(sys.argv[1]):  # the stage's rename into place: the old one is already aside
            os.kill(os.getpid(), signal.SIGKILL)
        return real_rename(src, dst)
    staged_folder.os.rename = rename
    write_profile(Path(sys.argv[1]), meta, texts)
""")
"""The refit's models are _fit(1e10)'s, fitted in this process and written as a profile (data files, as the package
writes them) that the child reads back and writes again (refitting them in the child took most of its time)."""


def _killed_mid_swap(directory: Path) -> None:
    """A refit of `directory` SIGKILLed after moving the old profile aside, before renaming its stage in."""
    models = write_profile(directory.parent.parent / "refit-models", *_fit(1e10))
    proc = subprocess.run([sys.executable, "-c", KILL_BETWEEN_RENAMES, str(directory), str(models)],
                          cwd=Path(__file__).parents[2], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    left = sorted(p.name for p in (directory.parent / staged_folder.STAGING).iterdir())
    assert not directory.exists() and len(left) == 2 and left[1].endswith(".old"), left  # the crash state


def test_a_profile_left_in_staging_by_a_killed_swap_is_found_by_predict(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """It used to stay in .staging/, which nothing reads: predict fell back to the roofline silently."""
    from llmperf_hook.predict import fitted

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    directory = write_profile(tmp_path / "profiles" / "cpu-x", *_fit(5e10))
    (directory / "reference_speed.json").write_text("{}\n")
    before = _predict_s(directory)
    _killed_mid_swap(directory)
    assert fitted.find_profile("cpu-x", "fp32") is not None
    assert _predict_s(directory) == before and (directory / "reference_speed.json").is_file()
    assert sorted(p.name for p in (tmp_path / "profiles").iterdir()) == ["cpu-x"]  # the dead writer's stage removed


def test_the_next_write_recovers_it_and_keeps_its_other_files(tmp_path: Path) -> None:
    directory = write_profile(tmp_path / "profiles" / "cpu-x", *_fit(5e10))
    (directory / "framework_overhead.json").write_text('{"measured": 1}\n')
    _killed_mid_swap(directory)
    write_profile(directory, *_fit(1e10))
    assert json.loads((directory / "framework_overhead.json").read_text()) == {"measured": 1}
    assert sorted(p.name for p in (tmp_path / "profiles").iterdir()) == ["cpu-x"]


NO_SUCH_PID = 4194305
"""Above the largest pid_max Linux allows (2**22, kernel/pid.c PID_MAX_LIMIT): no process here has it."""


def _left(directory: Path, host: str, pid: int) -> Path:
    """A folder moved aside by writer `pid` on `host` that did not rename its stage in."""
    left = directory.parent / staged_folder.STAGING / f"{directory.name}.{host}.{pid}.0123abcd.old"
    left.mkdir(parents=True)
    return left


def test_a_live_writers_folders_are_left_alone(tmp_path: Path) -> None:
    """Between a live writer's two renames (microseconds) its folder aside is its own, not a crash's."""
    directory = tmp_path / "profiles" / "cpu-x"
    live = _left(directory, staged_folder._host(), os.getppid())
    assert staged_folder.recover(directory) is False
    assert live.is_dir() and not directory.exists()


def test_another_hosts_writer_is_never_judged_gone(tmp_path: Path) -> None:
    """On a $LLMPERF_HOME shared by several machines its PID means nothing here: deleting or moving its folders
    would break a live write there."""
    directory = tmp_path / "profiles" / "cpu-x"
    other = _left(directory, staged_folder._host() + "-other", NO_SUCH_PID)
    assert staged_folder.recover(directory) is False
    assert other.is_dir() and not directory.exists()
    dead_here = _left(directory, staged_folder._host(), NO_SUCH_PID)
    assert staged_folder.recover(directory) is True  # the same leftover from this host is put back
    assert directory.is_dir() and not dead_here.exists() and other.is_dir()


def test_the_last_of_two_racing_refits_keeps_the_files_the_other_added(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Refit A swapped its profile in and then wrote framework_overhead.json into it (minutes later, after
    measuring); refit B had carried the folder over before that, and its swap retired A's file: lost. Now the
    last writer carries over what the folder it replaced gained meanwhile, beside its own reference_speed.json."""
    directory = write_profile(tmp_path / "profiles" / "cpu-x", *_fit(5e10))
    (directory / "reference_speed.json").write_text('{"b": 1}\n')
    real_carry, calls = staged_folder._carry_over, []

    def carry_then_a_writes(src: Path, stage: Path, keep, atomic: bool = False) -> None:
        real_carry(src, stage, keep, atomic)
        calls.append(atomic)
        if len(calls) == 1:  # B has carried the folder over; A's measurement lands in the live folder now
            (directory / "framework_overhead.json").write_text('{"a": 1}\n')

    monkeypatch.setattr(staged_folder, "_carry_over", carry_then_a_writes)
    write_profile(directory, *_fit(1e10))
    assert json.loads((directory / "framework_overhead.json").read_text()) == {"a": 1}
    assert json.loads((directory / "reference_speed.json").read_text()) == {"b": 1}
    assert not list(directory.glob(".*.tmp"))

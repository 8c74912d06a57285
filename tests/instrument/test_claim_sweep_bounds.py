"""The job-id claim sweep after a refine (instrument/shared_job.release_claims) is bounded: a session releases only
its own job's claim, and a claimed run directory that does not answer (a dead hard NFS mount) is skipped after a
time limit with a warning, instead of hanging `llmperf run` after its job ended (R71's note)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from llmperf_hook.instrument import shared_job
from llmperf_hook.instrument.shared_job import release_claims


def _claims(home: Path, **run_dirs: Path) -> Path:
    store = home / "store.sqlite"
    (home / "job_ids").mkdir(parents=True)
    for job_id, run_dir in run_dirs.items():
        (home / "job_ids" / job_id).write_text(f"{shared_job.socket.gethostname()}:{run_dir}\n")
    return store


def test_a_run_directory_that_does_not_answer_is_skipped_after_the_limit(tmp_path: Path, monkeypatch, capsys) -> None:
    """Two claims in a 'dead mount' folder whose check blocks, one in a live folder: the sweep returns after the
    limit, checks the dead folder once, releases nothing there, and says so."""
    dead, live = tmp_path / "dead", tmp_path / "live"
    store = _claims(tmp_path / "home", a=dead, b=dead, c=live)
    blocked, checked = threading.Event(), []

    def finished(job_id: str, host: str, run_dir: Path, age_s: float) -> bool:
        checked.append(job_id)
        if run_dir == dead:
            blocked.wait(30)  # a stat on a hung hard mount
            return False
        return True

    monkeypatch.setattr(shared_job, "_claim_finished", finished)
    start = time.monotonic()
    try:
        released = release_claims(store, limit_s=0.3)
    finally:
        blocked.set()
    assert time.monotonic() - start < 5
    assert released == ["c"] and sorted(checked) == ["a", "c"]  # b (dead too) not waited for, nor checked after
    assert sorted(p.name for p in (tmp_path / "home" / "job_ids").iterdir()) == ["a", "b"]
    err = capsys.readouterr().err
    assert f"its run directory {dead} did not answer within 0.3 s" in err and "`llmperf refine`" in err


def test_only_the_named_jobs_claims_are_checked(tmp_path: Path, monkeypatch) -> None:
    """The session's own release touches no other job's run directory."""
    store = _claims(tmp_path / "home", mine=tmp_path / "a", other=tmp_path / "nfs")
    checked = []
    monkeypatch.setattr(shared_job, "_claim_finished", lambda job_id, *rest: checked.append(job_id) or True)
    assert release_claims(store, job_ids=("mine",)) == ["mine"]
    assert checked == ["mine"]
    assert [p.name for p in (tmp_path / "home" / "job_ids").iterdir()] == ["other"]


def test_the_session_releases_its_own_jobs_claim_only(tmp_path: Path, monkeypatch) -> None:
    """Wiring: the refine after `llmperf run --instrument` passes its job id (it swept every claim)."""
    from llmperf_hook.commands import refine as refine_command
    from llmperf_hook.instrument import session
    from llmperf_hook.refine import refine_run as refine_module

    calls = []
    monkeypatch.setattr(refine_command, "check_has_jobs", lambda run_dir: None)
    monkeypatch.setattr(refine_module, "refine_run", lambda run_dir, job_ids: refine_module.RefineReport(
        str(run_dir), str(tmp_path / "store.sqlite"), ()))
    monkeypatch.setattr(session, "release_claims", lambda store, **kw: calls.append(kw) or [])
    session._refine_quietly(tmp_path, "job-7")
    assert calls == [{"job_ids": ("job-7",)}]


def test_several_silent_run_directories_share_one_limit(tmp_path: Path, monkeypatch, capsys) -> None:
    """Run directories on one dead mount are checked side by side: the sweep takes the limit once, not once per
    directory (20 run directories on a dead /nfs held `llmperf refine` 20 x 10 s)."""
    dead = [tmp_path / f"dead{i}" for i in range(4)]
    store = _claims(tmp_path / "home", **{f"d{i}": d for i, d in enumerate(dead)}, live=tmp_path / "live")
    blocked = threading.Event()

    def finished(job_id: str, host: str, run_dir: Path, age_s: float) -> bool:
        if run_dir in dead:
            blocked.wait(30)
            return False
        return True

    monkeypatch.setattr(shared_job, "_claim_finished", finished)
    start = time.monotonic()
    try:
        released = release_claims(store, limit_s=0.5)
    finally:
        blocked.set()
    assert time.monotonic() - start < 1.5  # one after another: >= 2 s
    assert released == ["live"]
    err = capsys.readouterr().err
    assert all(f"its run directory {d} did not answer within 0.5 s" in err for d in dead), err

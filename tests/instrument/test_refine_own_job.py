"""When an instrumented job ends, refine takes its own records only. It refined the whole run directory: another
job still running there was ingested from its first steps and said to have 'ended first', and a job the user had
refined under the cluster it ran on (`llmperf refine --cluster ...`) went back to its prediction's key."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from llmperf_hook.instrument.session import _refine_quietly
from llmperf_hook.refine.refine_run import refine_run

PREDICTION = {"schema": 1, "step_time_s": 0.01, "cluster": {"name": "dgx-h100", "gpu": "cpu-test"},
              "config": {"framework": "deepspeed", "world_size": 1, "num_layers": 2, "hidden_size": 64,
                         "seq_length": 64, "micro_batch_size": 2, "global_batch_size": 2, "zero_stage": 1,
                         "precision": "fp32"}}


def _job(run: Path, job_id: str, times: list[float], asked: int) -> None:
    lines = [{"schema": 1, "kind": "meta", "job_id": job_id, "rank": 0, "world_size": 1, "framework": "deepspeed"}]
    lines += [{"schema": 1, "kind": "step", "job_id": job_id, "rank": 0, "world_size": 1, "step": i,
               "wall_time_s": t, "warmup": i == 0, "profiled": False, "framework": "deepspeed", "device": "cpu",
               "peak_rss_bytes": 10 ** 8} for i, t in enumerate(times)]
    with open(run / "rank0.jsonl", "a") as f:
        f.write("".join(json.dumps(x) + "\n" for x in lines))
    (run / "jobs" / job_id).mkdir(parents=True)
    (run / "jobs" / job_id / "prediction.json").write_text(json.dumps(PREDICTION))
    (run / "jobs" / job_id / "session.json").write_text(json.dumps({"job_id": job_id, "steps": asked}))


def test_the_ending_job_refines_itself_only(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    run = tmp_path / "run"
    run.mkdir()
    _job(run, "earlier", [0.05, 0.02, 0.02, 0.02], 4)
    refine_run(run, cluster="dgx-a100")  # the user's: the cluster it really ran on
    _job(run, "running", [0.05, 0.03], 6)  # two of its six steps so far
    _job(run, "ending", [0.05, 0.04, 0.04, 0.04], 4)
    capsys.readouterr()
    _refine_quietly(run, "ending")
    err = capsys.readouterr().err
    assert "job ending" in err and "job running" not in err and "job earlier" not in err, err
    with sqlite3.connect(tmp_path / "home" / "store.sqlite") as conn:
        rows = dict((j, c) for j, c in conn.execute("SELECT job_id, cluster FROM refine_runs"))
    assert rows == {"earlier": "dgx-a100", "ending": "dgx-h100"}


def test_a_job_without_a_step_is_not_ingested_beside_another(tmp_path: Path, monkeypatch, capsys) -> None:
    """A job that ended before its first step, in a run directory where another job has steps (review R61 of
    d789372): alone it is 'nothing refined'; beside another it was ingested as '0/1 ranks, 0 timed steps' under a
    note about its prediction, after the warning that it recorded no step."""
    from llmperf_hook.instrument.session import JobEnd, _record_end

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    run = tmp_path / "run"
    run.mkdir()
    _job(run, "earlier", [0.05, 0.02, 0.02, 0.02], 4)
    _job(run, "stepless", [], 4)
    capsys.readouterr()
    _record_end(run, run / "jobs" / "stepless", "stepless", {"job_id": "stepless"}, JobEnd(1, None), None)
    err = capsys.readouterr().err
    assert "recorded no step" in err and "nothing refined" in err and "job stepless" not in err, err
    assert not (tmp_path / "home" / "store.sqlite").exists() or _jobs_in_store(tmp_path / "home") == set()


def _jobs_in_store(home: Path) -> set[str]:
    with sqlite3.connect(home / "store.sqlite") as conn:
        return {j for (j,) in conn.execute("SELECT job_id FROM refine_runs")}

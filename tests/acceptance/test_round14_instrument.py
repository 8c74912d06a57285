"""Acceptance round 14 for issue 6 (`llmperf run --instrument`, `llmperf refine`), played as a user on this CPU.

Inside one Slurm allocation (SLURM_JOB_ID set, as `salloc` leaves it) a user starts two different jobs at once into
one --run-dir: a 2-rank torchrun DDP calibration run with a profiler window that stops itself (`--instrument 3
--profile-ops 2 --stop-after 6`), and a plain-torch one-process job (`--instrument 4`), both the CPU testbed's GPT
(2 layers, hidden 128). Checked on what they leave: every step of every rank, the profiled steps and their op samples,
the clean stop, the jobs' own output and exit codes, the machine-speed reading taken after each rank's last recorded
step (in its end record; never in the job's first iteration), one job id each (the allocation's id, not shared by two different commands), the refine
each session ran, `llmperf refine RUN_DIR` (predicted vs measured before and after, both jobs), and predict using
the calibration afterwards. The 2-node launch sharing one job id is tests/instrument/test_multinode_job.py; the
2-rank DeepSpeed ZeRO-1 job of the issue's Done-when is test_round13_instrument.py's.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.acceptance.cli import run_cli

REPO = Path(__file__).resolve().parents[2]
TRAIN_GPT = REPO / "examples" / "cpu-testbed" / "train_gpt.py"
SHAPE = ["--num-layers", "2", "--hidden-size", "128", "--num-attention-heads", "4", "--seq-length", "32",
         "--max-position-embeddings", "32", "--micro-batch-size", "2", "--vocab-size", "512"]
PLAIN = [sys.executable, str(TRAIN_GPT), *SHAPE, "--global-batch-size", "2", "--train-iters", "6"]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("round14")
    run = root / "run"
    env = {**os.environ, "LLMPERF_HOME": str(root / "home"), "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO), "SLURM_JOB_ID": "99"}
    env.pop("SLURM_STEP_ID", None)
    llmperf = [sys.executable, "-m", "llmperf_hook", "run", "--run-dir", str(run)]
    ddp = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_free_port()),
           str(TRAIN_GPT), *SHAPE, "--global-batch-size", "4", "--train-iters", "10"]
    procs = {"ddp": subprocess.Popen([*llmperf, "--instrument", "3", "--profile-ops", "2", "--stop-after", "6", "--",
                                      *ddp], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True),
             "plain": subprocess.Popen([*llmperf, "--instrument", "4", "--", *PLAIN], cwd=root, env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)}
    done = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    records = [json.loads(line) for path in sorted(run.glob("rank*.jsonl")) for line in path.read_text().splitlines()]
    ids = {name: next(line.split("job ")[1].split(" ")[0] for line in d.stderr.splitlines()
                      if line.startswith("llmperf: job ")) for name, d in done.items()}
    return {"root": root, "run": run, "home": root / "home", "done": done, "ids": ids, "ddp": ddp,
            "records": {name: [r for r in records if r["job_id"] == job_id] for name, job_id in ids.items()}}


def _steps(records: list[dict]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for r in records:
        if r["kind"] == "step":
            out.setdefault(r["rank"], []).append(r["step"])
    return out


def test_both_jobs_end_as_they_would_without_llmperf(two_jobs: dict) -> None:
    ddp, plain = two_jobs["done"]["ddp"], two_jobs["done"]["plain"]
    assert ddp.returncode == plain.returncode == 0, (ddp.stderr[-2000:], plain.stderr[-2000:])
    assert plain.stdout.count("iter ") == 6 and "done: 6 steps" in plain.stdout  # its own output, whole
    assert "--stop-after 6: the job was stopped cleanly after 6 optimizer steps" in ddp.stderr
    assert "done:" not in ddp.stdout and 1 <= ddp.stdout.count("iter ") <= 6  # stopped before the script's end
    assert "Traceback" not in ddp.stderr + plain.stderr and "llmperf hook" not in ddp.stderr + plain.stderr


def test_two_different_jobs_of_one_allocation_keep_their_own_ids(two_jobs: dict) -> None:
    """The allocation's id names the job (its nodes would share it), but a different command at the same time is
    another job: slurm-99 and slurm-99-2, whichever started first."""
    assert sorted(two_jobs["ids"].values()) == ["slurm-99", "slurm-99-2"]
    assert sorted(p.name for p in (two_jobs["run"] / "jobs").iterdir() if p.is_dir()) == ["slurm-99", "slurm-99-2"]


def test_every_step_of_every_rank_with_the_profile_window_and_the_stop(two_jobs: dict) -> None:
    ddp, plain = two_jobs["records"]["ddp"], two_jobs["records"]["plain"]
    assert _steps(ddp) == {0: [0, 1, 2, 3, 4], 1: [0, 1, 2, 3, 4]} and _steps(plain) == {0: [0, 1, 2, 3]}
    assert {(r["step"], r["profiled"]) for r in ddp if r["kind"] == "step" and r["rank"] == 0} == \
        {(0, False), (1, False), (2, False), (3, True), (4, True)}  # the window follows the 3 timed steps
    assert {r["framework"] for r in ddp + plain if r["kind"] == "step"} == {"torch"}
    ops = [r for r in ddp if r["kind"] == "op"]
    assert {r["rank"] for r in ops} == {0, 1} and any(r["op_class"] == "gemm" for r in ops)
    assert sorted(r["rank"] for r in ddp if r["kind"] == "stop") == [0, 1]
    assert sorted(r["rank"] for r in plain if r["kind"] == "end") == [0]


def test_the_machine_speed_is_read_after_each_ranks_last_recorded_step(two_jobs: dict) -> None:
    """Once per rank, in the end record after its last recorded step, never in the meta record (it was read before
    step 0, in the job's first iteration)."""
    for name, ranks in (("ddp", [0, 1]), ("plain", [0])):
        for rank in ranks:
            mine = [r for r in two_jobs["records"][name] if r["rank"] == rank and r["kind"] != "op"]
            kinds = [r["kind"] for r in mine]
            assert kinds[0] == "meta" and "reference" not in mine[0], (name, kinds)
            assert [k for k in kinds if k not in ("meta", "step")] == (["end", "stop"] if name == "ddp" else ["end"])
            readings = [r for r in mine if "reference" in r]
            assert len(readings) == 1 and readings[0]["kind"] == "end" and readings[0]["reference"]["cpu_s"] > 0


def test_each_session_refined_its_own_job(two_jobs: dict) -> None:
    with sqlite3.connect(two_jobs["home"] / "store.sqlite") as conn:
        runs = dict(conn.execute("SELECT job_id, world_size FROM refine_runs").fetchall())
        ops = conn.execute("SELECT COUNT(*) FROM refine_op_samples WHERE job_id = ?",
                           (two_jobs["ids"]["ddp"],)).fetchone()[0]
    assert runs == {two_jobs["ids"]["ddp"]: 2, two_jobs["ids"]["plain"]: 1} and ops > 0
    for name in ("ddp", "plain"):
        err = two_jobs["done"][name].stderr
        assert f"job {two_jobs['ids'][name]}: torch on cpu" in err and "predicted before:" in err \
            and "predicted after:" in err, err[-2000:]


def test_refine_of_the_run_dir_prints_before_and_after_for_both(two_jobs: dict, tmp_path: Path, capsys,
                                                                 monkeypatch) -> None:
    home = tmp_path / "home"
    shutil.copytree(two_jobs["home"], home)
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    code, out, err = run_cli(["refine", str(two_jobs["run"])], capsys)
    assert code == 0, err
    for name, ranks in (("ddp", "2/2 ranks"), ("plain", "1/1 ranks")):
        block = out.split(f"job {two_jobs['ids'][name]}:")[1].split("\n  job ")[0]
        assert ranks in block and "predicted before:" in block and "predicted after:" in block, block
    assert "op samples:" in out
    code, out, err = run_cli(["refine", "--format", "json"], capsys)  # no RUN_DIR: the latest run, this one
    assert code == 0, err
    report = json.loads(out)
    assert report["run_dir"] == str(two_jobs["run"]) and {j["job_id"] for j in report["jobs"]} == \
        set(two_jobs["ids"].values())


def test_predict_afterwards_says_it_uses_the_calibration(two_jobs: dict, capsys, monkeypatch) -> None:
    """For the hardware the instrumented run was predicted for (this CPU: `run --instrument` chose cpu-local; a
    plain `predict` defaults to the cluster's GPU), as the refine report says."""
    monkeypatch.setenv("LLMPERF_HOME", str(two_jobs["home"]))
    assert "later predictions use it: `llmperf predict --hardware cpu-local --cluster dgx-h100 -- <command>`" in \
        two_jobs["done"]["plain"].stderr
    code, out, err = run_cli(["predict", "--hardware", "cpu-local", "--cluster", "dgx-h100", "--", *PLAIN], capsys)
    assert code == 0, err
    assert "calibrated on this exact configuration" in out + err and "instrumented run(s) of it" in out + err

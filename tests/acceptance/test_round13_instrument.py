"""Acceptance round 13 for issue 6 (`llmperf run --instrument`, `llmperf refine`), played as a user on this CPU.

One real 2-rank DeepSpeed ZeRO-1 job (the issue's Done-when) runs through `llmperf run --instrument 5` into a
--run-dir that already holds another job's records, with the user's own sitecustomize.py and PYTHONPATH; every
check on what it leaves (records, the job's output and exit code, store rows, refine of the whole folder and again,
refine under another cluster, damaged copies of its files, predict after refine) reads that one run. A plain-torch job whose hook raises
runs apart (the hook's fault is injected through its config, as only a test can). ~30 s on a quiet machine.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deepspeed_shm import remove_job_buffers

from tests.acceptance.cli import error_lines, forbid_launch, run_cli

REPO = Path(__file__).resolve().parents[2]
TESTBED = REPO / "examples" / "cpu-testbed"
SHAPE = ["--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "32",
         "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", "4",
         "--vocab-size", "256"]
EARLIER = "20261127T120000Z-4242"
"""The job whose records the --run-dir already holds (same hardware and cluster, another configuration)."""
USER_SITE = "import os\nopen(os.path.join(os.environ['SITE_MARKS'], str(os.getpid())), 'w').close()\n"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ds_command(port: int) -> list[str]:
    return ["deepspeed", "--num_gpus", "2", "--master_port", str(port), str(TESTBED / "train_gpt.py"),
            "--deepspeed_config", str(TESTBED / "ds_zero1.json"), *SHAPE]


def _earlier_job(run: Path) -> None:
    """Another job's files as `llmperf run --instrument` leaves them: rank files, jobs/<id>/prediction.json."""
    run.mkdir(parents=True)
    for rank in (0, 1):
        lines = [{"schema": 1, "kind": "meta", "job_id": EARLIER, "rank": rank, "world_size": 2, "device": "cpu",
                  "framework": "deepspeed"}]
        lines += [{"schema": 1, "kind": "step", "job_id": EARLIER, "rank": rank, "world_size": 2, "step": i,
                   "wall_time_s": t, "cpu_time_s": t, "warmup": i == 0, "profiled": False, "framework": "deepspeed",
                   "device": "cpu", "peak_rss_bytes": 10 ** 8} for i, t in enumerate([0.5, 0.08, 0.08, 0.08])]
        (run / f"rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (run / "jobs" / EARLIER).mkdir(parents=True)
    prediction = {"schema": 1, "step_time_s": 0.04, "cluster": {"name": "dgx-h100", "gpu": "cpu-local"},
                  "config": {"framework": "megatron-deepspeed", "world_size": 2, "num_layers": 4, "hidden_size": 64,
                             "seq_length": 64, "micro_batch_size": 2, "global_batch_size": 4, "zero_stage": 1,
                             "precision": "fp32"}}
    (run / "jobs" / EARLIER / "prediction.json").write_text(json.dumps(prediction))


@pytest.fixture(scope="module")
def ds_job(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("round13-ds")
    user, marks, run = root / "user-site", root / "site-marks", root / "run"
    user.mkdir()
    marks.mkdir()
    (user / "sitecustomize.py").write_text(USER_SITE)
    _earlier_job(run)
    env = {**os.environ, "LLMPERF_HOME": str(root / "home"), "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1",
           "SITE_MARKS": str(marks), "PYTHONPATH": f"{user}{os.pathsep}{REPO}",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    port, started = _free_port(), time.time()
    argv = [sys.executable, "-m", "llmperf_hook", "run", "--instrument", "5", "--run-dir", str(run), "--",
            *_ds_command(port), "--train-iters", "7"]
    try:
        done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=400)
    finally:  # the job's two 69 MB /dev/shm all-reduce buffers (tests/deepspeed_shm.py), left by every run before
        remove_job_buffers([port], started)
    records = [json.loads(line) for path in sorted(run.glob("rank*.jsonl")) for line in path.read_text().splitlines()]
    job_id = json.loads((run / "session.json").read_text())["job_id"]
    return {"root": root, "run": run, "done": done, "home": root / "home", "marks": marks, "port": port,
            "job_id": job_id, "records": [r for r in records if r["job_id"] == job_id]}


def _home_copy(ds_job: dict, tmp_path: Path, monkeypatch) -> Path:
    """A copy of the run's $LLMPERF_HOME for a test that changes the store (the others read the original)."""
    home = tmp_path / "home"
    shutil.copytree(ds_job["home"], home)
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    return home


def _rows(home: Path, sql: str, *args) -> list[tuple]:
    with sqlite3.connect(home / "store.sqlite") as conn:
        return conn.execute(sql, args).fetchall()


def test_every_step_of_both_ranks_is_recorded_with_warmup_and_peak_rss(ds_job: dict) -> None:
    assert ds_job["done"].returncode == 0, ds_job["done"].stderr[-3000:]
    steps = [r for r in ds_job["records"] if r["kind"] == "step"]
    assert sorted((r["rank"], r["step"]) for r in steps) == [(k, s) for k in (0, 1) for s in range(5)]
    assert {r["framework"] for r in steps} == {"deepspeed"} and {r["world_size"] for r in steps} == {2}
    # --instrument 5: two warm-up steps (first-step allocation, then allocator settling), three timed
    assert sorted((r["rank"], r["step"]) for r in steps if r["warmup"]) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(r["peak_rss_bytes"] > 10 ** 7 and r["wall_time_s"] > 0 and r["timer"] == "perf_counter"
               and r["device"] == "cpu" for r in steps)
    kinds = sorted((r["rank"], r["kind"]) for r in ds_job["records"] if r["kind"] != "step")
    assert kinds == [(0, "end"), (0, "meta"), (1, "end"), (1, "meta")]  # no hook error, no stop


def test_the_jobs_output_exit_code_and_own_sitecustomize_are_intact(ds_job: dict) -> None:
    done = ds_job["done"]
    assert [line.split(" |")[0] for line in done.stdout.splitlines() if line.startswith("iter ")] == \
        [f"iter {i}" for i in range(7)]
    assert "done: 7 steps" in done.stdout and "Traceback" not in done.stderr
    assert "llmperf hook" not in done.stderr  # the hook said nothing into the job's output
    # the user's sitecustomize ran in both ranks (the generated one chained to it), through deepspeed's launcher
    pids = {str(r["pid"]) for r in ds_job["records"] if r["kind"] == "meta"}
    assert len(pids) == 2 and pids <= {p.name for p in ds_job["marks"].iterdir()}


def test_store_rows_of_the_job_and_then_of_the_whole_run_dir(ds_job: dict, tmp_path: Path, capsys,
                                                              monkeypatch) -> None:
    """The refine run when the job ended stored its steps (the measured step is the median over timed steps of the
    slowest rank) and left the other job of the run directory alone; `llmperf refine RUN_DIR` takes both, each with
    its own prediction, and refining again counts nothing twice."""
    home, job_id = ds_job["home"], ds_job["job_id"]
    steps = [r for r in ds_job["records"] if r["kind"] == "step" and not r["warmup"]]
    slowest = [max(r["wall_time_s"] for r in steps if r["step"] == s) for s in (2, 3, 4)]
    runs = {j: rest for j, *rest in _rows(home, "SELECT job_id, world_size, num_timed_steps, measured_step_time_s, "
                                                "hardware, cluster, framework FROM refine_runs")}
    assert list(runs) == [job_id] and "predicted after" in ds_job["done"].stderr
    assert runs[job_id][:2] == [2, 3] and runs[job_id][2] == pytest.approx(statistics.median(slowest))
    assert runs[job_id][3:] == ["cpu-local", "dgx-h100", "megatron-deepspeed"]
    assert _rows(home, "SELECT COUNT(*) FROM refine_steps WHERE job_id = ?", job_id) == [(10,)]
    assert _rows(home, "SELECT COUNT(*) FROM step_observations WHERE run_id = ?", job_id) == [(10,)]
    assert _rows(home, "SELECT num_runs, num_configs FROM refine_calibrations") == [(1, 1)]

    home = _home_copy(ds_job, tmp_path, monkeypatch)
    code, out, err = run_cli(["refine", "--format", "json", str(ds_job["run"])], capsys)
    assert code == 0, err
    jobs = {j["job_id"]: j for j in json.loads(out)["jobs"]}
    assert jobs[job_id]["steps_by_rank"] == {"0": [0, 1, 2, 3, 4], "1": [0, 1, 2, 3, 4]}
    assert jobs[EARLIER]["measured_step_time_s"] == pytest.approx(0.08) and jobs[EARLIER]["predicted_before_s"] == 0.04
    tables = ("refine_runs", "refine_steps", "step_observations", "refine_config_scales", "calibrations")
    before = [_rows(home, f"SELECT COUNT(*) FROM {t}") for t in tables]
    scale = _rows(home, "SELECT step_time_scale, num_runs, num_configs FROM refine_calibrations")
    assert before[:3] == [[(2,)], [(18,)], [(18,)]] and scale[0][1:] == (2, 2)
    code, out, err = run_cli(["refine", str(ds_job["run"])], capsys)
    assert code == 0, err
    assert [_rows(home, f"SELECT COUNT(*) FROM {t}") for t in tables] == before
    assert _rows(home, "SELECT step_time_scale, num_runs, num_configs FROM refine_calibrations") == \
        [(pytest.approx(scale[0][0]), 2, 2)]


def test_predict_after_refine_says_it_uses_the_calibration(ds_job: dict, capsys, monkeypatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(ds_job["home"]))
    command = [*_ds_command(ds_job["port"]), "--train-iters", "7"]
    code, out, err = run_cli(["predict", "--hardware", "cpu-local", "--", *command], capsys)
    assert code == 0, err
    assert "calibrated on this exact configuration" in out + err and "1 instrumented run(s) of it" in out + err


def test_refine_under_another_cluster_moves_the_runs(ds_job: dict, tmp_path: Path, capsys, monkeypatch) -> None:
    """The run was predicted for the default dgx-h100; refined for the cluster it really ran on, both jobs go to
    that key, and the dgx-h100 calibration the job's own refine made is removed, not kept counting it."""
    home = _home_copy(ds_job, tmp_path, monkeypatch)
    code, out, err = run_cli(["refine", "--cluster", "dgx-a100", str(ds_job["run"])], capsys)
    assert code == 0, err
    assert _rows(home, "SELECT cluster, num_runs FROM refine_calibrations") == [("dgx-a100", 2)]
    assert _rows(home, "SELECT cluster, num_runs FROM calibrations") == [("dgx-a100", 2)]
    assert "its calibration is removed" in out
    command = [*_ds_command(ds_job["port"]), "--train-iters", "7"]
    for cluster, calibrated in (("dgx-h100", False), ("dgx-a100", True)):
        code, out, err = run_cli(["predict", "--hardware", "cpu-local", "--cluster", cluster, "--", *command], capsys)
        assert code == 0 and ("calibrated on this exact configuration" in out + err) == calibrated, (cluster, out)


def test_refine_of_damaged_copies_of_the_run(ds_job: dict, tmp_path: Path, capsys, monkeypatch) -> None:
    """Garbage and a truncated line are skipped and counted; a missing rank file is named; an empty folder and a
    folder of garbage only exit 2 with one message. Never a traceback."""
    _home_copy(ds_job, tmp_path, monkeypatch)
    run = tmp_path / "run"
    shutil.copytree(ds_job["run"], run)
    rank1 = (run / "rank1.jsonl").read_text()
    (run / "rank1.jsonl").write_text(rank1 + "\x00\x00garbage {not json\n" + rank1.splitlines()[2][:40])
    code, out, err = run_cli(["refine", "--format", "json", str(run)], capsys)
    assert code == 0, err
    job = {j["job_id"]: j for j in json.loads(out)["jobs"]}[ds_job["job_id"]]
    assert job["steps_by_rank"]["1"] == [0, 1, 2, 3, 4] and any("2 unreadable" in n for n in job["notes"])
    (run / "rank1.jsonl").unlink()
    code, out, err = run_cli(["refine", str(run)], capsys)
    assert code == 0 and "ranks [1] recorded no step (of world size 2)" in out, out + err
    for content in (None, "\x00\x01 not a record\n{]\n"):
        folder = tmp_path / f"bad-{content is None}"
        folder.mkdir()
        if content:
            (folder / "rank0.jsonl").write_text(content)
        code, out, err = run_cli(["refine", str(folder)], capsys)
        assert code == 2 and len(error_lines(err)) == 1 and "Traceback" not in err, err


PLAIN_JOB = """\
import sys, torch
torch.set_num_threads(1)
model = torch.nn.Linear(32, 32)
opt = torch.optim.AdamW(model.parameters())
for i in range(6):
    opt.zero_grad()
    model(torch.randn(4, 32)).sum().backward()
    opt.step()
    print("iter", i, flush=True)
print("trained", flush=True)
sys.exit(5)
"""


def test_a_hook_that_raises_leaves_the_job_as_it_was(tmp_path: Path) -> None:
    """The hook fails at the end of step 2 of 4: one line on stderr, an error record, the hook out of the way; the
    job trains on to its end, with its own output and its own exit code."""
    from llmperf_hook.instrument.bootstrap import write_hook_dir
    from llmperf_hook.instrument.config import HookConfig, write_hook_config
    from llmperf_hook.instrument.session import build_child_env

    run = tmp_path / "run"
    hook = write_hook_dir(run / "jobs" / "j" / "hook")
    write_hook_config(HookConfig(run_dir=str(run), job_id="j", num_steps=4, inject_fault_at_step=2), hook)
    env = build_child_env({**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}, hook, run)
    (tmp_path / "job.py").write_text(PLAIN_JOB)
    done = subprocess.run([sys.executable, "job.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 5 and done.stdout.splitlines() == [f"iter {i}" for i in range(6)] + ["trained"]
    assert done.stderr.count("llmperf hook: disabled in rank 0 after an internal error") == 1, done.stderr
    assert "Traceback" not in done.stderr
    records = [json.loads(line) for line in (run / "rank0.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "step"] == [0, 1]
    assert [r["kind"] for r in records].count("error") == 1


@pytest.mark.parametrize(("name", "says"), [("rank0.jsonl", "rank0.jsonl, which is not a file"),
                                            ("jobs", "Not a directory (")])
def test_something_in_the_way_in_the_run_dir_stops_the_launch(name: str, says: str, tmp_path: Path, capsys,
                                                              monkeypatch) -> None:
    """A folder rank0.jsonl in the --run-dir: the hook failed at its first write and recorded nothing, and the session
    then said the job 'recorded no step', as if no optimizer step had run; refused before the launch now. A file
    `jobs` where the jobs/ folder goes was refused with 'Not a directory. Free space there': it now names the path."""
    run = tmp_path / "run"
    run.mkdir()
    (run / name).mkdir() if name.endswith(".jsonl") else (run / name).write_text("my notes\n")
    (tmp_path / "job.py").write_text(PLAIN_JOB)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    forbid_launch(monkeypatch)
    code, _, err = run_cli(["run", "--instrument", "3", "--run-dir", str(run), "--", sys.executable, "job.py"], capsys)
    assert code == 2 and len(error_lines(err)) == 1 and says in err and str(run) in err, err

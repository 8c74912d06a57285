"""Never harm the job: a hook that raises, a broken hook install, and many writers at once."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from instrument_helpers import SMALL_GPT, TRAIN_GPT, make_child_env, read_records

from llmperf_hook.instrument.bootstrap import write_hook_dir
from llmperf_hook.instrument.config import HookConfig, write_hook_config
from llmperf_hook.instrument.jsonl_writer import JsonlWriter
from llmperf_hook.instrument.session import build_child_env


def _start_with_hook(tmp_path: Path, env: dict[str, str], config: HookConfig | str, iters: int) -> subprocess.Popen:
    hook = write_hook_dir(tmp_path / "run" / "hook")
    if isinstance(config, HookConfig):
        write_hook_config(config, hook)
    else:
        (hook / "llmperf_hook_config.json").write_text(config)
    argv = [sys.executable, str(TRAIN_GPT), *SMALL_GPT, "--train-iters", str(iters)]
    return subprocess.Popen(argv, env=build_child_env(env, hook, tmp_path / "run"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _run_with_hook(tmp_path: Path, env: dict[str, str], config: HookConfig | str, iters: int) -> subprocess.CompletedProcess:
    return _finish(_start_with_hook(tmp_path, env, config, iters))


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory) -> subprocess.CompletedProcess:
    """The job of these tests (6 steps) without the hook: what each hooked run must print and exit with."""
    env = make_child_env(tmp_path_factory.mktemp("clean"))
    return subprocess.run([sys.executable, str(TRAIN_GPT), *SMALL_GPT, "--train-iters", "6"], env=env,
                          capture_output=True, text=True, timeout=120)


def test_hook_that_raises_leaves_training_complete(tmp_path: Path, child_env: dict[str, str],
                                                   clean_run: subprocess.CompletedProcess) -> None:
    config = HookConfig(run_dir=str(tmp_path / "run"), job_id="fault", num_steps=5, inject_fault_at_step=1)
    done = _run_with_hook(tmp_path, child_env, config, iters=6)
    assert done.returncode == 0 == clean_run.returncode
    assert done.stdout.count("iter ") == 6 and "done: 6 steps" in done.stdout
    losses = [ln.split("loss ")[1] for ln in done.stdout.splitlines() if "loss" in ln]
    assert losses == [ln.split("loss ")[1] for ln in clean_run.stdout.splitlines() if "loss" in ln]  # same training
    assert done.stderr.count("llmperf hook: disabled") == 1 and "fault injected at step 1" in done.stderr
    records = read_records(tmp_path / "run")
    assert [r["step"] for r in records if r["kind"] == "step"] == [0]
    assert [r["kind"] for r in records][-1] == "error"


def test_unreadable_hook_config_only_warns(tmp_path: Path, child_env: dict[str, str]) -> None:
    done = _run_with_hook(tmp_path, child_env, "{not json", iters=2)
    assert done.returncode == 0 and "done: 2 steps" in done.stdout
    assert "llmperf hook: not installed" in done.stderr
    assert not list((tmp_path / "run").glob("rank*.jsonl"))


def _without_times(stdout: str) -> str:
    return re.sub(r"step_time_s [0-9.]+", "step_time_s T", stdout)


def test_hook_failing_at_install_and_at_exit_leaves_output_and_exit_code(
        tmp_path: Path, child_env: dict[str, str], clean_run: subprocess.CompletedProcess) -> None:
    """At install: a config the hook refuses (num_steps 0). At exit: the records of a job that ended before its N
    steps are written by an atexit callback, here into a run directory that cannot exist (under a file); an
    exception escaping it printed a traceback into the job's stderr. Either way: one line, the job's own output and
    exit code as without the hook. The at-exit job runs one step: its records (meta, step 0) are queued together
    and nothing else before the exit. With more steps, a step ending a second or more after the first record
    (a loaded machine: jsonl_writer's max_age_s) flushed them mid-run, and the hook failed there instead."""
    (tmp_path / "a_file").write_text("not a folder")
    config = HookConfig(run_dir=str(tmp_path / "a_file" / "run"), job_id="j", num_steps=10)
    at_install = _start_with_hook(tmp_path / "a", child_env, json.dumps({"run_dir": str(tmp_path), "job_id": "j",
                                                                         "num_steps": 0}), iters=6)
    at_exit = _start_with_hook(tmp_path / "b", child_env, config, iters=1)  # the two jobs run side by side
    one_step = clean_run.stdout.splitlines()[0] + "\ndone: 1 steps\n"
    for done, said, clean_stdout in ((_finish(at_install), "llmperf hook: not installed", clean_run.stdout),
                                     (_finish(at_exit), "could not write the last records", one_step)):
        assert done.returncode == clean_run.returncode == 0
        assert _without_times(done.stdout) == _without_times(clean_stdout)
        assert done.stderr.count(said) == 1 and "Traceback" not in done.stderr, done.stderr


def test_patch_failing_when_the_framework_is_imported_only_disables_the_hook(tmp_path: Path,
                                                                           child_env: dict[str, str]) -> None:
    """The post-import patch raises (a deepspeed whose engine module has no DeepSpeedEngine, as a renamed class in
    a future release would): the import still succeeds, the job trains to the end with its exit code, the hook
    says once that it is disabled and records nothing more."""
    fake = tmp_path / "fake" / "deepspeed" / "runtime"
    fake.mkdir(parents=True)
    for init in (fake.parent / "__init__.py", fake / "__init__.py"):
        init.write_text("")
    (fake / "engine.py").write_text("ENGINE_LOADED = True\n")
    job = tmp_path / "job.py"
    job.write_text("import runpy, sys\nimport deepspeed.runtime.engine as e\nprint('engine module', e.ENGINE_LOADED)\n"
                   f"sys.argv = [{str(TRAIN_GPT)!r}] + sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n")
    hook = write_hook_dir(tmp_path / "run" / "hook")
    write_hook_config(HookConfig(run_dir=str(tmp_path / "run"), job_id="patch", num_steps=3), hook)
    env = build_child_env(child_env, hook, tmp_path / "run")
    env["PYTHONPATH"] += f"{os.pathsep}{tmp_path / 'fake'}"
    done = subprocess.run([sys.executable, str(job), *SMALL_GPT, "--train-iters", "3"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "engine module True" in done.stdout and "done: 3 steps" in done.stdout
    assert done.stderr.count("llmperf hook: disabled") == 1 and "DeepSpeedEngine" in done.stderr
    assert "Traceback" not in done.stderr
    assert [r["kind"] for r in read_records(tmp_path / "run")] == ["error"]


def _hook_failing_at(point: str, tmp_path: Path, env: dict[str, str]) -> subprocess.Popen:
    """The 6-step job with the hook failing at `point`: its import (a broken llmperf_hook install shadowing this
    checkout), the start of step 0 (marked at the first forward), the opening of the profiler
    window after 3 timed steps, or its first write (the run directory lies under a file)."""
    run = tmp_path / "run"
    config = {"import": HookConfig(run_dir=str(run), job_id="f", num_steps=3),
              "step_begin": HookConfig(run_dir=str(run), job_id="f", num_steps=3, inject_fault_at_step=0,
                                       inject_fault_point="step_begin"),
              "profiler": HookConfig(run_dir=str(run), job_id="f", num_steps=3, profile_ops_steps=2,
                                     inject_fault_at_step=3, inject_fault_point="profiler"),
              "write": HookConfig(run_dir=str(tmp_path / "a_file" / "run"), job_id="f", num_steps=3)}[point]
    (tmp_path / "a_file").write_text("not a folder")
    if point == "import":
        broken = tmp_path / "broken" / "llmperf_hook"
        broken.mkdir(parents=True)
        (broken / "__init__.py").write_text("raise RuntimeError('a half-installed llmperf')\n")
        env = {**env, "PYTHONPATH": f"{broken.parent}{os.pathsep}{env['PYTHONPATH']}"}
    return _start_with_hook(tmp_path, env, config, iters=6)


FAULT_POINTS = ("import", "step_begin", "profiler", "write")  # step end: test_hook_that_raises_leaves_training_complete


@pytest.fixture(scope="module")
def failing_point_jobs(tmp_path_factory) -> Iterator[dict[str, subprocess.Popen]]:
    """The four jobs of the test below, each in a folder and $LLMPERF_HOME of its own, started side by side when the
    first of them is asked for: each is a one-thread child the test only waits on, so run one at a time they left
    the second core of a 2-core machine idle. Each test waits for its own and asserts on it alone."""
    jobs = {}
    for point in FAULT_POINTS:
        folder = tmp_path_factory.mktemp(f"fault-{point}")
        jobs[point] = _hook_failing_at(point, folder, make_child_env(folder))
    yield jobs
    for proc in jobs.values():  # a test that failed before waiting leaves its job running
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_hook_failing_at_each_point_leaves_the_job_as_without_it(
        failing_point_jobs: dict[str, subprocess.Popen], clean_run: subprocess.CompletedProcess, point: str) -> None:
    """Before: failing at the start of step 0 (a timer or memory probe that cannot be made) raised IndexError out
    of the job's first forward, the job died. Wherever the hook fails: the job's own output and exit code as
    without it, and one line from the hook."""
    done = _finish(failing_point_jobs[point])
    assert done.returncode == clean_run.returncode == 0, done.stderr[-3000:]
    assert _without_times(done.stdout) == _without_times(clean_run.stdout) and "done: 6 steps" in done.stdout
    said = [ln for ln in done.stderr.splitlines() if ln.startswith("llmperf hook:")]
    assert len(said) == 1 and "Traceback" not in done.stderr, done.stderr
    assert ("not installed" if point == "import" else "disabled") in said[0], said


@pytest.mark.parametrize("step, point, profile", [(2, "step_begin", 0), (1, "profiler", 2), (3, "profiler", 0)])
def test_a_fault_point_its_step_never_reaches_is_refused(step: int, point: str, profile: int) -> None:
    """Only step 0's start is marked (a later step starts where the previous one ended) and the profiler window
    opens after the num_steps timed steps: a fault placed elsewhere never fired, and its test passed untested."""
    with pytest.raises(AssertionError):
        HookConfig(run_dir="r", job_id="f", num_steps=3, profile_ops_steps=profile, inject_fault_at_step=step,
                   inject_fault_point=point)


def _append_lines(path: str, writer_id: int, count: int) -> None:
    writer = JsonlWriter(path)
    for i in range(count):
        writer.write({"writer": writer_id, "i": i, "pad": "x" * (97 * (i % 7))})
    writer.close()


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "rank0.jsonl")
    procs = [multiprocessing.Process(target=_append_lines, args=(path, w, 300)) for w in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    lines = [json.loads(ln) for ln in Path(path).read_text().splitlines()]
    assert len(lines) == 6 * 300
    for w in range(6):
        assert [x["i"] for x in lines if x["writer"] == w] == list(range(300))


def test_two_jobs_sharing_a_run_dir_keep_their_records(tmp_path: Path, child_env: dict[str, str],
                                                        monkeypatch) -> None:
    from llmperf_hook.refine.refine_run import refine_run

    monkeypatch.setenv("LLMPERF_HOME", child_env["LLMPERF_HOME"])  # the in-process refine below: never ~/.cache

    run_dir = tmp_path / "shared-run"
    procs = []
    for i, seconds in enumerate((0.5, 0.7)):
        call = json.dumps({"argv": [sys.executable, str(TRAIN_GPT), *SMALL_GPT, "--train-iters", "5"],
                           "run_dir": str(run_dir), "steps": 4, "prediction": {"step_time_s": seconds}})
        code = ("import json, os, sys, time\nfrom llmperf_hook.instrument.session import run_instrumented\n"
                f"time.sleep({i} * 1.1)\nkw = json.loads({call!r})\n"
                "sys.exit(run_instrumented(kw.pop('argv'), env=os.environ, **kw))\n")
        procs.append(subprocess.Popen([sys.executable, "-c", code], env=child_env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    records = read_records(run_dir)
    jobs = sorted({r["job_id"] for r in records})
    assert len(jobs) == 2
    for job in jobs:
        assert [r["step"] for r in records if r["kind"] == "step" and r["job_id"] == job] == [0, 1, 2, 3]
    report = refine_run(run_dir, hardware="cpu-x", cluster="local")
    assert sorted(j.predicted_before_s for j in report.jobs) == [0.5, 0.7]


def test_records_after_a_torn_line_are_kept(tmp_path: Path) -> None:
    """A rank killed mid-write leaves a line without its newline; the next job appending to the same rank file
    used to glue its first record (the meta record) onto it, and refine lost both."""
    from llmperf_hook.instrument.jsonl_writer import JsonlWriter
    from llmperf_hook.refine.run_records import read_run_dir

    path = tmp_path / "rank0.jsonl"
    path.write_text('{"kind":"step","job_id":"old","rank":0,"step":0}\n{"kind":"step","job_id":"old","ra')
    writer = JsonlWriter(str(path))
    writer.write({"kind": "meta", "job_id": "new", "rank": 0})
    writer.write({"kind": "step", "job_id": "new", "rank": 0, "step": 0}, flush=True)
    writer.close()
    run = read_run_dir(tmp_path)
    assert [(r["job_id"], r["kind"]) for r in run.records] == [("old", "step"), ("new", "meta"), ("new", "step")]
    assert run.num_bad_lines == 1  # the torn line alone
    writer = JsonlWriter(str(path))  # a file ending in a newline gets no blank line
    writer.write({"kind": "end", "job_id": "new", "rank": 0}, flush=True)
    writer.close()
    assert "\n\n" not in path.read_text() and read_run_dir(tmp_path).num_bad_lines == 1


def test_several_optimizers_per_iteration_make_one_step(tmp_path: Path) -> None:
    """Plain torch with two optimizers stepped per iteration (Muon + AdamW, a GAN) recorded two 'steps' per
    iteration, each half an iteration long; the first optimizer's steps are the job's steps, and when it is
    gone the next one takes over."""
    import gc

    from llmperf_hook.instrument.recorder import StepRecorder

    class Opt:  # stands for a torch.optim.Optimizer (the post-step hook passes the instance)
        pass

    rec = StepRecorder(HookConfig(run_dir=str(tmp_path), job_id="j", num_steps=10, num_warmup_steps=0))
    first, second = Opt(), Opt()
    for _ in range(3):
        rec.torch_optimizer_stepped(first)
        rec.torch_optimizer_stepped(second)
    assert rec._num_steps_done == 3
    del first
    gc.collect()
    third = Opt()
    rec.torch_optimizer_stepped(second)  # the lead is gone: the next optimizer to step leads
    rec.torch_optimizer_stepped(third)
    rec.torch_optimizer_stepped(second)
    assert rec._num_steps_done == 5
    rec.writer.close()

"""Robustness round 6: `llmperf run`, `tune` and `refine` as a user breaks them: a launcher that is not there or
not executable, a --run-dir that cannot be one, SIGINT, tune's JSON when nothing fits and --apply into a folder
it cannot write, and a CPU run refined against a GPU's calibration."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmperf_hook.errors import UsageError

GPT = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
       "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --bf16 "
       "--vocab-size 50257").split()
HUGE = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 96 --hidden-size 12288 --num-attention-heads 96 "
        "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 --bf16 "
        "--vocab-size 50257").split()


def llmperf(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLMPERF_HOME": str(cwd / "home"), **(env or {})}
    return subprocess.run([sys.executable, "-m", "llmperf_hook", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


@pytest.mark.parametrize("instrument", [[], ["--instrument", "2"]])
def test_a_command_that_is_not_there_exits_2_and_leaves_nothing(tmp_path: Path, instrument: list[str]) -> None:
    (tmp_path / "a_dir").mkdir()
    (tmp_path / "not_exec.sh").write_text("echo hi\n")
    for program, says in (("no-such-launcher-xyz", "no such command on PATH"), ("./missing.sh", "no such file"),
                          ("./a_dir", "is a directory"), ("./not_exec.sh", "not executable")):
        out = llmperf("run", *instrument, "--", program, "--flag", cwd=tmp_path)
        assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert f"cannot launch {program!r}" in out.stderr
    assert not (tmp_path / "llmperf-runs").exists()  # no run directory for a job that never started


def test_dry_run_does_not_need_the_launcher(tmp_path: Path) -> None:
    out = llmperf("run", "--dry-run", "--", "no-such-launcher-xyz", "x", cwd=tmp_path)
    assert out.returncode == 0 and "no-such-launcher-xyz x" in out.stdout


def test_gate_verdict_comes_before_the_launcher_check(tmp_path: Path) -> None:
    (tmp_path / "pretrain_gpt.py").write_text("")  # a missing script is refused before the prediction (run_entry.py)
    out = llmperf("run", "--cluster", "dgx-h100", "--require-fit", "--", *HUGE, cwd=tmp_path,
                  env={"PATH": str(tmp_path)})  # no torchrun on this PATH
    assert out.returncode == 3 and "exceeds" in out.stderr


@pytest.mark.parametrize("run_dir, says", [("a_file", "is a file, not a folder"), ("a_file/sub", "is a file"),
                                           ("", "is empty")])
def test_run_dir_that_cannot_be_a_folder_is_refused_before_the_launch(tmp_path: Path, run_dir: str, says: str) -> None:
    (tmp_path / "a_file").write_text("keep")
    marker = tmp_path / "job_ran"
    out = llmperf("run", "--instrument", "1", "--run-dir", run_dir, "--", sys.executable, "-c",
                  f"open({str(marker)!r}, 'w').write('x')", cwd=tmp_path)
    assert out.returncode == 2 and says in out.stderr, out.stderr
    assert not marker.exists() and (tmp_path / "a_file").read_text() == "keep"
    assert "nothing could be predicted" not in out.stderr  # refused before the prediction was even tried


def test_sigint_reaches_the_instrumented_job_and_its_code_is_ours(tmp_path: Path) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text("import signal, sys, time\n"
                      "signal.signal(signal.SIGINT, lambda s, f: (print('job got SIGINT', flush=True), sys.exit(42)))\n"
                      "print('ready', flush=True)\ntime.sleep(60)\n")
    env = {**os.environ, "LLMPERF_HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "llmperf_hook", "run", "--instrument", "1", "--run-dir",
                             str(tmp_path / "run"), "--", sys.executable, str(script)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)  # no terminal: llmperf forwards it to the job
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 42 and "job got SIGINT" in out, err


def test_tune_json_when_nothing_fits_is_one_object_and_exit_3(tmp_path: Path) -> None:
    out = llmperf("tune", "--cluster", "dgx-a100", "--format", "json", "--", *HUGE, cwd=tmp_path)
    assert out.returncode == 3 and "nothing fits" in out.stderr
    doc = json.loads(out.stdout)
    assert doc["exit_code"] == 3 and doc["fits"] is False and doc["error"].startswith("nothing fits")
    assert doc["nearest"]["layout"] in doc["error"] and doc["nearest"]["layers_that_fit"] >= 1


def _ds_job(tmp_path: Path) -> list[str]:
    ds = tmp_path / "cfg" / "ds.json"
    ds.parent.mkdir()
    ds.write_text(json.dumps({"train_batch_size": 256, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": 3}}))
    return ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--deepspeed", "--deepspeed_config", str(ds),
            "--zero-stage", "3", "--no-pipeline-parallel", "--num-layers", "40", "--hidden-size", "5120",
            "--num-attention-heads", "40", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--micro-batch-size", "2", "--global-batch-size", "256", "--bf16", "--checkpoint-activations",
            "--vocab-size", "50257"]


def test_tune_apply_into_a_folder_it_cannot_write_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.commands.tune import command as tune_command
    from llmperf_hook.tune import apply

    def read_only(plan) -> None:
        raise PermissionError(13, "Permission denied", str(tmp_path / "cfg" / "ds.llmperf-tuned.json"))

    monkeypatch.setattr(apply, "write_planned_files", read_only)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    out = CliRunner().invoke(tune_command, ["--cluster", "dgx-a100", "--apply", "--dry-run", "--", *_ds_job(tmp_path)])
    assert isinstance(out.exception, UsageError) and out.exception.exit_code == 2
    assert "Permission denied" in str(out.exception) and "ds.llmperf-tuned.json" in str(out.exception)


def test_tune_apply_without_the_launcher_writes_nothing(tmp_path: Path) -> None:
    out = llmperf("tune", "--cluster", "dgx-a100", "--apply", "--", *_ds_job(tmp_path), cwd=tmp_path,
                  env={"PATH": str(tmp_path)})
    assert out.returncode == 2 and "cannot launch 'deepspeed'" in out.stderr
    assert sorted(p.name for p in (tmp_path / "cfg").iterdir()) == ["ds.json"]


def test_tune_apply_dry_run_twice_never_overwrites(tmp_path: Path) -> None:
    job = _ds_job(tmp_path)
    original = (tmp_path / "cfg" / "ds.json").read_text()
    for _ in range(2):
        assert llmperf("tune", "--cluster", "dgx-a100", "--apply", "--dry-run", "--", *job, cwd=tmp_path).returncode == 0
    names = sorted(p.name for p in (tmp_path / "cfg").iterdir())
    assert names == ["ds.json", "ds.llmperf-tuned.json"]  # the second run finds its identical copy and reuses it
    assert (tmp_path / "cfg" / "ds.json").read_text() == original


def test_cpu_run_never_calibrates_a_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.refine.calibration import find_calibration
    from llmperf_hook.refine.refine_run import hardware_device, refine_run

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "refine"))
    from refine_helpers import PREDICTION, write_run

    gpu_prediction = {**PREDICTION, "cluster": {"name": "dgx-a100", "gpu": "a100-sxm4-80gb"}}
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.02, 0.02]}, prediction=gpu_prediction)
    report = refine_run(run)
    (job,) = report.jobs
    assert job.calibration is None and any("the job ran on the CPU" in n and "a100-sxm4-80gb" in n for n in job.notes)
    assert find_calibration("a100-sxm4-80gb", "dgx-a100", "deepspeed") is None
    assert hardware_device("a100-sxm4-80gb") == "cuda" and hardware_device("no-such-hw") is None
    (tmp_path / "home" / "hardware").mkdir(parents=True)
    (tmp_path / "home" / "hardware" / "my-cpu.yaml").write_text("description: X measured by `llmperf profile --device cpu`\n")
    assert hardware_device("my-cpu") == "cpu"
    cpu_prediction = {**PREDICTION, "cluster": {"name": "local-cpu", "gpu": "my-cpu"}}
    (job,) = refine_run(write_run(tmp_path / "c", "j2", {0: [0.5, 0.02, 0.02]}, prediction=cpu_prediction)).jobs
    assert job.calibration is not None and find_calibration("my-cpu", "local-cpu", "deepspeed") is not None


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0, -1.0, True, "0.01"])
def test_prediction_json_without_a_usable_step_time_calibrates_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       value: object) -> None:
    from llmperf_hook.refine.refine_run import refine_run, uncalibrated_prediction_s

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "refine"))
    from refine_helpers import PREDICTION, write_run

    prediction = {**PREDICTION, "step_time_s": value}
    assert uncalibrated_prediction_s(prediction) == (None, None)
    (job,) = refine_run(write_run(tmp_path / "r", "j1", {0: [0.5, 0.02, 0.02]}, prediction=prediction)).jobs
    assert job.calibration is None and job.predicted_before_s is None
    assert any("no usable prediction" in n for n in job.notes)


def test_refines_at_once_on_one_store_all_succeed(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "refine"))
    from refine_helpers import write_run

    runs = [write_run(tmp_path / f"r{i}", f"j{i}", {0: [0.5, 0.02, 0.021], 1: [0.5, 0.02, 0.022]}) for i in range(4)]
    env = {**os.environ, "LLMPERF_HOME": str(tmp_path / "home")}
    procs = [subprocess.Popen([sys.executable, "-m", "llmperf_hook", "refine", "--format", "json", str(run)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for run in runs]
    results = [(p.communicate(timeout=120), p.returncode) for p in procs]
    assert all(code == 0 for _, code in results), [err for (_, err), _ in results]
    import sqlite3

    with sqlite3.connect(tmp_path / "home" / "store.sqlite") as conn:
        jobs = {row[0] for row in conn.execute("SELECT job_id FROM refine_runs")}
        (num_runs,) = conn.execute("SELECT num_runs FROM calibrations").fetchone()
    assert jobs == {"j0", "j1", "j2", "j3"} and num_runs == 4


def test_tune_search_file_that_is_not_text_exits_2(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_bytes(b"\xff\xfe\x00garbage")
    out = llmperf("tune", "--cluster", "dgx-h100", "--search", str(tmp_path / "space.yaml"), "--", *GPT, cwd=tmp_path)
    assert out.returncode == 2 and "not UTF-8" in out.stderr and "internal error" not in out.stderr


def test_tune_dry_run_without_apply_is_refused_and_ignored_options_are_named(tmp_path: Path) -> None:
    out = llmperf("tune", "--cluster", "dgx-h100", "--dry-run", "--", *GPT, cwd=tmp_path)
    assert out.returncode == 2 and "--dry-run only works with --apply" in out.stderr
    out = llmperf("tune", "--cluster", "dgx-h100", "--model", "no-such-preset", "--top", "1", "--", *GPT, cwd=tmp_path)
    assert out.returncode == 0 and "--model no-such-preset ignored" in out.stderr  # as predict and explain say


@pytest.mark.parametrize("budget", ["0", "-1", "nan", "inf"])
def test_max_step_time_must_be_a_positive_finite_budget(tmp_path: Path, budget: str) -> None:
    out = llmperf("run", "--cluster", "dgx-h100", "--max-step-time", budget, "--dry-run", "--", *GPT, cwd=tmp_path)
    assert out.returncode == 2 and f"--max-step-time {budget}" in out.stderr and "positive, finite" in out.stderr


def test_refine_framework_must_be_one_predictions_look_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.commands.refine import command as refine_command

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "refine"))
    from refine_helpers import write_run

    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.02, 0.02]})
    out = CliRunner().invoke(refine_command, [str(run), "--framework", "Megatron-LM"])
    assert isinstance(out.exception, UsageError) and "'Megatron-LM'" in str(out.exception)
    assert not (tmp_path / "home" / "store.sqlite").exists()
    assert CliRunner().invoke(refine_command, [str(run), "--framework", "megatron"]).exit_code == 0


def test_refine_skips_a_folder_named_like_a_rank_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.refine.refine_run import refine_run

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "refine"))
    from refine_helpers import write_run

    (tmp_path / "empty" / "rank0.jsonl").mkdir(parents=True)
    with pytest.raises(UsageError, match="holds no rank"):
        refine_run(tmp_path / "empty")
    run = write_run(tmp_path / "r", "j1", {0: [0.5, 0.02, 0.02]})
    (run / "rank1.jsonl").mkdir()
    (job,) = refine_run(run).jobs
    assert job.job.step_time_s == pytest.approx(0.02)


def test_leading_assignments_go_into_the_jobs_environment(tmp_path: Path) -> None:
    """`llmperf run -- FOO=1 cmd` runs cmd with FOO=1, as a shell would (execvp of 'FOO=1' failed), e.g.
    LLMPERF_DEEPSPEED_VERSION=0.4.2 before a deepspeed command; a missing program after them is named."""
    out = llmperf("run", "--", "FOO=1", "BAR=two", sys.executable, "-c",
                  "import os; print(os.environ['FOO'], os.environ['BAR'])", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip().endswith("1 two"), out.stderr
    missing = llmperf("run", "--", "FOO=1", "no-such-launcher-xyz", cwd=tmp_path)
    assert missing.returncode == 2 and "cannot launch 'no-such-launcher-xyz'" in missing.stderr

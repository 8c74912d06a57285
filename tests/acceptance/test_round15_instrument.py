"""Acceptance round 15 for issue 6 (`llmperf run --instrument`, `llmperf refine`, and what `tune` says of the same
cost model), played as a user on this CPU: each test is something that broke (or was missing) in the round, checked
the way the user met it. The multi-node bookkeeping of this round (a crashed node session, job-id claims,
`deepspeed --no_ssh`) is tests/instrument/test_session_liveness.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.acceptance.cli import run_cli

REPO = Path(__file__).resolve().parents[2]
GPT_BF16 = ["python", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "512", "--num-attention-heads", "8",
            "--seq-length", "256", "--max-position-embeddings", "256", "--micro-batch-size", "4",
            "--global-batch-size", "4", "--vocab-size", "1024", "--bf16"]


def _cpu_profile(home: Path, name: str) -> None:
    """A CPU operator profile as `llmperf profile --device cpu` leaves it when its framework cost could not be
    measured (no framework_overhead.json: a bf16 reading that did not end in its time box on this AVX2-only host),
    with the measured-peak hardware file beside it; the models are the shipped A100 ones re-labelled."""
    from llmperf_hook.profile.profile_io import meta_sha256
    from llmperf_hook.resources import configs_dir

    folder = home / "profiles" / name
    shutil.copytree(configs_dir() / "profiles" / "a100-sxm4-80gb", folder)
    doc = json.loads((folder / "profile.json").read_text())
    doc.update(name=name, hardware={"device": "AMD EPYC 7B13", "machine": "x86_64", "threads": "1",
                                    "clock": "process_cpu"})
    doc["meta_sha256"] = meta_sha256(doc)
    (folder / "profile.json").write_text(json.dumps(doc))
    (home / "hardware").mkdir(parents=True, exist_ok=True)
    (home / "hardware" / f"{name}.yaml").write_text(
        f"name: {name}\npeak_TFLOPs: {{fp32: 0.08, bf16: 0.08, fp16: 0.001}}\nmemory_bandwidth_GBps: 20.0\n"
        "memory_capacity_GiB: 64.0\ngemm_efficiency: 1.0\nmemory_efficiency: 1.0\n"
        "description: AMD EPYC measured by `llmperf profile --device cpu`\n")


def test_tune_says_what_predict_says_of_its_cost_model(tmp_path: Path, monkeypatch, capsys) -> None:
    """A CPU job tuned on a CPU profile without its framework cost: predict warns that the step is likely predicted
    low and that its MFU is beyond the measured peak; tune ranked the same step times and said neither."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    _cpu_profile(tmp_path, "cpu-x")
    code, predicted, _ = run_cli(["predict", "--hardware", "cpu-x", "--", *GPT_BF16], capsys)
    assert code == 0
    missing = next(line.split("warning: ", 1)[1] for line in predicted.splitlines()
                   if "has no measured framework cost for bf16" in line)
    code, table, tuned = run_cli(["tune", "--hardware", "cpu-x", "--", *GPT_BF16], capsys)
    assert code == 0 and "your command" in table
    notes = [line.removeprefix("llmperf tune: warning: ") for line in tuned.splitlines()]
    assert missing in notes  # word for word as predict says it, once
    mfu = [n for n in notes if "predicted MFU" in n]
    assert len(mfu) == 1 and mfu[0].startswith("your command and ") and "above 100 % of cpu-x's measured peak" in mfu[0]
    predict_mfu = next(line.split("warning: ", 1)[1] for line in predicted.splitlines() if "predicted MFU" in line)
    assert mfu[0].split(": ", 1)[1] == predict_mfu  # your command's row is the highest: predict's words for it


def test_refine_of_a_folder_that_is_no_run_says_so(tmp_path: Path, monkeypatch, capsys) -> None:
    """`llmperf refine ~/notes` (a folder no `llmperf run --instrument` made) was told 'the job recorded no step',
    as if a job had run there."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x\n")
    code, _, err = run_cli(["refine", str(tmp_path / "notes")], capsys)
    assert code == 2 and "it is no run directory" in err and "'records in DIR'" in err and "Traceback" not in err
    (tmp_path / "run" / "jobs" / "j1").mkdir(parents=True)  # a run whose job never took a step: as before
    code, _, err = run_cli(["refine", str(tmp_path / "run")], capsys)
    assert code == 2 and "the job recorded no step" in err


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "rank0.jsonl").read_text().splitlines() if line.strip()] \
        if (run / "rank0.jsonl").is_file() else []


def test_a_killed_session_is_said_ended_and_its_id_claim_released_by_refine(tmp_path: Path, monkeypatch,
                                                                           capsys) -> None:
    """Inside an allocation (SLURM_JOB_ID) the user's `llmperf run --instrument 2` is SIGKILLed (an OOM killer, a
    scancel of the wrong step) after the job recorded its steps; the job itself runs on to its end. The session never
    wrote its end nor refined: `llmperf refine RUN` says its session was killed and counted as ended (before, a
    session without its end record gave no word), and the claim of slurm-4343 under $LLMPERF_HOME/job_ids is removed
    once the store holds the refined run (before, claims were never removed)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    run, home = tmp_path / "run", tmp_path / "home"
    env = {**os.environ, "LLMPERF_HOME": str(home), "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO), "SLURM_JOB_ID": "4343"}
    env.pop("SLURM_STEP_ID", None)
    job = [sys.executable, str(REPO / "examples" / "cpu-testbed" / "train_gpt.py"), "--num-layers", "1",
           "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16", "--max-position-embeddings",
           "16", "--micro-batch-size", "2", "--global-batch-size", "2", "--vocab-size", "128", "--train-iters", "400"]
    session = subprocess.Popen([sys.executable, "-m", "llmperf_hook", "run", "--instrument", "2", "--run-dir",
                                str(run), "--", *job], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    while not any(r.get("kind") == "end" for r in _records(run)) and time.time() < deadline:
        time.sleep(0.2)
    session.send_signal(signal.SIGKILL)
    session.wait()
    child = next(r["pid"] for r in _records(run) if r.get("kind") == "meta")
    while time.time() < deadline:  # the job, orphaned, runs to its own end
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:  # not left running past the test
        os.kill(child, signal.SIGKILL)
        pytest.fail(f"the orphaned job (pid {child}) did not end within 180 s")
    assert (home / "job_ids" / "slurm-4343").is_file()  # claimed at start, never refined
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    code, out, err = run_cli(["refine", str(run)], capsys)
    assert code == 0, err
    assert "job slurm-4343: torch on cpu, 1/1 ranks" in out
    assert f"(pid {session.pid}) ended without recording its end (its process is gone: killed, or crashed)" in out
    assert not (home / "job_ids" / "slurm-4343").exists()

"""Helpers of the instrumentation tests (a uniquely named module: `conftest` names collide across test folders)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
TESTBED = REPO / "examples" / "cpu-testbed"
TRAIN_GPT = TESTBED / "train_gpt.py"
SMALL_GPT = ["--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16",
             "--micro-batch-size", "2", "--vocab-size", "128"]


SHARED_ID_VARIABLES = ("SLURM_JOB_ID", "SLURM_STEP_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "TORCHELASTIC_RUN_ID")
"""What makes the sessions of one launch share a job id (instrument/shared_job.py)."""


def make_child_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a child job: one thread, CPU DeepSpeed, a private LLMPERF_HOME, this checkout importable."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu", LLMPERF_HOME=str(tmp_path / "home"),
               PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for name in SHARED_ID_VARIABLES:  # a test run inside a Slurm job: each test's job keeps an id of its own
        env.pop(name, None)
    return env


def read_records(run_dir: Path) -> list[dict]:
    records = []
    for path in sorted(run_dir.glob("rank*.jsonl")):
        records.extend(json.loads(line) for line in path.read_text().splitlines())
    return records


def steps_by_rank(records: list[dict]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for r in records:
        if r["kind"] == "step":
            out.setdefault(r["rank"], []).append(r["step"])
    return out


def run_session(tmp_path: Path, env: dict[str, str], argv: list[str], stdout_file: Path | None = None,
                **kwargs) -> subprocess.CompletedProcess:
    """run_instrumented in a fresh interpreter (signal handlers and sys.meta_path stay out of pytest's). With
    `stdout_file` the job's output goes to that file (read back into .stdout) instead of a pipe: a line written to a
    pipe wakes its reader, and on a busy machine the job then waits for a core in the middle of its loop."""
    call = {"argv": argv, "run_dir": str(tmp_path / "run"), **kwargs}
    code = ("import json, os, sys\nfrom llmperf_hook.instrument.session import run_instrumented\n"
            f"kw = json.loads({json.dumps(json.dumps(call))})\n"
            "sys.exit(run_instrumented(kw.pop('argv'), env=os.environ, **kw))\n")
    if stdout_file is None:
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240,
                              cwd=str(tmp_path))
    with stdout_file.open("w") as out:
        done = subprocess.run([sys.executable, "-c", code], env=env, stdout=out, stderr=subprocess.PIPE, text=True,
                              timeout=240, cwd=str(tmp_path))
    done.stdout = stdout_file.read_text()
    return done


def free_port() -> int:
    """A TCP port nobody listens on right now (for torchrun / deepspeed --master_port)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

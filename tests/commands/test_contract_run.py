"""Issue 6's `llmperf run --instrument N -- <command>` contract through the real CLI in child processes, beside what
tests/acceptance/test_instrument_acceptance.py checks: the job ends through llmperf exactly as it ends alone (the
same bytes on stdout, its stdin, its exit code, the signal that killed it), a reused or shared --run-dir loses no
record (two jobs started at once), a run directory that cannot be written stops before the launch, and
--profile-ops K maps the profiled kernels onto the graph's op classes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TRAIN_GPT = REPO / "examples" / "cpu-testbed" / "train_gpt.py"

JOB = """\
import os, sys, signal, torch
line = sys.stdin.readline()
sys.stdout.buffer.write(b"bytes \\x00\\xff\\xfe as they are\\r\\n")
print("stdin:", line.strip(), flush=True)
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(4):
    opt.zero_grad()
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
print("err line", file=sys.stderr, flush=True)
sys.stdout.write("no newline at the end")
sys.stdout.flush()
how = sys.argv[1]
if how.startswith("sig"):
    os.kill(os.getpid(), getattr(signal, how.upper()))
sys.exit(int(how))
"""


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "LLMPERF_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}


def _job(tmp_path: Path) -> Path:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    return script


def _run(args: list[str], tmp_path: Path, stdin: bytes = b"hello\n", timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=tmp_path, env=_env(tmp_path), input=stdin, capture_output=True, timeout=timeout_s)


def _run_side_by_side(commands: list[list[str]], tmp_path: Path, stdin: bytes = b"hello\n",
                      timeout_s: float = 120) -> list[subprocess.CompletedProcess]:
    """_run of each command, all started at once: independent jobs (each mostly torch's import) use the machine's
    other cores instead of waiting for one another."""
    procs = [subprocess.Popen(args, cwd=tmp_path, env=_env(tmp_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for args in commands]
    try:
        outs = [proc.communicate(stdin, timeout=timeout_s) for proc in procs]
    finally:  # as subprocess.run does on a timeout: no job is left running
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return [subprocess.CompletedProcess(proc.args, proc.returncode, out, err) for proc, (out, err) in zip(procs, outs)]


def _llmperf(*args: str) -> list[str]:
    return [sys.executable, "-m", "llmperf_hook", *args]


def _steps(run_dir: Path) -> dict[str, list[int]]:
    """Step numbers per job id, from every rank file."""
    out: dict[str, list[int]] = {}
    for path in sorted(run_dir.glob("rank*.jsonl")):
        for record in map(json.loads, path.read_text().splitlines()):
            if record["kind"] == "step":
                out.setdefault(record["job_id"], []).append(record["step"])
    return out


@pytest.mark.parametrize("how", ["0", "sigterm", "sigkill"])
def test_the_job_ends_through_llmperf_as_it_ends_alone(tmp_path: Path, how: str) -> None:
    script = _job(tmp_path)
    run = tmp_path / "run"
    commands = [[sys.executable, str(script), how],
                _llmperf("run", "--instrument", "3", "--run-dir", str(run), "--", sys.executable, str(script), how)]
    if how == "sigterm":
        # `llmperf run -- job` execs the job, so a signal that kills the job kills `llmperf run`; the instrumented
        # path (which waits for the job, then refines) ends the same way.
        commands.append(_llmperf("run", "--", sys.executable, str(script), how))
    alone, through, *plain = _run_side_by_side(commands, tmp_path)
    assert len(plain) == (how == "sigterm")
    assert through.returncode == alone.returncode, through.stderr.decode()[-2000:]
    if how.startswith("sig"):
        assert alone.returncode == -getattr(signal, how.upper())  # killed, not exited: the same through llmperf
    assert through.stdout == alone.stdout  # byte for byte: llmperf writes nothing to the job's stdout
    assert b"stdin: hello" in through.stdout and b"err line" in through.stderr
    assert b"Traceback" not in through.stderr
    assert list(_steps(run).values()) == [[0, 1, 2]]
    (session,) = run.glob("jobs/*/session.json")
    ended = json.loads(session.read_text())
    code = 128 + getattr(signal, how.upper()) if how.startswith("sig") else int(how)
    assert ended["exit_code"] == code  # as a shell reports it
    assert ended["signal"] == (getattr(signal, how.upper()) if how.startswith("sig") else None)
    for exec_path in plain:
        assert exec_path.returncode == through.returncode == -signal.SIGTERM and exec_path.stdout == through.stdout


def test_a_reused_run_dir_keeps_the_earlier_jobs_records(tmp_path: Path) -> None:
    script = _job(tmp_path)
    run = tmp_path / "run"
    for _ in range(2):
        done = _run(_llmperf("run", "--instrument", "3", "--run-dir", str(run), "--", sys.executable, str(script), "0"),
                    tmp_path)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
    steps = _steps(run)
    assert len(steps) == 2 and all(s == [0, 1, 2] for s in steps.values())
    refine = _run(_llmperf("refine", "--format", "json", str(run)), tmp_path)
    assert refine.returncode == 0 and len(json.loads(refine.stdout)["jobs"]) == 2, refine.stderr.decode()


def test_two_jobs_started_at_once_into_one_run_dir_lose_nothing(tmp_path: Path) -> None:
    script = _job(tmp_path)
    run = tmp_path / "run"
    args = _llmperf("run", "--instrument", "4", "--run-dir", str(run), "--", sys.executable, str(script), "0")
    procs = [subprocess.Popen(args, cwd=tmp_path, env=_env(tmp_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(2)]
    results = [p.communicate(b"x\n", timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err.decode()[-1500:] for _, err in results]
    steps = _steps(run)
    assert len(steps) == 2 and all(s == [0, 1, 2, 3] for s in steps.values()), steps
    for path in run.glob("rank*.jsonl"):  # every line whole: no interleaved writes
        assert all(isinstance(json.loads(line), dict) for line in path.read_text().splitlines())
    assert len(list(run.glob("jobs/*/session.json"))) == 2


@pytest.mark.parametrize("where", ["/proc/llmperf-run-dir", "read-only"])
def test_a_run_dir_that_cannot_be_written_stops_before_the_launch(tmp_path: Path, where: str) -> None:
    if where == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        (tmp_path / "ro").mkdir()
        (tmp_path / "ro").chmod(0o500)
        where = str(tmp_path / "ro" / "run")
    marker = tmp_path / "job-ran"
    done = _run(_llmperf("run", "--instrument", "2", "--run-dir", where, "--", sys.executable, "-c",
                         f"open({str(marker)!r}, 'w').close()"), tmp_path)
    err = done.stderr.decode()
    assert done.returncode == 2 and not marker.exists(), err
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert len(lines) == 1 and where in lines[0] and "Traceback" not in err


def test_profile_ops_maps_kernels_onto_op_classes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = _run(_llmperf("run", "--instrument", "2", "--profile-ops", "2", "--run-dir", str(run), "--",
                         sys.executable, str(TRAIN_GPT), "--num-layers", "1", "--hidden-size", "64",
                         "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
                         "--micro-batch-size", "2", "--vocab-size", "256", "--train-iters", "5"), tmp_path)
    assert done.returncode == 0 and b"done: 5 steps" in done.stdout, done.stderr.decode()[-2000:]
    records = [json.loads(ln) for p in run.glob("rank*.jsonl") for ln in p.read_text().splitlines()]
    steps = [(r["step"], r["profiled"]) for r in records if r["kind"] == "step"]
    assert steps == [(0, False), (1, False), (2, True), (3, True)]
    ops = {(r["op_class"], r["phase"]): r for r in records if r["kind"] == "op"}
    assert {("gemm", "fwd"), ("gemm", "bwd"), ("attention", "fwd"), ("layernorm", "fwd"), ("embedding", "fwd"),
            ("cross_entropy", "fwd"), ("optimizer", "step")} <= set(ops), sorted(ops)
    assert ops[("gemm", "fwd")]["dims"]["k"] in (64, 256) and ops[("gemm", "fwd")]["seconds"] > 0
    assert b"op samples: " in done.stderr  # refine ingested them when the job ended

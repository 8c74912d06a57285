"""Issue 6 (`llmperf run --instrument`, `llmperf refine`) through the real CLI on a plain torch script (no
DeepSpeed: a few seconds a job): the job's output and exit code intact (also a failing job), the user's
PYTHONPATH and sitecustomize still working, every step recorded with its warm-up marked, --stop-after ending
the job cleanly, refine ingesting the run again from its folder, and the option misuse errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .cli import error_lines, forbid_launch, run_child, run_cli

JOB = """\
import os, sys, torch, usermod
print("SITE", os.environ.get("USER_SITECUSTOMIZE"), usermod.VALUE, flush=True)
model = torch.nn.Linear(16, 16)
opt = torch.optim.Adam(model.parameters())
for _ in range(int(sys.argv[1])):
    opt.zero_grad()
    model(torch.randn(4, 16)).sum().backward()
    opt.step()
print("DONE", flush=True)
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[2]))
"""


def _job_dir(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    user = tmp_path / "user-site"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\n")
    (user / "usermod.py").write_text("VALUE = 42\n")
    (tmp_path / "job.py").write_text(JOB)
    repo = str(Path(__file__).resolve().parents[2])
    env = {"LLMPERF_HOME": str(tmp_path / "home"), "PYTHONPATH": f"{user}{os.pathsep}{repo}"}
    return tmp_path, env


def _steps(run_dir: Path) -> list[dict]:
    lines = (run_dir / "rank0.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "step"]


def test_failing_job_keeps_its_exit_code_output_and_user_site(tmp_path: Path, capsys, monkeypatch) -> None:
    cwd, env = _job_dir(tmp_path)
    run = cwd / "runs" / "a"
    proc = run_child(["run", "--instrument", "4", "--run-dir", str(run), "--", "python", "job.py", "6", "3"], cwd, env)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.splitlines()[-2:] == ["SITE ran 42", "DONE"]
    assert "to stderr" in proc.stderr and "llmperf refine:" in proc.stderr and "Traceback" not in proc.stderr
    steps = _steps(run)
    assert [s["step"] for s in steps] == [0, 1, 2, 3]
    assert steps[0]["warmup"] and not steps[-1]["warmup"]
    assert all(s["wall_time_s"] > 0 and s["peak_rss_bytes"] > 0 and s["timer"] == "perf_counter" for s in steps)
    monkeypatch.setenv("LLMPERF_HOME", env["LLMPERF_HOME"])
    code, out, err = run_cli(["refine", "--format", "json", str(run)], capsys)
    assert code == 0, err
    job = json.loads(out)["jobs"][0]
    assert job["steps_by_rank"] == {"0": [0, 1, 2, 3]} and job["measured_step_time_s"] > 0


def test_stop_after_ends_the_job_cleanly(tmp_path: Path) -> None:
    cwd, env = _job_dir(tmp_path)
    run = cwd / "runs" / "b"
    proc = run_child(["run", "--instrument", "2", "--stop-after", "3", "--run-dir", str(run), "--",
                      "python", "job.py", "10", "5"], cwd, env)
    assert proc.returncode == 0, proc.stderr
    assert "SITE ran 42" in proc.stdout and "DONE" not in proc.stdout
    assert "--stop-after 3" in proc.stderr
    assert [s["step"] for s in _steps(run)] == [0, 1]


@pytest.mark.parametrize(("args", "says"), [
    (["--profile-ops", "2"], "--profile-ops"),
    (["--stop-after", "2"], "--stop-after"),
    (["--run-dir", "r"], "--run-dir"),
    (["--instrument", "0"], "--instrument 0"),
    (["--instrument", "2", "--stop-after", "0"], "--stop-after 0"),
])
def test_instrument_option_misuse_exits_2_before_launch(tmp_path: Path, capsys, monkeypatch, args, says) -> None:
    """In this process (the CLI exits before any launch): a launch, by exec or by a child process, fails the test."""
    (tmp_path / "job.py").write_text("open('ran', 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    forbid_launch(monkeypatch)
    code, _, err = run_cli(["run", *args, "--", "python", "job.py"], capsys)
    assert code == 2 and not (tmp_path / "ran").exists(), err
    lines = error_lines(err)
    assert len(lines) == 1 and says in lines[0], err
    assert not (tmp_path / "r").exists() and not (tmp_path / "llmperf-runs").exists()


def test_refine_of_a_folder_without_records_exits_2(tmp_path: Path, capsys) -> None:
    code, _, err = run_cli(["refine", str(tmp_path / "missing")], capsys)
    assert code == 2 and "does not exist" in err
    code, _, err = run_cli(["refine", str(tmp_path)], capsys)
    assert code == 2 and "no rank*.jsonl records" in err

"""`llmperf run`: gates, dry run, exec with the child's exit code passed through (real torchrun job)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmperf_hook.hardware.load import load_hardware

GPT = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
       "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --bf16 "
       "--vocab-size 50257").split()
HUGE = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 96 --hidden-size 12288 --num-attention-heads 96 "
        "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 8 --bf16 "
        "--vocab-size 50257").split()


def llmperf(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmperf_hook", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_dry_run_prints_command_and_stops() -> None:
    out = llmperf("run", "--cluster", "dgx-h100", "--dry-run", "--", *GPT)
    assert out.returncode == 0, out.stderr
    assert "would exec" in out.stdout and "pretrain_gpt.py --num-layers 4" in out.stdout
    js = llmperf("run", "--cluster", "dgx-h100", "--dry-run", "--format", "json", "--", *GPT)
    lines = js.stdout.strip().splitlines()
    assert json.loads(lines[-1])["command"] == GPT and json.loads(lines[0])["schema"] == 1


def test_gates_exit_3() -> None:
    fit = llmperf("run", "--cluster", "dgx-h100", "--dry-run", "--require-fit", "--", *HUGE)
    capacity_gib = load_hardware("h100-sxm5-80gb").memory_capacity_bytes / 2**30  # the preset: what torch reports
    assert fit.returncode == 3 and f"exceeds the {capacity_gib:.2f} GiB" in fit.stderr
    slow = llmperf("run", "--cluster", "dgx-h100", "--max-step-time", "0.000001", "--dry-run", "--", *GPT)
    assert slow.returncode == 3 and "--max-step-time" in slow.stderr


def test_framework_rejection_exits_2_and_gate_without_prediction_exits_2(tmp_path: Path) -> None:
    bad = GPT[:]
    bad[bad.index("--num-attention-heads") + 1] = "15"
    out = llmperf("run", "--", *bad)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    script = tmp_path / "plain.py"
    script.write_text("print('plain')\n")
    gated = llmperf("run", "--require-fit", "--", sys.executable, str(script))
    assert gated.returncode == 2 and "need a prediction" in gated.stderr


def test_exec_passes_the_exit_code_of_an_unpredictable_command(tmp_path: Path) -> None:
    script = tmp_path / "exit7.py"
    script.write_text("import sys\nprint('child ran')\nsys.exit(7)\n")
    out = llmperf("run", "--", sys.executable, str(script))
    assert out.returncode == 7 and "child ran" in out.stdout and "nothing could be predicted" in out.stderr


def test_real_torchrun_job_through_prefix_form(tmp_path: Path) -> None:
    """A tiny real torchrun job (plain torch on CPU) launched as `llmperf torchrun ...`. The three launches run at
    once (each mostly torch's import), each on its own --master-port: a second torchrun on the default port would
    fail, and its failure could pass for the child's exit code."""
    import os
    import socket

    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun not installed")
    script = tmp_path / "job.py"
    script.write_text("import os, sys\nimport torch\nprint('rank', os.environ['RANK'], torch.ones(2).sum().item())\n"
                      "sys.exit(int(os.environ.get('CHILD_EXIT', '0')))\n")
    sockets = [socket.socket() for _ in range(3)]
    for sock in sockets:  # three free ports, distinct: all bound at once, then released for torchrun
        sock.bind(("127.0.0.1", 0))
    ports = [str(sock.getsockname()[1]) for sock in sockets]
    for sock in sockets:
        sock.close()
    llmperf_torchrun = [sys.executable, "-m", "llmperf_hook", "torchrun"]
    launches = [(llmperf_torchrun, "0"), ([str(torchrun)], "7"), (llmperf_torchrun, "7")]
    procs = [subprocess.Popen([*head, "--master-port", port, "--nproc-per-node", "1", str(script)], cwd=tmp_path,
                              env={**os.environ, "CHILD_EXIT": code}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for (head, code), port in zip(launches, ports)]
    done = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:  # a launch that timed out is not left running
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    env_ok, direct, through = done
    assert env_ok.returncode == 0, env_ok.stderr
    # the child ran in each (a torchrun that failed to start, e.g. on a taken port, also exits 1: not the child's code)
    assert all("rank 0 2.0" in launch.stdout for launch in done), [launch.stderr[-2000:] for launch in done]
    assert direct.returncode != 0 and through.returncode == direct.returncode  # torchrun's own code for a failed child


def test_instrument_branch_passes_the_exit_code(tmp_path: Path) -> None:
    pytest.importorskip("llmperf_hook.instrument.session")
    script = tmp_path / "exit3.py"
    script.write_text("import sys\nprint('instrumented child')\nsys.exit(3)\n")
    out = llmperf("run", "--instrument", "1", "--run-dir", str(tmp_path / "run"), "--", sys.executable, str(script))
    assert out.returncode == 3 and "instrumented child" in out.stdout

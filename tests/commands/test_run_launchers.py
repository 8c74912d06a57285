"""launchers/torchrun and launchers/deepspeed shims send launches through `llmperf run`; the sbatch template
gates before srun."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIMS = ROOT / "launchers"


def _env(**extra: str) -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{SHIMS}:{bindir}:{os.environ.get('PATH', '')}", **extra}


def test_torchrun_shim_dry_run_points_at_the_real_launcher() -> None:
    if not (Path(sys.executable).parent / "torchrun").exists():
        pytest.skip("torchrun not installed next to python")
    cmd = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "512",
           "--num-attention-heads", "8", "--seq-length", "512", "--max-position-embeddings", "512",
           "--micro-batch-size", "1", "--global-batch-size", "8", "--vocab-size", "1000"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=_env(LLMPERF_RUN_ARGS="--dry-run --cluster dgx-h100"),
                         timeout=120)
    assert out.returncode == 0, out.stderr
    real = str(Path(sys.executable).parent / "torchrun")
    assert f"{real} --nproc-per-node 8 pretrain_gpt.py" in out.stdout and "step time" in out.stdout


def test_shim_exec_passes_exit_code_and_bypass(tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake = fake_bin / "deepspeed"
    fake.write_text("#!/usr/bin/env bash\necho real deepspeed \"$@\"\nexit 5\n")
    fake.chmod(0o755)
    env = _env()
    env["PATH"] = f"{SHIMS}:{fake_bin}:{Path(sys.executable).parent}:/usr/bin:/bin"
    out = subprocess.run(["deepspeed", "train.py", "--foo"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 5 and "real deepspeed train.py --foo" in out.stdout
    assert "nothing could be predicted" in out.stderr  # it went through llmperf run
    bypass = subprocess.run(["deepspeed", "x"], capture_output=True, text=True, env={**env, "LLMPERF_SHIM_BYPASS": "1"},
                            timeout=60)
    assert bypass.returncode == 5 and "nothing could be predicted" not in bypass.stderr


def test_sbatch_template_gates_before_srun() -> None:
    lines = (SHIMS / "slurm" / "train.sbatch").read_text().splitlines()
    gate = next(i for i, line in enumerate(lines) if line.startswith("llmperf run") and "--dry-run" in line)
    launch = next(i for i, line in enumerate(lines) if line.startswith("srun "))
    assert gate < launch
    assert subprocess.run(["bash", "-n", str(SHIMS / "slurm" / "train.sbatch")]).returncode == 0

"""Helpers for the acceptance tests: the real `llmperf` CLI in this process (commands that do not exec) or in a
child process (commands that launch a job), and the jobs these tests tune, profile and instrument."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MEGATRON_16 = [
    "torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "32",
    "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "4096", "--max-position-embeddings",
    "4096", "--micro-batch-size", "1", "--global-batch-size", "512", "--tensor-model-parallel-size", "4",
    "--pipeline-model-parallel-size", "2", "--bf16", "--vocab-size", "32000",
]
"""A Llama-2-7B-like Megatron-LM job on two DGX nodes whose own layout is far from the fastest."""

GPT3_ON_8 = [
    "torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "96", "--hidden-size", "12288",
    "--num-attention-heads", "96", "--seq-length", "2048", "--max-position-embeddings", "2048",
    "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--vocab-size", "50257",
    "--tensor-model-parallel-size", "8",
]
"""GPT-3 175B on one 8-GPU node: nothing fits."""


def forbid_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A launch, by exec or by a child process, fails the test (for commands that must exit before launching)."""

    def launched(*args, **kwargs):
        raise AssertionError(f"the job was launched: {args[:2]}")

    monkeypatch.setattr(os, "execvpe", launched)
    monkeypatch.setattr(subprocess, "Popen", launched)


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """`llmperf ARGS` in this process: (exit code, stdout, stderr)."""
    from llmperf_hook.cli import main

    with pytest.raises(SystemExit) as ex:
        main(args)
    out, err = capsys.readouterr()
    return int(ex.value.code or 0), out, err


def run_child(args: list[str], cwd: Path, env: dict[str, str] | None = None,
              timeout_s: float = 120) -> subprocess.CompletedProcess:
    """`python -m llmperf_hook ARGS` as a child process (for commands that exec the job)."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "llmperf_hook", *args], cwd=cwd, env=full_env, text=True,
                          capture_output=True, timeout=timeout_s)


def error_lines(err: str) -> list[str]:
    """The `llmperf: error:` lines of stderr (a one-paragraph error is exactly one)."""
    return [ln for ln in err.splitlines() if "error" in ln.lower()]

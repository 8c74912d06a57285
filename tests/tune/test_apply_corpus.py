"""Issue 7's --apply criteria on a corpus of launch commands (tests/tune/apply_corpus.py): Megatron-LM (dense, MoE
with EP, interleaved, CP, FP8, Slurm, sbatch --wrap, bash -c), Megatron-DeepSpeed (ZeRO 0-3, pipeline engine,
--hostfile, --include), DeepSpeed scripts (every two of DeepSpeed's batch triad, offload, release 0.5.4), the Hugging
Face Trainer and accelerate: tune --apply --dry-run exits as expected, never 1; the applied command is one explain
accepts with tune's layout; DeepSpeed's DeepSpeedConfig reads a written ds_config as tuned; the user's files are
byte-identical; exit 3 names the largest model that would fit."""

from __future__ import annotations

from pathlib import Path

import pytest

from .apply_corpus import CASES, check_case
from .helpers import run_cli


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_apply_then_explain(case, deepspeed_config, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no accelerate default_config.yaml of this machine
    for key, value in case.env.items():
        monkeypatch.setenv(key, value)
    assert check_case(case, tmp_path, lambda args: run_cli(args, capsys), deepspeed_config) == []


def test_the_corpus_is_varied() -> None:
    assert len(CASES) >= 40 and len({c.name for c in CASES}) == len(CASES)

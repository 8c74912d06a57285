"""--step-batch-size-schedule with --global-batch-size: Megatron-LM's validate_args raises 'Cannot specify both'
(core_v0.18.0 on, the releases with the schedule); Megatron-LM's own examples/gpt3/train_gpt3_175b_distributed.sh
gives both, run as its README says (`bash ... CKPT TB VOCAB MERGES DATA`), but its unquoted ${TRAINING_ARGS[@]} splits
the schedule into words first, which Megatron's parse_args refuses before validate_args runs. Through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.launch.cli_run import llmperf
from tests.launch.test_bash_arrays import GPT3_EXAMPLE

GPT = ["torchrun", "--nproc_per_node", "8", "pretrain_gpt.py", "--num-layers", "8", "--hidden-size", "1024",
       "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
       "--micro-batch-size", "1", "--bf16", "--vocab-size", "50257", "--tokenizer-type", "NullTokenizer"]


def test_both_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    out = llmperf(capsys, "explain", "--", *GPT, "--step-batch-size-schedule", "0:16 2.4B:320", "--global-batch-size",
                  "320")
    assert out.code == 2 and "Cannot specify both --step-batch-size-schedule and --global-batch-size" in out.err


def test_the_schedule_alone_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    out = llmperf(capsys, "explain", "--format", "json", "--", *GPT, "--step-batch-size-schedule", "0:16 2.4B:320")
    assert out.code == 0, out.err


def test_megatron_lms_gpt3_example_as_its_readme_runs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.sh").write_text(GPT3_EXAMPLE)
    monkeypatch.chdir(tmp_path)
    out = llmperf(capsys, "explain", "--", "bash", "train.sh", "ckpt", "tb", "vocab.json", "merges.txt", "data")
    assert out.code == 2 and "unrecognized arguments" in out.err and "'2.4B:320', '4.8B:624'" in out.err, out.err

"""The Hugging Face Trainer's --fsdp_config without --fsdp: TrainingArguments never loads it (transformers
training_args.py _process_fsdp_args returns at `if not self.fsdp`), so FSDP and its activation checkpointing are off.
predict prices plain DDP without recompute, and tune searches --gradient_checkpointing on and off (it kept the
config's checkpointing on before, as if FSDP ran); under --fsdp the config's checkpointing is on and priced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.cli import run_cli

TRAINER = ["torchrun", "--nproc-per-node", "8", "train.py", "--model_name_or_path", "meta-llama/Llama-2-7b-hf",
           "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4", "--bf16", "--output_dir", "out",
           "--fsdp_config", "fsdp.json"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / ".llmperf"))
    (tmp_path / "train.py").write_text("from transformers import Trainer, TrainingArguments\n")
    (tmp_path / "fsdp.json").write_text('{"activation_checkpointing": true}')
    return tmp_path


def test_predict_prices_what_runs(home: Path, capsys) -> None:
    code, out, err = run_cli(["predict", "--format", "json", "--cluster", "dgx-h100", "--model", "llama2-7b", "--",
                              *TRAINER], capsys)
    assert code == 0, err
    assert json.loads(out)["config"]["recompute"] == "none"


def test_tune_searches_the_trainer_switch(home: Path, capsys) -> None:
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--model", "llama2-7b", "--top", "3",
                              "--", *TRAINER], capsys)
    assert code == 3, err  # 7B under plain DDP fits no 80 GB GPU, checkpointing or not: the knobs are still reported
    data = json.loads(out)
    assert "activation_checkpointing" not in err, err
    assert set(data["knobs"]["searched"]["recompute"]) == {"none", "full"}, data["knobs"]
    with_fsdp = [*TRAINER, "--fsdp", "full_shard auto_wrap"]  # under --fsdp: the config's key is searched
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--model", "llama2-7b", "--top", "3",
                              "--", *with_fsdp], capsys)
    assert code == 0, err
    assert json.loads(out)["baseline"]["recompute"] == "full"  # FSDP's checkpointing, read from the config

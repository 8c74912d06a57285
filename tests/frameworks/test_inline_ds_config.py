"""A ds_config given in place of its path (DeepSpeedConfig: a dict, an existing path, else urlsafe-base64 JSON) is
read the same way for every framework that takes --deepspeed_config; Megatron-DeepSpeed exited 2 'DeepSpeed config
/cwd/<base64> does not exist'."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from llmperf_hook.frameworks.deepspeed_config import encode_inline_ds_config, inline_ds_config_form, read_ds_config
from llmperf_hook.frameworks.resolve import resolve_job

RAW = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1},
       "bf16": {"enabled": True}}
B64 = base64.urlsafe_b64encode(json.dumps(RAW).encode()).decode()


def test_megatron_deepspeed_reads_a_base64_config(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048",
            "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--micro-batch-size", "2", "--global-batch-size", "64", "--bf16", "--deepspeed", "--deepspeed_config", B64,
            "--zero-stage", "1"]
    _, cfg = resolve_job(argv, {})
    assert (cfg.framework, cfg.optimizer.zero_stage, cfg.batch.micro_batch_size) == ("megatron-deepspeed", 1, 2)
    assert B64 in str(cfg.sources["zero_stage"])


def test_the_form_of_a_config_word(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    text = json.dumps(RAW)
    assert inline_ds_config_form(B64) == "base64" and inline_ds_config_form("ds.json") is None
    assert inline_ds_config_form(text) is None  # DeepSpeed does not json.loads a string
    assert inline_ds_config_form(text, hf_trainer=True) == "json"  # accelerate's HfDeepSpeedConfig does
    (tmp_path / B64).write_text(json.dumps({"train_batch_size": 8}))
    assert inline_ds_config_form(B64) is None  # an existing file of that name wins, as in DeepSpeedConfig
    for form in ("base64", "json"):
        word = encode_inline_ds_config(RAW, form)
        assert read_ds_config(word, hf_trainer=form == "json") == RAW

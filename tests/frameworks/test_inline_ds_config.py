"""A ds_config given in place of its path (DeepSpeedConfig: a dict, an existing path, else urlsafe-base64 JSON) is
read as DeepSpeedConfig reads it wherever DeepSpeed is the first to read it; Megatron-DeepSpeed's pretrain() opens the
word as a file and json.load-s it first (since 2021-10), so there it exits 2 naming that reader."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError, UsageError
from llmperf_hook.frameworks.deepspeed_config import encode_inline_ds_config, inline_ds_config_form, read_ds_config
from llmperf_hook.frameworks.resolve import resolve_job

RAW = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1},
       "bf16": {"enabled": True}}
B64 = base64.urlsafe_b64encode(json.dumps(RAW).encode()).decode()


def test_megatron_deepspeed_refuses_a_base64_config(tmp_path: Path, monkeypatch) -> None:
    """Megatron-DeepSpeed's pretrain() opens --deepspeed_config as a file and json.load-s it (megatron/training.py
    _create_ds_config_dict at HEAD of microsoft/ and deepspeedai/; a json.load in pretrain() since 2021-10) before
    DeepSpeed, which would decode base64, sees it: the job stops (FileNotFoundError). It was read as DeepSpeed reads
    it (exit 0); the same config in a file is read."""
    monkeypatch.chdir(tmp_path)
    argv = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048",
            "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--micro-batch-size", "2", "--global-batch-size", "64", "--bf16", "--deepspeed", "--deepspeed_config", B64,
            "--zero-stage", "1"]
    with pytest.raises(ConfigError, match="Megatron-DeepSpeed cannot read --deepspeed_config .*base64 JSON.*"
                                          "_create_ds_config_dict"):
        resolve_job(argv, {})
    (tmp_path / "ds.json").write_text(json.dumps(RAW))
    _, cfg = resolve_job([str(tmp_path / "ds.json") if word == B64 else word for word in argv], {})
    assert (cfg.framework, cfg.optimizer.zero_stage, cfg.batch.micro_batch_size) == ("megatron-deepspeed", 1, 2)


@pytest.mark.parametrize("text", ['{"train_batch_size": 64, // a comment\n "train_micro_batch_size_per_gpu": 2}',
                                  '{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,}'])
def test_megatron_deepspeed_reads_plain_json_only(text: str, tmp_path: Path, monkeypatch) -> None:
    """Its json.load refuses the comments and trailing commas DeepSpeed's hjson reader accepts; the message names the
    program that refuses (plain deepspeed with a non-Megatron script reads them, test_deepspeed_config.py)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(text)
    with pytest.raises(ConfigError, match="Megatron-DeepSpeed cannot read DeepSpeed config .*json.load"):
        resolve_job(["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "256",
                     "--num-attention-heads", "4", "--seq-length", "128", "--max-position-embeddings", "128",
                     "--micro-batch-size", "2", "--vocab-size", "1000", "--deepspeed", "--deepspeed_config",
                     "ds.json"], {})


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


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


def test_a_base64_hjson_object_without_braces_is_read_as_deepspeed_reads_it(tmp_path: Path, monkeypatch) -> None:
    """DeepSpeedConfig hjson.loads the decoded text, which takes a top-level object without braces (checked with
    DeepSpeed 0.19.8: DeepSpeedConfig(<base64 of 'train_batch_size: 8 ...'>).train_batch_size == 8); it exited 2
    'does not exist'. accelerate's json.loads (the Trainer's --deepspeed) refuses it, so that stays refused."""
    monkeypatch.chdir(tmp_path)
    word = _b64("train_batch_size: 8\ntrain_micro_batch_size_per_gpu: 8")
    assert read_ds_config(word) == {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8}
    assert inline_ds_config_form(word) == "base64" and inline_ds_config_form(word, hf_trainer=True) is None
    with pytest.raises(UsageError, match="does not exist"):
        read_ds_config(word, hf_trainer=True)


def test_a_key_given_twice_is_refused_only_where_deepspeed_reads_the_file(tmp_path: Path, monkeypatch) -> None:
    """DeepSpeedConfig refuses duplicate keys in a file (hjson.load with dict_raise_error_on_duplicate_keys) but its
    base64 reader (hjson.loads) keeps the last value, as accelerate's json.load / json.loads do for the Trainer's
    --deepspeed file or string (the engine then gets a dict); those exited 2 'gives the key(s) ... twice'."""
    monkeypatch.chdir(tmp_path)
    text = '{"train_batch_size": 4, "train_batch_size": 8}'
    (tmp_path / "ds.json").write_text(text)
    with pytest.raises(ConfigError, match="train_batch_size twice"):
        read_ds_config("ds.json")
    for word, hf_trainer in ((_b64(text), False), (_b64(text), True), (text, True), ("ds.json", True)):
        assert read_ds_config(word, hf_trainer) == {"train_batch_size": 8}


def test_a_template_placeholder_left_in_the_config_is_named(tmp_path: Path, monkeypatch) -> None:
    """Megatron-DeepSpeed's examples_deepspeed/MoE/*_MoS.sh sed chains leave `"stage": ZERO_STAGE` in the ds_config
    (their template has it, their sed does not replace it): its json.load stops there, and the message names the word
    rather than blaming comments."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text('{"train_batch_size": 64,\n "zero_optimization": {"stage": ZERO_STAGE}}')
    with pytest.raises(ConfigError, match="refuses the bare word ZERO_STAGE where a value goes .*replace it"):
        resolve_job(["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "256",
                     "--num-attention-heads", "4", "--seq-length", "128", "--max-position-embeddings", "128",
                     "--micro-batch-size", "2", "--vocab-size", "1000", "--deepspeed", "--deepspeed_config",
                     "ds.json"], {})

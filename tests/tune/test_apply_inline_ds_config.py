"""A ds_config given in argv itself (DeepSpeedConfig base64-decodes a word that is not a file; the Trainer's
--deepspeed also takes a JSON string): tune read it as a path under the working directory and exited 2 'DeepSpeed
config /cwd/<base64> does not exist'. --apply now writes the tuned config back in the same form, in place (the
command stays self-contained, and no file is written), and the table lists the changed keys, not two base64 words."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job
from llmperf_hook.tune import ds_config_rewrite as dsr
from llmperf_hook.tune.apply import plan_tuned_command
from llmperf_hook.tune.candidate import apply_candidate, candidate_of
from llmperf_hook.tune.render import INLINE_WHERE

from .helpers import run_cli

RAW = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1},
       "bf16": {"enabled": True}}
B64 = base64.urlsafe_b64encode(json.dumps(RAW).encode()).decode()
MDS = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048",
       "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
       "--micro-batch-size", "2", "--global-batch-size", "64", "--bf16", "--deepspeed", "--deepspeed_config", B64,
       "--zero-stage", "1"]


def _decoded(word: str) -> dict:
    return json.loads(base64.urlsafe_b64decode(word))


def _ds_config_word(argv) -> str:
    return argv[list(argv).index("--deepspeed_config") + 1]


def test_megatron_deepspeed_refuses_a_base64_config_before_tuning(tmp_path: Path, monkeypatch) -> None:
    """Megatron-DeepSpeed's pretrain() opens --deepspeed_config as a file and json.load-s it (megatron/training.py
    _create_ds_config_dict, since 2023-10): a base64 word stops the job, so there is nothing to tune (exit 2)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="Megatron-DeepSpeed cannot read --deepspeed_config"):
        resolve_job(MDS, {})


def test_deepspeed_accepts_the_rewritten_word(monkeypatch) -> None:
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", B64]
    _, cfg = resolve_job(argv, {}, JobOverrides(model="llama2-7b"))
    new = replace(candidate_of(cfg), micro_batch_size=1, zero_stage=3)
    plan = plan_tuned_command(argv, cfg, new, apply_candidate(cfg, new))
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    deepspeed_config = pytest.importorskip("deepspeed.runtime.config")
    monkeypatch.setattr(deepspeed_config.dist, "get_rank", lambda *a, **k: 0)

    class Mpu:
        def get_data_parallel_world_size(self) -> int:
            return 8

    ds = deepspeed_config.DeepSpeedConfig(_ds_config_word(plan.argv), mpu=Mpu())
    assert (ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps, ds.zero_optimization_stage) == (1, 8, 3)


def test_tune_apply_with_a_base64_config_writes_no_file(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", B64]
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama3-8b", "--format", "json", "--apply",
                              "--dry-run", "--", *argv], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert not list(tmp_path.iterdir()) and data["applied"]["new_files"] == []
    best = data["top"][0]
    assert best["changes"] and all(c["where"] == INLINE_WHERE for c in best["changes"])
    code, eout, eerr = run_cli(["explain", "--format", "json", "--model", "llama3-8b", "--", *data["applied"]["argv"]],
                               capsys)
    assert code == 0, eerr
    resolved = json.loads(eout)
    assert (resolved["micro_batch_size"], resolved["zero_stage"], resolved["global_batch_size"]) == (
        best["micro_batch_size"], best["zero_stage"], 64)


def test_a_trainer_json_string_config_stays_a_json_string(capsys) -> None:
    text = json.dumps({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                       "zero_optimization": {"stage": 1}, "bf16": {"enabled": "auto"}})
    argv = ["deepspeed", "--num_gpus", "8", "run_clm.py", "--model_name_or_path", "x", "--block_size", "1024",
            "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4", "--deepspeed", text, "--bf16"]
    _, cfg = resolve_job(argv, {}, JobOverrides(model="llama2-7b"))
    new = replace(candidate_of(cfg), micro_batch_size=4, zero_stage=3)
    plan = plan_tuned_command(argv, cfg, new, apply_candidate(cfg, new))
    word = plan.argv[list(plan.argv).index("--deepspeed") + 1]
    assert json.loads(word)["zero_optimization"]["stage"] == 3 and not plan.new_files
    _, again = resolve_job(list(plan.argv), {}, JobOverrides(model="llama2-7b"))
    assert (again.batch.micro_batch_size, again.batch.num_microbatches, again.optimizer.zero_stage) == (4, 2, 3)


def test_zero_stages_are_checked_for_an_inline_config() -> None:
    partial = {**RAW, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}
    word = base64.urlsafe_b64encode(json.dumps(partial).encode()).decode()
    # DeepSpeed takes a partial optimizer offload (ratio < 1) at ZeRO-3 only (was None: 'no readable ds_config').
    assert dsr.zero_stages_deepspeed_accepts(["train.py", "--deepspeed_config", word], (0, 1, 2, 3)) == (3,)
    # The Trainer's --deepspeed also takes a JSON string (read as explain reads it): it was None, so tune kept ZeRO
    # stages DeepSpeed refuses for it.
    assert dsr.zero_stages_deepspeed_accepts(["run_clm.py", "--deepspeed", json.dumps(partial)], (0, 1, 2, 3)) == (3,)

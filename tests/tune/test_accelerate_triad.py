"""The tuned copy of an accelerate DeepSpeed config file states a batch triad that runs the user's global batch.

accelerate's DeepSpeedPlugin sets gradient_accumulation_steps to 1 where the file has none, and its Accelerator fills
only "auto" values (accelerate/utils/dataclasses.py DeepSpeedPlugin.__post_init__, accelerator.py
_prepare_deepspeed): a copy with a tuned micro-batch and no accumulation ran micro x 1 x DP, not the global batch
tune held, and the Trainer's tuned --gradient_accumulation_steps mismatched the plugin's 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.tune.accelerate_apply import tuned_plugin_config
from llmperf_hook.tune.candidate import Candidate

from .apply_corpus import HF
from .helpers import run_cli

NEW = Candidate(tp=1, pp=1, vpp=1, cp=1, sequence_parallel=False, micro_batch_size=2, recompute="none",
                recompute_num_layers=None, distributed_optimizer=False, zero_stage=3)
ZERO2 = {"zero_optimization": {"stage": 2}}


@pytest.mark.parametrize("user", [
    {"train_micro_batch_size_per_gpu": 8},  # the plugin's accumulation 1: batch 8 x 1 x 8 GPUs = 64
    {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1},
    {"train_micro_batch_size_per_gpu": 8, "train_batch_size": 64},
])
def test_a_numeric_micro_batch_gets_the_whole_triad(user: dict) -> None:
    copy = tuned_plugin_config({**user, **ZERO2}, NEW, num_microbatches=4, global_batch=64, set_zero=True)
    assert (copy["train_batch_size"], copy["train_micro_batch_size_per_gpu"], copy["gradient_accumulation_steps"]) \
        == (64, 2, 4)
    assert copy["train_batch_size"] == copy["train_micro_batch_size_per_gpu"] * copy["gradient_accumulation_steps"] * 8


def test_auto_values_stay_for_the_trainer_to_fill() -> None:
    """"auto" micro-batch: the Trainer fills the triad from its rewritten flags (HfTrainerDeepSpeedConfig)."""
    user = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", **ZERO2}
    copy = tuned_plugin_config(user, NEW, num_microbatches=4, global_batch=64, set_zero=True)
    assert copy["train_micro_batch_size_per_gpu"] == "auto" and copy["gradient_accumulation_steps"] == "auto"


def test_applied_accelerate_job_runs_the_held_global_batch(tmp_path: Path, capsys, monkeypatch) -> None:
    """accelerate launch --deepspeed_config_file ds.json, whose micro-batch 8 is a number and which has no accumulation
    (the plugin's 1: 8 x 1 x 8 = 64): the copy states micro x accumulation x 8 = 64, and the Trainer's flags agree."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": "auto"},
                                                  **ZERO2}))
    (tmp_path / "space.yaml").write_text("micro_batch_size: [1, 2]\n")
    argv = ["accelerate", "launch", "--use_deepspeed", "--num_processes", "8", "--deepspeed_config_file", "ds.json",
            "run_clm.py", "--per_device_train_batch_size", "8", *HF]
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama2-7b", "--search", "space.yaml",
                              "--format", "json", "--apply", "--dry-run", "--", *argv], capsys)
    assert code == 0, err
    data = json.loads(out)
    (path,) = data["applied"]["new_files"]
    copy = json.loads(Path(path).read_text())
    micro, gas = copy["train_micro_batch_size_per_gpu"], copy["gradient_accumulation_steps"]
    assert copy["train_batch_size"] == micro * gas * 8 == 64 and micro == data["top"][0]["micro_batch_size"]
    applied = data["applied"]["argv"]
    trainer = dict(zip(applied, applied[1:]))  # each word -> the next: the Trainer flags come last
    assert int(trainer["--per_device_train_batch_size"]) == micro and int(trainer["--gradient_accumulation_steps"]) == gas
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama2-7b", "--", *applied], capsys)
    assert code == 0, err
    assert json.loads(out)["global_batch_size"] == 64

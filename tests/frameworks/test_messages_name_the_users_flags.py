"""A refusal names the framework that refuses and the user's own flag or key (H213; R87: the Trainer's batch mismatch
was worded as DeepSpeed's _batch_assertion, Megatron-DeepSpeed's expert-parallel sizes as Megatron's parallel_state)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.acceptance.test_round17_frameworks import _explain

MDS = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--micro-batch-size", "8", "--global-batch-size", "64",
       "--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "1024",
       "--max-position-embeddings", "1024", "--fp16", "--deepspeed", "--deepspeed_config", "ds.json"]
MDS_CONFIG = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8, "fp16": {"enabled": True}}


def test_trainer_train_batch_size_mismatch_is_the_trainers(tmp_path: Path, capsys, monkeypatch) -> None:
    """transformers trainer_config_process: fill_match("train_batch_size", world x per_device_train_batch_size x
    gradient_accumulation_steps, "train_batch_size (calculated)") refuses at deepspeed_init, before DeepSpeed's own
    _batch_assertion could."""
    config = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
              "zero_optimization": {"stage": 2}}
    command = ["deepspeed", "--num_gpus", "8", "run_clm.py", "--model_name_or_path", "gpt2", "--do_train",
               "--output_dir", "out", "--per_device_train_batch_size", "4", "--deepspeed", "ds.json"]
    code, _, err = _explain(tmp_path, config, command, capsys, monkeypatch)
    assert code == 2
    assert "train_batch_size (calculated) 32 = world size 8 x --per_device_train_batch_size 4" in err, err
    assert "_batch_assertion" not in err


@pytest.mark.parametrize(("flags", "says"), [
    (["--moe-expert-parallel-size", "64", "--num-experts", "128"], "deepspeed/utils/groups.py"),
    (["--ep-size", "8", "--num-experts", "12"], "deepspeed/moe/layer.py"),
    (["--tensor-model-parallel-size", "2", "--moe-expert-parallel-size", "8", "--num-experts", "16"], None)])
def test_megatron_deepspeed_expert_parallel_sizes_follow_deepspeeds_groups(flags: list[str], says: str | None,
                                                                        tmp_path: Path, capsys, monkeypatch) -> None:
    """Megatron-DeepSpeed's MoE is DeepSpeed's: its expert groups split each stage's ranks ((world / PP) % EP, groups.py
    _create_expert_and_data_parallel) and experts % EP (moe/layer.py); TP 2 x EP 8 on 8 ranks starts (Megatron's
    world % (ETP x EP x PP), which refused it, is not this framework's)."""
    (tmp_path / "pretrain_gpt.py").write_text("")
    code, _, err = _explain(tmp_path, MDS_CONFIG, [*MDS, *flags], capsys, monkeypatch, model="")
    assert code == (2 if says else 0), err
    if says:
        assert says in err and flags[-4] in err and "parallel_state" not in err and "Megatron requires" not in err, err

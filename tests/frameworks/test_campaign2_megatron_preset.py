"""A Megatron-style script whose shape comes from llmperf --model (no --num-layers/--hidden-size) is still
Megatron: its --tensor-model-parallel-size, --pipeline-model-parallel-size, EP and batch flags count. It was
taken for a plain torch script, every parallel flag ignored (TP1 PP1 DP32, global batch 32 instead of 256)."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import script

LAYOUT_ONLY = ["torchrun", "--nnodes", "4", "--nproc-per-node", "8", "pretrain_gpt.py", "--micro-batch-size", "1",
               "--global-batch-size", "256", "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "4",
               "--expert-model-parallel-size", "8", "--expert-tensor-parallel-size", "1", "--sequence-parallel", "--bf16", "--seq-length", "4096"]


def test_layout_flags_with_a_model_preset_are_megatron():
    cfg = script(LAYOUT_ONLY, model="mixtral-8x7b")
    assert cfg.framework == "megatron"
    assert (cfg.parallel.tp, cfg.parallel.pp, cfg.parallel.ep, cfg.parallel.dp) == (2, 4, 8, 4)
    assert cfg.batch.global_batch_size == 256 and cfg.model.num_experts == 8
    assert cfg.model.padded_vocab_size % (128 * 2) == 0  # Megatron pads to make-vocab-size-divisible-by * TP
    assert "--model mixtral-8x7b" in str(cfg.sources["num_layers"])


def test_virtual_stages_and_expert_rule_use_the_preset_counts():
    cfg = script([*LAYOUT_ONLY, "--num-layers-per-virtual-pipeline-stage", "2"], model="mixtral-8x7b")
    assert cfg.parallel.vpp == 4  # 32 layers / PP 4 / 2
    with pytest.raises(ConfigError, match="expert-model-parallel-size 3"):
        script([*LAYOUT_ONLY, "--expert-model-parallel-size", "3"], model="mixtral-8x7b")


def test_without_a_preset_megatron_asks_for_its_shape_flags():
    with pytest.raises(ConfigError, match="--num-layers"):
        script(LAYOUT_ONLY)


def test_a_hugging_face_script_with_a_tp_flag_stays_hugging_face(tmp_path):
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}')
    cfg = script(["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed", str(tmp_path / "ds.json"),
                  "--tensor-model-parallel-size", "2", "--max_seq_length", "1024"], model="llama2-7b")
    assert cfg.framework == "hf-deepspeed"


def test_an_entry_point_with_only_batch_flags_and_a_preset_is_megatron():
    # Megatron's own pretrain_gpt.py with no layout flag: its --micro-batch-size / --global-batch-size were dropped
    # (read as a plain torch script: micro-batch 1, global batch 8) until the batch flags counted for entry points.
    cfg = script(["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--micro-batch-size", "4",
                  "--global-batch-size", "64", "--bf16"], model="llama3-8b")
    assert cfg.framework == "megatron"
    assert (cfg.batch.micro_batch_size, cfg.batch.global_batch_size) == (4, 64)


def test_a_users_train_script_with_megatron_batch_flags_is_not_taken_for_megatron():
    cfg = script(["torchrun", "--nproc-per-node", "8", "train.py", "--micro-batch-size", "4"], model="llama3-8b")
    assert cfg.framework != "megatron"

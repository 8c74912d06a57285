"""Megatron-DeepSpeed splits the learned position table over the TP ranks under --sequence-parallel
(SequenceParallelPositionEmbedding, language_model.py); Megatron-LM keeps it whole on every rank. At 256k positions
and h 6144 the table is 1.6 B parameters: whole on each of 32 ranks, Megatron-DeepSpeed's long-sequence GPT-30B
example would not fit the 40 GB A100s it ran on."""

from __future__ import annotations

import json

import pytest

from llmperf_hook.graph.params import embedding_params
from tests.frameworks.helpers import megatron

SHAPE = ["--num-layers", "2", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "8192",
         "--max-position-embeddings", "8192", "--vocab-size", "50257", "--micro-batch-size", "1",
         "--global-batch-size", "1", "--tensor-model-parallel-size", "8", "--fp16"]


@pytest.fixture(scope="module")
def ds_args(tmp_path_factory) -> list[str]:
    ds_config = tmp_path_factory.mktemp("ds") / "ds_config.json"
    ds_config.write_text(json.dumps({"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1,
                                     "fp16": {"enabled": True}, "zero_optimization": {"stage": 0}}))
    return ["--deepspeed", "--deepspeed_config", str(ds_config), "--zero-stage", "0", "--no-pipeline-parallel"]


def _positions(cfg) -> int:
    m = cfg.model
    return embedding_params(cfg) - m.padded_vocab_size // cfg.parallel.tp * m.hidden_size


def test_megatron_deepspeed_splits_positions_under_sequence_parallel(ds_args):
    cfg = megatron("--sequence-parallel", *ds_args, base=SHAPE)
    assert cfg.framework == "megatron-deepspeed"
    assert _positions(cfg) == 8192 * 1024 // 8


def test_whole_table_without_sequence_parallel_or_under_megatron_lm(ds_args):
    assert _positions(megatron(*ds_args, base=SHAPE)) == 8192 * 1024
    lm = megatron("--sequence-parallel", base=SHAPE)
    assert lm.framework == "megatron"
    assert _positions(lm) == 8192 * 1024

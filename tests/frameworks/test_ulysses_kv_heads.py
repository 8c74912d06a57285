"""DeepSpeed-Ulysses and the key/value heads of grouped-query attention.

- DeepSpeed's UlyssesSPAttentionHF (deepspeed/runtime/sequence_parallel/ulysses_sp.py) raises 'KV attention head
  count K is not divisible by SP size S or vice versa' unless K % S == 0 or S % K == 0 (it replicates fewer kv heads).
- Megatron-DeepSpeed's ParallelAttention.forward asserts projection_size == kv_projection_size when Ulysses
  (--ds-sequence-parallel-size > 1) is on (megatron/model/transformer.py): no grouped-query attention with it.
Both were accepted by explain (exit 0) and failed at start-up / the first step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job

# 48 query heads, 8 key/value heads: SP 3, 6 and 12 divide the heads but neither divide nor are multiples of 8.
SHAPE = {"name": "gqa-48-8", "num_layers": 8, "hidden_size": 6144, "ffn_hidden_size": 16384,
         "num_attention_heads": 48, "num_query_groups": 8, "kv_channels": 128, "seq_length": 8192,
         "vocab_size": 32000}


def _hf_ulysses(tmp_path: Path, sp: int, world: int = 24):
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": world // sp, "train_micro_batch_size_per_gpu": 1,
                                                  "bf16": {"enabled": True}, "zero_optimization": {"stage": 3},
                                                  "sequence_parallel_size": sp}))
    (tmp_path / "model.yaml").write_text(json.dumps(SHAPE))
    argv = ["deepspeed", "--num_gpus", str(world), "train.py", "--deepspeed_config", str(tmp_path / "ds.json")]
    return resolve_job(argv, {}, JobOverrides(model=str(tmp_path / "model.yaml")))[1]


@pytest.mark.parametrize("sp", [3, 6, 12])
def test_deepspeed_ulysses_refuses_kv_heads_it_cannot_split_or_replicate(sp: int, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"8 key/value heads.*KV attention head count 8 is not divisible by SP size {sp}"):
        _hf_ulysses(tmp_path, sp)


@pytest.mark.parametrize("sp", [2, 4, 8, 16])
def test_deepspeed_ulysses_splits_or_replicates_the_others(sp: int, tmp_path: Path) -> None:
    assert _hf_ulysses(tmp_path, sp, world=48).parallel.cp == sp


MDS = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "8", "--hidden-size", "4096",
       "--num-attention-heads", "32", "--seq-length", "8192", "--max-position-embeddings", "8192", "--vocab-size",
       "32000", "--micro-batch-size", "1", "--global-batch-size", "16", "--bf16", "--deepspeed", "--deepspeed_config",
       "ds.json", "--zero-stage", "1", "--ds-sequence-parallel-size", "4"]


@pytest.mark.parametrize("kv_heads, refused", [("8", True), ("32", False)])
def test_megatron_deepspeed_ulysses_refuses_grouped_query_attention(kv_heads: str, refused: bool, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1,
                                                  "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}))
    argv = [*MDS, "--num-key-value-heads", kv_heads]
    if refused:
        with pytest.raises(ConfigError, match="grouped-query attention.*projection_size == kv_projection_size"):
            resolve_job(argv, {})
    else:
        assert resolve_job(argv, {})[1].parallel.cp == 4

"""Megatron-LM forks whose public launch scripts llmperf refused: bigcode-project/Megatron-LM (StarCoder/SantaCoder:
--attention-head-type multiquery, --tokenizer-file) and epfLLM/Megatron-LLM (finetune.py, underscore option names,
the shape from the checkpoint with --use_checkpoint_args)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job

SANTACODER = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2048 --num-attention-heads 16 "
              "--attention-head-type multiquery --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 2 "
              "--global-batch-size 192 --fp16 --fim-rate 0.5 --tokenizer-type TokenizerFromFileWithFIM").split()
EPFL = ("torchrun --nproc_per_node 8 finetune.py --tensor_model_parallel_size 8 --pipeline_model_parallel_size 1 "
        "--load /ckpt/llama2-7b --model_name llama2 --tokenizer_type SentencePieceTokenizer --bf16 --global_batch_size 12 "
        "--micro_batch_size 1 --use_rms_norm --glu_activation swiglu --no_tie_embed_logits --seq_length 4096 "
        "--max_position_embeddings 4096 --position_embedding_type rotary --use_checkpoint_args --sequence_parallel "
        "--metrics perplexity accuracy").split()


def test_multiquery_attention_is_one_key_value_group_and_tokenizer_json_sizes_the_vocabulary(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {f"t{i}": i for i in range(49152)}}}))
    _, cfg = resolve_job([*SANTACODER, "--tokenizer-file", str(tmp_path / "tokenizer.json")], {})
    assert (cfg.model.num_query_groups, cfg.model.vocab_size, cfg.parallel.dp) == (1, 49152, 8)


def test_a_missing_tokenizer_file_is_named() -> None:
    with pytest.raises(ConfigError, match="TokenizerFromFileWithFIM with --tokenizer-file /nowhere/tokenizer.json"):
        resolve_job([*SANTACODER, "--tokenizer-file", "/nowhere/tokenizer.json"], {})


def test_megatron_llm_reads_its_underscore_options_and_asks_for_the_checkpoints_shape() -> None:
    with pytest.raises(ConfigError, match="with --use_checkpoint_args Megatron takes the model shape from the "
                                          "checkpoint's saved arguments in --load /ckpt/llama2-7b"):
        resolve_job(EPFL, {})
    _, cfg = resolve_job(EPFL, {}, JobOverrides(model="llama2-7b"))
    assert (cfg.parallel.tp, cfg.parallel.dp, cfg.batch.global_batch_size, cfg.model.seq_length) == (8, 1, 12, 4096)
    assert not any("defines no such option" in w for w in cfg.warnings)


def test_megatron_llm_options_need_its_model_name() -> None:
    argv = [w for w in EPFL if w not in ("--model_name", "llama2")]
    with pytest.raises(ConfigError, match="does not know --use_rms_norm"):
        resolve_job(argv, {}, JobOverrides(model="llama2-7b"))

"""The bigscience Megatron-DeepSpeed fork's `--tokenizer-type PretrainedFromHF` takes its tokenizer from
--tokenizer-name-or-path (BLOOM's and bigscience's train/tr10-13B-ml scripts): a local tokenizer folder there is
sized, and a refusal names that flag, not --tokenizer-model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import megatron

ARGS = ["--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "128",
        "--max-position-embeddings", "128", "--micro-batch-size", "1", "--tokenizer-type", "PretrainedFromHF"]


def test_a_local_tokenizer_folder_is_sized(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {f"t{i}": i for i in range(300)}},
                                                         "added_tokens": []}))
    (tmp_path / "tokenizer_config.json").write_text("{}")
    cfg = megatron("--tokenizer-name-or-path", str(tmp_path), base=ARGS)
    assert (cfg.model.vocab_size, cfg.model.padded_vocab_size) == (300, 384)


def test_a_hub_name_is_refused_naming_the_flag() -> None:
    with pytest.raises(ConfigError, match=r"--tokenizer-name-or-path teven/test_150k_vocab_tokenizer .*--vocab-size"):
        megatron("--tokenizer-name-or-path", "teven/test_150k_vocab_tokenizer", base=ARGS)

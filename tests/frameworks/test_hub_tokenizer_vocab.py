"""Megatron's HuggingFaceTokenizer sizes its vocabulary from the Hub (len(tokenizer)); well-known repositories are
sized by name (frameworks/vocab.py HUB_TOKENIZER_VOCAB), others still ask for --vocab-size."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.vocab import resolve_vocab_size
from llmperf_hook.provenance import Source, SourceKind

NONE = Source(SourceKind.DEFAULT, "")


@pytest.mark.parametrize("repo, size", [("meta-llama/Meta-Llama-3-70B", 128256), ("meta-llama/Llama-3.1-8B", 128256),
                                        ("meta-llama/Llama-2-7b-hf", 32000), ("mistralai/Mixtral-8x7B-v0.1", 32000),
                                        ("gpt2", 50257)])
def test_known_hub_tokenizers_are_sized_by_name(repo: str, size: int) -> None:
    got, source = resolve_vocab_size(None, NONE, "HuggingFaceTokenizer", repo)
    assert got == size and repo in str(source)


def test_an_unknown_hub_tokenizer_still_asks_for_the_size() -> None:
    with pytest.raises(ConfigError, match="--vocab-size"):
        resolve_vocab_size(None, NONE, "HuggingFaceTokenizer", "someone/some-model")
    assert resolve_vocab_size(1000, NONE, "HuggingFaceTokenizer", "meta-llama/Llama-2-7b-hf")[0] == 1000  # given wins

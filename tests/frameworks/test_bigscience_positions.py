"""The bigscience Megatron-DeepSpeed fork's --position-embedding-type values (PositionEmbeddingType: rotary,
absolute, alibi; BLOOM trains with alibi) are accepted and read as rope / learned / no position table."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import BASE, megatron

NO_POSITIONS = [w for k, w in enumerate(BASE) if "--max-position-embeddings" not in BASE[max(k - 1, 0):k + 1]]
"""BASE without --max-position-embeddings: the fork asserts it is None with rotary (megatron/arguments.py parse_args)."""


def _fork(value: str):  # type: ignore[no-untyped-def]
    return megatron("--position-embedding-type", value, base=NO_POSITIONS if value == "rotary" else None)


@pytest.mark.parametrize("value, expected", [("alibi", "none"), ("rotary", "rope"), ("absolute", "learned_absolute"),
                                             ("rope", "rope"), ("learned_absolute", "learned_absolute")])
def test_fork_position_types(value: str, expected: str) -> None:
    cfg = _fork(value)
    assert cfg.model.position_embedding == expected


@pytest.mark.parametrize("value", ["alibi", "rotary", "absolute"])
def test_fork_position_types_do_not_warn(value: str) -> None:
    assert not any("position" in w for w in _fork(value).warnings)


def test_rotary_takes_no_max_position_embeddings() -> None:
    """bigscience train/tr4-1B3-rotary: the fork asserts max_position_embeddings is None with rotary, and its scripts
    give none; llmperf asked for one ('Megatron requires --max-position-embeddings', exit 2). Given one, the fork's
    assert fires: exit 2 naming it."""
    assert _fork("rotary").model.position_embedding == "rope"
    with pytest.raises(ConfigError, match="asserts max_position_embeddings is None"):
        megatron("--position-embedding-type", "rotary")
    with pytest.raises(ConfigError, match="requires --max-position-embeddings"):
        megatron("--position-embedding-type", "rope", base=NO_POSITIONS)
    with pytest.raises(ConfigError, match="requires --max-position-embeddings"):  # epfLLM/Megatron-LLM's spelling
        megatron("--position_embedding_type", "rotary", base=NO_POSITIONS)


def _bloom(*extra: str, tp: str = "4") -> list[str]:
    return ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "1024",
            "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--micro-batch-size", "1", "--tensor-model-parallel-size", tp, "--tokenizer-type", "PretrainedFromHF",
            "--tokenizer-name-or-path", "bigscience/tokenizer", *extra]


def test_pad_vocab_size_to_fixes_the_padded_vocabulary() -> None:
    # bigscience fork tokenizer.py _vocab_size_with_padding: after = pad_vocab_size_to; the Hub tokenizer need not be sized
    from llmperf_hook.frameworks.resolve import resolve_job

    cfg = resolve_job(_bloom("--pad-vocab-size-to", "250880"), {})[1]
    assert (cfg.model.vocab_size, cfg.model.padded_vocab_size) == (250880, 250880)
    assert "--pad-vocab-size-to" in str(cfg.sources["padded_vocab_size"])
    sized = resolve_job(_gpt2_bloom("--pad-vocab-size-to", "51200"), {})[1]
    assert (sized.model.vocab_size, sized.model.padded_vocab_size) == (50257, 51200)


def _gpt2_bloom(*extra: str, tp: str = "4") -> list[str]:
    """The fork with GPT-2's BPE (50257 tokens), known by --embed-layernorm: it has no --vocab-size (no branch does)."""
    words = _bloom(*extra, "--embed-layernorm", "--vocab-file", "vocab.json", "--merge-file", "merges.txt", tp=tp)
    at = words.index("PretrainedFromHF")
    return [*words[:at], "GPT2BPETokenizer", *words[at + 3:]]


@pytest.mark.parametrize(("extra", "tp", "match"), [
    (["--pad-vocab-size-to", "50176"], "4", "below the vocabulary 50257"),
    (["--pad-vocab-size-to", "250881"], "1", "not divisible by --make-vocab-size-divisible-by 128"),
    (["--pad-vocab-size-to", "50258", "--make-vocab-size-divisible-by", "1"], "4",
     "--pad-vocab-size-to 50258 does not split over tensor-model-parallel-size 4"),
])
def test_pad_vocab_size_to_the_fork_refuses(extra: list[str], tp: str, match: str) -> None:
    from llmperf_hook.errors import ConfigError
    from llmperf_hook.frameworks.resolve import resolve_job

    with pytest.raises(ConfigError, match=match):
        resolve_job(_gpt2_bloom(*extra, tp=tp), {})

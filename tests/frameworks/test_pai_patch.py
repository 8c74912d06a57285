"""Pai-Megatron-Patch entry points (alibaba/Pai-Megatron-Patch a098ca5 examples/*/pretrain_*.py): Megatron-LM's
parser plus megatron_patch/arguments.py get_patch_args, the tokenizer named by --patch-tokenizer-type and sized by
megatron_patch/tokenizer build_tokenizer, and the pinned Megatron backends' validate_args. Before, every one of
its launch scripts exited 2 ('Megatron's argument parser does not know --extra-vocab-size, --patch-tokenizer-type')."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import resolve_job

MODEL = ("torchrun --nproc_per_node 8 pretrain_qwen.py --num-layers 24 --hidden-size 896 --num-attention-heads 14 "
         "--ffn-hidden-size 4864 --group-query-attention --num-query-groups 2 --seq-length 128 "
         "--max-position-embeddings 32768 --swiglu --normalization RMSNorm --disable-bias-linear --add-qkv-bias "
         "--micro-batch-size 1 --global-batch-size 8 --bf16").split()
QWEN = [*MODEL, *"--position-embedding-type rope --max-padding-length 128 --dataset MMAP --train-mode pretrain "
                 "--extra-vocab-size 293".split()]


def _vocab(argv: list[str]) -> tuple[int, int]:
    _, cfg = resolve_job(argv, {})
    return cfg.model.vocab_size, cfg.model.padded_vocab_size


def _tokenizer_dir(tmp_path: Path, base: int, added: int = 0) -> str:
    vocab = {f"t{i}": i for i in range(base)}
    added_tokens = [{"id": base + i, "content": f"<a{i}>"} for i in range(added)]
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}, "added_tokens": added_tokens}))
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 999999}))  # padded: never read
    return str(tmp_path)


def test_patch_options_are_accepted_only_with_the_patch_tokenizer() -> None:
    with pytest.raises(ConfigError, match="does not know --max-padding-length.*--extra-vocab-size"):
        resolve_job(QWEN, {})
    assert _vocab([*QWEN, "--patch-tokenizer-type", "Qwen2Tokenizer", "--padded-vocab-size", "151936"]) == \
        (151936, 151936)


def test_qwen2_tokenizer_in_load_plus_extra_without_padding(tmp_path: Path) -> None:
    load = _tokenizer_dir(tmp_path, 1000, added=22)
    argv = [*QWEN, "--patch-tokenizer-type", "Qwen2Tokenizer", "--load", load, "--tensor-model-parallel-size", "2"]
    assert _vocab(argv) == (1293, 1293)  # len(encoder) 1000 + 293; not padded to 128 x TP (1536)


def test_deepseek_v2_tokenizer_is_len_minus_two_plus_extra(tmp_path: Path) -> None:
    load = _tokenizer_dir(tmp_path, 1000, added=15)
    assert _vocab([*QWEN, "--patch-tokenizer-type", "DeepSeekV2Tokenizer", "--load", load]) == (1306, 1306)


@pytest.mark.parametrize("kind, expected", [("LLama3Tokenizer", 128000 + 293), ("MixtralTokenizer", 128000 + 293),
                                            ("StarcoderTokenizerFromHF", 49152), ("BloomTokenizerFromHF", 250880)])
def test_other_tokenizer_families(kind: str, expected: int) -> None:
    argv = [*QWEN, "--patch-tokenizer-type", kind, "--vocab-size", "128000", "--padded-vocab-size", "5"]
    assert _vocab(argv) == (expected, expected)  # --padded-vocab-size is overwritten by these build_tokenizer branches


@pytest.mark.parametrize("kind, fix", [("Qwen2Tokenizer", "add --padded-vocab-size N"),
                                       ("LLama3Tokenizer", "add --vocab-size N")])
def test_a_tokenizer_not_on_this_machine_is_refused_with_the_fix(kind: str, fix: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_job([*QWEN, "--patch-tokenizer-type", kind, "--load", "/nowhere/ckpt"], {})
    text = err.value.args[0]
    assert f"Pai-Megatron-Patch's --patch-tokenizer-type {kind} loads the Hugging Face tokenizer from --load " \
           "/nowhere/ckpt" in text and fix in text


def test_extra_vocab_size_zero_is_valid() -> None:
    argv = [*QWEN[:-1], "0", "--patch-tokenizer-type", "MistralTokenizer", "--vocab-size", "32000"]
    assert _vocab(argv) == (32000, 32000)


def test_legacy_rope_flag_satisfies_mtp_on_the_patch_backends_only() -> None:
    """Pai's pinned Megatron-LM-250328/250624/250908 map --use-rotary-position-embeddings to rope before the MTP check;
    Megatron-LM since core_v0.17.0 checks MTP first."""
    legacy = [*MODEL, "--use-rotary-position-embeddings", "--mtp-num-layers", "1"]
    with pytest.raises(ConfigError, match="mapped to rope only after this check since core_v0.17.0"):
        resolve_job([*legacy, "--vocab-size", "1000"], {})
    _, cfg = resolve_job([*legacy, "--patch-tokenizer-type", "Qwen2Tokenizer", "--padded-vocab-size", "1000"], {})
    assert cfg.model.mtp_num_layers == 1 and cfg.model.position_embedding == "rope"

"""Vocabulary size of a Megatron tokenizer and Megatron's padding of it.

Megatron builds the tokenizer and pads its `vocab_size` (megatron/training/tokenizer/tokenizer.py,
`_vocab_size_with_padding`). We do the same without loading tokenizer libraries: GPT2BPETokenizer is
50257 tokens (the GPT-2 vocab.json, 50256 merges + <|endoftext|>), a local Hugging Face tokenizer directory
is read (tokenizer.json added + model vocab, or config.json `vocab_size`), a local SentencePiece model of
Llama2Tokenizer is counted, a local WordPiece vocab.txt of BertWordPiece(Lower)Case is counted,
`--vocab-size` is used as given.
"""

from __future__ import annotations

import json
import math
import os
import re

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.provenance import Source, SourceKind

KNOWN_VOCAB = {"GPT2BPETokenizer": 50257}

HUB_TOKENIZER_VOCAB = (
    (re.compile(r"^meta-llama/(Meta-)?Llama-3(\.\d)?-", re.I), 128256, "Llama 3 tokenizer: 128,000 BPE + 256 special"),
    (re.compile(r"^meta-llama/Llama-2-", re.I), 32000, "Llama 2 SentencePiece tokenizer"),
    (re.compile(r"^mistralai/(Mistral-7B(-Instruct)?-v0\.1|Mixtral-8x7B)", re.I), 32000,
     "Mistral v0.1 / Mixtral SentencePiece tokenizer"),
    (re.compile(r"^(openai-community/)?gpt2(-medium|-large|-xl)?$", re.I), 50257, "GPT-2 BPE"),
)
"""Hugging Face Hub tokenizers whose size Megatron's HuggingFaceTokenizer (vocab_size = len(tokenizer)) reads from
the Hub, by repository name: the sizes their tokenizer files give (len including the added special tokens)."""


def pad_vocab_size(vocab_size: int, divisible_by: int, tp: int) -> int:
    """Megatron `_vocab_size_with_padding`: ceil(V / (divisible_by * TP)) * divisible_by * TP."""
    multiple = divisible_by * tp
    return int(math.ceil(vocab_size / multiple) * multiple)


def _tokenizer_json_size(path: str) -> int | None:
    try:
        with open(path, encoding="utf-8") as handle:
            raw = json.load(handle)
    except (OSError, ValueError):
        return None
    vocab = raw.get("model", {}).get("vocab") if isinstance(raw, dict) else None
    ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab))) if isinstance(vocab, list) else []
    ids += [t.get("id", -1) for t in raw.get("added_tokens", []) if isinstance(t, dict)]
    ids = [i for i in ids if isinstance(i, int)]
    return max(ids) + 1 if ids else None


def _json_len(path: str) -> int | None:
    try:
        with open(path, encoding="utf-8") as handle:
            raw = json.load(handle)
    except (OSError, ValueError):
        return None
    return len(raw) if isinstance(raw, (dict, list)) else None


def vocab_from_hf_dir(path: str) -> tuple[int, Source] | None:
    """`len(tokenizer)` of a local HF tokenizer (what Megatron's HuggingFaceTokenizer reports): the highest token id
    + 1 in tokenizer.json, else vocab.json + added_tokens.json (slow tokenizers), else config.json vocab_size."""
    if not os.path.isdir(path):
        return None
    size = _tokenizer_json_size(os.path.join(path, "tokenizer.json"))
    if size is not None:
        return size, Source(SourceKind.CONFIG_FILE, f"{path}/tokenizer.json")
    base = _json_len(os.path.join(path, "vocab.json"))
    if base is not None:
        return base + (_json_len(os.path.join(path, "added_tokens.json")) or 0), Source(SourceKind.CONFIG_FILE, f"{path}/vocab.json")
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as handle:
            value = json.load(handle).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return None
    return (value, Source(SourceKind.CONFIG_FILE, f"{path}/config.json vocab_size")) if isinstance(value, int) else None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            return value, pos


def sentencepiece_pieces(path: str) -> int | None:
    """Number of pieces in a SentencePiece tokenizer.model (protobuf ModelProto, field 1 `pieces`, repeated):
    what Megatron's Llama2Tokenizer reports as vocab_size (sp_model.vocab_size()). None if unreadable."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        pos, count = 0, 0
        while pos < len(data):
            tag, pos = _varint(data, pos)
            wire = tag & 7
            if wire == 0:
                _, pos = _varint(data, pos)
            elif wire == 2:
                length, pos = _varint(data, pos)
                pos += length
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            else:
                return None
            count += int(tag >> 3 == 1 and wire == 2)
        return count if pos == len(data) and count else None
    except (OSError, ValueError):
        return None


SENTENCEPIECE_TOKENIZERS = ("Llama2Tokenizer", "GPTSentencePieceTokenizer")
"""vocab_size = the SentencePiece model's pieces (tokenizer.py _Llama2Tokenizer / _GPTSentencePieceTokenizer)."""
BERT_TOKENIZERS = ("BertWordPieceLowerCase", "BertWordPieceCase")


def wordpiece_size(path: str) -> int | None:
    """Megatron's _BertWordPieceTokenizer: the vocab.txt tokens (one per line, load_vocab keeps the last of a
    repeated one: bert_tokenization.py:121-133 at core_r0.5.0) plus [BOS] and [EOS], added when absent
    (tokenizer.py _BertWordPieceTokenizer.__init__ and add_token, :86-110)."""
    try:
        with open(path, encoding="utf-8") as handle:
            tokens = {line.strip() for line in handle if line.strip()}
    except (OSError, UnicodeDecodeError):
        return None
    return len(tokens | {"[BOS]", "[EOS]"}) if tokens else None


FILE_TOKENIZERS = ("TokenizerFromFile", "TokenizerFromFileWithFIM")
"""bigcode-project/Megatron-LM's tokenizers read from --tokenizer-file (a Hugging Face tokenizer.json)."""


def resolve_vocab_size(vocab_size: int | None, vocab_source: Source, tokenizer_type: str | None, tokenizer_model: str | None,
                       vocab_file: str | None = None, tokenizer_file: str | None = None,
                       model_flag: str = "--tokenizer-model") -> tuple[int, Source]:
    """--vocab-size first, then what the tokenizer type fixes (a local GPT-2 vocab.json is counted), then a local
    tokenizer directory; `model_flag` names the flag `tokenizer_model` came from."""
    if vocab_size is not None:
        return vocab_size, vocab_source
    if tokenizer_type == "GPT2BPETokenizer" and vocab_file and os.path.isfile(vocab_file):
        size = _json_len(vocab_file)  # Megatron's GPT-2 tokenizer: len(encoder)
        if size:
            return size, Source(SourceKind.CONFIG_FILE, f"{vocab_file} (GPT-2 encoder)")
    if tokenizer_type in SENTENCEPIECE_TOKENIZERS and tokenizer_model and os.path.isfile(tokenizer_model):
        pieces = sentencepiece_pieces(tokenizer_model)
        if pieces:
            return pieces, Source(SourceKind.CONFIG_FILE, f"{tokenizer_model} (SentencePiece pieces)")
    if tokenizer_type in BERT_TOKENIZERS and vocab_file and os.path.isfile(vocab_file):
        size = wordpiece_size(vocab_file)
        if size:
            return size, Source(SourceKind.CONFIG_FILE, f"{vocab_file} (WordPiece tokens + [BOS], [EOS])")
    if tokenizer_type in FILE_TOKENIZERS and tokenizer_file and os.path.isfile(tokenizer_file):
        size = _tokenizer_json_size(tokenizer_file)  # bigcode's TokenizerFromFile[WithFIM]: HF tokenizer.json
        if size:
            return size, Source(SourceKind.CONFIG_FILE, f"{tokenizer_file} (tokenizer.json)")
    if tokenizer_type in KNOWN_VOCAB:
        return KNOWN_VOCAB[tokenizer_type], Source(SourceKind.DEFAULT, f"{tokenizer_type} vocabulary")
    if tokenizer_model:
        found = vocab_from_hf_dir(tokenizer_model)
        if found is not None:
            return found
        for pattern, size, what in HUB_TOKENIZER_VOCAB:
            if pattern.match(tokenizer_model) and not os.path.exists(tokenizer_model):
                return size, Source(SourceKind.DEFAULT, f"{model_flag} {tokenizer_model} ({what})")
    given = f"{model_flag} {tokenizer_model}" if tokenizer_model else (
        f"--vocab-file {vocab_file}" if vocab_file else f"--tokenizer-file {tokenizer_file}" if tokenizer_file else
        "no --tokenizer-model or --vocab-file")
    raise ConfigError(
        f"cannot tell the vocabulary size: --tokenizer-type {tokenizer_type or '(none)'} with {given} is not a "
        "tokenizer llmperf can size without loading it (it reads a local Hugging Face tokenizer directory, a local "
        "GPT-2 vocab.json, WordPiece vocab.txt or Llama 2 SentencePiece model, and knows GPT2BPETokenizer and a few "
        "Hub repositories by name; the file named is not on this machine or not one of those). Add --vocab-size N "
        "(the tokenizer's vocabulary before padding), or run llmperf where the tokenizer file is."
    )


def megatron_vocab(flags: FlagValues, tokenizer: str | None, divisible: int, div_src: str, tp: int,
           src: dict[str, Source]) -> tuple[int, int]:
    """(vocabulary, padded vocabulary). Megatron pads to a multiple of divisible * TP; the bigscience fork's
    --pad-vocab-size-to N pads to N itself (megatron/tokenizer/tokenizer.py _vocab_size_with_padding at 8387ae1: it
    raises when N < the vocabulary or N % make-vocab-size-divisible-by != 0), so with it the tokenizer need not be
    sized; VocabParallelEmbedding then splits N over TP (mpu/utils.py divide asserts N % TP == 0)."""
    if flags.has("patch_tokenizer_type"):  # a Pai-Megatron-Patch entry point sizes its own tokenizer
        from llmperf_hook.frameworks.pai_patch import pai_vocab

        found = pai_vocab(flags, src)
        if found is not None:
            return found
    pad_to = flags.get("pad_vocab_size_to")
    try:
        # the bigscience fork's PretrainedFromHF tokenizer is AutoTokenizer(--tokenizer-name-or-path) (BLOOM's
        # scripts, bigscience train/tr11-176B-ml; the fork is not mirrored here): that names its files, not
        # --tokenizer-model, so a local directory is sized from it and a refusal names it
        hf_name = tokenizer == "PretrainedFromHF" and flags.has("tokenizer_name_or_path")
        vocab, src["vocab_size"] = resolve_vocab_size(
            flags.get("vocab_size"), flags.source("vocab_size"), tokenizer,
            flags.get("tokenizer_name_or_path") if hf_name else flags.get("tokenizer_model"), flags.get("vocab_file"),
            flags.get("tokenizer_file"), flags.seen_flags["tokenizer_name_or_path"] if hf_name else "--tokenizer-model")
    except ConfigError:
        if pad_to is None:
            raise
        vocab, src["vocab_size"] = pad_to, Source(SourceKind.DERIVED, f"{flags.seen_flags['pad_vocab_size_to']} "
                                                  f"{pad_to} (the tokenizer's own size is not known here)")
    if pad_to is None:
        src["padded_vocab_size"] = Source(SourceKind.DERIVED, f"ceil({vocab} / ({divisible} [{div_src}] * TP {tp})) * "
                                          f"{divisible * tp}")
        return vocab, pad_vocab_size(vocab, divisible, tp)
    flag = flags.seen_flags["pad_vocab_size_to"]
    for bad, rule in ((pad_to < vocab, f"is below the vocabulary {vocab} ({src['vocab_size']}): it can only pad up"),
                      (pad_to % divisible != 0, f"is not divisible by --make-vocab-size-divisible-by {divisible}"),
                      (pad_to % tp != 0, f"does not split over tensor-model-parallel-size {tp} (VocabParallelEmbedding)")):
        if bad:
            raise ConfigError(f"{flag} {pad_to} {rule}; the bigscience Megatron-DeepSpeed fork raises at start-up "
                              "(_vocab_size_with_padding). Give a multiple of both that is at least the vocabulary.")
    src["padded_vocab_size"] = flags.source("pad_vocab_size_to")
    return vocab, pad_to

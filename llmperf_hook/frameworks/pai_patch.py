"""The vocabulary of a Pai-Megatron-Patch job (alibaba/Pai-Megatron-Patch, a098ca5): its entry points build the
tokenizer named by `--patch-tokenizer-type` (megatron_patch/tokenizer/__init__.py build_tokenizer), not Megatron's
`--tokenizer-type`, and set the padded vocabulary themselves:

- Qwen2Tokenizer, Qwen3Tokenizer, Qwen2VLTokenizer, DeepSeekV2Tokenizer: `--padded-vocab-size N` when given (non-zero),
  else the Hugging Face tokenizer in `--load` (Qwen: len(tokenizer.encoder), the base vocabulary without added
  tokens; DeepSeekV2Tokenizer: len(tokenizer) - 2) + `--extra-vocab-size`; no padding to a multiple (Qwen2.5:
  151643 + 293 = 151936, DeepSeek-V3: 128815 - 2 + 467 = 129280, each the HF config's vocab_size);
- LLamaTokenizer, LLama2Tokenizer, LLama3Tokenizer, MixtralTokenizer, MistralTokenizer, QwenTokenizer, YiTokenizer,
  FalconTokenizer, BaichuanTokenizer, OPTTokenizer, QwenVLTokenizer: tokenizer.vocab_size + `--extra-vocab-size`;
- a few with a fixed size (BloomTokenizerFromHF 250880, ChatGLMTokenizerFromHF 130528, GLM10BZHTokenizerFromHF 50048,
  IcetkGLM130BTokenizer 150528, StarcoderTokenizerFromHF 49152, VicunaTokenizerFromHF 32000);
- JiebaBPETokenizer, BloomTokenizerFromCustom, GPT2BPETokenizer: Megatron's padding (read as Megatron's).
The tokenizer is loaded from the checkpoint folder; without it here, `--vocab-size N` (which these tokenizers do
not read) is taken as its base size, as the refusal says.
"""

from __future__ import annotations

import json
import os

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.vocab import vocab_from_hf_dir
from llmperf_hook.provenance import Source, SourceKind

PADDED_FLAG_TOKENIZERS = frozenset({"Qwen2Tokenizer", "Qwen3Tokenizer", "Qwen2VLTokenizer", "DeepSeekV2Tokenizer"})
PLUS_EXTRA_TOKENIZERS = frozenset({"LLamaTokenizer", "LLama2Tokenizer", "LLama3Tokenizer", "MixtralTokenizer",
                                   "MistralTokenizer", "QwenTokenizer", "YiTokenizer", "FalconTokenizer",
                                   "BaichuanTokenizer", "OPTTokenizer", "QwenVLTokenizer"})
FIXED_VOCAB = {"BloomTokenizerFromHF": 250880, "ChatGLMTokenizerFromHF": 130528, "GLM10BZHTokenizerFromHF": 50048,
               "IcetkGLM130BTokenizer": 150528, "StarcoderTokenizerFromHF": 49152, "VicunaTokenizerFromHF": 32000}


def _base_vocab(folder: str) -> tuple[int, str] | None:
    """The tokenizer's base vocabulary in a local Hugging Face folder: tokenizer.json's model.vocab (no added
    tokens), else vocab.json; the model's config.json vocab_size is already padded, so it is not used."""
    for name, read in (("tokenizer.json", lambda raw: raw.get("model", {}).get("vocab")), ("vocab.json", lambda raw: raw)):
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                vocab = read(json.load(handle))
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(vocab, (dict, list)) and vocab:
            return len(vocab), f"{folder}/{name}"
    return None


def pai_vocab(flags: FlagValues, src: dict[str, Source]) -> tuple[int, int] | None:
    """(vocabulary, padded vocabulary) as Pai-Megatron-Patch's build_tokenizer sets them, or None when the tokenizer
    is padded as Megatron pads (the caller's rule)."""
    kind = flags.get("patch_tokenizer_type")
    flag = f"--patch-tokenizer-type {kind}"
    if kind in FIXED_VOCAB:
        src["vocab_size"] = src["padded_vocab_size"] = Source(SourceKind.DEFAULT, f"{flag} (fixed in build_tokenizer)")
        return FIXED_VOCAB[kind], FIXED_VOCAB[kind]
    if kind not in PADDED_FLAG_TOKENIZERS | PLUS_EXTRA_TOKENIZERS:
        return None
    padded = flags.get("padded_vocab_size") or 0
    if kind in PADDED_FLAG_TOKENIZERS and padded:
        src["vocab_size"] = src["padded_vocab_size"] = flags.source("padded_vocab_size")
        return padded, padded
    extra = flags.get("extra_vocab_size") or 0
    base, where = _tokenizer_size(flags, flag, kind)
    src["vocab_size"] = src["padded_vocab_size"] = Source(
        SourceKind.DERIVED, f"{base} ({where}) + --extra-vocab-size {extra} ({flag}; no padding)")
    return base + extra, base + extra


def _tokenizer_size(flags: FlagValues, flag: str, kind: str) -> tuple[int, str]:
    if flags.get("vocab_size") is not None:
        return flags.get("vocab_size"), "--vocab-size, taken as the tokenizer's base size"
    load = flags.get("load")
    if kind == "DeepSeekV2Tokenizer":
        full = vocab_from_hf_dir(load) if load else None
        found = (full[0] - 2, f"len(tokenizer) - 2, {full[1]}") if full else None
    else:
        found = _base_vocab(load) if load else None
    if found is not None:
        return found
    where = f"--load {load}" if load else "--load (not given)"
    fix = ("add --padded-vocab-size N (the vocab_size of the model's config.json, e.g. 151936 for Qwen2.5 and Qwen3, "
           "129280 for DeepSeek-V3), which build_tokenizer keeps" if kind in PADDED_FLAG_TOKENIZERS else
           "add --vocab-size N (the tokenizer's base vocabulary, tokenizer.vocab_size: 128000 for Llama 3, 32000 for "
           "Llama 2 and Mistral), which llmperf reads as that size (build_tokenizer itself does not read it)")
    raise ConfigError(
        f"cannot tell the vocabulary size: Pai-Megatron-Patch's {flag} loads the Hugging Face tokenizer from {where}, "
        "which is not a tokenizer folder on this machine (megatron_patch/tokenizer build_tokenizer: padded vocabulary = "
        f"its vocabulary + --extra-vocab-size). Run llmperf where that checkpoint is, or {fix}.")

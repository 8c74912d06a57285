"""Megatron-LM argument semantics: defaults, derivations, flag spellings, and rejections (arguments.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.vocab import pad_vocab_size
from llmperf_hook.provenance import SourceKind
from tests.frameworks.helpers import BASE, megatron


def test_defaults_and_derivations() -> None:
    cfg = megatron()
    assert (cfg.parallel.tp, cfg.parallel.pp, cfg.parallel.dp) == (1, 1, 8)
    assert (cfg.batch.micro_batch_size, cfg.batch.global_batch_size, cfg.batch.num_microbatches) == (1, 8, 1)
    assert cfg.model.ffn_hidden_size == 4 * 4096 and cfg.model.kv_channels == 128
    assert cfg.model.num_query_groups == 32 and cfg.model.padded_vocab_size == 50304
    assert cfg.precision == "fp32" and cfg.sources["global_batch_size"].kind is SourceKind.DERIVED


def test_swiglu_ffn_rule_and_gqa() -> None:
    cfg = megatron("--swiglu", "--group-query-attention", "--num-query-groups", "8")
    assert cfg.model.ffn_hidden_size == int((4 * 4096 * 2 / 3) / 64) * 64 == 10880
    assert cfg.model.num_query_groups == 8
    assert megatron("--group-query-attention").model.num_query_groups == 1  # Megatron's default 1


def test_last_repeated_flag_wins_and_no_forms() -> None:
    cfg = megatron("--tensor-model-parallel-size", "4", "--tensor_model_parallel_size=2", "--swiglu", "--no-swiglu")
    assert cfg.parallel.tp == 2 and not cfg.model.swiglu
    assert megatron("--disable-bias-linear").model.add_bias_linear is False


def test_virtual_pipeline_both_spellings() -> None:
    old = megatron("--pipeline-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage", "2", "--global-batch-size", "8")
    new = megatron("--pipeline-model-parallel-size", "4", "--num-virtual-stages-per-pipeline-rank", "4", "--global-batch-size", "8")
    assert old.parallel.vpp == new.parallel.vpp == 4 and old.pipeline_schedule == "interleaved"
    with pytest.raises(ConfigError, match="cannot both"):
        megatron("--pipeline-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage", "2",
                 "--num-virtual-stages-per-pipeline-rank", "4")
    with pytest.raises(ConfigError, match="multiple of pipeline-model-parallel-size"):
        megatron("--pipeline-model-parallel-size", "4", "--num-virtual-stages-per-pipeline-rank", "2", "--global-batch-size", "6")


def test_microbatch_group_size_relaxes_the_interleaved_rule() -> None:
    # World 8, PP 2 -> DP 4; GBS 20 -> 5 micro-batches: not a multiple of PP, legal in groups of 5 (or 3 + 2).
    args = ("--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2", "--global-batch-size", "20")
    with pytest.raises(ConfigError, match="multiple of pipeline-model-parallel-size 2"):
        megatron(*args)
    for group in ("5", "3"):
        cfg = megatron(*args, "--microbatch-group-size-per-virtual-pipeline-stage", group)
        assert cfg.parallel.vpp_group == int(group) and cfg.batch.num_microbatches == 5
    with pytest.raises(ConfigError, match="between PP 2"):
        megatron(*args, "--microbatch-group-size-per-virtual-pipeline-stage", "6")  # more than the 5 micro-batches
    with pytest.raises(ConfigError, match="last group of 1"):
        megatron(*args, "--microbatch-group-size-per-virtual-pipeline-stage", "4")


def test_uneven_pipeline() -> None:
    cfg = megatron("--pipeline-model-parallel-size", "4", "--decoder-first-pipeline-num-layers", "5",
                   "--decoder-last-pipeline-num-layers", "7")
    assert cfg.parallel.decoder_first_pipeline_num_layers == 5
    with pytest.raises(ConfigError, match="uneven pipeline split"):
        megatron("--pipeline-model-parallel-size", "4", "--decoder-first-pipeline-num-layers", "6")


def test_sequence_parallel_and_expert_tp_defaults() -> None:
    assert megatron("--sequence-parallel").parallel.sequence_parallel is False
    cfg = megatron("--tensor-model-parallel-size", "2", "--sequence-parallel", "--num-experts", "8",
                   "--expert-model-parallel-size", "4")
    assert cfg.parallel.sequence_parallel and cfg.parallel.etp == 2 and cfg.model.moe_ffn_hidden_size == 4 * 4096


def test_precision_recompute_optimizer() -> None:
    assert megatron("--bf16", "--fp8-format", "hybrid").precision == "fp8"
    with pytest.raises(ConfigError, match="both set"):
        megatron("--fp16", "--bf16")
    assert megatron("--recompute-activations").recompute.granularity == "selective"
    with pytest.raises(ConfigError, match="recompute-method"):
        megatron("--recompute-granularity", "full")
    with pytest.raises(ConfigError, match="overlap-param-gather"):
        megatron("--overlap-param-gather")
    cfg = megatron("--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather")
    assert cfg.optimizer.distributed_optimizer and cfg.optimizer.overlap_param_gather


def test_overlap_param_gather_with_optimizer_step_asserts_and_is_read() -> None:
    """arguments.py validate_args (core_r0.9 .. HEAD) asserts the distributed optimizer, --overlap-param-gather, an
    interleaved pipeline and no distributed checkpoint format (only --ckpt-format torch); the flag then reaches
    OptimizerConfig (graph/ddp_buckets.py: buckets off)."""
    gather = ["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"]
    interleaved = ["--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2",
                   "--global-batch-size", "16"]
    torch_ckpt = ["--ckpt-format", "torch"]
    for args, missing in ((interleaved, "--use-distributed-optimizer"), (gather, "interleaved pipeline"),
                          (interleaved + gather[:2], r"needs --overlap-param-gather \("),
                          (gather + interleaved, "distributed checkpointing")):
        extra = torch_ckpt if missing != "distributed checkpointing" else []
        with pytest.raises(ConfigError, match=missing):
            megatron("--overlap-param-gather-with-optimizer-step", *args, *extra)
    cfg = megatron("--overlap-param-gather-with-optimizer-step", *gather, *interleaved, *torch_ckpt)
    assert cfg.optimizer.overlap_param_gather_with_optimizer_step
    assert not megatron(*gather, *interleaved).optimizer.overlap_param_gather_with_optimizer_step


@pytest.mark.parametrize(("args", "fragment"), [
    (["--tensor-model-parallel-size", "8", "--num-attention-heads", "20", "--kv-channels", "128"], "heads % TP"),
    (["--pipeline-model-parallel-size", "3"], "not divisible by"),
    (["--micro-batch-size", "3", "--global-batch-size", "16"], "GBS % (MBS*DP)"),
    (["--context-parallel-size", "8", "--seq-length", "2056", "--max-position-embeddings", "4096"], "2 x context-parallel-size"),
    (["--tensor-model-parallel-size", "8", "--group-query-attention", "--num-query-groups", "3"], "multiple or a divisor"),
    (["--expert-model-parallel-size", "2"], "needs --num-experts"),
    (["--num-experts", "8", "--tensor-model-parallel-size", "2"], "needs --sequence-parallel"),
    (["--tp-comm-overlap"], "sequence-parallel"),
    (["--max-position-embeddings", "1024"], "max_position_embeddings >= seq_length"),
    (["--batch-size", "4"], "no longer accepted"),
])
def test_rejections_name_values_and_rule(args: list[str], fragment: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        megatron(*args)
    assert fragment in str(info.value), str(info.value)


def test_required_flags() -> None:
    shape = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--vocab-size", "100"]
    with pytest.raises(ConfigError, match="--seq-length"):
        megatron(base=shape + ["--micro-batch-size", "1"])
    with pytest.raises(ConfigError, match="--micro-batch-size"):
        megatron(base=shape + ["--seq-length", "128", "--max-position-embeddings", "128"])


def test_vocab_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert pad_vocab_size(50257, 128, 8) == 51200
    base = [a for a in BASE if a not in ("--tokenizer-type", "GPT2BPETokenizer")]
    assert megatron("--vocab-size", "32000", base=base).model.vocab_size == 32000
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text(json.dumps(
        {"model": {"vocab": {"a": 0, "b": 1, "c": 2}}, "added_tokens": [{"id": 9, "content": "<s>"}]}))
    cfg = megatron("--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "tok", base=base)
    assert cfg.model.vocab_size == 10 and cfg.model.padded_vocab_size == 128
    with pytest.raises(ConfigError, match="--vocab-size"):
        megatron("--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "org/remote-name", base=base)
    (tmp_path / "slow").mkdir()
    (tmp_path / "slow" / "vocab.json").write_text(json.dumps({str(i): i for i in range(300)}))
    (tmp_path / "slow" / "added_tokens.json").write_text(json.dumps({"<pad>": 300}))
    assert megatron("--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "slow", base=base).model.vocab_size == 301
    (tmp_path / "gpt2-vocab.json").write_text(json.dumps({str(i): i for i in range(50257)}))
    cfg = megatron("--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "gpt2-vocab.json", base=base)
    assert cfg.model.vocab_size == 50257 and "gpt2-vocab.json" in str(cfg.sources["vocab_size"])


def test_not_modelled_settings_warn_once_each() -> None:
    cfg = megatron("--recompute-granularity", "selective", "--recompute-modules", "core_attn", "layernorm",
                   "--moe-expert-capacity-factor", "1.0", "--rampup-batch-size", "16", "16", "1000", "--global-batch-size", "64",
                   "--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--use-distributed-optimizer",
                   "--cuda-graph-impl", "none")
    text = "\n".join(cfg.warnings)
    assert "--recompute-modules" in text and "--moe-expert-capacity-factor" in text and "--rampup-batch-size" in text
    assert "CUDA graphs" not in text and len(cfg.warnings) == len(set(cfg.warnings))
    assert cfg.optimizer.offload_optimizer == "cpu"


def _sentencepiece_model(pieces: int) -> bytes:
    """A minimal ModelProto: `pieces` repeated SentencePiece messages (field 1) plus a trainer_spec (field 2)."""
    def field(number: int, payload: bytes) -> bytes:
        length, out = len(payload), b""
        while True:
            out += bytes([(length & 0x7F) | (0x80 if length > 0x7F else 0)])
            length >>= 7
            if not length:
                break
        return bytes([(number << 3) | 2]) + out + payload

    body = b"".join(field(1, field(1, f"tok{i}".encode()) + b"\x15\x00\x00\x00\x00") for i in range(pieces))
    return body + field(2, b"\x08\x01")


def test_llama2_tokenizer_model_is_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tokenizer.model").write_bytes(_sentencepiece_model(300))
    base = [a for a in BASE if a not in ("--tokenizer-type", "GPT2BPETokenizer")]
    cfg = megatron("--tokenizer-type", "Llama2Tokenizer", "--tokenizer-model", "tokenizer.model", base=base)
    assert cfg.model.vocab_size == 300 and cfg.model.padded_vocab_size == 384
    (tmp_path / "junk.model").write_bytes(b"\xff\xff\xff")
    with pytest.raises(ConfigError, match="--vocab-size"):
        megatron("--tokenizer-type", "Llama2Tokenizer", "--tokenizer-model", "junk.model", base=base)


@pytest.mark.parametrize(("args", "fp32"), [
    (["--bf16"], True), (["--bf16", "--grad-reduce-in-bf16"], False),
    (["--bf16", "--grad-reduce-in-bf16", "--accumulate-allreduce-grads-in-fp32"], False),
    (["--fp16"], False), (["--fp16", "--accumulate-allreduce-grads-in-fp32"], True)])
def test_main_gradient_dtype_follows_megatron(args: list[str], fp32: bool) -> None:
    """arguments.py: under --bf16 accumulate_allreduce_grads_in_fp32 is set unless --grad-reduce-in-bf16 clears it
    (bf16 main grads, bf16 reduction: half the gradient buffer and bytes); fp16 keeps fp16 unless asked."""
    assert megatron(*args).optimizer.fp32_main_grads is fp32


def test_te_cross_entropy_fusion_warns_as_recent_releases_refuse_it() -> None:
    # megatron/training/arguments.py since 168cb15d70 (core_v0.19.0): assert not (fusion and impl == 'te').
    cfg = megatron("--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te")
    assert any("core_v0.19.0" in w and "stability" in w for w in cfg.warnings)
    for args in (["--cross-entropy-fusion-impl", "te"], ["--cross-entropy-loss-fusion"]):
        assert not any("stability" in w for w in megatron(*args).warnings)

"""--attention-backend unfused under Transformer Engine (megatron-core's default --transformer-impl): TE's
UnfusedDotProductAttention and its own FusedScaleMaskSoftmax decide the softmax path
(attention_core_ops.te_fused_softmax_available), not megatron-core's local rule: keys up to 16383 (not 4096), sk a
multiple of 8, sq (not the attention batches) a multiple of the batches per block, a sink column concatenated
before the kernel, the fallback always in fp32, and NVTE_MASKED_SOFTMAX_FUSION instead of
--no-masked-softmax-fusion."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

from llmperf_hook.api import resolve_command
from llmperf_hook.errors import ConfigError
from llmperf_hook.graph.attention_core_ops import (fused_softmax_available, te_fused_softmax_available,
                                                   torch_softmax_path)
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.hardware.load import load_cluster

MEGATRON = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "2048",
            "--num-attention-heads", "16", "--max-position-embeddings", "8192", "--vocab-size", "50304",
            "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16", "--attention-backend", "unfused"]


def _cfg(seq: int, *extra: str, env: dict[str, str] | None = None):
    return resolve_command([*MEGATRON, "--seq-length", str(seq), *extra], env or {}, cluster="dgx-h100")[1]


def _attention(cfg) -> dict:
    block = next(b for b in build_graph(cfg, load_cluster("dgx-h100")).stages[0].chunks[0].blocks
                 if b.name.startswith("dense_layer"))
    return {op.name: op for op in block.fwd if op.name.startswith("attn.")}


def test_te_rule_differs_from_megatron_cores() -> None:
    # 8192 keys: over megatron-core's 4096, under TE's 16384
    assert te_fused_softmax_available(16, 8192, 8192, False) and not fused_softmax_available(16, 8192, 8192)
    assert not te_fused_softmax_available(16, 16384, 16384, False)
    # sk 1028: a multiple of 4 (megatron-core) but not of 8 (TE)
    assert fused_softmax_available(16, 1028, 1028) and not te_fused_softmax_available(16, 1028, 1028, False)
    # attention batches 4 with 64 keys: 4 batches per block x 2 rows (get_batch_per_block 8) fail megatron-core's
    # attn_batches % 8; TE checks sq % 8
    assert te_fused_softmax_available(4, 64, 64, False) and not fused_softmax_available(4, 64, 64)
    assert not te_fused_softmax_available(2, 1024, 1024, False)  # attn_batches % 4 in both


@given(st.sampled_from([1024, 2048, 4096, 8192]))
def test_a_sink_column_is_checked_at_sk_plus_one(s: int) -> None:
    """sk + 1 is odd for these key lengths: TE's kernel refuses it (sk % 8), and the sink runs the torch path."""
    assert te_fused_softmax_available(16, s, s, False) and not te_fused_softmax_available(16, s, s, True)
    assert te_fused_softmax_available(16, 2048, 2047, True)  # 2047 + 1 keys


def test_graph_follows_te_under_transformer_engine_and_megatron_core_under_local() -> None:
    te = _cfg(8192)
    assert te.transformer_impl == "transformer_engine" and not torch_softmax_path(te)
    assert "attn.mask_fill" not in _attention(te)
    local = _cfg(8192, "--transformer-impl", "local")
    assert torch_softmax_path(local) and "attn.mask_fill" in _attention(local)


def test_te_fallback_softmaxes_in_fp32_and_concatenates_a_sink_in_the_activation_dtype() -> None:
    cfg = make_config(num_layers=2, hidden_size=1024, num_attention_heads=16, seq_length=1024, tp=8,
                      micro_batch_size=1, precision="bf16", framework="megatron", attention_backend="unfused")
    ops = _attention(cfg)  # attention batches 2: the torch fallback, in fp32 without --attention-softmax-in-fp32
    assert "attn.softmax_cast_fp32" in ops and ops["attn.softmax"].dtype == "fp32"
    assert "attn.softmax_cast_fp32" not in _attention(replace(cfg, transformer_impl="local"))
    wide = make_config(num_layers=2, hidden_size=1024, num_attention_heads=16, seq_length=2048, micro_batch_size=4,
                       precision="bf16", framework="megatron", attention_backend="unfused")
    assert not torch_softmax_path(wide)
    sinks = replace(wide, model=replace(wide.model, attention_sinks=True))
    ops = _attention(sinks)  # 2049 keys: the torch path; TE's cat runs before its fp32 cast
    scores = 4 * 16 * 2048 * 2048
    assert torch_softmax_path(sinks) and ops["attn.sink_concat"].dtype == "bf16"
    assert ops["attn.sink_concat"].bytes_moved == 2 * scores * 2


def test_nvte_masked_softmax_fusion_decides_not_the_megatron_flag() -> None:
    assert not torch_softmax_path(_cfg(2048, env={}))
    assert torch_softmax_path(_cfg(2048, env={"NVTE_MASKED_SOFTMAX_FUSION": "0"}))
    ignored = _cfg(2048, "--no-masked-softmax-fusion")
    assert not torch_softmax_path(ignored)
    assert any("--no-masked-softmax-fusion ignored by Transformer Engine" in w for w in ignored.warnings)
    assert torch_softmax_path(_cfg(2048, "--no-masked-softmax-fusion", "--transformer-impl", "local"))
    with pytest.raises(ConfigError, match="NVTE_MASKED_SOFTMAX_FUSION='yes' .* not an integer"):
        _cfg(2048, env={"NVTE_MASKED_SOFTMAX_FUSION": "yes"})

"""Megatron's fused causal softmax availability rule and the PyTorch fallback ops it implies."""

from __future__ import annotations

from hypothesis import given, strategies as st

from llmperf_hook.graph.attention_core_ops import fused_softmax_available


def test_tp8_of_16_heads_at_micro_batch_1_falls_back() -> None:
    # attn_batches = micro_batch x heads / tp = 1 x 16 / 8 = 2: not a multiple of 4 (is_kernel_available).
    assert not fused_softmax_available(2, 1024, 1024)
    assert fused_softmax_available(4, 1024, 1024)
    assert fused_softmax_available(16, 2048, 2048)


def test_key_length_limits() -> None:
    assert not fused_softmax_available(8, 16, 16)
    assert fused_softmax_available(8, 4096, 4096)
    assert not fused_softmax_available(8, 8192, 8192)  # 16 < sk <= 4096 (megatron-core, Megatron-DeepSpeed)
    assert not fused_softmax_available(8, 1026, 1026)


@given(st.integers(1, 512), st.sampled_from([256, 512, 1024, 2048, 4096]))
def test_multiple_of_four_decides_for_long_keys(attn_batches: int, s: int) -> None:
    assert fused_softmax_available(attn_batches, s, s) == (attn_batches % 4 == 0)


def _attention_ops(framework: str, tp: int, mbs: int, **fields) -> list:
    from dataclasses import replace

    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.graph.sample_configs import make_config
    from llmperf_hook.hardware.load import load_cluster

    cfg = make_config(num_layers=2, hidden_size=1024, num_attention_heads=16, seq_length=1024, tp=tp,
                      micro_batch_size=mbs, precision="fp16", framework=framework, attention_backend="unfused")
    block = next(b for b in build_graph(replace(cfg, **fields), load_cluster("dgx-a100")).stages[0].chunks[0].blocks
                 if b.name.startswith("dense_layer"))
    return [op for op in block.fwd if op.name.startswith("attn.")]


def _attention_names(framework: str, tp: int, mbs: int, **fields) -> list[str]:
    return [op.name for op in _attention_ops(framework, tp, mbs, **fields)]


def test_graph_emits_the_torch_softmax_path_only_where_the_kernel_is_unavailable() -> None:
    assert "attn.mask_fill" not in _attention_names("megatron-deepspeed", 8, 2)
    names = _attention_names("megatron-deepspeed", 8, 1)
    # forward_torch_softmax with softmax_in_fp32 (Megatron-DeepSpeed's layer scaling default): float, scale,
    # masked_fill, softmax, half.
    i = names.index("attn.softmax")
    assert names[i - 3:i + 2] == ["attn.softmax_cast_fp32", "attn.softmax_scale", "attn.mask_fill",
                                  "attn.softmax", "attn.softmax_cast_back"]
    megatron = _attention_names("megatron", 8, 1, transformer_impl="local")  # megatron-core's own softmax
    assert "attn.mask_fill" in megatron and "attn.softmax_cast_fp32" not in megatron
    # Transformer Engine's UnfusedDotProductAttention: the same fallback, always in fp32 (te_unfused_attention)
    assert "attn.softmax_cast_fp32" in _attention_names("megatron", 8, 1)


def test_flags_choose_the_torch_softmax_path_and_its_precision() -> None:
    """--no-masked-softmax-fusion runs the PyTorch path whatever the shape; --attention-softmax-in-fp32 adds the
    casts (no scale without layer scaling) and the softmax reads and writes fp32."""
    assert "attn.mask_fill" in _attention_names("megatron", 1, 4, masked_softmax_fusion=False)
    ops = {op.name: op for op in _attention_ops("megatron", 1, 4, masked_softmax_fusion=False, softmax_in_fp32=True)}
    assert "attn.softmax_cast_fp32" in ops and "attn.softmax_cast_back" in ops and "attn.softmax_scale" not in ops
    scores = 4 * 16 * 1024 * 1024
    assert ops["attn.softmax"].dtype == "fp32" and ops["attn.softmax"].bytes_moved == 2 * 4 * scores
    no_scaling = _attention_names("megatron-deepspeed", 8, 1, query_key_layer_scaling=False)
    assert "attn.softmax_scale" not in no_scaling and "attn.softmax_cast_fp32" not in no_scaling


def test_fp32_softmax_output_is_what_the_layer_saves() -> None:
    from dataclasses import replace

    from llmperf_hook.graph.sample_configs import make_config
    from llmperf_hook.schedule.activations import layer_terms

    cfg = make_config(num_layers=2, hidden_size=1024, num_attention_heads=16, seq_length=1024, micro_batch_size=4,
                      precision="bf16", framework="megatron", attention_backend="unfused")
    fused = layer_terms(cfg)[2]
    fallback_fp32 = layer_terms(replace(cfg, masked_softmax_fusion=False, softmax_in_fp32=True))[2]
    assert fused == 5 * 16 * 1024 * 1024 * 4  # Korthikanti et al.: 5 a s^2 b
    assert fallback_fp32 == 7 * 16 * 1024 * 1024 * 4  # fp32 softmax output + mask + bf16 dropout output


def test_no_attention_dropout_no_dropout_kernel_and_no_mask() -> None:
    """torch's dropout at p = 0 returns its input (ATen dropout): no kernel, no mask, and the AV product keeps the
    softmax output itself (2 bytes per score in bf16 instead of Korthikanti's 5), or its bf16 cast (4 + 2)."""
    from dataclasses import replace

    from llmperf_hook.graph.sample_configs import make_config
    from llmperf_hook.schedule.activations import stored_score_bytes

    assert "attn.dropout" not in _attention_names("megatron", 1, 4, attention_dropout=0.0)
    assert "attn.dropout" in _attention_names("megatron", 1, 4)
    cfg = make_config(num_layers=2, hidden_size=1024, num_attention_heads=16, seq_length=1024, micro_batch_size=4,
                      precision="bf16", framework="megatron", attention_backend="unfused")
    assert stored_score_bytes(replace(cfg, attention_dropout=0.0)) == 2
    assert stored_score_bytes(replace(cfg, attention_dropout=0.0, masked_softmax_fusion=False, softmax_in_fp32=True)) == 6


def test_fp32_scores_take_the_torch_path_without_casts() -> None:
    """The fused kernel needs fp16 / bf16 input (is_kernel_available: input_in_float16); fp32 scores are softmaxed
    as they are: input.float() is a no-op and nothing is cast back, only layer scaling's multiply remains."""
    from llmperf_hook.graph.sample_configs import make_config
    from llmperf_hook.graph.attention_core_ops import torch_softmax_path

    cfg = make_config(num_layers=2, hidden_size=1024, num_attention_heads=16, seq_length=1024, micro_batch_size=4,
                      precision="fp32", framework="megatron-deepspeed", attention_backend="unfused")
    assert torch_softmax_path(cfg)
    names = [op.name for op in _fp32_attention_ops()]
    assert "attn.softmax_cast_fp32" not in names and "attn.softmax_cast_back" not in names
    assert "attn.softmax_scale" in names and "attn.mask_fill" in names


def _fp32_attention_ops() -> list:
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.graph.sample_configs import make_config
    from llmperf_hook.hardware.load import load_cluster

    cfg = make_config(num_layers=2, hidden_size=1024, num_attention_heads=16, seq_length=1024, micro_batch_size=4,
                      precision="fp32", framework="megatron-deepspeed", attention_backend="unfused")
    block = next(b for b in build_graph(cfg, load_cluster("dgx-a100")).stages[0].chunks[0].blocks
                 if b.name.startswith("dense_layer"))
    return [op for op in block.fwd if op.name.startswith("attn.")]

"""Megatron's fused causal softmax availability rule and the PyTorch fallback ops it implies."""

from __future__ import annotations

from hypothesis import given, strategies as st

from llmperf_hook.graph.layer_ops import fused_softmax_available


def test_tp8_of_16_heads_at_micro_batch_1_falls_back() -> None:
    # attn_batches = micro_batch x heads / tp = 1 x 16 / 8 = 2: not a multiple of 4 (is_kernel_available).
    assert not fused_softmax_available(2, 1024, 1024)
    assert fused_softmax_available(4, 1024, 1024)
    assert fused_softmax_available(16, 2048, 2048)


def test_key_length_limits() -> None:
    assert not fused_softmax_available(8, 16, 16)
    assert not fused_softmax_available(8, 16384 * 2, 16384 * 2)
    assert not fused_softmax_available(8, 1026, 1026)


@given(st.integers(1, 512), st.sampled_from([256, 512, 1024, 2048, 4096, 8192]))
def test_multiple_of_four_decides_for_long_keys(attn_batches: int, s: int) -> None:
    assert fused_softmax_available(attn_batches, s, s) == (attn_batches % 4 == 0)


def _attention_names(framework: str, tp: int, mbs: int) -> list[str]:
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.graph.sample_configs import make_config
    from llmperf_hook.hardware.load import load_cluster

    cfg = make_config(num_layers=2, hidden_size=1024, num_attention_heads=16, seq_length=1024, tp=tp,
                      micro_batch_size=mbs, precision="fp16", framework=framework, attention_backend="unfused")
    block = next(b for b in build_graph(cfg, load_cluster("dgx-a100")).stages[0].chunks[0].blocks
                 if b.name.startswith("dense_layer"))
    return [op.name for op in block.fwd if op.name.startswith("attn.")]


def test_graph_emits_the_torch_softmax_path_only_where_the_kernel_is_unavailable() -> None:
    assert "attn.mask_fill" not in _attention_names("megatron-deepspeed", 8, 2)
    names = _attention_names("megatron-deepspeed", 8, 1)
    # forward_torch_softmax with softmax_in_fp32 (Megatron-DeepSpeed's layer scaling default): float, scale,
    # masked_fill, softmax, half.
    i = names.index("attn.softmax")
    assert names[i - 3:i + 2] == ["attn.softmax_cast_fp32", "attn.softmax_scale", "attn.mask_fill",
                                  "attn.softmax", "attn.softmax_cast_back"]
    megatron = _attention_names("megatron", 8, 1)
    assert "attn.mask_fill" in megatron and "attn.softmax_cast_fp32" not in megatron

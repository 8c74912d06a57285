"""Memory of the unfused attention's PyTorch softmax backward, the global score buffer, and the logits / layer
backward peaks that never coincide."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, strategies as st

from llmperf_hook.schedule import activations as act
from llmperf_hook.schedule.memory import one_peak_of_two


def _cfg(**fields):
    from llmperf_hook.graph.sample_configs import make_config

    cfg = make_config(num_layers=12, hidden_size=1024, num_attention_heads=16, seq_length=2048, tp=1,
                      micro_batch_size=4, precision="bf16", framework="megatron", attention_backend="unfused")
    return replace(cfg, **fields)


SCORES = 4 * 16 * 2048 * 2048


def test_fp32_torch_softmax_backward_holds_nine_more_bytes_per_score() -> None:
    # 4 fp32 tensors of scores alive in the softmax backward (16 B) against the 7 B stored (4 + 2 + 1).
    cfg = _cfg(masked_softmax_fusion=False, softmax_in_fp32=True)
    assert act.softmax_backward_extra_bytes(cfg) == 9 * SCORES
    # 8 - 5 with megatron-core's local softmax in bf16 (Transformer Engine's fallback always runs in fp32)
    assert act.softmax_backward_extra_bytes(replace(cfg, softmax_in_fp32=False, transformer_impl="local")) == 3 * SCORES
    assert act.softmax_backward_extra_bytes(replace(cfg, softmax_in_fp32=False)) == 9 * SCORES


def test_fused_kernel_and_flash_hold_nothing_extra() -> None:
    assert act.softmax_backward_extra_bytes(_cfg()) == 0.0
    assert act.softmax_backward_extra_bytes(_cfg(attention_backend="flash", masked_softmax_fusion=False)) == 0.0


def test_score_buffer_only_for_megatron_unfused_attention() -> None:
    assert act.score_buffer_bytes(_cfg()) == 2 * SCORES
    assert act.score_buffer_bytes(_cfg(attention_backend="flash")) == 0.0
    assert act.score_buffer_bytes(_cfg(framework="deepspeed")) == 0.0


def test_logits_and_layer_backward_are_one_peak() -> None:
    parts = {"weights": 5.0, "logits_and_loss": 3.0, "recompute_working_set": 1.0, "softmax_backward_working_set": 1.5}
    assert one_peak_of_two(parts) == {"weights": 5.0, "logits_and_loss": 3.0}
    parts["recompute_working_set"] = 2.0
    assert one_peak_of_two(parts) == {"weights": 5.0, "recompute_working_set": 2.0, "softmax_backward_working_set": 1.5}
    assert one_peak_of_two({"weights": 5.0, "logits_and_loss": 3.0}) == {"weights": 5.0, "logits_and_loss": 3.0}


@given(st.floats(0, 1e12), st.floats(0, 1e12), st.floats(0, 1e12))
def test_peak_is_the_larger_of_the_two(logits: float, recompute: float, softmax: float) -> None:
    parts = {"weights": 1.0, "logits_and_loss": logits, "recompute_working_set": recompute,
             "softmax_backward_working_set": softmax}
    total = sum(one_peak_of_two(parts).values())
    assert abs(total - (1.0 + max(logits, recompute + softmax))) <= 1e-6 * (1 + total)


def test_full_recompute_memory_rises_with_the_fp32_softmax_backward() -> None:
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.hardware.load import load_cluster
    from llmperf_hook.schedule.memory import estimate_memory

    cluster = load_cluster("dgx-h100")
    # A small vocabulary, so the layer's backward working set, not the logits and loss, makes the fused path's peak.
    small_vocab = replace(_cfg().model, vocab_size=8192, padded_vocab_size=8192)
    base = _cfg(recompute=replace(_cfg().recompute, granularity="full", method="uniform", num_layers=1),
                model=small_vocab)
    fused = estimate_memory(base, build_graph(base, cluster), cluster)
    torch_path = replace(base, masked_softmax_fusion=False, softmax_in_fp32=True)
    unfused = estimate_memory(torch_path, build_graph(torch_path, cluster), cluster)
    assert unfused.components["softmax_backward_working_set"] == 9 * SCORES
    assert unfused.peak_bytes_per_gpu > fused.peak_bytes_per_gpu + 9 * SCORES

"""Backward kernels of the unfused attention's PyTorch softmax path, as torch's CUDA kernels and autograd run them."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, strategies as st

from llmperf_hook.graph.backward import TORCH_SOFTMAX_BWD_BYTES_FACTOR, backward_op
from llmperf_hook.graph.op import Op


def _layer(**fields) -> tuple[list[Op], list[Op]]:
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.graph.sample_configs import make_config
    from llmperf_hook.hardware.load import load_cluster

    cfg = make_config(num_layers=2, hidden_size=1024, num_attention_heads=16, seq_length=2048, tp=1,
                      micro_batch_size=4, precision="bf16", framework="megatron", attention_backend="unfused")
    block = next(b for b in build_graph(replace(cfg, **fields), load_cluster("dgx-h100")).stages[0].chunks[0].blocks
                 if b.name.startswith("dense_layer"))
    return list(block.fwd), [op for op in block.bwd if op.phase == "bwd"]


def _by_name(ops: list[Op], name: str) -> Op:
    return next(op for op in ops if op.name == name)


def test_torch_softmax_backward_is_a_product_and_a_reduction_in_fp32() -> None:
    fwd, bwd = _layer(masked_softmax_fusion=False, softmax_in_fp32=True)
    scores = 4 * 16 * 2048 * 2048
    softmax = _by_name(fwd, "attn.softmax")
    assert softmax.tags.get("kernel") == "torch" and softmax.bytes_moved == 8 * scores
    # tmp = grad * output (read 4 + 4, write 4), host_softmax_backward(tmp, output) (read 4 + 4, write 4).
    assert _by_name(bwd, "attn.softmax").bytes_moved == 24 * scores


def test_mask_fill_backward_clones_then_fills() -> None:
    fwd, bwd = _layer(masked_softmax_fusion=False, softmax_in_fp32=True)
    scores = 4 * 16 * 2048 * 2048
    assert _by_name(fwd, "attn.mask_fill").bytes_moved == 9 * scores  # read 4 + mask 1, write 4
    # grad.masked_fill(mask, 0): clone (read 4, write 4) + masked_fill_ (read 4 + mask 1, write 4).
    assert _by_name(bwd, "attn.mask_fill").bytes_moved == 17 * scores
    # Casts keep their forward traffic: grad.to(fp32) and grad.to(bf16), 6 bytes per score each.
    assert [op.bytes_moved for op in bwd if op.op_class == "cast"] == [6 * scores, 6 * scores]


def test_fused_softmax_keeps_one_backward_kernel() -> None:
    fwd, bwd = _layer()  # masked-softmax fusion on, 2048 keys, 64 attention batches: the fused kernel
    assert "kernel" not in _by_name(fwd, "attn.softmax").tags
    assert _by_name(bwd, "attn.softmax").bytes_moved == 2 * _by_name(fwd, "attn.softmax").bytes_moved


def test_flash_attention_has_no_softmax_ops() -> None:
    fwd, _ = _layer(attention_backend="flash")
    assert not [op for op in fwd if op.op_class in ("softmax", "mask_fill", "cast")]


@given(st.integers(1, 10**9), st.sampled_from(["softmax", "mask_fill", "dropout", "layernorm"]), st.booleans())
def test_backward_bytes_never_below_the_forward_read(elements: int, op_class: str, torch_kernel: bool) -> None:
    tags = {"kernel": "torch"} if torch_kernel else {}
    fwd = Op("x", op_class, "fwd", {"elements": elements}, 0.0, float(9 * elements), "fp32", None, tags)
    bwd = backward_op(fwd)
    assert bwd.bytes_moved >= fwd.bytes_moved - elements
    if op_class == "softmax" and torch_kernel:
        assert bwd.bytes_moved == fwd.bytes_moved * TORCH_SOFTMAX_BWD_BYTES_FACTOR

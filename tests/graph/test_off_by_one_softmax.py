"""Megatron --softmax-type off-by-one (ModelShape.zero_sink_logit): DotProductAttention.softmax_offset is a tensor of
zeros, not None, so FusedScaleMaskSoftmax.forward skips its kernel (`and softmax_offset is None`) and the PyTorch
fallback runs SoftmaxOne's torch.cat over the scores: the unfused attention's work of a learned sink, without its
parameters."""

from __future__ import annotations

from llmperf_hook.api import resolve_command
from llmperf_hook.graph import params as pc
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.param_tensors import attention_tensors
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.schedule.activations import softmax_backward_extra_bytes

MEGATRON = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "2048",
            "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--vocab-size", "50304", "--micro-batch-size", "1", "--global-batch-size", "8",
            "--tensor-model-parallel-size", "2", "--bf16", "--disable-bias-linear", "--attention-backend", "unfused"]


def _cfg(*extra: str):
    return resolve_command([*MEGATRON, *extra], {}, cluster="dgx-h100")[1]


def _fwd(cfg) -> dict:
    graph = build_graph(cfg, load_cluster("dgx-h100"))
    block = next(b for b in graph.stages[0].chunks[0].blocks if b.name.startswith("dense_layer"))
    return {op.name: op for op in block.fwd}


def test_off_by_one_takes_the_torch_softmax_with_the_sink_concat() -> None:
    plain, one = _fwd(_cfg()), _fwd(_cfg("--softmax-type", "off-by-one"))
    assert "attn.mask_fill" not in plain and "attn.sink_concat" not in plain
    scores = 1 * 8 * 2048 * 2048  # micro-batch x 16 heads / TP 2 x s x s
    assert one["attn.mask_fill"].dims == {"elements": scores}
    assert one["attn.softmax"].tags.get("kernel") == "torch"
    assert one["attn.sink_concat"].bytes_moved == 2.0 * scores * 2
    learnable = _fwd(_cfg("--softmax-type", "learnable"))
    assert {n: op.bytes_moved for n, op in one.items()} == {n: op.bytes_moved for n, op in learnable.items()}


def test_off_by_one_has_no_parameters_and_the_fallbacks_memory() -> None:
    plain, one = _cfg(), _cfg("--softmax-type", "off-by-one")
    assert one.model.zero_sink_logit and not one.model.attention_sinks
    assert pc.attention_params(one) == pc.attention_params(plain)
    assert attention_tensors(one) == attention_tensors(plain)
    # the fallback's softmax backward holds its saved output, the gradient and a temporary (the fused kernel: none)
    learnable = _cfg("--softmax-type", "learnable")
    assert softmax_backward_extra_bytes(one) == softmax_backward_extra_bytes(learnable) > 0
    assert softmax_backward_extra_bytes(plain) == 0


def test_the_local_attention_concatenates_fp32_scores_under_an_fp32_softmax() -> None:
    """megatron-core's local DotProductAttention runs SoftmaxOne inside forward_torch_softmax after `input.float()`:
    the cat reads and writes fp32 scores; Transformer Engine's unfused attention concatenates before its softmax
    casts, in bf16."""
    scores = 1 * 8 * 2048 * 2048
    fp32 = ("--softmax-type", "off-by-one", "--attention-softmax-in-fp32")
    local = _fwd(_cfg(*fp32, "--transformer-impl", "local"))["attn.sink_concat"]
    assert (local.bytes_moved, local.dtype) == (2.0 * scores * 4, "fp32")
    assert _fwd(_cfg(*fp32))["attn.sink_concat"].bytes_moved == 2.0 * scores * 2
    assert _fwd(_cfg("--softmax-type", "off-by-one", "--transformer-impl", "local"))["attn.sink_concat"].bytes_moved \
        == 2.0 * scores * 2

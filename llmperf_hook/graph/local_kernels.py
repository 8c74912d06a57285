"""Kernels of Megatron's local (non-Transformer-Engine) layers that the GEMM and attention-core ops leave out.

- The QKV bias add. Megatron's column-parallel linear does not fuse its bias into the GEMM:
  LinearWithGradAccumulationAndAsyncCommunication.forward runs `output = torch.matmul(total_input, weight.t())`,
  then `output = output + bias` (megatron-core 0.16.1 core/tensor_parallel/layers.py; the same in
  microsoft/Megatron-DeepSpeed 4822c87e megatron/core/tensor_parallel/layers.py:273-275), and its backward
  `grad_bias = grad_output.sum(dim=0)`. The QKV projection is the one column-parallel linear that keeps its bias
  (skip_bias_add False: megatron-core attention.py linear_qkv, Megatron-DeepSpeed ParallelAttention.query_key_value);
  the MLP's FC1 and the row-parallel linears hand theirs to the bias-GeLU and bias-dropout-add kernels (layer_ops
  activation / residual). Transformer Engine's Linear adds the bias in the GEMM's epilogue: no kernel. Nor does
  torch.nn.Linear, which a torch script's attention runs (the CPU testbed's train_gpt.py, transformers' models):
  F.linear is aten::linear, which calls at::addmm(bias, input, weight.t()) on a 2-D input and flattens a contiguous
  3-D one into the same addmm (_flatten_nd_linear; aten/src/ATen/native/Linear.cpp), the bias in the GEMM's
  epilogue; the H200 kernel tables of that script show 48 aten::addmm a step and no bias add (measurements/
  h200-sxm-141gb-2026-11-27-b/kernels/ds_bf16_zero2.txt). Its backward's bias-gradient reduction (addmm's backward
  sums the gradient over the tokens) is not priced apart for such a script's linears, the QKV's included.
- The context copy of the unfused attention: CoreAttention (Megatron-DeepSpeed megatron/model/transformer.py:361)
  and megatron-core's DotProductAttention (dot_product_attention.py:245) run
  `context.permute(2, 0, 1, 3).contiguous()` on the [b, heads, s, d] output of the AV bmm: one copy kernel. Its
  backward is no kernel: contiguous() passes the gradient through and permute() is a view, whose result the AV
  bmm's backward takes as a strided batched operand (batch stride d, leading dimension b x heads x d).

Their host time is already counted: predict/host_issue.py prices one host unit per modelled op for the framework
ops Megatron issues around it, the GEMM's bias add and the views and transposes among them (the unit read from
vTrain's host-bound S24 cells with that op list). So both ops are tagged host=lumped: GPU time only."""

from __future__ import annotations

from dataclasses import replace

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.layer_ops import IDENTITY_BACKWARD, LayerContext, elementwise
from llmperf_hook.graph.op import Op

SCRIPT_FRAMEWORKS = frozenset({"deepspeed", "hf-deepspeed", "torch"})
"""TrainingConfig.framework of a script whose network is its own or transformers' (the set of
schedule/activations.SCRIPT_FRAMEWORKS, which the graph cannot import: stage [5] builds on stage [3])."""

LUMPED_HOST = "lumped"
"""Tag value (host=lumped) of an op whose host time is in the unit of the modelled op it follows
(predict/host_issue.op_host_units gives it none)."""


def qkv_bias_add(ctx: LayerContext, width: int) -> list[Op]:
    """The local QKV linear's `output + bias` over its tokens x width output (read and write: 2 passes; backward the
    bias-gradient sum, graph/backward.py BWD_BYTES_FACTOR), when the layers are Megatron's local ones with a QKV
    bias (ModelShape.qkv_biased: --add-bias-linear, Megatron's default, or --add-qkv-bias), and not nn.Linear's
    (torch_linear_script: the bias in addmm's epilogue)."""
    if ctx.cfg.transformer_impl != "local" or not ctx.cfg.model.qkv_biased or torch_linear_script(ctx.cfg):
        return []
    elements = ctx.tokens * width
    op = elementwise("attn.qkv_bias", "bias_add", {"elements": elements}, elements, ctx, passes=2.0)
    return [replace(op, tags={**op.tags, "host": LUMPED_HOST})]


def torch_linear_script(cfg: TrainingConfig) -> bool:
    """Whether the layers are a torch script's torch.nn.Linear, not Megatron's linear autograd functions: a script
    that is not Megatron's (framework deepspeed / hf-deepspeed / torch: schedule/activations.SCRIPT_FRAMEWORKS) or
    one ZeRO-3 treats as nn.Linear (TrainingConfig.torch_linear_layers)."""
    return cfg.torch_linear_layers or cfg.framework in SCRIPT_FRAMEWORKS


def context_copy(ctx: LayerContext, width: int) -> list[Op]:
    """The unfused local attention's permute(2, 0, 1, 3).contiguous() of its tokens x width (heads x head dim on
    the rank) context: read and write, no backward kernel."""
    if ctx.cfg.transformer_impl != "local" or ctx.cfg.attention_backend != "unfused":
        return []
    elements = ctx.tokens * width
    op = elementwise("attn.context_copy", "context_copy", {"elements": elements}, elements, ctx, passes=2.0)
    return [replace(op, tags={**op.tags, "host": LUMPED_HOST, "backward": IDENTITY_BACKWARD})]

"""The unfused bias-activation (graph/layer_ops.activation) adds the FC1 bias where the MLP has one
(ModelShape.mlp_biased), not wherever the attention's linears are biased (add_bias_linear): Megatron's mlp.py adds
`bias_parallel` from linear_fc1 before the activation when bias_activation_fusion is off."""

from __future__ import annotations

from dataclasses import replace

from llmperf_hook.api import resolve_command
from llmperf_hook.graph.build import build_context
from llmperf_hook.graph.layer_ops import mlp_ops

MEGATRON = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "2048",
            "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--vocab-size", "50304", "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16",
            "--no-bias-gelu-fusion"]


def _activation(cfg, **shape: object):
    cfg = replace(cfg, model=replace(cfg.model, **shape))
    return next(op for op in mlp_ops(build_context(cfg, 8)) if op.name == "mlp.gelu")


def test_the_fc1_bias_follows_the_mlps_biases() -> None:
    cfg = resolve_command(MEGATRON, {}, cluster="dgx-h100")[1]
    assert not cfg.bias_activation_fusion and cfg.model.add_bias_linear
    assert _activation(cfg).op_class == "bias_activation"
    # biased attention, unbiased MLP (ModelShape.mlp_bias False): the activation alone
    assert _activation(cfg, mlp_bias=False).op_class == "gelu"
    # unbiased attention, biased MLP: the bias add comes back
    assert _activation(cfg, add_bias_linear=False, mlp_bias=True).op_class == "bias_activation"

"""Backward and recompute ops derived from forward ops.

Backward of a GEMM is two GEMMs of the same size (dgrad, wgrad): 2x the forward FLOPs and bytes. Flash
attention backward recomputes the scores and runs five GEMM-like products against two in forward: 2.5x
(Dao 2023, FlashAttention-2, Sec. 3.2). Memory-bound ops read the saved input and the output gradient and write
the input gradient: ~2x forward traffic. Collectives mirror their forward: all-gather <-> reduce-scatter under
sequence parallelism, all-reduce stays (the conjugate f/g operators of Shoeybi et al. 2019), all-to-all and the
CP exchange repeat (the CP ring also returns dK/dV, 2x).
"""

from __future__ import annotations

from llmperf_hook.graph.op import Op

BWD_FLOP_FACTOR = {"gemm": 2.0, "bmm": 2.0, "router": 2.0, "attention": 2.5}
BWD_BYTES_FACTOR = {"cross_entropy": 14.0 / 38.0, "cast": 1.0, "scale": 1.0, "bias_dropout_add": 0.8,
                    "bias_activation": 1.25}
"""Backward traffic / forward traffic where it is not the FLOP factor: Megatron's cross-entropy backward moves
14 bytes per logit against 38 in forward (graph/layer_ops.py CE_FWD_BYTES_PER_LOGIT); the unfused softmax
path's cast and scale (layer_ops.softmax_fallback_ops) backpropagate as one kernel of the same traffic (cast
back, multiply by the scale); its mask fill is two kernels (backward_bytes). The unfused bias-dropout-add and
bias-activation (layer_ops.residual / activation, --no-bias-dropout-fusion / --no-bias-gelu-fusion) backpropagate
as their fused kernels do (the add passes its gradient through; dropout's mask multiply and the bias-gradient sum run
either way): bias-dropout-add the fused residual's 6 passes (0.8 x its 7.5 forward passes with biases and dropout),
bias + GeLU the GeLU's 4 passes plus one read of the gradient for the bias sum (1.25 x its 4)."""
BWD_COMM_CLASS = {"allgather": "reducescatter", "reducescatter": "allgather"}
SELECTIVE_RECOMPUTE_CLASSES = frozenset({"attention", "bmm", "softmax", "dropout", "cast", "scale", "mask_fill"})
"""Korthikanti et al. 2022 Sec. 5: selective recompute replays the attention core (QK^T, softmax, dropout, AV)."""


def backward_op(op: Op) -> Op:
    # Op(...) directly rather than dataclasses.replace: this runs for every op of every graph built.
    if op.collective is not None:
        factor = 2.0 if op.name == "attn.cp_kv_exchange" else 1.0
        return Op(op.name, BWD_COMM_CLASS.get(op.op_class, op.op_class), "bwd", {"bytes": int(op.dims["bytes"] * factor)},
                  op.flops, op.bytes_moved, op.dtype, op.collective, op.tags)
    factor = BWD_FLOP_FACTOR.get(op.op_class, 2.0)
    return Op(op.name, op.op_class, "bwd", op.dims, op.flops * factor, backward_bytes(op, factor), op.dtype, None,
              op.tags)


TORCH_SOFTMAX_BWD_BYTES_FACTOR = 3.0
"""PyTorch's softmax backward on CUDA is two kernels (aten/src/ATen/native/cuda/SoftMax.cu
softmax_backward_cuda_out: `Tensor tmp = grad * output;` then host_softmax_backward(tmp, output)): the product
reads grad and output and writes tmp, the reduction kernel reads tmp and output and writes the input gradient:
6 tensor passes against the forward's 2 (read scores, write probabilities). Megatron's fused softmax kernels
(scaled_masked_softmax backward) are one kernel of 3 passes: the default factor. Check, not fit: in the H100
kernel table of l12h1024-m4 (measurements/h100-sxm5-80gb-2026-11-26-b/kernels) the 24 fp32 softmax backwards
take 25.2 ms of _softmax_backward_data plus ~25 ms of the 80 `mul` calls (24 of them s^2 fp32 products), against
37.5 ms for the 48 forwards: 2.7x one forward."""


def backward_bytes(op: Op, flop_factor: float) -> float:
    """HBM bytes of a memory-bound op's backward (BWD_BYTES_FACTOR, else the FLOP factor), with two ops whose
    backward is more than one kernel: PyTorch's softmax (TORCH_SOFTMAX_BWD_BYTES_FACTOR, ops tagged kernel=torch by
    layer_ops.attention_core) and the mask fill of the unfused softmax path, whose gradient is
    `grad.masked_fill(mask, 0)` (torch derivatives.yaml masked_fill_.Scalar): at::masked_fill clones the gradient
    (read + write, no mask) and runs masked_fill_ on the clone (the forward's traffic): 2 x forward - the mask byte."""
    if op.op_class == "mask_fill":
        return 2.0 * op.bytes_moved - float(op.dims.get("elements", 0))
    if op.op_class == "softmax" and op.tags.get("kernel") == "torch":
        return op.bytes_moved * TORCH_SOFTMAX_BWD_BYTES_FACTOR
    return op.bytes_moved * BWD_BYTES_FACTOR.get(op.op_class, flop_factor)


def _replayed(op: Op) -> Op:
    return Op(op.name, op.op_class, "recompute", op.dims, op.flops, op.bytes_moved, op.dtype, op.collective, op.tags)


def recompute_ops(fwd: list[Op], granularity: str) -> list[Op]:
    """The forward ops replayed before backward: all of them (full) or the attention core (selective)."""
    if granularity == "full":
        return [_replayed(op) for op in fwd]
    if granularity == "selective":
        return [_replayed(op) for op in fwd if op.name.startswith("attn.") and op.op_class in SELECTIVE_RECOMPUTE_CLASSES]
    return []


def backward_block(fwd: list[Op], granularity: str) -> tuple[Op, ...]:
    """Recomputed forward (if any), then the backward ops in reverse execution order."""
    return tuple(recompute_ops(fwd, granularity) + [backward_op(op) for op in reversed(fwd)])

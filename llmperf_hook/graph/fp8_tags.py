"""Tags that say how Transformer Engine runs an FP8 run's linear layers, read by the cost models: the scaling recipe
of each FP8 GEMM's quantize (predict/roofline.fp8_quantize_s), which of its operands sequence parallelism gathers,
and which TP traffic travels quantized (graph/backward.py, layer_ops.tp_enter / tp_exit)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # layer_ops imports this module
    from llmperf_hook.graph.layer_ops import LayerContext


SP_GATHERED_TAG = "fp8_sp_gathered"
"""Tag naming the FP8 operand of a GEMM that sequence parallelism all-gathers; its value is "<input|grad>/<tp>"."""


def fp8_gathered_tag(ctx: LayerContext, operand: str) -> dict[str, str]:
    """Tag of an FP8 GEMM whose `operand` is all-gathered over TP under sequence parallelism: Transformer Engine
    quantizes the rank's local shard, row-wise only, before the all-gather, and makes the column-wise (transposed)
    copy the weight-gradient GEMM needs from the gathered FP8 tensor in backward (transformer_engine/pytorch/module/
    linear.py _Linear.forward, 'Cast local input tensor if needed': per-tensor FP8 quantizers set columnwise=False,
    'All-gather is not supported with FP8 column-wise data'; the output gradient of a row-parallel layer likewise
    in grad_output_preprocess). predict/roofline.fp8_quantize_s prices those bytes."""
    if not operand or ctx.dtype != "fp8" or ctx.tp.group_size == 1 or not ctx.cfg.parallel.sequence_parallel:
        return {}
    return {SP_GATHERED_TAG: f"{operand}/{ctx.tp.group_size}"}


CURRENT_SCALING = "current"
"""Tag value (fp8_scaling=current) of an FP8 GEMM whose operands Transformer Engine scales from their own amax
(Megatron --fp8-recipe tensorwise: Float8CurrentScaling), which predict/roofline.fp8_quantize_s prices."""
BLOCK_SCALING = "block"
"""Tag value (fp8_scaling=block) of an FP8 GEMM under a block-scaled recipe (Megatron --fp8-recipe mxfp8: TE's
MXFP8Quantizer, 1x32 blocks; blockwise: Float8BlockQuantizer, 1x128 activation blocks). TE all-gathers their
column-wise data as well (distributed.py _all_gather_mxfp8, _start_all_gather_fp8_blockwise), so a sequence-parallel
shard is cast both ways before the gather (module/linear.py _Linear.forward clears columnwise only for the
per-tensor Float8Quantizer / Float8CurrentScalingQuantizer) and nothing is transposed after it."""
BLOCK_SCALED_RECIPES = frozenset({"mxfp8", "blockwise"})


def fp8_scaling_tag(ctx: LayerContext) -> dict[str, str]:
    """fp8_scaling=current on the GEMMs of an FP8 run under --fp8-recipe tensorwise, =block under mxfp8 / blockwise;
    delayed scaling (the default) takes its scales from the amax history and casts per tensor: no tag."""
    if ctx.dtype != "fp8":
        return {}
    if ctx.cfg.fp8_recipe == "tensorwise":
        return {"fp8_scaling": CURRENT_SCALING}
    return {"fp8_scaling": BLOCK_SCALING} if ctx.cfg.fp8_recipe in BLOCK_SCALED_RECIPES else {}


FP8_PAYLOAD = "fp8"
"""Tag value (payload=fp8 on a sequence-parallel input gather, bwd_payload=fp8 on a reduce-scatter whose backward
gathers the output gradient) of TP traffic that Transformer Engine sends quantized: its FP8 linears cast the local
shard, then all-gather it (module/linear.py _Linear.forward, gather_along_first_dim(inputmat, quantizer=...); the
output gradient of a row-parallel linear in grad_output_preprocess; userbuffers' all-gather buffers are FP8 too,
module/base.py initialize_ub fp8_buf). The reduce-scatters of bf16 outputs and input gradients stay 2 bytes."""
FP8_PAYLOAD_BYTES = 1


def fp8_grad_payload_tag(ctx: LayerContext) -> dict[str, str]:
    """bwd_payload=fp8 on the output reduce-scatter of a row-parallel FP8 linear under sequence parallelism: its
    backward gathers the output gradient quantized, row-wise only under the per-tensor recipes (1 B per element,
    transposed after the gather); the block recipes gather both layouts (linear.py _Linear.backward sets the grad
    quantizer rowwise and columnwise): 2 B, as many as bf16, so no tag."""
    if ctx.dtype != "fp8" or ctx.cfg.fp8_recipe in BLOCK_SCALED_RECIPES:
        return {}
    return {"bwd_payload": FP8_PAYLOAD}

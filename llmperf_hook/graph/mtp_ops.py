"""Forward ops of one Megatron-Core multi-token prediction (MTP) depth on the last pipeline stage.

megatron/core/transformer/multi_token_prediction.py MultiTokenPredictionLayer, per depth k: the input tokens
shifted by k are looked up in the (shared) word embedding, the embedding and the previous hidden states are
normalised (enorm, hnorm), concatenated (2h) and projected back to h by the column-parallel eh_proj (no bias;
under sequence parallelism it all-gathers its 2h input, and its h/tp output is all-gathered over TP before
being split back to the sequence shard), then one transformer layer of the decoder's last-layer kind, the
depth's final_layernorm, the shared output layer and a cross-entropy loss (process_mtp_loss).
"""

from __future__ import annotations

from dataclasses import replace

from llmperf_hook.graph import layer_ops as lo
from llmperf_hook.graph import vocab_ops as vo
from llmperf_hook.graph.op import Op


def _concat_projection(ctx: lo.LayerContext) -> list[Op]:
    h, t = ctx.cfg.model.hidden_size, ctx.tp.group_size
    ops = [lo.norm("mtp.enorm", ctx), lo.norm("mtp.hnorm", ctx),
           lo.elementwise("mtp.concat", "permute", {"elements": 2 * ctx.norm_tokens * h}, 2 * ctx.norm_tokens * h, ctx)]
    ops += [*lo.tp_enter("mtp.eh_tp_allgather", ctx, 2 * h), lo.gemm("mtp.eh_proj", ctx.tokens, h // t, 2 * h, ctx)]
    if t > 1:  # gather_from_tensor_model_parallel_region: the h/tp output slices become T x h on every rank
        ops.append(lo.comm("mtp.eh_out_allgather", "allgather", ctx.tokens * h * ctx.act_bytes, ctx.tp, ctx))
    return ops


def mtp_head_ops(ctx: lo.LayerContext) -> list[Op]:
    """The depth's final norm, the shared output layer and its loss (the main head's ops, renamed)."""
    return [replace(op, name="mtp." + op.name.split(".", 1)[1]) for op in vo.head_ops(ctx)]


def mtp_depth_ops(ctx: lo.LayerContext, layer: list[Op]) -> list[Op]:
    """One MTP depth up to its loss head: the shifted tokens' embedding, the concat projection and `layer` (the
    transformer layer's forward ops); mtp_head_ops follow."""
    embed = [replace(op, name="mtp." + op.name) for op in vo.embedding_ops(ctx)]
    return [*embed, *_concat_projection(ctx), *layer]

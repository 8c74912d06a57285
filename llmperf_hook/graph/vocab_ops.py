"""Forward ops of the model's vocabulary-sized ends on one rank: the word (+ position) embedding, and the final norm,
LM head and cross-entropy loss; plus the tied embedding weight's gradient sum in backward.

Shapes and TP collectives as in graph/layer_ops.py (megatron/core/tensor_parallel/layers.py VocabParallelEmbedding,
models/gpt/gpt_model.py output_layer, tensor_parallel/cross_entropy.py).
"""

from __future__ import annotations

from llmperf_hook.graph.layer_ops import (IDENTITY_BACKWARD, LayerContext, async_dgrad_tags, comm, elementwise, gemm,
                                          norm, own_grad_allreduce, tp_enter, tp_exit)
from llmperf_hook.graph.op import Op


def embedding_ops(ctx: LayerContext) -> list[Op]:
    """Vocab-parallel embedding lookup (+ learned positions), then all-reduce, whose backward is the identity
    (IDENTITY_BACKWARD), or under SP a reduce-scatter, whose backward all-gathers the gradient
    (reduce_scatter_to_sequence_parallel_region)."""
    m = ctx.cfg.model
    vocab = m.padded_vocab_size // ctx.tp.group_size
    out = ctx.tokens * m.hidden_size
    ops = [Op("embedding.lookup", "embedding", "fwd", {"tokens": ctx.tokens, "vocab": vocab, "hidden": m.hidden_size},
              bytes_moved=float(2 * out * ctx.act_bytes), dtype=ctx.dtype)]
    if ctx.tp.group_size > 1 and not ctx.cfg.parallel.sequence_parallel:
        ops.append(comm("embedding.tp_reduce", "allreduce", out * ctx.act_bytes, ctx.tp, ctx,
                        backward=IDENTITY_BACKWARD))
    else:
        ops += tp_exit("embedding.tp_reduce", ctx)
    ops.append(elementwise("embedding.dropout", "dropout", {"elements": ctx.norm_tokens * m.hidden_size},
                           ctx.norm_tokens * m.hidden_size, ctx))
    return ops


CE_FWD_BYTES_PER_LOGIT = 2 + 4 + 4 + 8 + 8 + 4 + 8
"""HBM bytes per logit of Megatron's vocab-parallel cross-entropy forward (tensor_parallel/cross_entropy.py):
cast of the 16-bit logits to fp32 (read 2, write 4), max (read 4), subtract the max (read 4 + write 4), exp in
place (8), sum (read 4), divide in place for the saved softmax (8). Its backward (graph/backward.py) multiplies
the saved softmax by the loss gradient in place (8) and casts the gradient back to 16 bit (read 4, write 2)."""


def head_ops(ctx: LayerContext) -> list[Op]:
    """Final norm, vocab-parallel LM head GEMM and cross-entropy (max/sum all-reduces of T floats over TP).

    The LM head is a ColumnParallelLinear (megatron/core/models/gpt/gpt_model.py output_layer; Megatron-DeepSpeed's
    parallel_lm_logits: copy_to_tensor_model_parallel_region, or the async path): without SP its T x h input
    gradient is all-reduced beside its weight-grad GEMM (own_grad_allreduce), async and overlapped where the job
    runs Megatron's async path (the cross-entropy all-reduce carries async_dgrad_tags for it). The cross-entropy's
    own all-reduces have no backward collective (cross_entropy.py VocabParallelCrossEntropy.backward is local)."""
    m = ctx.cfg.model
    vocab = m.padded_vocab_size // ctx.tp.group_size
    ops = [norm("head.final_norm", ctx), *tp_enter("head.tp_allgather", ctx),
           own_grad_allreduce(gemm("head.lm_head", ctx.tokens, vocab, m.hidden_size, ctx), ctx),
           Op("head.cross_entropy", "cross_entropy", "fwd", {"tokens": ctx.tokens, "vocab": vocab},
              bytes_moved=float(CE_FWD_BYTES_PER_LOGIT * ctx.tokens * vocab), dtype=ctx.dtype)]
    if ctx.tp.group_size > 1:
        tags = {} if ctx.cfg.parallel.sequence_parallel else async_dgrad_tags(ctx)
        ops.append(comm("head.ce_allreduce", "allreduce", 3 * ctx.tokens * 4, ctx.tp, ctx,
                        backward=IDENTITY_BACKWARD, **tags))
    return ops


def tied_grad_sum_ops(ctx: LayerContext) -> tuple[Op, ...]:
    """The tied word-embedding weight's two gradients of one micro-batch summed, when the embedding and the LM head
    run on the same rank (one chunk holds both). Autograd adds the LM head's weight gradient and the lookup's dense
    gradient in the weight's input buffer before AccumulateGrad (torch/csrc/autograd/input_buffer.cpp accumulate:
    old_var.add_(var), else old_var + var): read both, write one, vocab/tp x hidden elements in the weight's dtype.
    The head's weight gradient is a tensor everywhere: DeepSpeed's engines, Hugging Face models and Megatron-DeepSpeed
    (grad_output.t().matmul(total_input), its fused accumulation commented out in core/tensor_parallel/layers.py)
    return the product; Megatron-LM with --gradient-accumulation-fusion writes the product into main_grad and returns
    a zero-filled dummy of the weight's shape for the shared weight at pp 1 (language_module.py sets zero_out_wgrad,
    layers.py: TE get_dummy_wgrad(..., zero=True) fill_(0), else torch.zeros; a96650b9b2 / 06d45e2634, 2023-11),
    one more write pass, which autograd sums all the same. With untied embeddings there is nothing to sum."""
    cfg = ctx.cfg
    if cfg.model.untie_embeddings:
        return ()
    elements = cfg.model.padded_vocab_size // ctx.tp.group_size * cfg.model.hidden_size
    passes = 4 if cfg.framework == "megatron" and cfg.gradient_accumulation_fusion else 3
    return (Op("head.tied_grad_sum", "grad_sum", "bwd", {"elements": elements}, flops=0.0,  # not model FLOPs (MFU)
               bytes_moved=float(passes * elements * ctx.act_bytes), dtype=ctx.dtype),)

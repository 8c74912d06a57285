"""Forward ops of the model's vocabulary-sized ends on one rank: the word (+ position) embedding, and the final norm,
LM head and cross-entropy loss; plus the tied embedding weight's gradient sum in backward.

Shapes and TP collectives as in graph/layer_ops.py (megatron/core/tensor_parallel/layers.py VocabParallelEmbedding,
models/gpt/gpt_model.py output_layer, tensor_parallel/cross_entropy.py).
"""

from __future__ import annotations

from llmperf_hook.graph.layer_ops import (IDENTITY_BACKWARD, LayerContext, async_dgrad_tags, comm, elementwise, gemm,
                                          norm, own_grad_allreduce, tp_enter, tp_exit)
from llmperf_hook.graph.op import Op
from llmperf_hook.graph.params import embedding_width, position_table_rows


def embedding_ops(ctx: LayerContext) -> list[Op]:
    """Vocab-parallel embedding lookup, then all-reduce, whose backward is the identity (IDENTITY_BACKWARD), or
    under SP a reduce-scatter, whose backward all-gathers the gradient (reduce_scatter_to_sequence_parallel_region);
    then the learned positions (position_ops) and the dropout: torch.nn.Dropout(hidden_dropout)
    (language_model_embedding.py embedding_dropout), which at p = 0 returns its input and runs no kernel (ATen
    Dropout.cpp _dropout_impl: `if (p == 0 || !train || input.numel() == 0) return input`), so none is priced."""
    m = ctx.cfg.model
    vocab = m.padded_vocab_size // ctx.tp.group_size
    out = ctx.tokens * m.hidden_size
    ops = [Op("embedding.lookup", "embedding", "fwd", {"tokens": ctx.tokens, "vocab": vocab, "hidden": m.hidden_size},
              bytes_moved=float(2 * out * ctx.act_bytes), dtype=ctx.dtype)]
    if ctx.tp.group_size > 1 and not (ctx.cfg.parallel.sequence_parallel and reduce_scatters_embedding(ctx)):
        ops.append(comm("embedding.tp_reduce", "allreduce", out * ctx.act_bytes, ctx.tp, ctx,
                        backward=IDENTITY_BACKWARD))
    else:
        ops += tp_exit("embedding.tp_reduce", ctx)
    ops += position_ops(ctx)
    if ctx.cfg.hidden_dropout > 0:
        ops.append(elementwise("embedding.dropout", "dropout", {"elements": ctx.norm_tokens * m.hidden_size},
                               ctx.norm_tokens * m.hidden_size, ctx))
    return ops


def reduce_scatters_embedding(ctx: LayerContext) -> bool:
    """Under SP the word embedding's TP reduction is a reduce-scatter only in Megatron-LM without learned positions
    (language_model_embedding.py: reduce_scatter_embeddings = not add_position_embedding and sequence_parallel,
    since cbf81447cc, 2024-04). With learned positions the full T x h sum is needed for the add: all-reduce, add,
    then scatter_to_sequence_parallel_region (a split; its backward all-gathers the gradient:
    embedding_scatter_backward). Megatron-DeepSpeed always all-reduces and scatters (megatron/model/
    language_model.py Embedding.forward; VocabParallelEmbedding: reduce_from_tensor_model_parallel_region)."""
    return ctx.cfg.framework == "megatron" and ctx.cfg.model.position_embedding != "learned_absolute"


def position_ops(ctx: LayerContext) -> list[Op]:
    """The learned position embedding (--position-embedding-type learned_absolute, Megatron's default; GPT-2's
    wpe): a lookup of the T position ids in the position_table_rows x h table and its add into the word embedding
    (language_model_embedding.py: `embeddings = word_embeddings + position_embeddings`, after the word embedding's
    TP all-reduce; Megatron-DeepSpeed's Embedding and Hugging Face GPT2Model the same). The fitted embedding class
    is torch.nn.functional.embedding of one table (profile/op_sampler.py), so the position lookup is an op of its
    own: a serial torch.nn.Embedding, whole on every TP rank; its backward writes the table's dense gradient. The
    add reads two T x h tensors and writes one; autograd passes its gradient to both inputs unchanged (AddBackward0
    runs no kernel): backward=identity. The table's gradient is reduced with the other parameters over DP; its TP
    replicas see the same all-reduced input and gradient, and no other pipeline stage holds it (only the word
    embedding is shared with the LM head), so no further collective."""
    rows = position_table_rows(ctx.cfg)
    if not rows:
        return []
    h = ctx.cfg.model.hidden_size
    out = ctx.tokens * h
    return [Op("embedding.position_lookup", "embedding", "fwd", {"tokens": ctx.tokens, "vocab": rows, "hidden": h},
               bytes_moved=float(2 * out * ctx.act_bytes), dtype=ctx.dtype),
            Op("embedding.position_add", "residual_add", "fwd", {"elements": out}, flops=0.0,
               bytes_moved=float(3 * out * ctx.act_bytes), dtype=ctx.dtype, tags={"backward": IDENTITY_BACKWARD})]


def embedding_scatter_backward(ctx: LayerContext) -> tuple[Op, ...]:
    """Backward of scatter_to_sequence_parallel_region after an all-reduced embedding under SP
    (reduce_scatters_embedding False): _ScatterToSequenceParallelRegion.backward gathers the T x h gradient over
    TP (_gather_along_first_dim), so every rank's lookups see the whole gradient."""
    p = ctx.cfg.parallel
    if ctx.tp.group_size == 1 or not p.sequence_parallel or reduce_scatters_embedding(ctx):
        return ()
    nbytes = ctx.tokens * ctx.cfg.model.hidden_size * ctx.act_bytes
    return (Op("embedding.sp_scatter", "allgather", "bwd", {"bytes": int(nbytes)}, dtype=ctx.dtype,
               collective=ctx.tp),)


MICROBATCH_LOAD_TAG = "microbatch_load"
"""Tag of the op whose pass carries the micro-batch load of a last pipeline stage that is not the first: that stage
loads the labels and loss mask of every micro-batch too (predict/host_issue.py, MICROBATCH_PROLOGUE_UNITS)."""


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


def weight_grad_sum_ops(ctx: LayerContext, first: bool) -> tuple[Op, ...]:
    """Autograd's sums of the vocabulary weights' gradient contributions in one micro-batch on the last stage (the
    head's rank; `first`: the embedding is on it too). A weight used k times gets k gradients, added in its input
    buffer before AccumulateGrad (torch/csrc/autograd/input_buffer.cpp accumulate: old_var.add_(var), else
    old_var + var): k - 1 adds of vocab/tp x width elements, each reading two and writing one.

    The uses: the tied word weight is looked up by the embedding (first stage) and multiplied by the LM head; with MTP
    (last stage) each depth looks up its shifted tokens in it and runs the shared output layer once more
    (multi_token_prediction.py; gpt_model.py builds the embedding where mtp_process and shares it with the output
    layer, shared_embedding_or_output_weight); untied, the output layer is used 1 + D times and the word embedding by
    the first stage's lookup plus the D MTP lookups. The head's weight gradient is a tensor everywhere (DeepSpeed's
    engines, Hugging Face models, Megatron-DeepSpeed: grad_output.t().matmul(total_input)) except Megatron-LM with
    --gradient-accumulation-fusion, whose linears write the product into main_grad and return
    TrainingConfig.fused_wgrad_return: nothing before 2023-08 (that use adds no gradient), an empty dummy after, a
    zero-filled one for the shared weight at pp 1 since 2023-11 (one more write pass each, summed all the same)."""
    cfg = ctx.cfg
    depths = cfg.model.mtp_num_layers
    fused = cfg.framework == "megatron" and cfg.gradient_accumulation_fusion
    head_adds = not fused or cfg.fused_wgrad_return != "none"
    lookups = int(first) + depths
    heads = (1 + depths) * int(head_adds)
    if cfg.model.untie_embeddings:
        uses = {"head.output_grad_sum": (heads, 0), "head.embedding_grad_sum": (lookups, 0)}
    else:
        zero_fill = fused and cfg.fused_wgrad_return == "zeros" and cfg.parallel.pp == 1
        uses = {"head.tied_grad_sum": (lookups + heads, heads if zero_fill else 0)}
    elements = cfg.model.padded_vocab_size // ctx.tp.group_size * embedding_width(cfg)
    ops: list[Op] = []
    for name, (grads, fills) in uses.items():
        for k in range(grads - 1):  # the zero fills are written once, before the first add
            passes = 3 + (fills if k == 0 else 0)
            ops.append(Op(name, "grad_sum", "bwd", {"elements": elements}, flops=0.0,  # not model FLOPs (MFU)
                          bytes_moved=float(passes * elements * ctx.act_bytes), dtype=ctx.dtype))
    return tuple(ops)

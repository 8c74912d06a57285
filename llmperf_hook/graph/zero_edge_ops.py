"""DeepSpeed ZeRO-2/3 ops of the word embedding and the output layer, per micro-batch.

- Gradients (ZeRO-2/3): partitioned gradients are reduced in every micro-step's backward, the embedding's and the
  output layer's as the layers' (stage_1_and_2.py process_gradients -> reduce_ready_partitions_and_remove_grads
  when partition_gradients; stage3.py the same), so they are block ops of the micro-batch, not once per step.
- Fetches (ZeRO-3, graph/zero3_trace.py): the word embedding is the first parameter of every micro-batch's trace,
  so its all-gather runs with nothing before it to hide behind, prefetch or not; the output layer is prefetched
  behind the last layer's forward (or still gathered since the embedding's forward when tied and the model fits in
  the reuse distance) and stays gathered into its backward; the embedding's backward fetch is prefetched behind the
  first layer's backward, or skipped when still gathered. Same groups, dtypes and host copies as a layer's fetch
  (zero_layer_ops: hpZ, qwZ, offload_param, the pre-v0.5.5 list gathers).
Only DeepSpeed: Megatron FSDP / torch FSDP2 priced through zero_stage keep their own rules (graph/step_ops.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph import params as pc
from llmperf_hook.graph.op import Collective, Op, Phase
from llmperf_hook.graph.op_graph import OpBlock
from llmperf_hook.graph.step_ops import comm_op, dp_groups, param_bytes
from llmperf_hook.graph.zero3_trace import deepspeed_zero, stage_trace
from llmperf_hook.graph.zero_layer_ops import hpz_group, offload_param_copy_ops, zero3_fetch_ops, zero_grad_reduce_ops

Edge = Literal["embedding", "head"]


def edge_params(cfg: TrainingConfig, edge: Edge) -> int:
    """All parameters of the embedding block (word + position tables) or the head block (final norm, output layer)."""
    return pc.embedding_params(cfg) if edge == "embedding" else pc.head_params(cfg)


def with_zero_edge_ops(cfg: TrainingConfig, block: OpBlock, stage: int, edge: Edge, gpus_per_node: int) -> OpBlock:
    """The embedding or head block of rank `stage` with its ZeRO ops: fetches before its forward and its backward,
    the gradient reduction after its backward."""
    fwd, bwd, reduce = zero_edge_ops(cfg, stage, edge, gpus_per_node)
    if not (fwd or bwd or reduce):
        return block
    return replace(block, fwd=fwd + block.fwd, bwd=bwd + block.bwd + reduce)


def zero_edge_ops(cfg: TrainingConfig, stage: int, edge: Edge,
                  gpus_per_node: int) -> tuple[tuple[Op, ...], tuple[Op, ...], tuple[Op, ...]]:
    """(fetch before the forward, fetch before the backward, gradient reduction) of the embedding or head block."""
    dense, _ = dp_groups(cfg, gpus_per_node)
    if not deepspeed_zero(cfg) or dense.group_size == 1:
        return (), (), ()
    reduce = _grad_reduce(cfg, edge_params(cfg, edge), dense)
    if cfg.optimizer.zero_stage < 3:
        return (), (), reduce
    trace = stage_trace(cfg, stage)
    secondary = hpz_group(cfg, dense, gpus_per_node)
    if edge == "embedding":
        # the first fetch of the micro-batch: nothing runs before it, so it is exposed even when prefetching
        fetch = _fetch(cfg, trace.embedding_elems, dense, secondary, "fwd", gpus_per_node)
        fwd = tuple(replace(op, tags={}) for op in fetch)
        bwd = _fetch(cfg, trace.embedding_elems, dense, secondary, "bwd", gpus_per_node) \
            if trace.embedding_bwd_fetch else ()
        return fwd, bwd, reduce
    elems = trace.output_elems or pc.embedding_params(cfg)  # tied: the embedding's own weight
    fwd = _fetch(cfg, elems, dense, secondary, "fwd", gpus_per_node) if trace.head_fwd_fetch else ()
    bwd = _fetch(cfg, elems, dense, secondary, "bwd", gpus_per_node) if trace.head_bwd_fetch else ()
    return fwd, bwd, reduce


def _grad_reduce(cfg: TrainingConfig, numel: int, dense: Collective) -> tuple[Op, ...]:
    """The block's gradient reduction; DeepSpeed before v0.6.0 reduce-scattered each parameter's gradient in the
    parameters' dtype (graph/zero3_legacy.py): here one tensor of the block's size."""
    if cfg.optimizer.zero_stage == 3 and cfg.optimizer.zero3_per_tensor_grad_reduce:
        overlap = "grad_reduce" if cfg.optimizer.overlap_grad_reduce else None
        return (comm_op("zero3_legacy.grad_reduce_scatter", "reducescatter", "bwd", numel * param_bytes(cfg), dense,
                        cfg, overlap),)
    return zero_grad_reduce_ops(cfg, numel, dense)


def _fetch(cfg: TrainingConfig, numel: int, dense: Collective, secondary: Collective | None, phase: Phase,
           ranks_per_host: int) -> tuple[Op, ...]:
    """One fetch of a single parameter tensor: its host copy under offload_param, then its all-gather over the data-
    parallel group, or, under hpZ, over the secondary group once a forward has released it (the first micro-batch's
    forward gathers over the whole group, as zero_layer_ops._zero_layer_comm prices a layer's)."""
    if numel <= 0:
        return ()
    m = max(1, cfg.batch.num_microbatches)
    if secondary is None:
        paths = ((dense, 1.0),)
    elif phase == "fwd" and m > 1:
        paths = ((dense, 1.0 / m), (secondary, (m - 1) / m))
    else:
        paths = ((dense if phase == "fwd" else secondary, 1.0),)
    copy_fwd, copy_bwd = offload_param_copy_ops(cfg, numel, dense.group_size, (numel,), ranks_per_host)
    ops = copy_fwd if phase == "fwd" else copy_bwd
    for coll, share in paths:
        ops += zero3_fetch_ops(cfg, numel, coll, phase, share, modules=(numel,))
    return ops

"""Stage [3] output: the per-rank operator graph of one training step, repeated layers stored once with a count.

A pipeline rank (`StageGraph`) holds `vpp` model chunks (`ChunkOps`); a chunk is a list of `OpBlock`s (the
embedding, N identical transformer layers, the LM head and loss), each with the ops one micro-batch runs in
forward and in backward (backward includes the recomputed forward when activation recompute is on). Per-step
ops (gradient sync, parameter gather, optimizer) sit on the stage. Every rank of a pipeline stage runs the
same graph (TP/CP/DP/EP ranks are symmetric), so one StageGraph stands for all ranks of that stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmperf_hook.graph.op import Op


@dataclass(frozen=True)
class OpBlock:
    """Ops that one micro-batch runs `count` times in a row (e.g. one transformer layer, count = layers)."""

    name: str
    """"embedding" | "dense_layer" | "moe_layer" | "head"."""
    fwd: tuple[Op, ...]
    """Forward ops of one repeat, in execution order."""
    bwd: tuple[Op, ...]
    """Backward ops of one repeat (recomputed forward first, then backward), in execution order."""
    count: int
    """Repeats per micro-batch (layers of this kind in the chunk)."""


@dataclass(frozen=True)
class ChunkOps:
    """One model chunk (virtual pipeline stage) on one pipeline rank."""

    stage: int
    """Pipeline rank 0..pp-1."""
    chunk: int
    """Virtual stage index 0..vpp-1 on this rank (model chunk number = chunk * pp + stage)."""
    num_layers: int
    blocks: tuple[OpBlock, ...]


@dataclass(frozen=True)
class StageGraph:
    """Everything one rank of pipeline stage `stage` runs in a step."""

    stage: int
    chunks: tuple[ChunkOps, ...]
    step_ops: tuple[Op, ...]
    """Once per step: gradient sync, parameter gather, optimizer; tags["overlap"] says what may hide them."""
    num_params: int
    """Parameters held by one rank of this stage (after TP/EP split, before ZeRO/distributed-optimizer sharding)."""
    num_expert_params: int = 0
    """Of `num_params`, those in MoE experts (synchronised over the expert data-parallel group)."""
    num_layers: int = 0


@dataclass(frozen=True)
class OpGraph:
    """The per-rank graph of one training step for every pipeline stage."""

    stages: tuple[StageGraph, ...]
    p2p: Op | None
    """Activation (forward) or gradient (backward) send between adjacent stages, per micro-batch; None if pp=1."""
    num_microbatches: int
    vpp: int
    model_flops_per_step: float
    """FLOPs of forward + backward of the whole step over all ranks, without recompute (for MFU)."""
    tokens_per_step: int
    warnings: tuple[str, ...] = ()
    p2p_gather: Op | None = None
    """All-gather over the TP group that rebuilds a received activation (or gradient) sent in 1/TP slices, on
    the receiver before it can compute; None when the whole tensor is sent (see graph/build.py `_p2p_ops`)."""

    def all_ops(self) -> list[Op]:
        """Every op of the graph, each block once (not multiplied by counts; blocks shared by chunks once)."""
        ops: list[Op] = [op for op in (self.p2p, self.p2p_gather) if op is not None]
        seen: set[int] = set()
        for stage in self.stages:
            ops.extend(stage.step_ops)
            for chunk in stage.chunks:
                if id(chunk.blocks) in seen:
                    continue
                seen.add(id(chunk.blocks))
                for block in chunk.blocks:
                    ops.extend(block.fwd)
                    ops.extend(block.bwd)
        return ops

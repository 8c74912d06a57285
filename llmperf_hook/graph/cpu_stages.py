"""Stages of a job placed on CPU hardware: one thread per rank runs compute, framework and communication.

Where the hardware's profile was fitted on a CPU (predict/cpu_framework.find_cpu_framework_cost finds its
measured framework cost), the per-rank graph changes in two ways, both physical:
- the optimizer op carries `param_tensors` (graph/param_tensors.py): torch's CPU Adam loop costs per tensor;
  under DeepSpeed also `deepspeed_zero` (stage) and `engine_params`: the engine's own per-step work
  (flat-buffer copies, gradient norm, master-weight copies, ZeRO bookkeeping) scales with the parameters it
  touches, (1 - f) x the stage's parameters (gradient hooks, ZeRO-3 fetch/release in forward and backward)
  + f x the rank's optimizer partition (the step's norm, update and copy back), f the measured
  `partition_fraction` of the ZeRO stage (profile/cpu_engine_cost.py; 0 for ZeRO-0, where the partition is
  the whole stage anyway). That reading's engines run one micro-batch per step; under ZeRO-2/3 its forward+backward
  share (predict/cpu_framework.fwd_bwd_share) is paid again by every further micro-batch
  (`engine_further_microbatches`, engine_further_microbatches() below), under ZeRO-0/1 it is not;
- no collective hides behind compute: the overlap tags that put ZeRO prefetches, bucketed gradient
  reductions and parameter gathers on a GPU side stream are dropped. gloo runs a collective on the calling
  thread (or a helper thread that competes for the same core under one-thread-per-rank), and DeepSpeed's
  CPU accelerator has no streams to overlap on;
- where the profile measured gloo's transport CPU (profile/cpu_rank_transport.py), one step op
  (predict/cpu_framework.TRANSPORT_OP) carries the bytes the rank puts on the wire per step: every collective of
  the stage's blocks times its count and the micro-batches, and the step's own collectives.
Any other hardware: the stages come back unchanged.
"""

from __future__ import annotations

from dataclasses import replace

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.op import Op
from llmperf_hook.graph.op_graph import StageGraph
from llmperf_hook.graph.param_tensors import optimizer_param_tensors
from llmperf_hook.hardware.spec import ClusterSpec


def _serial(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    from llmperf_hook.predict.cpu_framework import cpu_serial_op

    return tuple(cpu_serial_op(op) for op in ops)


def partition_fraction(hardware_name: str, dtype: str, zero_stage: int) -> float:
    """The measured share of DeepSpeed's per-parameter engine work done on the rank's partition (0 if none)."""
    from llmperf_hook.predict.cpu_framework import FILE_NAME, _read  # the same cached read of the same file
    from llmperf_hook.predict.fitted import profile_dirs

    for directory in profile_dirs(hardware_name):
        path = directory / FILE_NAME
        if path.is_file():
            entry = _read(str(path), path.stat().st_mtime_ns).get("dtypes", {}).get(dtype, {})
            step = entry.get("deepspeed_step", {}).get(str(zero_stage), {})
            return min(1.0, max(0.0, float(step.get("partition_fraction", 0.0))))
    return 0.0


def engine_params(full_params: int, partition_params: int, fraction: float) -> int:
    """Parameters DeepSpeed's engine touches per step on one rank (module docstring)."""
    return round((1.0 - fraction) * full_params + fraction * min(partition_params, full_params))


def engine_further_microbatches(cfg: TrainingConfig) -> int:
    """Micro-batches of a step after the first whose backward repeats DeepSpeed's gradient handling. ZeRO-2
    reduces and partitions in every micro-batch's backward (runtime/zero/stage_1_and_2.py
    reduce_ready_partitions_and_remove_grads: `if self.partition_gradients or self.is_gradient_accumulation_boundary()`
    -> reduce_independent_p_g_buckets_and_remove_grads: bucket copy, average_tensor, copy_grads_in_partition; engine.py
    allreduce_gradients: "ZeRO stage >= 2 communicates during non gradient accumulation boundaries as well"), ZeRO-3
    too (stage3.py: parameters fetched and released in every forward and backward, gradients reduce-scattered in every
    backward). ZeRO-0/1 reduce only at the boundary (allreduce_gradients' `elif self.is_gradient_accumulation_boundary()`
    -> reduce_gradients / buffered_allreduce_fallback): 0 (DeepSpeed 0.19.8; measured, /work/notes/h215.md: a ZeRO-1
    engine's further micro-batch costs 0.9-2.6 ms beyond plain torch's, a ZeRO-2 engine's 7-11 ms, on 0.55 M
    parameters)."""
    return max(0, cfg.batch.num_microbatches - 1) if cfg.optimizer.zero_stage >= 2 else 0


def _optimizer_tags(cfg: TrainingConfig, stage: StageGraph, op: Op, fraction: float) -> dict[str, str]:
    tags = {"param_tensors": str(optimizer_param_tensors(cfg, stage.stage, stage.num_layers))}
    if "deepspeed" in cfg.framework:
        partition = int(op.dims.get("params", stage.num_params))
        tags.update(deepspeed_zero=str(cfg.optimizer.zero_stage),
                    engine_params=str(engine_params(stage.num_params, partition, fraction)))
        further = engine_further_microbatches(cfg)
        if further:  # each repeats the forward+backward share of the engine's work on the stage's parameters
            tags.update(engine_further_microbatches=str(further), engine_stage_params=str(stage.num_params))
    return tags


def _transport_op(cfg: TrainingConfig, stage: StageGraph) -> tuple[Op, ...]:
    """The stage's wire bytes per step as one step op (module docstring); none without any."""
    from llmperf_hook.predict.cpu_framework import TRANSPORT_OP, transport_wire_bytes

    m = cfg.batch.num_microbatches
    wire = sum(transport_wire_bytes(op, block.count * m) for chunk in stage.chunks for block in chunk.blocks
               for op in (*block.fwd, *block.bwd))
    wire += sum(transport_wire_bytes(op) for op in stage.step_ops)
    if wire <= 0:
        return ()
    return (Op(TRANSPORT_OP, "deepspeed_bookkeeping", "step", {"wire_bytes": round(wire)}, dtype=cfg.precision),)


def _stage(cfg: TrainingConfig, stage: StageGraph, fraction: float, transport: bool) -> StageGraph:
    # DeepSpeed's engine cost on a CPU is measured as a whole (profile/cpu_engine_cost.py), bookkeeping included.
    step_ops = tuple(replace(op, tags={**op.tags, **_optimizer_tags(cfg, stage, op, fraction)})
                     if op.op_class == "optimizer" else op
                     for op in _serial(stage.step_ops) if op.op_class != "deepspeed_bookkeeping")
    step_ops += _transport_op(cfg, stage) if transport else ()
    chunks = tuple(replace(chunk, blocks=tuple(replace(b, fwd=_serial(b.fwd), bwd=_serial(b.bwd))
                                               for b in chunk.blocks)) for chunk in stage.chunks)
    return replace(stage, chunks=chunks, step_ops=step_ops)


def cpu_stages(cfg: TrainingConfig, cluster: ClusterSpec, stages: tuple[StageGraph, ...]) -> tuple[StageGraph, ...]:
    """`stages` adapted to CPU hardware (module docstring); unchanged for any other hardware."""
    from llmperf_hook.predict.cpu_framework import find_cpu_framework_cost

    cost = find_cpu_framework_cost(cluster.gpu.name, cfg.precision)
    if cost is None:
        return stages
    fraction = partition_fraction(cluster.gpu.name, cfg.precision, cfg.optimizer.zero_stage) \
        if "deepspeed" in cfg.framework else 0.0
    return tuple(_stage(cfg, s, fraction, cost.transport_per_byte_s > 0) for s in stages)


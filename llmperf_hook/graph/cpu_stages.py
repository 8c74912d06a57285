"""Stages of a job placed on CPU hardware: one thread per rank runs compute, framework and communication.

Where the hardware's profile was fitted on a CPU (predict/cpu_framework.find_cpu_framework_cost finds its
measured framework cost), the per-rank graph changes in two ways, both physical:
- the optimizer op carries `param_tensors` (graph/param_tensors.py): torch's CPU Adam loop costs per tensor;
  under DeepSpeed also `deepspeed_zero` (stage) and `engine_params` (the stage's parameters): the engine's
  own per-step work (flat-buffer copies, gradient norm, master-weight copies, ZeRO bookkeeping) scales with them;
- no collective hides behind compute: the overlap tags that put ZeRO prefetches, bucketed gradient
  reductions and parameter gathers on a GPU side stream are dropped. gloo runs a collective on the calling
  thread (or a helper thread that competes for the same core under one-thread-per-rank), and DeepSpeed's
  CPU accelerator has no streams to overlap on.
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


def _stage(cfg: TrainingConfig, stage: StageGraph) -> StageGraph:
    tags = {"param_tensors": str(optimizer_param_tensors(cfg, stage.stage, stage.num_layers))}
    if "deepspeed" in cfg.framework:
        tags.update(deepspeed_zero=str(cfg.optimizer.zero_stage), engine_params=str(stage.num_params))
    # DeepSpeed's engine cost on a CPU is measured as a whole (profile/cpu_framework.py), bookkeeping included.
    step_ops = tuple(replace(op, tags={**op.tags, **tags}) if op.op_class == "optimizer" else op
                     for op in _serial(stage.step_ops) if op.op_class != "deepspeed_bookkeeping")
    chunks = tuple(replace(chunk, blocks=tuple(replace(b, fwd=_serial(b.fwd), bwd=_serial(b.bwd))
                                               for b in chunk.blocks)) for chunk in stage.chunks)
    return replace(stage, chunks=chunks, step_ops=step_ops)


def cpu_stages(cfg: TrainingConfig, cluster: ClusterSpec, stages: tuple[StageGraph, ...]) -> tuple[StageGraph, ...]:
    """`stages` adapted to CPU hardware (module docstring); unchanged for any other hardware."""
    from llmperf_hook.predict.cpu_framework import find_cpu_framework_cost

    if find_cpu_framework_cost(cluster.gpu.name, cfg.precision) is None:
        return stages
    return tuple(_stage(cfg, s) for s in stages)


"""Stage [5] outputs: the simulated step (time, breakdown, per-stage detail) and the memory estimate."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class MemoryEstimate:
    """Memory of the busiest rank (the pipeline stage with the highest peak)."""

    peak_bytes_per_gpu: int
    capacity_bytes: int
    fits: bool
    """Every rank's must-fit bytes fit the capacity (schedule/memory_rule.py fits_gpu, via memory_fit.fit_verdict:
    on a failed cudaMalloc PyTorch frees its cached blocks and retries)."""
    headroom_bytes: int
    """capacity - peak (negative: short by that much)."""
    components: Mapping[str, int]
    """Bytes by component (weights, gradients, optimizer_states, activations, logits, cuda_context, ...)."""
    stage: int = 0
    """Pipeline rank whose peak this is."""
    per_stage_peak_bytes: tuple[int, ...] = ()
    host_components: Mapping[str, int] = field(default_factory=dict)
    """Host (CPU) bytes of one node by component: offloaded optimizer states, gradients and parameters, pinned swap
    buffers, CPU activation checkpoints (schedule/host_memory.py); empty when nothing is offloaded."""
    host_capacity_bytes: int = 0
    """The cluster's host RAM per node; 0 = not stated."""
    tight: bool = False
    """Fits, but by less than the allocator's fragmentation allowance or the memory model's own error band
    (schedule/memory_fit.py fit_verdict): the report says "fits, tight" and warns."""
    must_fit_bytes: int = -1
    """The most any rank must find on the GPU: its allocated bytes, the caching allocator's reserve left out
    (schedule/memory_rule.py must_fit_bytes); the quantity predict's verdict and tune's margin compare. Not given
    (-1): the peak itself (a rank with no caching-allocator reserve, e.g. on CPU)."""

    def __post_init__(self) -> None:
        if self.must_fit_bytes < 0:
            object.__setattr__(self, "must_fit_bytes", self.peak_bytes_per_gpu)

    @property
    def fragmentation_bytes(self) -> int:
        """The caching allocator's reserve over the allocated peak, included in the peak
        (schedule/allocator_reserve.py)."""
        return int(self.components.get("allocator_fragmentation", 0))

    @property
    def host_bytes_per_node(self) -> int:
        return sum(self.host_components.values())

    @property
    def host_fits(self) -> bool:
        """The offloads fit the host RAM (True where the cluster does not state it)."""
        return not self.host_capacity_bytes or self.host_bytes_per_node <= self.host_capacity_bytes


@dataclass(frozen=True)
class TimelineEvent:
    """One bar of the simulated step for the trace: a forward/backward of a micro-batch, a sync or a step."""

    stage: int
    name: str
    """"F" | "B" | "grad_sync" | "param_gather" | "optimizer" | "p2p"."""
    start_s: float
    end_s: float
    chunk: int = 0
    microbatch: int = -1
    detail: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class StageTiming:
    """Per pipeline stage: per-micro-batch forward/backward times and where the stage's step time goes."""

    stage: int
    num_layers: int
    fwd_s: float
    """Forward of one micro-batch over all chunks of this stage (compute + exposed in-layer comm)."""
    bwd_s: float
    """Backward of one micro-batch incl. recompute."""
    compute_s: float
    """Busy compute over the step (all micro-batches, forward + backward + recompute)."""
    exposed_comm_s: Mapping[str, float]
    """Exposed communication over the step by kind (tp, cp, ep, zero, dp_grad, param_gather, embedding)."""
    pipeline_end_s: float
    """When this stage's last backward finishes."""
    idle_s: float
    """Pipeline bubble + waiting for p2p on this stage."""
    optimizer_s: float


@dataclass(frozen=True)
class StepEstimate:
    step_time_s: float
    tokens_per_s: float
    mfu: float
    """model FLOPs / (step time * world size * dense peak of the training dtype)."""
    breakdown: Mapping[str, float]
    """Seconds by component on the critical stage; sums to step_time_s."""
    stages: tuple[StageTiming, ...]
    memory: MemoryEstimate
    predictor: Mapping[str, str]
    """Which cost model produced each op class (and "calibration" when one scaled the step)."""
    warnings: tuple[str, ...] = ()
    model_flops_per_step: float = 0.0
    critical_stage: int = 0
    timeline: tuple[TimelineEvent, ...] = ()
    """Filled when asked for detail (trace output)."""
    calibration_scale: float = 1.0

"""DeepSpeed ZeRO-3's hook time inside the forward and backward passes it runs in, overlapped with their kernels.

What the host and the GPU share (DeepSpeed edaa722, deepspeed/runtime/zero/):
- The module hooks run on the host between the ops of the pass: the pre-forward / pre-backward hook fetches the
  module's parameters (partitioned_param_coordinator.fetch_sub_module), the post hooks release them, and each
  parameter's gradient hook copies its gradient into the reduction bucket (stage3.__add_grad_to_ipg_bucket).
  None of them waits for the compute stream. fetch_sub_module waits on its all-gather handles and on the oldest of
  more than two fetch events (`__max_ongoing_fetch_events = 2`, `popleft().synchronize()`), events recorded on the
  all-gather stream, which does not wait for the compute stream; the compute stream waits for the all-gather
  stream instead (`current_stream().wait_stream(self.__allgather_stream)`). The gradient hook makes the reduction
  stream wait for the compute stream (`reduce_and_partition_stream.wait_stream(current_stream())`); the host
  waits on a reduction only when a third bucket is reduced while two are in flight (`max_param_reduce_events = 2`).
- Every micro-batch's backward ends in stage3.independent_gradient_partition_epilogue, which reduces the last
  bucket and calls `reduce_and_partition_stream.synchronize()`: that stream waited for the compute stream, so the
  host waits for the pass's last kernel there.
Before v0.5.5 every fetch ran after `torch.cuda.synchronize()` (frameworks/deepspeed_release.py, c0eeb69df): the
host waited for the device at every module, so the hooks add to the pass (OptimizerConfig.zero3_list_param_gather).
So they do today with overlap_comm false on a partition group of one rank: the all-gather stream is then the
default stream (parameter_offload.py: `Stream() if overlap_comm else default_stream()`), and a one-rank fetch's
handle (partition_parameters.py NoGatherCoalescedHandle.wait) calls `current_stream().synchronize()` on it, the
compute stream (fetch_syncs_device). With more ranks that handle waits on NCCL's work, a stream wait.
From v0.5.5 on, within a pass the host issues kernels and runs hooks while the GPU runs what it was given, and the
two meet at the end of each backward: a pass takes the longer of its GPU time and its host time (the issue of its ops,
predict/host_issue.pass_host_s, plus its hooks), not their sum. Where the GPU is idle for the hooks (the small
testbed models of every measured run) the hooks are exposed almost whole; where its kernels outlast the host's
work (large layers) they hide.

The split between passes is read from the development host's cProfile of z3a's configuration
(measurements/h200-sxm-141gb-2026-11-27-b/kernels/ds_bf16_zero3_cprofile.cprofile.txt, cumulative seconds over three
steps): forward, the pre-forward hook 0.096 s (fetch) and the forward's 264 of 519 releases at 0.084 / 519 s each
(0.043 s); backward, the pre-backward hooks 0.057 s, the post-backward hooks 0.068 s (releases) and the gradient
hooks 0.096 s: 0.139 / (0.139 + 0.221) = 0.39 of the hook time is the forward's. Under activation checkpointing the
recomputed forward runs its modules again and so their fetch and release hooks (fetch_sub_module's
`in_checkpoint_recompute`): under full recompute the backward also carries the forward's share in proportion to the
forward it recomputes. Selective recompute re-runs the core attention, which holds no parameter: nothing to fetch.

The host and the device meet only at the backward's end, not between a micro-batch's forward and backward (the
testbed script reads no loss in between), so max() per pass is the upper end: a forward whose kernels outlast its
hooks lets the host start the backward's early; per micro-batch it would be max(GPU, host) over both passes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from llmperf_hook.frameworks.training_config import TrainingConfig

ZERO3_HOOK_FORWARD_SHARE = 0.39
"""Share of ZeRO-3's hook host time spent in the forward pass (module docstring: the development cProfile)."""

Pass = TypeVar("Pass")


def hooked_pass(cost: Pass, pass_host_s: float, hooks_s: float, overlap: bool) -> Pass:
    """`cost` (a schedule.compose.PassCost) with `hooks_s` of ZeRO-3 hook time run by the host in the same pass:
    the pass lasts max(its time, its ops' host issue + hooks) (module docstring). Without overlap (every fetch
    synchronising the device; or no host model: a CPU device, host_per_op_s 0, whose host runs the ops itself) the
    hooks add to the pass."""
    if hooks_s <= 0.0:
        return cost
    total_s = cost.total_s  # type: ignore[attr-defined]
    longer_s = max(total_s, pass_host_s + hooks_s) if overlap else total_s + hooks_s
    return replace(cost, total_s=longer_s, hooks_wait_s=longer_s - total_s)  # type: ignore[type-var]


def fetch_syncs_device(cfg: TrainingConfig) -> bool:
    """Whether every ZeRO-3 fetch waits for the device, so that the hooks add to the pass (module docstring): DeepSpeed
    before v0.5.5, or overlap_comm false (OptimizerConfig.overlap_grad_reduce) on a partition group of one rank: the
    data-parallel group, with Ulysses (modelled as cp) its sequence-data-parallel group (graph/step_ops.dp_groups)."""
    o = cfg.optimizer
    return o.zero3_list_param_gather or (not o.overlap_grad_reduce and cfg.parallel.dp * cfg.parallel.cp == 1)


def recomputed_hook_share(cfg: TrainingConfig, recompute_s: float, forward_s: float) -> float:
    """Share of the forward's fetch and release hooks the backward runs again: the recomputed share of the forward
    under full recompute; none under selective recompute (the core attention holds no parameter)."""
    if cfg.recompute.granularity != "full" or forward_s <= 0.0:
        return 0.0
    return min(1.0, recompute_s / forward_s)


def pass_hooks_s(hooks_per_microbatch_s: float, backward: bool, recomputed_share: float) -> float:
    """Hook seconds of one pass: the forward's share, or the backward's plus the recomputed forward's."""
    fwd_s = ZERO3_HOOK_FORWARD_SHARE * hooks_per_microbatch_s
    if not backward:
        return fwd_s
    return hooks_per_microbatch_s - fwd_s + recomputed_share * fwd_s

"""Host (CPU) issue time of a pass: the floor under GPU time when the framework cannot launch kernels fast enough.

Megatron-LM and DeepSpeed run PyTorch in eager mode: every kernel is issued by Python through the PyTorch
dispatcher and the CUDA launch path, one after the other, on one CPU thread per rank. The GPU can only run
what the CPU has issued. One pass over a block of ops is an in-order launch queue (`queued_pass_s`): the CPU
issues op i at c_i = c_(i-1) + kernels(op_i) * HOST_ISSUE_S_PER_OP, the GPU starts it at max(g_(i-1), c_i)
and ends it at g_i = start + t_i; the pass takes g_last. The CPU runs ahead during long GEMMs and falls behind
on runs of short kernels, so the pass lies between max(GPU busy, host issue) and their sum. A pass boundary
(waiting for communication or the next micro-batch) drains the queue. For big layers the GPU is the
bottleneck and nothing changes; for small models (hidden 1-2k, micro-batch 1-2) the host is, and step time
stops depending on tensor-parallel degree and micro-batch size: exactly the
signature of vTrain's measured single-node runs (../shared/validation/dev.csv S24), where time per layer and
micro-batch stays at 3.0-3.4 ms from TP 1 to TP 4 and from micro-batch 1 to 2 at hidden 1024, 12-24 layers.

One modelled op stands for the several framework ops Megatron issues around it (the GEMM and its bias add,
views/transposes, casts, the fused-kernel wrapper, autograd bookkeeping in backward): about 4 PyTorch ops at
~15 us of eager dispatch each on a server CPU (PyTorch's per-op CPU overhead is 10-20 us, e.g. the PyTorch
profiler's CPU-time column for aten ops; Megatron GPT layers issue 50-60 kernels in forward), i.e. ~60-65 us
per modelled op. With the graph's 13 compute ops per dense layer forward, forward + recompute + backward
(2 kernels per op) gives 52 units = 3.4 ms per layer and micro-batch, the plateau of the S24 runs.
Collectives cost no host time (one NCCL call each) but hold the stream for their duration; collectives on a
side stream (tagged `overlap`, or TP communication under --tp-comm-overlap) are left to the schedule's
overlap rule and skipped here.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from llmperf_hook.graph.op import Op

HOST_ISSUE_S_PER_OP = 65e-6
"""CPU seconds to issue one modelled compute op in PyTorch eager mode (~4 framework ops x ~16 us; see above)."""

KERNELS_PER_PHASE = {"fwd": 1, "recompute": 1, "bwd": 2, "step": 1}
"""Backward of an op issues its input-gradient and weight-gradient work: twice the forward's launches."""


def host_issue_s(ops: Iterable[Op], per_op_s: float = HOST_ISSUE_S_PER_OP) -> float:
    """CPU time to issue the compute ops of one pass (collectives excluded)."""
    return per_op_s * sum(KERNELS_PER_PHASE.get(op.phase, 1) for op in ops if op.collective is None)


def host_bound_pass_s(gpu_busy_s: float, ops: Iterable[Op], per_op_s: float = HOST_ISSUE_S_PER_OP) -> float:
    """Seconds one pass takes when its ops cost `gpu_busy_s` on the GPU: the slower of GPU and host issue."""
    return max(gpu_busy_s, host_issue_s(ops, per_op_s))


def queued_pass_s(ops: Sequence[Op], seconds_of: Callable[[Op], float], per_op_s: float = HOST_ISSUE_S_PER_OP,
                  side_stream: Callable[[Op], bool] = lambda op: "overlap" in op.tags) -> float:
    """GPU end time of one pass of `ops` (execution order) issued by one CPU thread (the queue above)."""
    issued_s = gpu_end_s = 0.0
    for op in ops:
        if op.collective is not None and side_stream(op):
            continue
        if op.collective is None:
            issued_s += per_op_s * KERNELS_PER_PHASE.get(op.phase, 1)
        gpu_end_s = max(gpu_end_s, issued_s) + seconds_of(op)
    return gpu_end_s

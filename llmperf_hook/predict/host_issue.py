"""Host (CPU) issue time of a pass: the floor under GPU time when the framework cannot launch kernels fast enough.

Megatron-LM and DeepSpeed run PyTorch in eager mode: every kernel is issued by Python through the PyTorch
dispatcher and the CUDA launch path, one after the other, on one CPU thread per rank. The GPU can only run
what the CPU has issued, so a pass over a block of ops takes

    pass_s = max(gpu_busy_s, host_issue_s),  host_issue_s = sum over compute ops of kernels(op) * HOST_ISSUE_S_PER_OP

(the CPU runs ahead of the GPU inside a pass, so the two overlap and the slower one sets the pace; a pass
boundary, where the schedule waits for communication or the next micro-batch, drains the queue). For big
layers the GPU is the bottleneck and the floor changes nothing; for small models (hidden 1-2k, micro-batch
1-2) the host is, and step time stops depending on tensor-parallel degree and micro-batch size: exactly the
signature of vTrain's measured single-node runs (../shared/validation/dev.csv S24), where time per layer and
micro-batch stays at 3.0-3.4 ms from TP 1 to TP 4 and from micro-batch 1 to 2 at hidden 1024, 12-24 layers.

One modelled op stands for the several framework ops Megatron issues around it (the GEMM and its bias add,
views/transposes, casts, the fused-kernel wrapper, autograd bookkeeping in backward): about 4 PyTorch ops at
~15 us of eager dispatch each on a server CPU (PyTorch's per-op CPU overhead is 10-20 us, e.g. the PyTorch
profiler's CPU-time column for aten ops; Megatron GPT layers issue 50-60 kernels in forward), i.e. ~60-65 us
per modelled op. With the graph's 13 compute ops per dense layer forward, forward + recompute + backward
(2 kernels per op) gives 52 units = 3.4 ms per layer and micro-batch, the plateau of the S24 runs.
Collectives are not counted: NCCL launches are single calls and their GPU time already sits in the pass.
"""

from __future__ import annotations

from typing import Iterable

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

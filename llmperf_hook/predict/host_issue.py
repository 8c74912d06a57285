"""Host (CPU) issue time of a pass: the floor under GPU time when the framework cannot launch kernels fast enough.

Megatron-LM and DeepSpeed run PyTorch in eager mode: every kernel is issued by Python through the PyTorch
dispatcher and the CUDA launch path, one after the other, on one CPU thread per rank. The GPU can only run
what the CPU has issued. One pass over a block of ops is an in-order launch queue (`queued_pass_s`): the CPU
issues op i at c_i = c_(i-1) + units(op_i) * per_op_s, the GPU starts it at max(g_(i-1), c_i) and ends it at
g_i = start + t_i; the pass takes g_last. The CPU runs ahead during long GEMMs and falls behind on runs of
short kernels, so the pass lies between max(GPU busy, host issue) and their sum. A pass boundary (waiting for
communication or the next micro-batch) drains the queue. For big layers the GPU is the bottleneck and nothing
changes; for small models (hidden 1-2k, micro-batch 1-2) the host is, and step time stops depending on the
micro-batch size: the signature of vTrain's measured single-node runs (../shared/validation/dev.csv S24,
Megatron-DeepSpeed on DeepSpeed's PipelineEngine, fp16, full recompute).

What the host issues, counted from the sources of that stack (Megatron-DeepSpeed `megatron/model/transformer.py`,
`megatron/core/tensor_parallel/{layers,mappings,data}.py`, DeepSpeed v0.9.5 `runtime/pipe/engine.py`,
`utils/timer.py`):
- Compute ops (`KERNELS_PER_PHASE`): one modelled op stands for the framework ops Megatron issues around it
  (the GEMM and its bias add, views/transposes, the fused-kernel wrapper, the RNG-tracker fork around dropout,
  autograd bookkeeping), about 4 PyTorch ops each. A dense layer is 13 modelled ops; under full recompute it
  issues them in the checkpointed forward, again in the recompute, and its backward issues input- and
  weight-gradient work (2 units per op): 52 units per layer and micro-batch.
- Collectives on the compute stream (`COLLECTIVE_CALL_UNITS`): each is a Python call through an autograd
  Function (`_ReduceFromModelParallelRegion`, the column-parallel linear's backward all-reduce), then
  `torch.distributed.all_reduce` and ProcessGroupNCCL (stream-event sync, allocator record, NCCL enqueue). A TP
  layer makes 6 such calls per micro-batch (2 forward, 2 recompute, 2 backward); TP 1 makes none (`_reduce`
  returns its input when the group has one rank). Collectives on a side stream (tagged `overlap`, TP under
  --tp-comm-overlap) are issued from C++ (Transformer Engine userbuffers, the CP ring) or bucket hooks and are
  left to the schedule's overlap rule: no host time, no queue slot here.
- The micro-batch prologue (`MICROBATCH_PROLOGUE_UNITS`, on the pass that holds the forward embedding lookup):
  DeepSpeed's PipelineEngine synchronises the device at every micro-batch's forward (`_exec_forward_pass` and
  `DeepSpeedEngine.forward` call `ThroughputTimer.start`, which runs `torch.cuda.synchronize()` from the third
  step on), and Megatron's data path reads the broadcast sizes back to the host (`broadcast_data`:
  `sizes_cuda.cpu()`), so the launch queue is empty when the micro-batch starts and the GPU idles while the host
  loads it: the size broadcast and the data broadcast (2 collective calls), and about 52 framework ops (13 units)
  between the synchronisation and the first layer kernel: the CPU-to-GPU copies and slicing of `get_batch_pipe`,
  the causal mask, loss mask and position ids of `get_ltor_masks_and_position_ids`, the engine's clone / detach /
  requires_grad of each loaded tensor and of the forward inputs, and the engine's Python around the module call.
  The last pipeline stage loads every micro-batch as well (it needs the labels and loss mask): DeepSpeed's
  TrainSchedule issues LoadMicroBatch on stage 0 and on stage pp - 1 (runtime/pipe/schedule.py `steps`;
  PipelineEngine._exec_load_micro_batch runs the batch function, Megatron-DeepSpeed's get_batch_pipe with its
  broadcast_data and masks, whole on both, then copies 3 inputs on the first and 2 labels on the last). Megatron-LM's
  get_batch (pretrain_gpt.py) returns early on the middle stages since a0e190ca4c (Oct 2023), by virtual stage
  (core_v0.16.1 is_first_or_last_pipeline_stage(vp_stage)): only the chunks holding the embedding and the head load;
  core_v0.16.1's last stage makes 5 broadcast calls (the first 7, the attention mask in the batch) and its
  non-source TP ranks read a size back with `.item()` on both (training/utils.py get_batch_on_this_tp_rank). So a
  last stage that is not also the first (pp > 1) pays the same prologue, on the pass of its head block
  (`MICROBATCH_LOAD_TAG`, set by graph/build.py); with pp = 1 one rank loads once. Not priced: before a0e190ca4c
  (v2.5, the 2022 tree of S03) every stage and every model chunk ran get_batch with broadcast_data's `.cpu()` (a
  data iterator per chunk), and on every stage DeepSpeed's _exec_forward_pass starts the ThroughputTimer (its
  synchronize) and clones its inputs: middle stages pay some too.

The per-unit cost is the cluster's `host_overhead_per_op_us`. The A100 presets read it from S24's host-bound
cells (hidden 1024, micro-batch 1-2, pp 1, where the GPU needs about a third of the time): 3.00-3.16 ms per layer
and micro-batch at TP 1 (52 units, no collective calls) and 3.31-3.58 ms at TP 2 and 4 (52 units + 6 calls);
least squares over the six cells with one unit per collective call gives 57 us per unit (a call then costs
57 us, the TP 2-4 excess 0.33 ms / 6 calls = 56 us). `HOST_ISSUE_S_PER_OP` is the generic default for a server
CPU (~4 framework ops x ~16 us of eager dispatch each, PyTorch's per-op CPU overhead being 10-20 us).
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from llmperf_hook.graph.op import Op
from llmperf_hook.graph.vocab_ops import MICROBATCH_LOAD_TAG

HOST_ISSUE_S_PER_OP = 65e-6
"""CPU seconds to issue one modelled compute op in PyTorch eager mode (~4 framework ops x ~16 us; see above)."""

KERNELS_PER_PHASE = {"fwd": 1, "recompute": 1, "bwd": 2, "step": 1}
"""Host units of a compute op by phase: backward issues input-gradient and weight-gradient work, twice the forward's."""

COLLECTIVE_CALL_UNITS = 1.0
"""Host units of one collective issued on the compute stream (autograd Function + torch.distributed +
ProcessGroupNCCL enqueue): read with the per-unit cost from the TP 1 vs TP 2-4 host-bound cells of S24 (above)."""

MICROBATCH_PROLOGUE_UNITS = 13.0 + 2 * COLLECTIVE_CALL_UNITS
"""Host units between the per-micro-batch device synchronisation and the first layer kernel, GPU idle: ~52
framework ops of data loading, masks and engine Python (13 units) and the two broadcasts of `broadcast_data`."""

MICROBATCH_START_OP = ("embedding.lookup", "fwd")
"""(name, phase) of the op whose pass starts a micro-batch on the first pipeline stage (graph/layer_ops.py)."""


def side_stream_collective(op: Op) -> bool:
    """The default side-stream test: a collective the graph tags `overlap` (the schedule hides it behind compute)."""
    return "overlap" in op.tags


def op_host_units(op: Op, side_stream: Callable[[Op], bool] = side_stream_collective) -> float:
    """Host units the CPU spends to issue `op` (0 for a side-stream collective, and for an op tagged host=lumped,
    whose issue is in the unit of the op it follows: graph/local_kernels.py)."""
    if op.tags.get("host") == "lumped":
        return 0.0
    if op.collective is None:
        return float(KERNELS_PER_PHASE.get(op.phase, 1))
    return 0.0 if side_stream(op) else COLLECTIVE_CALL_UNITS


def prologue_units(ops: Iterable[Op]) -> float:
    """`MICROBATCH_PROLOGUE_UNITS` if this pass starts a micro-batch (holds the forward embedding lookup) or loads
    one on the last pipeline stage (an op tagged `MICROBATCH_LOAD_TAG`), else 0."""
    starts = any((op.name, op.phase) == MICROBATCH_START_OP or MICROBATCH_LOAD_TAG in op.tags for op in ops)
    return MICROBATCH_PROLOGUE_UNITS if starts else 0.0


def host_issue_s(ops: Iterable[Op], per_op_s: float = HOST_ISSUE_S_PER_OP) -> float:
    """CPU time to issue the compute ops of one pass (collectives and the prologue excluded: `pass_host_s`)."""
    return per_op_s * sum(op_host_units(op) for op in ops if op.collective is None)


def pass_host_s(ops: Sequence[Op], per_op_s: float = HOST_ISSUE_S_PER_OP,
                side_stream: Callable[[Op], bool] = side_stream_collective) -> float:
    """All CPU time of one pass as `queued_pass_s` issues it: compute ops, collective calls and the prologue."""
    return per_op_s * (prologue_units(ops) + sum(op_host_units(op, side_stream) for op in ops))


def host_bound_pass_s(gpu_busy_s: float, ops: Iterable[Op], per_op_s: float = HOST_ISSUE_S_PER_OP) -> float:
    """Seconds one pass takes when its ops cost `gpu_busy_s` on the GPU: the slower of GPU and host issue."""
    return max(gpu_busy_s, host_issue_s(ops, per_op_s))


def queued_pass_s(ops: Sequence[Op], seconds_of: Callable[[Op], float], per_op_s: float = HOST_ISSUE_S_PER_OP,
                  side_stream: Callable[[Op], bool] = side_stream_collective) -> float:
    """GPU end time of one pass of `ops` (execution order) issued by one CPU thread (the queue above)."""
    return queued_op_spans(ops, seconds_of, per_op_s, side_stream)[-1][1] if ops else 0.0


def queued_op_spans(ops: Sequence[Op], seconds_of: Callable[[Op], float], per_op_s: float = HOST_ISSUE_S_PER_OP,
                    side_stream: Callable[[Op], bool] = side_stream_collective
                    ) -> list[tuple[float, float]]:
    """(GPU start, GPU end) of each op of the queue, from the pass start; a side-stream collective gets the
    span (end of the previous op, same), as it holds no slot of the compute stream."""
    issued_s = per_op_s * prologue_units(ops)
    gpu_end_s = 0.0
    spans: list[tuple[float, float]] = []
    for op in ops:
        if op.collective is not None and side_stream(op):
            spans.append((gpu_end_s, gpu_end_s))
            continue
        issued_s += per_op_s * op_host_units(op, side_stream)
        start_s = max(gpu_end_s, issued_s)
        gpu_end_s = start_s + seconds_of(op)
        spans.append((start_s, gpu_end_s))
    return spans

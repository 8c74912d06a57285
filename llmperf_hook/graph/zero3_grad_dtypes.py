"""The HBM traffic a DeepSpeed ZeRO-3 gradient adds on its way from the backward to the partition buffer when
communication_data_type differs from the model's dtype (fp32 reduction of a bf16 / fp16 model).

The path, per micro-batch (deepspeed/runtime/zero/stage3.py, comm/coalesced_collectives.py, v0.10.1 to today):
1. __add_grad_to_ipg_bucket copies each 16-bit param.grad into the ipg bucket, allocated in communication_data_type
   (ipg_buckets[communication_data_type], v0.17.2 on): read the model's width, write the bucket's. Before v0.17.2
   (ed5f73755) the bucket is in the model's dtype and __avg_scatter_grads casts every gradient to the communication
   dtype (`g.to(self.communication_data_type)`), one more pass (OptimizerConfig.zero3_comm_dtype_bucket).
2. __avg_scatter_grads -> reduce_scatter_coalesced over the whole bucket: torch.cat of the per-rank chunks and the
   pre-divide `div_(world_sz)`, each a read and a write of every element in the communication width; then the
   reduce-scatter itself, priced as communication in that width (step_ops.grad_comm_bytes).
3. The reduced partition is cast: before v0.19.2 (56e7e0c55, #8056) back to the model's dtype whenever
   communication_data_type differs from it (`g.to(self.dtype)`); from v0.19.2 on to gradient_accumulation_dtype
   whenever it differs from that (OptimizerConfig.zero3_accum_cast_on_reduce).
4. partition_grads copies it into the partition buffer (gradient_accumulation_dtype) at micro-step 0 and adds it after
   (`grad_buffer.add_(grad_partition.to(self.gradient_accumulation_dtype))`: a widening copy first when the
   partition is narrower).
Steps 1-2 touch every gradient the rank computes, steps 3-4 its 1/DP partition. The bf16-everything path (all three
dtypes the model's) is what step_ops.DEEPSPEED_MP_BYTES_PER_PARAM / DEEPSPEED_REDUCE_BYTES_PER_MICROBATCH measured;
this module prices only what other dtypes add over it, read from the source (not measured here). With the
communication dtype the model's, step_ops.ZERO3_FP32_ACCUM_BYTES_PER_PARAM prices a wider accumulation.
"""

from __future__ import annotations

from llmperf_hook.frameworks.training_config import TrainingConfig

WIDTH = {"fp32": 4, "fp16": 2, "bf16": 2}


def bucket_bytes_per_rank_param(model: str, comm: str, comm_dtype_bucket: bool) -> float:
    """Steps 1-2 for one gradient element, beyond the all-`model` path: torch.cat and div_ read and write the wider
    element (4 x the extra width); the v0.17.2 bucket is written wider once (1 x), the older one is cast whole
    (read the model's width, write the communication width)."""
    extra = max(0, WIDTH[comm] - WIDTH[model])
    cast = extra if comm_dtype_bucket else WIDTH[model] + WIDTH[comm]
    return float(4 * extra + cast)


def zero3_comm_dtype_differs(cfg: TrainingConfig) -> bool:
    """A 16-bit DeepSpeed ZeRO-3 job whose communication_data_type is not the model's, on the coalesced gradient path
    (v0.6.0 on; not qgZ's quantized all-to-all), with the gradient partition on the GPU (no optimizer offload)."""
    o = cfg.optimizer
    return ("deepspeed" in cfg.framework and o.zero_stage == 3 and cfg.precision in ("bf16", "fp16")
            and o.grad_comm_dtype in WIDTH and o.grad_comm_dtype != cfg.precision
            and not o.zero3_per_tensor_grad_reduce and not o.zero_quantized_gradients and o.offload_optimizer == "none")


def partition_bytes_per_local_param(model: str, comm: str, accum: str, cast_to_accum: bool,
                                    microbatches: int) -> float:
    """Steps 3-4 over a step's micro-batches, bytes per local (partitioned) parameter beyond the all-`model` path,
    whose first micro-batch copies (2 + 2) and further ones add (2 + 2 + 2). `cast_to_accum`: v0.19.2 and later."""
    m, a = WIDTH[model], WIDTH[accum]
    partition = accum if cast_to_accum else (model if comm != model else comm)
    p = WIDTH[partition]
    cast = WIDTH[comm] + p if comm != partition else 0
    widen = p + a if partition != accum else 0
    first = cast + (p + a) - 2 * m
    further = cast + widen + 3 * a - 3 * m
    return first + max(0, microbatches - 1) * further


def zero3_grad_dtype_bytes(cfg: TrainingConfig, local: int, rank_params: int) -> float:
    """Bytes a step adds when ZeRO-3 reduces in a dtype other than the model's (zero3_comm_dtype_differs): the
    wider bucket over the `rank_params` gradients the rank computes, every micro-batch, and the partition's casts and
    copies over its `local` parameters (partition_bytes_per_local_param). 0 otherwise."""
    if not zero3_comm_dtype_differs(cfg):
        return 0.0
    o, m = cfg.optimizer, max(1, cfg.batch.num_microbatches)
    comm, model = str(o.grad_comm_dtype), cfg.precision
    bucket = bucket_bytes_per_rank_param(model, comm, o.zero3_comm_dtype_bucket) * rank_params * m
    accum = o.grad_accum_dtype if o.grad_accum_dtype in WIDTH else model
    partition = partition_bytes_per_local_param(model, comm, str(accum), o.zero3_accum_cast_on_reduce, m)
    return float(bucket + partition * local)

"""ZeRO-3 collectives as DeepSpeed v0.3.x-v0.5.x ran them: per parameter tensor, as Python lists of per-rank views.

Switched on by OptimizerConfig.zero3_list_param_gather (DeepSpeed < v0.5.5) and zero3_per_tensor_grad_reduce
(DeepSpeed < v0.6.0), which validate/framework_era.py sets for runs of that era. Today's DeepSpeed gathers into
one flat buffer (all_gather_into_tensor) and reduce-scatters coalesced buckets: none of this applies to it.

What that code did per collective (git show v0.3.13:deepspeed/runtime/zero/partition_parameters.py):
- Parameter fetch, `_allgather_param` (one call per parameter tensor of a module, stage3.py fetch_sub_module ->
  _all_gather(async_op=True)): `torch.zeros(aligned_param_size)` (a memset of the whole 16-bit parameter),
  `torch.cuda.synchronize()`, then a Python loop over the world size building one `flat_tensor.narrow` view per
  rank and calling `torch.distributed.get_rank(group=...)` in every iteration, then
  `torch.distributed.all_gather(partitions, ...)` on that list of N views. torch's ProcessGroupNCCL::allgather
  gathers a list into a flat temporary and copies it out with one `copy_` (plus a recordStream) per rank on the
  NCCL stream (ProcessGroupNCCL.cpp allgather post-hook, "Copy the flattened output tensors to the outputs";
  DeepSpeed PR #1188 / commit c0eeb69df: "torch.distributed.all_gather will do implicit memcpy at the end of
  each ncclAllgather"). Fetches are serial and exposed (graph/zero_layer_ops.py, stage3_prefetch_bucket_size 0).
- Gradient reduction, `_reduce_scatter_gradients` (stage3.py average_tensor -> reduce_gradients_at_owner): one
  `_reduce_scatter_gradient` per parameter tensor in the bucket, biases and norms included, each a Python loop of
  N `narrow` views and `torch.distributed.reduce_scatter(input_list[rank], input_list)`; torch flattens the N
  inputs into a temporary with one `copy_` per rank before the NCCL call (reduce_scatter pre-hook). Before it,
  average_tensor divides the bucket in place (`tensor.div_(world_size)`) and reduce_independent_p_g_buckets_and_
  remove_grads copies each gradient of at most reduce_bucket_size elements (5e8 by default) into the contiguous
  ipg bucket. Replaced by reduce_scatter_coalesced in v0.6.0.
- Persistent parameters after the step, `_post_step` (stage3.py): the parameters under
  stage3_param_persistence_threshold (biases, norms) stay gathered between steps, so the step re-gathers them with
  `all_gather(persistent_parameters)`, async_op=False, which runs `_allgather_params`: one coalesced list
  all-gather (a loop of N `narrow` views, torch's N copy-outs), then for every persistent parameter a Python loop
  over the world size copying each rank's few elements into the full tensor (`narrow`, `view(-1).narrow`,
  `copy_`): one tiny copy per parameter and rank, issued by the host while the GPU waits. From v0.5.5 on
  `_allgather_params_coalesced` gathers into place without that loop.
"""

from __future__ import annotations

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.op import Collective, Op, Phase
from llmperf_hook.graph.param_tensors import tensors_per_layer

GATHER_LOOP_S_PER_RANK = 2.9e-6
"""Host time per rank of _allgather_param's loop (`narrow` + `get_rank(group)` + the rank test): 2.9 us, measured
by benchmarks/measure_zero3_host_loop.py (torch 2.13 CPU, one thread, 1,536 ranks, best of 101; 2.88-2.96 over
three runs). The GPU is idle meanwhile: the loop runs after the synchronize and before the gather is launched."""
REDUCE_LOOP_S_PER_RANK = 1.75e-6
"""Host time per rank of _reduce_scatter_gradient's loop (`narrow` + bounds test + append): 1.74-1.75 us, same
measurement."""
COPY_S_PER_RANK = 4e-6
"""One small copy per rank on the NCCL stream (list all-gather copy-out, list reduce-scatter flatten): the fixed
cost of one kernel on an A100 (configs/hardware/a100-sxm4-80gb.yaml kernel_launch_us 4). The host side is about
as long: `copy_` dispatch 2.3-3.1 us (same measurement, without the CUDA launch) plus the launch call. The copies
run one after another on one stream; the reduce-scatter waits for its flatten copies, the gathered parameter is
ready only after its copy-out."""
GATHER_EXTRA_BYTES_PER_ELEM = 2 + 2 + 2
"""HBM bytes per gathered 16-bit element beyond the gather: torch.zeros writes the flat parameter (2), the copy-out
reads the temporary and writes the views (2 + 2)."""
REDUCE_EXTRA_BYTES_PER_ELEM = 4 + 4
"""Per 16-bit gradient element: the in-place div_ by the world size (read 2, write 2) and torch's flatten of the
input list (read 2, write 2)."""
IPG_COPY_BYTES_PER_ELEM = 4
"""Copy of a gradient of at most reduce_bucket_size elements into the contiguous ipg bucket (read 2, write 2)."""
PERSISTENT_COPY_LOOP_S = 4.9e-6
"""Host time per (persistent parameter, rank) of `_allgather_params`' copy loop without the copy itself (`narrow`,
`view(-1).narrow`, the bounds test and `min`): 4.9-5.0 us, measured by benchmarks/measure_zero3_persistent_gather.py
(torch 2.13 CPU, one thread, 2,240 ranks, best of 101; same machine as GATHER_LOOP_S_PER_RANK). The copy adds
COPY_S_PER_RANK."""
PERSISTENCE_THRESHOLD_DEFAULT = 100_000
"""stage3_param_persistence_threshold default (v0.3.13 stage3.py FP16_DeepSpeedZeroOptimizer_Stage3
param_persistence_threshold=100000): parameters with fewer elements stay gathered (ds_persist)."""
REDUCE_BUCKET_SIZE_DEFAULT = 500_000_000
"""zero_optimization.reduce_bucket_size default (v0.3.13 zero/constants.py ZERO_OPTIMIZATION_REDUCE_BUCKET_SIZE_DEFAULT):
gradients larger than it are reduced in place (extra_large_param_to_reduce), smaller ones copied into the bucket."""


def _list_overhead(name: str, phase: Phase, elements: int, nbytes: float, host_s: float, dtype: str) -> Op:
    """The host loop, the per-rank copies and the extra memory passes of list collectives, as one op on the critical
    path (the synchronous fetch leaves nothing to hide them behind)."""
    return Op(name, "zero3_list_copy", phase, {"elements": int(elements)}, flops=0.0, bytes_moved=float(nbytes),
              dtype=dtype, tags={"host_s": f"{host_s:.6g}"})


def list_gather_overhead_ops(cfg: TrainingConfig, modules: tuple[int, ...], coll: Collective,
                             share: float) -> tuple[Op, ...]:
    """What the gathers of one fetch phase of a layer cost beyond the NCCL all-gathers themselves (one per module
    weight; norms and biases under the persistence threshold stay resident): per gather, N x (loop + copy)."""
    if not cfg.optimizer.zero3_list_param_gather or not modules:
        return ()
    n = coll.group_size
    host_s = len(modules) * n * (GATHER_LOOP_S_PER_RANK + COPY_S_PER_RANK) * share
    elements = int(sum(modules) * share)
    return (_list_overhead("zero3_legacy.gather_list_copies", "fwd", elements,
                           elements * GATHER_EXTRA_BYTES_PER_ELEM, host_s, cfg.precision),)


def per_tensor_reduce_ops(cfg: TrainingConfig, modules: tuple[int, ...], layer_params: int, dense: Collective,
                          nbytes_per_elem: float, tags: dict[str, str]) -> tuple[Op, ...]:
    """A layer's gradient reduction as that DeepSpeed ran it: one reduce-scatter per parameter tensor, plus the
    list overhead. The four module weights carry the elements zero_layer_ops.zero3_gather_modules gives them (the biases'
    included), the other tensors (biases, norm weights and biases) share the norms' elements: tiny messages whose
    time is the ring's latency, so their exact split does not matter."""
    small_tensors = max(0, tensors_per_layer(cfg) - len(modules))
    small_elems = max(0, layer_params - sum(modules))
    each_small = small_elems // small_tensors if small_tensors else 0
    sizes = list(modules) + [each_small] * small_tensors
    ops = [Op("zero3_legacy.grad_reduce_scatter", "reducescatter", "bwd", {"bytes": int(e * nbytes_per_elem)},
              dtype=cfg.precision, collective=dense, tags=tags) for e in sizes if e > 0]
    n = dense.group_size
    host_s = len(ops) * n * (REDUCE_LOOP_S_PER_RANK + COPY_S_PER_RANK)
    bucket = cfg.optimizer.grad_bucket_size_elems or REDUCE_BUCKET_SIZE_DEFAULT
    ipg = sum(e for e in sizes if e <= bucket) * IPG_COPY_BYTES_PER_ELEM
    nbytes = layer_params * REDUCE_EXTRA_BYTES_PER_ELEM + ipg
    return tuple(ops) + (_list_overhead("zero3_legacy.reduce_list_copies", "bwd", layer_params, nbytes, host_s,
                                        cfg.precision),)


def persistent_tensor_sizes(cfg: TrainingConfig, num_layers: int, last_stage: bool) -> tuple[int, ...]:
    """Elements of the parameters of a stage's `num_layers` layers (and the final norm on the last stage) that stay
    gathered (under PERSISTENCE_THRESHOLD_DEFAULT), per TP rank: the QKV (also alone, add_qkv_bias) and MLP-up
    biases (column-parallel, split over TP), the projection and MLP-down biases (row-parallel, whole), the two
    norms' weight (and bias for LayerNorm). Every weight matrix is larger than the threshold for any hidden size
    above 316."""
    m, t = cfg.model, cfg.parallel.tp
    h = m.hidden_size
    per_norm = (h,) if m.normalization == "RMSNorm" else (h, h)
    qkv_out = (m.num_attention_heads + 2 * m.num_query_groups) * m.kv_channels
    biases: tuple[int, ...] = (qkv_out // t,) if m.qkv_biased else ()
    biases += (h,) if m.add_bias_linear else ()  # the attention projection; the MLP's two per ModelShape.mlp_biased
    biases += (m.ffn_hidden_size * (2 if m.swiglu else 1) // t, h) if m.mlp_biased else ()
    layer = tuple(n for n in biases + per_norm * 2 if 0 < n < PERSISTENCE_THRESHOLD_DEFAULT)
    final = tuple(n for n in per_norm if n < PERSISTENCE_THRESHOLD_DEFAULT) if last_stage else ()
    return layer * num_layers + final


def rank_copies(numel: int, world: int) -> int:
    """Copies `_allgather_params` makes for one parameter: ranks whose padded partition (ceil(numel / world)
    elements, _aligned_size / world_size) starts inside the parameter."""
    part = -(-numel // world)
    return min(world, -(-numel // part))


def persistent_gather_ops(cfg: TrainingConfig, num_layers: int, last_stage: bool, dense: Collective) -> tuple[Op, ...]:
    """The step's re-gather of the persistent parameters (DeepSpeed < v0.5.5, see the module docstring): the
    coalesced all-gather over the data-parallel group and, on the critical path after the optimizer, its list loop
    (N x (loop + copy-out)) and the per-parameter copy loop (copies x (PERSISTENT_COPY_LOOP_S + COPY_S_PER_RANK))."""
    sizes = persistent_tensor_sizes(cfg, num_layers, last_stage)
    n = dense.group_size
    if not cfg.optimizer.zero3_list_param_gather or not sizes or n <= 1:
        return ()
    elems = sum(sizes)
    gather_bytes = sum(-(-e // n) for e in sizes) * n * 2
    copies = sum(rank_copies(e, n) for e in sizes)
    host_s = n * (REDUCE_LOOP_S_PER_RANK + COPY_S_PER_RANK) + copies * (PERSISTENT_COPY_LOOP_S + COPY_S_PER_RANK)
    gather = Op("zero3_legacy.persistent_param_allgather", "allgather", "step", {"bytes": gather_bytes},
                dtype=cfg.precision, collective=dense)
    # The copy-out of torch's list gather and the copies into the parameters: read and write each element twice.
    return gather, _list_overhead("zero3_legacy.persistent_param_allgather_copies", "step", elems, elems * 2 * 4,
                                  host_s, cfg.precision)

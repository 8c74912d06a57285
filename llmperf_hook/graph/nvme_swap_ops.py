"""DeepSpeed ZeRO-Infinity's NVMe swap traffic (offload_optimizer / offload_param device nvme, ZeRO-3 only).

Priced at the host's NVMe bandwidth (ClusterSpec.nvme_read/write_bytes_per_s, predict/roofline.nvme_swap_s), shared
by the ranks of the host, which swap at the same moments. What DeepSpeed moves (0.19, deepspeed/runtime/zero/
stage3.py, runtime/swap_tensor/):
- Optimizer (PartitionedOptimizerSwapper): each swappable sub-group's fp32 master weights and Adam m and v live in
  files under nvme_path; at the gradient-accumulation boundary its fp32 gradients are written out
  (_swap_out_offload_fp32_gradients), and the step reads master, m, v and gradients back
  (_optimizer_states_and_gradient_swap_in) and writes master, m, v out again (_optimizer_states_and_gradient_swap_out):
  16 bytes read and 16 written per parameter of the offloaded share (12 with one optimizer state), serial with the
  CPU Adam step unless the section's pipeline_read / pipeline_write is on (PipelinedOptimizerSwapper; priced serial,
  with a warning).
- Parameters (AsyncPartitionedParameterSwapper): each parameter's 16-bit partition (ds_tensor) lives in a file; a
  fetch reads it into a pinned buffer (swap_in) before its host-to-device copy, prefetched asynchronously ahead of
  use when the trace is complete (partitioned_param_coordinator.__prefetch_nvme_param_partitions); after the step
  the updated partitions are written back (stage3.py _partitioned_params_swap_out): 2 bytes per parameter. Only the
  partitions beyond offload_param.max_in_cpu (1e9 elements a rank) stay on NVMe: the optimizer moves the first ones
  to host memory for good when it is built (param_nvme_share).
"""

from __future__ import annotations

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.op import Collective, Op, Phase
from llmperf_hook.graph.zero3_trace import rank_fetched_elems

NVME_LINK = Collective(group="nvme", group_size=1, ranks_per_node=1)
"""The host's NVMe as the 'group' of a prefetched parameter read: the composer hides it behind compute where it is
tagged overlap, as it hides the gathers it feeds, or charges it as exposed ZeRO time."""
FP32_BYTES = 4


def optimizer_swap_bytes_per_param(cfg: TrainingConfig) -> int:
    """Bytes read (and, as many, written) per offloaded parameter and step: the fp32 master weight, every state
    tensor of optimizer.state[param] (swap_tensor/optimizer_utils.py _get_state_tensors: Adam's m and v, one for
    DeepSpeedCPUAdagrad / DeepSpeedCPULion) and the fp32 gradient; read for the step, the master and states written
    back after it, the gradient written at the boundary. Adam: 4 x (1 + 2 + 1) = 16 B; one state: 12 B."""
    states = 2 if cfg.optimizer.name == "adam" else 1
    return FP32_BYTES * (1 + states + 1)


def param_nvme_share(cfg: TrainingConfig, partition_elems: float) -> float:
    """Share of a rank's 16-bit parameter partition that lives on NVMe under offload_param nvme. DeepSpeed gives the
    partition's first max_in_cpu elements (its leading sub-groups) a host buffer and swaps them into it for good
    when the optimizer is built (stage3.py _create_param_groups_fp16_flat_cpu_memory, _move_to_flat_buffer:
    'Swapping in ... permanently to CPU'); those are fetched from the host and updated in place after the step
    (_partitioned_params_swap_out swaps out only the partitions not AVAILABLE). Priced as an average over the
    rank's layers (the resident ones are the first)."""
    if cfg.optimizer.offload_param != "nvme" or partition_elems <= 0:
        return 0.0
    return max(0.0, 1.0 - cfg.optimizer.nvme_param_max_in_cpu_elems / partition_elems)


def param_swap_bytes(cfg: TrainingConfig) -> int:
    """Bytes of a parameter partition DeepSpeed swaps: param.ds_tensor, in the model's dtype."""
    return 4 if cfg.precision == "fp32" else 2


def _swap(name: str, phase: Phase, read_bytes: float, write_bytes: float, ranks_per_host: int,
          collective: Collective | None = None, tags: dict[str, str] | None = None) -> Op:
    return Op(name, "nvme_swap", phase, {"read_bytes": int(read_bytes), "write_bytes": int(write_bytes),
                                         "ranks_per_host": ranks_per_host},
              flops=0.0, bytes_moved=0.0, dtype="fp32", collective=collective, tags=tags or {})


def optimizer_nvme_swap_ops(cfg: TrainingConfig, offloaded_params: int, local_params: int,
                            ranks_per_host: int) -> list[Op]:
    """The step's swap traffic: the optimizer sub-groups offloaded to NVMe (`offloaded_params` of the rank's
    partition) and, under offload_param nvme, the write-back of the rank's updated 16-bit partition."""
    o = cfg.optimizer
    if o.zero_stage != 3:
        return []
    optimizer = offloaded_params * optimizer_swap_bytes_per_param(cfg) if o.offload_optimizer == "nvme" else 0
    params = local_params * param_nvme_share(cfg, local_params) * param_swap_bytes(cfg)
    if not optimizer and not params:
        return []
    return [_swap("optimizer.nvme_swap", "step", optimizer, optimizer + params, ranks_per_host)]


def param_nvme_read_ops(cfg: TrainingConfig, sizes: tuple[int, ...], d: int, phase: Phase,
                        ranks_per_host: int) -> tuple[Op, ...]:
    """The reads of one fetch phase's parameter partitions (`sizes` elements each, 1/d of them per rank) from NVMe,
    before their host-to-device copies, for the share on NVMe (param_nvme_share of the rank's partition: ZeRO-3
    runs without pipeline parallelism, so rank 0's fetched parameters over d); prefetched behind compute when
    stage3_prefetch_bucket_size > 0."""
    o = cfg.optimizer
    share = param_nvme_share(cfg, rank_fetched_elems(cfg, 0) / max(1, d)) if o.zero_stage == 3 else 0.0
    if share <= 0:
        return ()
    hidden = {"overlap": "param_gather"} if o.stage3_prefetch_bucket_size_elems != 0 else {}
    per_rank = param_swap_bytes(cfg) / max(1, d) * share
    return tuple(_swap("zero3.param_nvme_read", phase, n * per_rank, 0, ranks_per_host, NVME_LINK, dict(hidden))
                 for n in sizes)

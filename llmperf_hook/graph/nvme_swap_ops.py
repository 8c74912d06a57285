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
  the updated partitions are written back (stage3.py _partitioned_params_swap_out): 2 bytes per parameter.
"""

from __future__ import annotations

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.op import Collective, Op, Phase

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
    params = local_params * param_swap_bytes(cfg) if o.offload_param == "nvme" else 0
    if not optimizer and not params:
        return []
    return [_swap("optimizer.nvme_swap", "step", optimizer, optimizer + params, ranks_per_host)]


def param_nvme_read_ops(cfg: TrainingConfig, sizes: tuple[int, ...], d: int, phase: Phase,
                        ranks_per_host: int) -> tuple[Op, ...]:
    """The reads of one fetch phase's parameter partitions (`sizes` elements each, 1/d of them per rank) from NVMe,
    before their host-to-device copies; prefetched behind compute when stage3_prefetch_bucket_size > 0."""
    o = cfg.optimizer
    if o.zero_stage < 3 or o.offload_param != "nvme":
        return ()
    hidden = {"overlap": "param_gather"} if o.stage3_prefetch_bucket_size_elems != 0 else {}
    per_rank = param_swap_bytes(cfg) / max(1, d)
    return tuple(_swap("zero3.param_nvme_read", phase, n * per_rank, 0, ranks_per_host, NVME_LINK, dict(hidden))
                 for n in sizes)

"""ds_config keys that change a DeepSpeed step's time or memory and that llmperf does not price: one warning each
when set to something other than DeepSpeed's default (0.19.8: runtime/config.py, runtime/constants.py,
runtime/zero/config.py, utils/config.py). The keys llmperf prices
(ZeRO stage, buckets, overlap_comm, contiguous_gradients, communication_data_type, grad_accum_dtype, offload, ZeRO++)
and those it warns about elsewhere (wall_clock_breakdown, flops_profiler, removed sections, sub_group_size,
round_robin_gradients) are read by deepspeed_config.py / deepspeed_schema.py, the activation_checkpointing section by
ds_checkpointing.py; the table of decisions is
tests/frameworks/real_scripts/FLAGS.md.
"""

from __future__ import annotations

from typing import Any

ZERO_KEYS: dict[str, tuple[Any, str]] = {
    "reduce_scatter": (True, "gradients all-reduced instead of reduce-scattered at ZeRO-1/2 (stage_1_and_2.py "
                             "average_tensor: about twice the bytes); timed as the reduce-scatter"),
    "use_multi_rank_bucket_allreduce": (True, "per-rank bucket all-reduces of the reduce_scatter false path not "
                                              "modelled"),
    "memory_efficient_linear": (True, "ZeRO-3 linear layers through torch's F.linear instead of DeepSpeed's "
                                      "LinearFunctionForZeroStage3: what autograd then saves is not modelled"),
    "legacy_stage1": (False, "DeepSpeed's legacy ZeRO-1 partitioning not modelled"),
    "allgather_partitions": (True, "ZeRO-1/2 parameters gathered by one broadcast per rank instead of an all-gather: "
                                   "timed as the all-gather"),
    "stage3_param_persistence_threshold": (100_000, "ZeRO-3 keeps parameters under this many elements resident: "
                                                    "priced at DeepSpeed's 1e5"),
    "param_persistence_threshold": (100_000, "ZeRO-3 keeps parameters under this many elements resident: priced at "
                                             "DeepSpeed's 1e5"),
    "stage3_model_persistence_threshold": (None, "a cap on ZeRO-3's resident parameters not modelled"),
    "model_persistence_threshold": (None, "a cap on ZeRO-3's resident parameters not modelled"),
    "stage3_max_reuse_distance": (1_000_000_000, "ZeRO-3's release of parameters by reuse distance is not modelled "
                                                 "(each layer is gathered again for its backward)"),
    "max_reuse_distance": (1_000_000_000, "ZeRO-3's release of parameters by reuse distance is not modelled (each "
                                          "layer is gathered again for its backward)"),
}
"""zero_optimization key -> (DeepSpeed's default, what a different value changes); None: any value warns (the
default is sys.maxsize). HF's "auto" fills (10 x hidden for the persistence threshold) are left alone."""

def _differs(value: Any, default: Any) -> bool:
    """A value the user set away from DeepSpeed's default ("auto" is filled by the Hugging Face integration)."""
    return value not in (None, "auto") and (default is None or value != default)


def _zero_warnings(raw: dict[str, Any], origin: str) -> list[str]:
    zero = raw.get("zero_optimization")
    if not isinstance(zero, dict):
        return []
    return [f"{origin} zero_optimization.{key} = {zero[key]}: {effect}" for key, (default, effect) in ZERO_KEYS.items()
            if _differs(zero.get(key), default)]


def _top_level_warnings(raw: dict[str, Any], origin: str) -> list[str]:
    """engine.py allreduce_bucket: a gradient_predivide_factor other than 1 scales the gradients before and after the
    all-reduce (one pass each, against one pass by 1/DP otherwise); comms_logger synchronizes the device after every
    collective (comm/comm.py timed_op: 'Need to make op blocking for accurate logging'); memory_breakdown calls
    see_memory_usage around every forward and backward, which runs gc.collect() on rank 0 (runtime/utils.py) while
    the other ranks wait at the next collective."""
    out: list[str] = []
    factor = raw.get("gradient_predivide_factor", 1.0)
    if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor != 1.0:
        out.append(f"{origin} gradient_predivide_factor = {factor}: an extra scaling pass over the gradients per step "
                   "not timed")
    logger = raw.get("comms_logger")
    if isinstance(logger, dict) and logger.get("enabled") is True:
        out.append(f"{origin} comms_logger enabled: DeepSpeed synchronizes the device after every collective it logs, "
                   "which serializes communication with compute; not modelled")
    if raw.get("memory_breakdown") is True:
        out.append(f"{origin} memory_breakdown: gc.collect() and memory reports on rank 0 around every forward and "
                   "backward not timed")
    return out


def _timer_and_precision_warnings(raw: dict[str, Any], origin: str) -> list[str]:
    """utils/config.py DeepSpeedThroughputTimerConfig (enabled and synchronized, default true): the synchronized
    throughput timer drains the device at every micro-batch's start, which predict/host_issue.py prices as the
    micro-batch prologue. bf16.immediate_grad_update (default false in 0.19.8): BF16_Optimizer accumulates each
    micro-batch's gradients into fp32 from backward hooks instead of in 16 bit."""
    out: list[str] = []
    timers = raw.get("timers")
    throughput = timers.get("throughput") if isinstance(timers, dict) else None
    if isinstance(throughput, dict) and False in (throughput.get("enabled", True), throughput.get("synchronized", True)):
        out.append(f"{origin} timers.throughput without a synchronized timer: the device sync at each micro-batch's "
                   "start, priced as a stall of the launch queue, does not happen")
    bf16 = raw.get("bf16", raw.get("bfloat16"))
    if isinstance(bf16, dict) and bf16.get("immediate_grad_update") is True:
        out.append(f"{origin} bf16.immediate_grad_update: fp32 gradient accumulation from backward hooks timed as the "
                   "16-bit accumulation")
    return out


def step_key_warnings(raw: dict[str, Any], origin: str) -> list[str]:
    """One line per ds_config key set away from its default that changes the step and is not priced."""
    return _zero_warnings(raw, origin) + _top_level_warnings(raw, origin) + _timer_and_precision_warnings(raw, origin)

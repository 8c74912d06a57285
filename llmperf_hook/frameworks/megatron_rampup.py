"""Megatron's batch-size ramp-up (--rampup-batch-size START INCREMENT SAMPLES, Megatron-LM to core_v0.17 and
Megatron-DeepSpeed): which global batches its steps run at.

train() calls update_num_microbatches(consumed, consistency_check=True) at every step and asserts that the step's
global batch divides by micro-batch x DP ('current global batch size ... is not divisible by micro-batch-size times
data parallel size', megatron/core/num_microbatches_calculator.py RampupBatchsizeNumMicroBatchesCalculator.update;
Megatron-DeepSpeed's megatron/microbatches.py alike), unless --decrease-batch-size-if-needed. A step's batch is
START + k x INCREMENT, k = int(consumed samples / (SAMPLES / increments)), the consumed samples growing by each step's
batch: every k is reached when SAMPLES / increments is at least the batch, a short ramp skips some. So micro-batch x
DP must divide the greatest common divisor of the batches the ramp reaches (START and INCREMENT when it reaches all).
explain (megatron_validate_args._check_rampup) and tune (tune/command_rules.py) both read it here.

--decrease-batch-size-if-needed (Megatron-LM, not Megatron-DeepSpeed): ConstantNumMicroBatchesCalculator (and the
ramp-up one at its final batch) runs each step at the global batch rounded down to a multiple of micro-batch x DP
(_round, 'decreasing batch size from G to R to keep divisiblity') and asserts at least one micro-batch: the step is
priced at that running batch (decreased_batch).
"""

from __future__ import annotations

import math
from dataclasses import replace

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.training_config import BatchConfig
from llmperf_hook.provenance import Source, SourceKind


def running_global_batch(global_batch: int, micro_batch: int, dp: int) -> int:
    """The batch a step runs at under --decrease-batch-size-if-needed: num_microbatches_calculator._round(global,
    micro x DP) = (global // (micro x DP)) x (micro x DP)."""
    per_step = micro_batch * dp
    return global_batch // per_step * per_step


def decreased_batch(batch: BatchConfig, dp: int, src: dict[str, Source], warnings: list[str]) -> BatchConfig:
    """`batch` as Megatron-LM runs it under --decrease-batch-size-if-needed: a global batch micro x DP does not divide
    is rounded down (ConstantNumMicroBatchesCalculator.__init__); exit 2 when that leaves no micro-batch ('number of
    microbatches should be at least 1'). Its eval batch is checked apart (megatron_validate_args._check_eval_batch)."""
    gbs, mbs = batch.global_batch_size, batch.micro_batch_size
    running = running_global_batch(gbs, mbs, dp)
    if running == gbs:
        return batch
    if running == 0:
        raise ConfigError(f"global batch size {gbs} ({src.get('global_batch_size')}) is below micro batch size {mbs} "
                          f"x data parallel size {dp} = {mbs * dp}: --decrease-batch-size-if-needed rounds it down to 0 "
                          "and Megatron's ConstantNumMicroBatchesCalculator asserts 'number of microbatches should be "
                          f"at least 1'. Use a global batch size of at least {mbs * dp}, or fewer GPUs per replica.")
    src["global_batch_size"] = Source(SourceKind.DERIVED, f"{gbs} ({src.get('global_batch_size')}) rounded down to "
                                      f"a multiple of MBS*DP = {mbs}*{dp} by --decrease-batch-size-if-needed")
    src["num_microbatches"] = Source(SourceKind.DERIVED, f"{running}/({mbs}*{dp})")
    warnings.append(f"--decrease-batch-size-if-needed: global batch size {gbs} is not divisible by micro batch size "
                    f"{mbs} x data parallel size {dp}; Megatron runs every step at {running} (its "
                    "NumMicroBatchesCalculator rounds down), and the step is priced there")
    return replace(batch, global_batch_size=running, num_microbatches=running // (mbs * dp))


def rampup_divisor(words: object, global_batch: int) -> int:
    """The greatest common divisor of the global batches below `global_batch` that the ramp-up runs steps at; 0 when
    the command has no ramp-up or Megatron refuses its words anyway (explain's rules: not three integers, START or
    INCREMENT not positive, GLOBAL - START not a non-negative multiple of INCREMENT; START = GLOBAL and SAMPLES = 0
    divide by zero in the calculator's __init__)."""
    if not isinstance(words, (list, tuple)) or len(words) != 3:
        return 0
    try:
        start, increment, samples = (int(w) for w in words)
    except ValueError:
        return 0
    if start <= 0 or increment <= 0 or samples <= 0 or start >= global_batch or (global_batch - start) % increment:
        return 0
    increments = (global_batch - start) // increment
    per_increment = samples / increments
    if per_increment >= global_batch:  # a step consumes at most GLOBAL samples: every k below `increments` is run
        return start if increments == 1 else math.gcd(start, increment)

    def batch(consumed: int) -> int:  # RampupBatchsizeNumMicroBatchesCalculator.update, its float division included
        return global_batch if consumed > samples else start + int(consumed / per_increment) * increment

    divisor, size, consumed = start, start, 0
    while size < global_batch:  # jump to the first step of the next batch size (batch() never decreases)
        low, high = 1, (samples - consumed) // size + 1  # `high` steps take it past SAMPLES: the global batch
        while low < high:
            mid = (low + high) // 2
            low, high = (mid + 1, high) if batch(consumed + mid * size) == size else (low, mid)
        consumed += low * size
        size = batch(consumed)
        divisor = math.gcd(divisor, size) if size < global_batch else divisor
    return divisor

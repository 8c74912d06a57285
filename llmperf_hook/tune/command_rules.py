"""Layout rules that flags of the user's command bring in where the TrainingConfig does not carry the flag.

`--apply` keeps every flag tune does not search, so a candidate must satisfy the rules those flags impose on the
knobs it changes; candidates.rule_masks states the rules it can read from the TrainingConfig, these read the training
script's own words (ParsedJob.script_args, variables expanded) and give the same kind of named masks (True = the
framework refuses that candidate's command):

- --rampup-batch-size START INCREMENT SAMPLES (Megatron-LM to core_v0.17, Megatron-DeepSpeed): the ramp-up
  calculator asserts at every iteration that the current global batch, START + k x INCREMENT up to the global
  batch, divides by micro-batch x DP ('current global batch size ... is not divisible by micro-batch-size times data
  parallel size', megatron/core/num_microbatches_calculator.py RampupBatchsizeNumMicroBatchesCalculator.update,
  called with consistency_check=True by train() each step), unless --decrease-batch-size-if-needed. So START and,
  when the ramp has a second value, INCREMENT must be multiples of micro-batch x DP.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from llmperf_hook.frameworks.flags import parse_flags
from llmperf_hook.frameworks.script_flags import SCRIPT_FLAGS
from llmperf_hook.frameworks.training_config import TrainingConfig

Masks = dict[str, np.ndarray]
MaskFn = Callable[[Mapping[str, np.ndarray]], Masks]

RAMPUP_RULE = "--rampup-batch-size start / increment % (micro_batch*dp) != 0"


def command_rule_masks(cfg: TrainingConfig, script_args: Sequence[str]) -> MaskFn:
    """The rules the command's flags bring in, as a function of a candidate table's columns."""
    if cfg.framework not in ("megatron", "megatron-deepspeed"):
        return lambda cols: {}
    flags = parse_flags(script_args, SCRIPT_FLAGS)
    ramp = _rampup_steps(flags.get("rampup_batch_size"), cfg.batch.global_batch_size)
    if not ramp or "--decrease-batch-size-if-needed" in script_args:  # that flag rounds each batch down instead
        return lambda cols: {}

    def masks(cols: Mapping[str, np.ndarray]) -> Masks:
        step = cols["mbs"] * np.maximum(cfg.world_size // (cols["tp"] * cols["pp"] * cols["cp"]), 1)
        return {RAMPUP_RULE: np.logical_or.reduce([size % step != 0 for size in ramp])}

    return masks


def _rampup_steps(words: object, global_batch: int) -> tuple[int, ...]:
    """(START, INCREMENT) that every micro-batch x DP must divide (INCREMENT only if the ramp has a second value);
    () when the command has no ramp-up or explain refuses its words anyway (not three integers)."""
    if not isinstance(words, (list, tuple)) or len(words) != 3:
        return ()
    try:
        start, increment, _ = (int(w) for w in words)
    except ValueError:
        return ()
    if start <= 0 or increment <= 0:
        return ()
    return (start, increment) if start < global_batch else (start,)

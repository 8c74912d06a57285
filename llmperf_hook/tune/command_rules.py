"""Layout rules that flags of the user's command bring in where the TrainingConfig does not carry the flag.

`--apply` keeps every flag tune does not search, so a candidate must satisfy the rules those flags impose on the
knobs it changes; candidates.rule_masks states the rules it can read from the TrainingConfig, these read the training
script's own words (ParsedJob.script_args, variables expanded) and give the same kind of named masks (True = the
framework refuses that candidate's command):

- --rampup-batch-size START INCREMENT SAMPLES (Megatron-LM to core_v0.17, Megatron-DeepSpeed): micro-batch x DP
  must divide every global batch the ramp-up runs steps at, unless --decrease-batch-size-if-needed
  (frameworks/megatron_rampup.py, which explain's rule reads too).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from llmperf_hook.frameworks.flags import parse_flags
from llmperf_hook.frameworks.megatron_rampup import rampup_divisor
from llmperf_hook.frameworks.script_flags import SCRIPT_FLAGS
from llmperf_hook.frameworks.training_config import TrainingConfig

Masks = dict[str, np.ndarray]
MaskFn = Callable[[Mapping[str, np.ndarray]], Masks]

RAMPUP_RULE = "a --rampup-batch-size step's global batch % (micro_batch*dp) != 0"


def command_rule_masks(cfg: TrainingConfig, script_args: Sequence[str], world_size: int | None = None) -> MaskFn:
    """The rules the command's flags bring in, as a function of a candidate table's columns; `world_size`: the GPUs
    the job starts with where not the config's (a smaller count of an elastic range: tune/elastic.py)."""
    world = cfg.world_size if world_size is None else world_size
    if cfg.framework not in ("megatron", "megatron-deepspeed"):
        return lambda cols: {}
    flags = parse_flags(script_args, SCRIPT_FLAGS)
    divisor = rampup_divisor(flags.get("rampup_batch_size"), cfg.batch.global_batch_size)
    if not divisor or "--decrease-batch-size-if-needed" in script_args:  # that flag rounds each batch down instead
        return lambda cols: {}

    def masks(cols: Mapping[str, np.ndarray]) -> Masks:
        step = cols["mbs"] * np.maximum(world // (cols["tp"] * cols["pp"] * cols["cp"]), 1)
        return {RAMPUP_RULE: divisor % step != 0}

    return masks


def all_rules(*fns: MaskFn) -> MaskFn:
    """One MaskFn holding every named mask of `fns` (search_candidates takes one)."""
    return lambda cols: {name: mask for fn in fns for name, mask in fn(cols).items()}

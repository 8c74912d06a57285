"""Layout rules that flags of the user's command bring in where the TrainingConfig does not carry the flag.

`--apply` keeps every flag tune does not search, so a candidate must satisfy the rules those flags impose on the
knobs it changes; candidates.rule_masks states the rules it can read from the TrainingConfig, these read the training
script's own words (ParsedJob.script_args, variables expanded) and give the same kind of named masks (True = the
framework refuses that candidate's command):

- --rampup-batch-size START INCREMENT SAMPLES (Megatron-LM to core_v0.17, Megatron-DeepSpeed): micro-batch x DP
  must divide every global batch the ramp-up runs steps at, unless --decrease-batch-size-if-needed
  (frameworks/megatron_rampup.py, which explain's rule reads too).
- Megatron-LM's eval batch (arguments.py validate_args, since #4014, 2026-04-13; core_v0.18.0 on, not in
  core_v0.16.1): --eval-global-batch-size (default: the global batch, which is MBS x DP when a
  --step-batch-size-schedule gives none: validate_args sets args.global_batch_size before the calculator reads the
  schedule) must be divisible by --eval-micro-batch-size (default: the micro-batch) x DP, asserted at start-up
  whatever --decrease-batch-size-if-needed says; with that flag, ConstantNumMicroBatchesCalculator
  (core/num_microbatches_calculator.py) rounds the training batch down to a multiple of micro x DP and asserts at least
  one micro-batch, so the global batch must be at least micro x DP. Both hold at every node count of an elastic range
  (tune/elastic.py checks them there).
- Megatron-LM's --step-batch-size-schedule (core_v0.18.0 on): train() calls update_num_microbatches(consumed,
  consistency_check=True) every step, and StepBatchsizeNumMicroBatchesCalculator.update asserts the current batch %
  (micro x DP) == 0 (its _validate_schedule does not check them: 'early schedule entries may be smaller than the
  current GPU configuration (e.g., after scaling up GPUs mid-training)'). A candidate must split every earlier batch
  the user's own layout splits (the final batch is the global batch, candidate_rules' rule); the others the user's
  run never reaches unsplit, so it must be resumed past them.
- Under --decrease-batch-size-if-needed the step runs at the global batch rounded down to a multiple of micro x DP
  (frameworks/megatron_rampup.decreased_batch): a candidate whose rounding of the command's --global-batch-size is not
  the batch priced would run another batch than the one its step time is for (at the world priced; an elastic
  range's smaller counts round as they must). At the world priced the flag alone brings no eval rule: core_v0.17
  and earlier have none (predict warns of core_v0.18.0's, megatron_validate_args._check_batch_flags), and this rule
  already keeps the batch priced (a command whose batch divides: the same candidates; one predict rounds: the eval
  rule would refuse every candidate running its priced batch). An elastic range's smaller counts likewise: the flag
  alone there runs rounded on core_v0.16.1 / core_v0.17 (ConstantNumMicroBatchesCalculator), so it prunes nothing, and
  tune/elastic.elastic_note says what core_v0.18.0 and later would need (an --eval-global-batch-size every count
  splits). With an eval flag (core_v0.18.0 on) the rule holds at every count.
- --defer-embedding-wgrad-compute: Megatron's ModelParallelConfig refuses it without pipeline parallelism
  (frameworks/megatron_rules._check_deferred_embedding_wgrad).
- --hierarchical-context-parallel-sizes and --tensor-parallel-num-weight-shards: the sizes validate_args holds the
  layout to (_kept_size_masks).
- --cp-comm-type a2a: Transformer Engine's all-to-all attention needs each TP rank's query and key/value heads to
  divide by the all-to-all group (frameworks/megatron_rules._check_a2a_heads).
- --optimizer muon / dist_muon: no distributed optimizer (core_v0.16 / 0.17 validate_args assert it; core_v0.18.0 on
  run it layer-wise, so a command that already gives --use-distributed-optimizer is not held to it).
- --export-kd-teacher-load: no interleaved schedule at PP > 1 (ModelOpt's builder asserts it,
  frameworks/megatron_unpriced_layers.check_distillation).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from llmperf_hook.frameworks.flags import parse_flags
from llmperf_hook.frameworks.megatron_rampup import rampup_divisor
from llmperf_hook.frameworks.megatron_rules import list_values
from llmperf_hook.frameworks.script_flags import SCRIPT_FLAGS
from llmperf_hook.frameworks.step_batch_schedule import step_batch_schedule
from llmperf_hook.frameworks.training_config import TrainingConfig

Masks = dict[str, np.ndarray]
MaskFn = Callable[[Mapping[str, np.ndarray]], Masks]

RAMPUP_RULE = "a --rampup-batch-size step's global batch % (micro_batch*dp) != 0"
EVAL_BATCH_RULE = "eval global batch % (eval micro_batch*dp) != 0"
ROUNDED_TO_NOTHING_RULE = "global_batch < micro_batch*dp (--decrease-batch-size-if-needed rounds it to 0)"
ROUNDED_ELSEWHERE_RULE = "--decrease-batch-size-if-needed rounds the global batch to another batch than the one priced"
SCHEDULE_RULE = "a --step-batch-size-schedule batch % (micro_batch*dp) != 0"
DECREASE_FLAG = "--decrease-batch-size-if-needed"
DEFERRED_WGRAD_RULE = "--defer-embedding-wgrad-compute needs pp > 1"
A2A_HEADS_RULE = "all-to-all context parallel: heads or key/value heads per tp rank % a2a size != 0"
HIERARCHICAL_CP_RULE = "cp != the product of --hierarchical-context-parallel-sizes"
MUON_DISTOPT_RULE = "--optimizer muon with the distributed optimizer (core_v0.16 / 0.17 refuse it)"
DISTILL_VPP_RULE = "--export-kd-teacher-load with an interleaved schedule (ModelOpt asserts)"
WEIGHT_SHARDS_RULE = "--tensor-parallel-num-weight-shards < tp, not a multiple of tp, or its shards per tp rank % dp != 0"


def command_rule_masks(cfg: TrainingConfig, script_args: Sequence[str], world_size: int | None = None) -> MaskFn:
    """The rules the command's flags bring in, as a function of a candidate table's columns; `world_size`: the GPUs
    the job starts with where not the config's (a smaller count of an elastic range: tune/elastic.py)."""
    world = cfg.world_size if world_size is None else world_size
    if cfg.framework not in ("megatron", "megatron-deepspeed"):
        return lambda cols: {}
    fns = [_rampup_masks(cfg, script_args, world), _a2a_heads_masks(cfg, script_args)]
    if cfg.framework == "megatron":  # Megatron-DeepSpeed's older arguments.py has no eval batch of its own
        fns += [_batch_flag_masks(cfg, script_args, world), _schedule_masks(cfg, script_args, world),
                _kept_size_masks(script_args, world)]
        flags = parse_flags(script_args, SCRIPT_FLAGS)
        if flags.get("defer_embedding_wgrad_compute"):
            fns.append(lambda cols: {DEFERRED_WGRAD_RULE: cols["pp"] == 1})
        if flags.get("optimizer") in ("muon", "dist_muon") and not flags.get("use_distributed_optimizer"):
            # megatron_validate_args._check_muon; a command with it already runs core_v0.18.0 or later
            fns.append(lambda cols: {MUON_DISTOPT_RULE: cols["distopt"] == 1})
        if any(w.split("=")[0] == "--export-kd-teacher-load" for w in script_args):  # megatron_unpriced_layers
            fns.append(lambda cols: {DISTILL_VPP_RULE: (cols["pp"] > 1) & (cols["vpp"] > 1)})
    return all_rules(*fns)


def _data_parallel(cols: Mapping[str, np.ndarray], world: int) -> np.ndarray:
    return np.maximum(world // (cols["tp"] * cols["pp"] * cols["cp"]), 1)


def _rampup_masks(cfg: TrainingConfig, script_args: Sequence[str], world: int) -> MaskFn:
    divisor = rampup_divisor(parse_flags(script_args, SCRIPT_FLAGS).get("rampup_batch_size"),
                             cfg.batch.global_batch_size)
    if not divisor or DECREASE_FLAG in script_args:  # that flag rounds each batch down instead
        return lambda cols: {}
    return lambda cols: {RAMPUP_RULE: divisor % (cols["mbs"] * _data_parallel(cols, world)) != 0}


def _last_int(script_args: Sequence[str], flag: str) -> int | None:
    words = list_values(script_args, flag)
    return int(words[0]) if words and words[0].isdigit() else None


def _batch_flag_masks(cfg: TrainingConfig, script_args: Sequence[str], world: int) -> MaskFn:
    """The eval batch's divisibility and, under DECREASE_FLAG, at least one micro-batch and the batch priced (module
    docstring). Without eval flags and without DECREASE_FLAG the eval rule is candidate_rules' global-batch one: not
    repeated."""
    eval_global = _last_int(script_args, "--eval-global-batch-size")
    eval_micro = _last_int(script_args, "--eval-micro-batch-size")
    decrease = list_values(script_args, DECREASE_FLAG) is not None
    if eval_global is None and eval_micro is None and not decrease:
        return lambda cols: {}
    schedule = list_values(script_args, "--step-batch-size-schedule") is not None
    # the command's own batch (tune pins a default one into the command): priced rounded under DECREASE_FLAG
    requested = _last_int(script_args, "--global-batch-size") or cfg.batch.global_batch_size
    priced = cfg.batch.global_batch_size

    def masks(cols: Mapping[str, np.ndarray]) -> Masks:
        dp = _data_parallel(cols, world)
        per_step = cols["mbs"] * dp
        out = {}
        if eval_global is not None or eval_micro is not None:  # flags of core_v0.18.0 on, which asserts the rule
            out[EVAL_BATCH_RULE] = (eval_global or (per_step if schedule else requested)) % (
                (eval_micro or cols["mbs"]) * dp) != 0
        if decrease:
            out[ROUNDED_TO_NOTHING_RULE] = requested < per_step
            if world == cfg.world_size:  # an elastic count runs its own rounding, unpriced (tune/elastic.py)
                out[ROUNDED_ELSEWHERE_RULE] = (requested >= per_step) & (requested // per_step * per_step != priced)
        return out

    return masks


def _schedule_masks(cfg: TrainingConfig, script_args: Sequence[str], world: int) -> MaskFn:
    """SCHEDULE_RULE on the earlier batches of --step-batch-size-schedule the user's own layout splits (module
    docstring); predict has parsed the schedule already (frameworks/step_batch_schedule.py)."""
    words = list_values(script_args, "--step-batch-size-schedule")
    if not words:
        return lambda cols: {}
    own = cfg.batch.micro_batch_size * cfg.parallel.dp
    steps = step_batch_schedule(" ".join(words), cfg.model.seq_length).steps[:-1]
    reached = np.array(sorted({batch for _, batch in steps if batch % own == 0}), dtype=np.int64)
    if not reached.size:
        return lambda cols: {}

    def masks(cols: Mapping[str, np.ndarray]) -> Masks:
        per_step = (cols["mbs"] * _data_parallel(cols, world))[:, None]
        return {SCHEDULE_RULE: (reached[None, :] % per_step != 0).any(axis=1)}

    return masks


def _a2a_heads_masks(cfg: TrainingConfig, script_args: Sequence[str]) -> MaskFn:
    """--cp-comm-type a2a (a2a+p2p: its first --hierarchical-context-parallel-sizes level) spreads each TP rank's
    query and key/value heads over the all-to-all group (frameworks/megatron_rules._check_a2a_heads, explain's rule)."""
    types, levels = list_values(script_args, "--cp-comm-type") or [], list_values(script_args, "--hierarchical-context-parallel-sizes")
    if "a2a" not in types and not ("a2a+p2p" in types and levels and levels[0].isdigit()):
        return lambda cols: {}
    heads, groups = cfg.model.num_attention_heads, cfg.model.num_query_groups

    def masks(cols: Mapping[str, np.ndarray]) -> Masks:
        size = cols["cp"] if "a2a" in types else np.full(cols["cp"].shape, int(levels[0]))
        per_rank = (heads // cols["tp"]) % size | np.maximum(groups // cols["tp"], 1) % size
        return {A2A_HEADS_RULE: (cols["cp"] > 1) & (size > 1) & (per_rank != 0)}

    return masks


def _kept_size_masks(script_args: Sequence[str], world: int) -> MaskFn:
    """Sizes of the command that --apply keeps and explain holds to the layout (frameworks/megatron_validate_args):
    validate_args asserts context_parallel_size == prod(--hierarchical-context-parallel-sizes) (_check_hierarchical_cp);
    core/model_parallel_config.py resolve_tensor_parallel_weight_shards raises for --tensor-parallel-num-weight-shards
    below TP or not a multiple of it, and validate_args asserts the world divides by TP x PP x CP x (shards / TP)
    (_weight_shard_warnings; shards == TP is plain TP)."""
    levels = list_values(script_args, "--hierarchical-context-parallel-sizes") or []
    product = int(np.prod([int(v) for v in levels])) if levels and all(v.isdigit() for v in levels) else None
    shards = _last_int(script_args, "--tensor-parallel-num-weight-shards")

    def masks(cols: Mapping[str, np.ndarray]) -> Masks:
        out: Masks = {}
        if product is not None:
            out[HIERARCHICAL_CP_RULE] = cols["cp"] != product
        if shards is not None:
            tp = cols["tp"]
            per_rank = np.maximum(shards // tp, 1)
            out[WEIGHT_SHARDS_RULE] = (shards != tp) & (
                (shards < tp) | (shards % tp != 0) | (_data_parallel(cols, world) % per_rank != 0))
        return out

    return masks


def all_rules(*fns: MaskFn) -> MaskFn:
    """One MaskFn holding every named mask of `fns` (search_candidates takes one)."""
    return lambda cols: {name: mask for fn in fns for name, mask in fn(cols).items()}

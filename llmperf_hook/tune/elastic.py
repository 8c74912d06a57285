"""A launch at a range of node counts (`torchrun --nnodes MIN:MAX`, Slurm's `srun -N MIN-MAX` / `#SBATCH
--nodes=MIN-MAX`): the size tune ranks at, and the layouts that also start and fit at every smaller count.

Slurm allocates "as many nodes as possible within the range specified and without delaying the initiation of the
job" (sbatch(1) -N), so the count a step sized by the allocation gets is known only when it starts
(launch/slurm_node_count.py: a range's MIN becomes `least`, only where the step's world follows its node count: not
under srun -n, which fixes the tasks; a size string such as `1,4` or `1-15:4` gives only the counts it lists,
ParsedJob.elastic_node_counts, and only those are checked). tune treats it as the elastic range below.

torchrun reads `--nnodes 2:4` as min_nodes 2, max_nodes 4 (torch/distributed/run.py parse_min_max_nnodes) and its
rendezvous starts the job once MIN nodes joined, admitting more only until its last-call timeout; after a node is lost
or added it restarts every worker at the new count. So the world the job trains at is anywhere from MIN to MAX nodes.
predict prices the maximum (launch/torchrun.parse_nnodes, with a warning), and tune ranks at the same size, the
fastest the job runs. A layout must also start at MIN, where Megatron-LM asserts world % (TP x PP x CP) == 0
(arguments.py), world % (ETP x EP x PP) == 0 (parallel_state.initialize_model_parallel: the expert grid) and, with the
global batch fixed, global_batch % (micro_batch x DP) == 0 and the interleaved schedule's micro-batch count rules, and
DeepSpeed asserts the same batch triad (runtime/config.py _batch_assertion) for a ds_config train_batch_size: a layout
that breaks one of them at MIN (candidate_rules.rule_masks at MIN's world) is counted invalid, so the configuration
tune lists and --apply launches starts at every count. Those rules are checked at every node count from MIN to
MAX, not only the ends: a count in between can break one that both ends keep (2:4 nodes x 8 GPUs with a global batch of
512: at 3 nodes DP is a multiple of 3, which never divides 512, so Megatron stops there whatever the layout).
Memory is a ranking rule too: at fewer nodes DP is smaller, so ZeRO and distributed-optimizer shards are larger and,
at a fixed global batch, each rank runs more micro-batches; a layout that fits at MAX but not at MIN is pruned (its
own count in the summary) before its step time is predicted. Assumed: the peak per GPU is non-increasing in the node
count (every term of schedule/memory.py shrinks or stays as DP grows: the shards are 1/DP, the micro-batches in
flight min(PP, m) with m = global / (micro x DP)), so the memory model is asked at MIN alone; the host RAM the
offloads pin is checked at MAX only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from llmperf_hook.errors import LlmperfError
from llmperf_hook.frameworks.megatron_rules import list_values
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.launch.parsed_job import ParsedJob
from llmperf_hook.provenance import SourceKind
from llmperf_hook.schedule.memory_rule import fits_gpu
from llmperf_hook.tune.candidate import candidate_of
from llmperf_hook.tune.candidate_rules import rule_masks
from llmperf_hook.tune.candidates import candidates_from_list
from llmperf_hook.tune.command_rules import (DECREASE_FLAG, EVAL_BATCH_RULE, RAMPUP_RULE, ROUNDED_TO_NOTHING_RULE,
                                             Masks, MaskFn, command_rule_masks)


def elastic_note(job: ParsedJob) -> str | None:
    """The size tune ranks at for an elastic launch, for the header (None: a fixed node count)."""
    least = job.elastic_min_nnodes
    if least is None:
        return None
    sizes = job.elastic_node_counts  # a Slurm size string's (`-N 1,2,4`), else every count from MIN
    inner = (sizes or tuple(range(least, job.nnodes)))[1:]
    listed = ", ".join(map(str, inner)) if len(inner) <= 4 else f"{inner[0]} to {inner[-1]}"
    between = f" and at {'the other counts it allows' if sizes else 'every count in between'} ({listed})" if inner \
        else ""
    words = _range_words(job)
    verb = "gives the job" if words.startswith("-N") else "starts at"  # Slurm picks the count when the job starts
    allowed = f"{', '.join(map(str, sizes))} or {job.nnodes}" if sizes else f"{least} to {job.nnodes}"
    return (f"{words} {verb} {allowed} nodes: ranked at the maximum, "
            f"{job.nnodes} nodes ({job.world_size} GPUs); every layout listed also starts at {least} "
            f"node{'s' * (least > 1)} ({least * job.nproc_per_node} GPUs){between}, and fits its memory at "
            f"{least}, where fewer data-parallel ranks hold larger ZeRO / distributed-optimizer shards (assumed: the "
            "peak per GPU does not grow with the node count, so memory is checked at the minimum); llmperf --nnodes N "
            "ranks at N nodes" + _release_eval_note(job))


def _release_eval_note(job: ParsedJob) -> str:
    """DECREASE_FLAG without an eval flag: the smaller counts run the global batch rounded down on Megatron-LM
    core_v0.16.1 / core_v0.17 (ConstantNumMicroBatchesCalculator, no eval check), as tune checks them; core_v0.18.0
    and later also assert 'eval_global_batch_size ... must be divisible by eval_micro_batch_size * data_parallel_size'
    with the eval batch defaulting to the unrounded global batch (arguments.py validate_args, #4014), which the
    sentence says, with the batches every count splits at micro-batch 1 (multiples of the counts' GPU lcm)."""
    args = job.script_args
    if list_values(args, DECREASE_FLAG) is None or any(
            list_values(args, flag) is not None for flag in ("--eval-global-batch-size", "--eval-micro-batch-size")):
        return ""
    lcm = math.lcm(*(nodes * job.nproc_per_node for nodes in (*smaller_counts(job), job.nnodes)))
    advice = (f"add --eval-global-batch-size with a multiple of {lcm} (every count splits it at micro-batch 1)"
              if lcm <= EVAL_BATCH_ADVICE_LIMIT else
              "no eval batch one would run splits every count (the smallest that does, the least common multiple of "
              f"their GPU numbers, has {len(str(lcm))} digits): on those releases narrow the range")
    return (f". {DECREASE_FLAG} alone: the smaller counts run the global batch rounded down, as Megatron-LM "
            "core_v0.17 and earlier do; core_v0.18.0 and later also assert there that the eval batch (by default "
            "the unrounded global batch) divides by micro-batch x data-parallel size (arguments.py): on those "
            f"releases {advice}")


EVAL_BATCH_ADVICE_LIMIT = 1_000_000
"""The largest eval batch (samples) _release_eval_note proposes: a range of many node counts needs the lcm of all their
GPU numbers (64:128 nodes of 8: 57 digits), no batch a job evaluates; past this it says so instead of the number."""


def _range_words(job: ParsedJob) -> str:
    """How the command asked for a range of node counts: torchrun's `--nnodes MIN:MAX`, Slurm's `-N MIN-MAX` or the
    DeepSpeed launcher's `--elastic_training --min_elastic_nodes MIN` over the nodes it launches
    (launch/deepspeed_elastic.py)."""
    if job.launcher == "deepspeed":
        return _deepspeed_words(job.elastic_min_nnodes, job.nnodes)
    source = job.sources.get("nnodes")
    dash = source is not None and (source.detail in ("-N", "--nodes") or source.detail.startswith("SLURM"))
    if dash and job.elastic_node_counts:
        return f"-N {','.join(map(str, (*job.elastic_node_counts, job.nnodes)))}"
    return f"-N {job.elastic_min_nnodes}-{job.nnodes}" if dash else f"--nnodes {job.elastic_min_nnodes}:{job.nnodes}"


def _deepspeed_words(least: int | None, nnodes: int) -> str:
    return f"deepspeed --elastic_training --min_elastic_nodes {least} (up to its {nnodes} nodes)"


WORLD_RULE = "world at the elastic minimum"
"""How the layout rule at MIN begins (the named mask: 'world at the elastic minimum (2 nodes, 16 GPUs) % ...')."""
BETWEEN_RULE = "world at an elastic count"
"""Likewise at a count between MIN and MAX: 'world at an elastic count (3 nodes, 24 GPUs) % ...'."""


def starting_nothing_sentence(counts: Sequence[str], invalid_by_rule: Mapping[str, int]) -> str:
    """For the exit-3 message: the counts of the range at which no layout searched can start, with the rules that
    refused the layouts there (a layout is counted under the first rule it breaks)."""
    if not counts:
        return ""
    shown = counts[:3]  # a wide range (64:128) can have dozens: the first three, with their rules
    said = [f"{where.replace(', ', ' (')})" for where in shown]
    more = f" (and at {len(counts) - len(shown)} other counts)" if len(counts) > len(shown) else ""
    rules = "; ".join(f"{rule}: {n:,}" for rule, n in invalid_by_rule.items() if _where(rule) in shown)
    return (f" No layout searched can start at {' or at '.join(said)}{more} of the elastic range, and the job starts "
            f"or restarts at any count of it: there each breaks a rule Megatron / DeepSpeed check at start-up "
            f"({rules}). "
            + ("Drop gradient_accumulation_steps from the ds_config (DeepSpeed then derives it at each world size), or "
               "give a fixed node count." if FIXED_TRIAD_RULE in rules else
               "Give a range without that count (or a fixed node count), or a global batch that the micro-batch times "
               "every count's data-parallel size divides."))


def global_batch_hint(job: ParsedJob, global_batch: int) -> str:
    """For the exit-3 message when a count starts nothing: the global batches every count of the range splits with
    micro-batch 1, multiples of the least common multiple L of its GPU counts (each count's DP = GPUs / (TP x PP x CP)
    divides its GPUs, so divides L); '' where L is far from the command's global batch (a wide range)."""
    counts = smaller_counts(job)
    if not counts:
        return ""
    gpus = [nodes * job.nproc_per_node for nodes in (*counts, job.nnodes)]
    step = math.lcm(*gpus)
    if step > 4 * global_batch:
        return ""
    near = [b for b in (global_batch // step * step, global_batch // step * step + step) if b > 0]
    listed = ", ".join(map(str, gpus)) if len(gpus) <= 5 else f"{gpus[0]} to {gpus[-1]}"
    return (f" With micro-batch 1 every count splits a global batch that is a multiple of {step} (the least common "
            f"multiple of the range's GPU counts, {listed}), e.g. {' or '.join(map(str, near))} (yours: "
            f"{global_batch}).")


def model_grid_sentence(job: ParsedJob) -> str:
    """For the exit-3 message where layouts fit the maximum's memory only with a model grid the range cannot start
    (nothing fits, and smaller counts refused layouts): every count's world must divide by TP x PP x CP
    (arguments.py), so the grid divides the greatest common divisor G of the range's GPU counts; two consecutive
    counts leave one node's GPUs (gcd(8n, 8(n + 1)) = 8). More TP / PP in --search cannot help past G."""
    counts = smaller_counts(job)
    if not counts:
        return ""
    bound = math.gcd(*(nodes * job.nproc_per_node for nodes in (*counts, job.nnodes)))
    return (f" Under {_range_words(job)} TP x PP x CP must divide {bound} GPUs (the greatest common divisor of its "
            "GPU counts) for every count to start, whatever --search allows: give a fixed node count, or a range "
            "whose counts share a larger divisor, to try larger model grids.")


def elastic_pruned_sentence(invalid_by_rule: Mapping[str, int]) -> str:
    """For the exit-3 message: the layouts only a smaller count of the range refused, which a fixed node count at
    the maximum would try."""
    pruned = {rule: n for rule, n in invalid_by_rule.items() if _where(rule) is not None}
    if not pruned:
        return ""
    where = "; ".join(dict.fromkeys(str(_where(rule)) for rule in pruned))
    return (f" {sum(pruned.values()):,} layouts were refused only because Megatron / DeepSpeed would stop at a smaller "
            f"node count of the elastic range ({where}: the model grid or the global batch does not divide there): "
            "a fixed --nnodes at the maximum, or a range without those counts, lets tune try them.")


def _where(rule: str) -> str | None:
    """'3 nodes, 24 GPUs' of a rule named at a smaller count of the range (None: not such a rule)."""
    if not rule.startswith((WORLD_RULE, BETWEEN_RULE)) and " at the elastic minimum (" not in rule and \
            " at an elastic count (" not in rule:
        return None
    return rule.rsplit("(", 1)[1].split(")", 1)[0] if not rule.startswith("world ") else \
        rule.split("(", 1)[1].split(")", 1)[0]


def counts_starting_nothing(masks: Mapping[str, np.ndarray]) -> tuple[str, ...]:
    """The smaller counts of an elastic range ('3 nodes, 24 GPUs') at which no candidate that the other rules keep
    can start: every one breaks a rule there (e.g. a global batch that no data-parallel size of that count divides).
    Empty when the other rules leave nothing, or the range has no such count."""
    groups: dict[str, np.ndarray] = {}
    other: np.ndarray | None = None
    for name, mask in masks.items():
        where = _where(name)
        if where is None:
            other = mask if other is None else other | mask
        else:
            groups[where] = groups[where] | mask if where in groups else mask
    if other is None or other.all():
        return ()
    return tuple(where for where, mask in groups.items() if (mask | other).all())


_WORLD_RULES = ("world % (tp*pp*cp) != 0", "world % (etp*ep*pp) != 0",
                "dp*cp or expert dp % --num-distributed-optimizer-instances != 0")
"""candidate_rules.rule_masks' rules that depend on the world alone: the model grid (arguments.py), the expert grid
(parallel_state.initialize_model_parallel) and the partial distributed optimizer's shard factor."""
_BATCH_RULES = ("global_batch % (micro_batch*dp) != 0", "interleaving needs", RAMPUP_RULE, EVAL_BATCH_RULE,
                ROUNDED_TO_NOTHING_RULE)
"""Its rules on the micro-batch count at a fixed global batch (the count grows as DP shrinks), a
--rampup-batch-size step's (command_rules.py: micro x DP divides every global batch the ramp-up runs), and Megatron-LM's
eval batch and at-least-one-micro-batch rules (command_rules.py). DECREASE_FLAG (Megatron-LM's flag for a job that keeps
training on fewer GPUs): where micro x DP does not divide the global batch, ConstantNumMicroBatchesCalculator
(core/num_microbatches_calculator.py) runs the largest multiple of it below (_round) instead of asserting,
floor(global / (micro x DP)) micro-batches, as candidate_rules' interleaving rule counts them; with an eval flag
(core_v0.18.0 on) the eval batch must still divide (arguments.py, since #4014; command_rules.py)."""


def _batch_rules(script_args: Sequence[str]) -> tuple[str, ...]:
    """The batch rules a smaller count of the range checks: without the divisibility one under DECREASE_FLAG (the
    ramp-up's goes too: command_rules)."""
    if list_values(script_args, DECREASE_FLAG) is None:
        return _BATCH_RULES
    return tuple(rule for rule in _BATCH_RULES if rule != _BATCH_RULES[0])


def decrease_batch_hint(framework: str, script_args: Sequence[str], invalid_by_rule: Mapping[str, int]) -> str:
    """For the exit-3 message of a Megatron-LM job where a smaller count refused layouts for the global batch alone:
    the flags that let it start there with a smaller batch ('' otherwise)."""
    split = any(rule.startswith(_BATCH_RULES[0]) and _where(rule) is not None for rule in invalid_by_rule)
    if framework != "megatron" or not split or list_values(script_args, DECREASE_FLAG) is not None:
        return ""
    return (f" Or add {DECREASE_FLAG} with an --eval-global-batch-size that every count splits: at a count whose "
            "micro-batch x data-parallel size does not divide the global batch, Megatron-LM then trains on the largest "
            "multiple of it below (num_microbatches_calculator.py) instead of stopping, but core_v0.18.0 and later "
            "still assert that the eval batch, by default the global batch, divides (arguments.py); tune checks that "
            "count's other rules.")


def smaller_counts(job: ParsedJob) -> tuple[int, ...]:
    """The node counts of the range below the maximum (the one ranked), smallest first: MIN to MAX - 1, or those a
    Slurm size string lists (`-N 1,4`: 1 alone; sbatch(1) -N: "what nodes values should be used"); empty for a fixed
    count, or where a launcher states the world itself (uneven slots: the range does not size it)."""
    least = job.elastic_min_nnodes
    if least is None or job.world_size != job.nnodes * job.nproc_per_node:
        return ()
    return job.elastic_node_counts or tuple(range(least, job.nnodes))


def _fixed_batch(cfg: TrainingConfig) -> bool:
    source = cfg.sources.get("global_batch_size")
    return source is not None and source.kind != SourceKind.DERIVED


FIXED_TRIAD_RULE = "ds_config train_batch_size != micro x gradient_accumulation_steps x dp"
"""A DeepSpeed config that writes train_batch_size, the micro batch and gradient_accumulation_steps: DeepSpeedConfig's
_batch_assertion (runtime/config.py) holds train == micro x GAS x DP at one data-parallel size only, and --apply keeps
all three (set for the maximum), so the job stops at every smaller count whatever the layout."""


def _fixed_triad(cfg: TrainingConfig) -> bool:
    """The ds_config writes all three batch keys (none derived, none left to the Trainer's flags)."""
    src = cfg.sources
    return all(key in src and src[key].kind == SourceKind.CONFIG_FILE and word in src[key].detail
               for key, word in (("global_batch_size", "train_batch_size"),
                                 ("micro_batch_size", "train_micro_batch_size_per_gpu"),
                                 ("num_microbatches", "gradient_accumulation_steps")))


PINNED = "--global-batch-size pinned by --apply"
"""Megatron without --global-batch-size runs micro x DP, which follows the world; --apply states the global batch the
search held where a layout's micro x DP at MAX differs from it (tune/megatron_argv._pin_global_batch), which fixes it
at every count."""


def _pinned_batch(cfg: TrainingConfig, cols: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """Per candidate, whether --apply pins a global batch the command derives (None: not a Megatron job with a derived
    global batch)."""
    if cfg.framework not in ("megatron", "megatron-deepspeed") or _fixed_batch(cfg):
        return None
    dp = cfg.world_size // np.maximum(cols["tp"] * cols["pp"] * cols["cp"], 1)
    return cols["mbs"] * dp != cfg.batch.global_batch_size


def elastic_rule_masks(cfg: TrainingConfig, job: ParsedJob) -> MaskFn:
    """The layout rules at each smaller count of the range, as named masks over a candidate table's columns:
    candidate_rules' world-dependent rules evaluated at that count's world, the batch ones only where the global
    batch is fixed (a derived one follows the world the job got), and DeepSpeed's triad where its config fixes all
    three keys (FIXED_TRIAD_RULE). MIN first, then the counts in between."""
    counts = smaller_counts(job)
    batch_rules = _batch_rules(job.script_args)
    rules = _WORLD_RULES + (batch_rules if _fixed_batch(cfg) else ())
    triad = _fixed_triad(cfg)

    def masks(cols: Mapping[str, np.ndarray]) -> Masks:
        named: Masks = {}
        pinned = _pinned_batch(cfg, cols)
        for nodes in counts:
            world = nodes * job.nproc_per_node
            where = f"({nodes} node{'s' * (nodes > 1)}, {world} GPUs)"
            prefix = WORLD_RULE if nodes == counts[0] else BETWEEN_RULE
            at_count = {**rule_masks(cfg, cols, world_size=world),
                        **command_rule_masks(cfg, job.script_args, world_size=world)(cols)}
            if triad:
                at_count[FIXED_TRIAD_RULE] = np.ones(len(cols["tp"]), dtype=bool)
            if pinned is not None:  # the batch rules hold only for the layouts --apply pins a global batch for
                at_count.update({f"{name} ({PINNED})": mask & pinned for name, mask in at_count.items()
                                 if name.startswith(batch_rules)})
            named.update({_count_name(name, prefix, where): mask for name, mask in at_count.items()
                          if name.startswith((*rules, FIXED_TRIAD_RULE)) or PINNED in name})
        return named

    return masks


def _count_name(rule: str, prefix: str, where: str) -> str:
    """'world % (tp*pp*cp) != 0' -> 'world at the elastic minimum (1 node, 8 GPUs) % (tp*pp*cp) != 0'; other rules
    end with 'at the elastic minimum (...)' (or 'at an elastic count (...)')."""
    if rule.startswith("world "):
        return f"{prefix} {where} {rule[len('world '):]}"
    return f"{rule} {prefix[len('world '):]} {where}"


def own_elastic_problem(cfg: TrainingConfig, job: ParsedJob) -> str | None:
    """The rule at a smaller count that the command's own layout breaks (it stays tune's baseline, priced at MAX),
    for a warning."""
    own = candidates_from_list((candidate_of(cfg),)).columns
    broken = [rule for rule, mask in elastic_rule_masks(cfg, job)(own).items() if mask[0]]
    if not broken:
        return None
    where = "the elastic minimum" if broken[0].startswith(WORLD_RULE) or "minimum" in broken[0] else \
        "a node count of its elastic range"
    return (f"your command cannot start at {where} ({broken[0]}: Megatron / DeepSpeed stop at start-up "
            f"there); it is priced at {job.nnodes} nodes as the baseline")


def at_node_count(cfg: TrainingConfig, nnodes: int) -> TrainingConfig:
    """A layout's config (tune/candidate.apply_candidate's) on `nnodes` nodes of the range: DP = world / (TP x PP x
    CP) and the micro-batch count at the fixed global batch, or the global batch at the command's accumulation where
    the batch follows the world (HF Trainer: per-device x accumulation x world). Call only for a layout the elastic
    masks accept (its model grid divides that count's world)."""
    world = nnodes * cfg.nproc_per_node
    p, b = cfg.parallel, cfg.batch
    dp = world // (p.tp * p.pp * p.cp)
    pinned = cfg.framework in ("megatron", "megatron-deepspeed") and b.micro_batch_size * p.dp != b.global_batch_size
    if _fixed_batch(cfg) or pinned:  # a global batch the command or --apply (PINNED) states
        batch = dataclasses.replace(b, num_microbatches=b.global_batch_size // (b.micro_batch_size * dp))
    else:
        batch = dataclasses.replace(b, global_batch_size=b.micro_batch_size * b.num_microbatches * dp)
    return dataclasses.replace(cfg, world_size=world, nnodes=nnodes, parallel=dataclasses.replace(p, dp=dp),
                               batch=batch)


@dataclasses.dataclass(frozen=True)
class ElasticMemory:
    """The memory rule of an elastic range: a layout's must-fit bytes per GPU (schedule/memory_rule.py) at the range's
    minimum (search_candidates prunes those over the usable memory, counted apart)."""

    least_nnodes: int
    nnodes: int
    """The range's maximum (the count ranked)."""
    memory: Callable[[TrainingConfig], Any]
    """The memory model alone (commands/tune.memory_only with the cluster bound) -> MemoryEstimate."""
    slurm: bool = False
    """The range is Slurm's -N MIN-MAX (else torchrun's --nnodes MIN:MAX), for messages."""
    deepspeed: bool = False
    """The range is the DeepSpeed launcher's --elastic_training one, for messages."""
    counts: tuple[int, ...] = ()
    """Every count the job may start at, smallest first, the maximum last (empty: every one from least_nnodes)."""
    batch_rules: tuple[str, ...] = _BATCH_RULES
    """The batch rules a count checks (_batch_rules: no divisibility one under --decrease-batch-size-if-needed)."""

    def must_fit_at(self, cfg: TrainingConfig, nnodes: int) -> float | None:
        """`cfg`'s must-fit bytes per GPU on `nnodes` nodes (None: the memory model cannot size it there, as search
        counts a model failure: the ranking at the maximum stands)."""
        try:
            return float(self.memory(at_node_count(cfg, nnodes)).must_fit_bytes)
        except (LlmperfError, AssertionError, ArithmeticError, ValueError):
            return None

    def must_fit_at_minimum(self, cfg: TrainingConfig) -> float | None:
        return self.must_fit_at(cfg, self.least_nnodes)

    def fitting_minimum(self, cfg: TrainingConfig, usable_bytes: float) -> int | None:
        """The fewest nodes from which `cfg`'s layout starts at every count up to the maximum (the world rules) and
        fits its memory (at that fewest, by the assumption of the module docstring); None: not even at the maximum."""
        row = candidates_from_list((candidate_of(cfg),)).columns
        rules = _WORLD_RULES + (self.batch_rules if _fixed_batch(cfg) else ())
        later = [n for n in self.counts or range(self.least_nnodes, self.nnodes + 1) if n > self.least_nnodes]
        starts = [not any(m[0] for name, m in rule_masks(cfg, row, world_size=nodes * cfg.nproc_per_node).items()
                          if name.startswith(rules)) for nodes in later]
        for i, nodes in enumerate(later):
            if all(starts[i:]):
                need = self.must_fit_at(cfg, nodes)
                if need is not None and fits_gpu(need, usable_bytes):
                    return nodes
        return None

    def range_words(self, least: int) -> str:
        """The command's range with `least` as its minimum, as the command writes it (a size string: its counts from
        `least` on)."""
        if self.deepspeed:
            return _deepspeed_words(least, self.nnodes)
        if self.slurm and self.counts and len(self.counts) < self.nnodes - self.least_nnodes + 1:
            return f"-N {','.join(str(n) for n in self.counts if n >= least)}"
        return f"-N {least}-{self.nnodes}" if self.slurm else f"--nnodes {least}:{self.nnodes}"


def elastic_memory(job: ParsedJob, memory: Callable[[TrainingConfig], Any]) -> ElasticMemory | None:
    """The memory rule of the job's range (None: a fixed node count)."""
    counts = smaller_counts(job)
    if not counts:
        return None
    return ElasticMemory(counts[0], job.nnodes, memory, slurm=_range_words(job).startswith("-N"),
                         deepspeed=job.launcher == "deepspeed",
                         counts=(*counts, job.nnodes), batch_rules=_batch_rules(job.script_args))


@dataclasses.dataclass(frozen=True)
class OverAtMinimum:
    """A layout whose must-fit bytes at an elastic range's minimum, by the memory model, are over the usable memory."""

    candidate: Any
    """tune/candidate.Candidate."""
    config: TrainingConfig
    """Its config at the maximum."""
    must_fit_bytes: float
    """Its must-fit bytes per GPU at the minimum (schedule/memory_rule.py)."""


def over_at_minimum_sentence(over: Sequence[OverAtMinimum], rule: ElasticMemory, usable_bytes: float) -> str:
    """For the exit-3 message: the layouts the minimum's memory ruled out, the least of them and from how many nodes
    it fits every count (the largest fitting configuration: a range that starts there)."""
    if not over:
        return ""
    least = min(over, key=lambda o: o.must_fit_bytes)
    nodes = f"{rule.least_nnodes} node{'s' * (rule.least_nnodes > 1)}"
    msg = (f" {len(over):,} layout{'s' * (len(over) > 1)} {'are' if len(over) > 1 else 'is'} over the usable memory at "
           f"the elastic minimum ({nodes}), where fewer data-parallel ranks hold larger ZeRO / distributed-optimizer "
           f"shards; the least there, {least.candidate.describe()}, needs {least.must_fit_bytes / 2**30:.1f} GiB per GPU, "
           f"{(least.must_fit_bytes - usable_bytes) / 2**30:.1f} GiB over.")
    start = rule.fitting_minimum(least.config, usable_bytes)
    if start is None:
        return msg + f" It does not fit at {rule.nnodes} nodes either."
    if start == rule.nnodes:
        return msg + f" It fits only at {rule.nnodes} nodes: give a fixed node count of {rule.nnodes}."
    return msg + (f" It fits from {start} nodes: the largest range that fits is {start} to {rule.nnodes} nodes "
                  f"({rule.range_words(start)}, or a fixed node count of {rule.nnodes}).")

"""An elastic launch (`torchrun --nnodes MIN:MAX`): the size tune ranks at, and the layouts that also start at MIN.

torchrun reads `--nnodes 2:4` as min_nodes 2, max_nodes 4 (torch/distributed/run.py parse_min_max_nnodes) and its
rendezvous starts the job once MIN nodes joined, admitting more only until its last-call timeout; after a node is lost
or added it restarts every worker at the new count. So the world the job trains at is anywhere from MIN to MAX nodes.
predict prices the maximum (launch/torchrun.parse_nnodes, with a warning), and tune ranks at the same size, the
fastest the job runs. A layout must also start at MIN, where Megatron-LM asserts world % (TP x PP x CP) == 0
(arguments.py), world % (ETP x EP x PP) == 0 (parallel_state.initialize_model_parallel: the expert grid) and, with the
global batch fixed, global_batch % (micro_batch x DP) == 0 and the interleaved schedule's micro-batch count rules, and
DeepSpeed asserts the same batch triad (runtime/config.py _batch_assertion) for a ds_config train_batch_size: a layout
that breaks one of them at MIN (candidate_rules.rule_masks at MIN's world) is counted invalid, so the configuration
tune lists and --apply launches starts at either end of the range. Fit is ranked at MAX; at fewer nodes DP is
smaller, so ZeRO and distributed-optimizer shards are larger, and the layouts listed are also checked at MIN by the
memory model alone (over_memory_at_minimum: a warning names those over, e.g. a 13B Megatron job with the
distributed optimizer under --nnodes 1:4, 9 of its top 10 at 4 nodes over 75 GiB at one node); node counts between
MIN and MAX are not checked.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from llmperf_hook.errors import LlmperfError
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.launch.parsed_job import ParsedJob
from llmperf_hook.provenance import SourceKind
from llmperf_hook.tune.candidate import candidate_of
from llmperf_hook.tune.candidate_rules import rule_masks
from llmperf_hook.tune.candidates import candidates_from_list
from llmperf_hook.tune.command_rules import Masks, MaskFn


def elastic_note(job: ParsedJob) -> str | None:
    """The size tune ranks at for an elastic launch, for the header (None: a fixed node count)."""
    least = job.elastic_min_nnodes
    if least is None:
        return None
    return (f"--nnodes {least}:{job.nnodes} starts at {least} to {job.nnodes} nodes: ranked at the maximum, "
            f"{job.nnodes} nodes ({job.world_size} GPUs); every layout listed also starts at {least} node{'s' * (least > 1)} "
            f"({least * job.nproc_per_node} GPUs), where fewer data-parallel ranks hold larger ZeRO / "
            "distributed-optimizer shards: fit is ranked at the maximum, and a warning names any listed layout over "
            "memory at the minimum (node counts in between are not checked); llmperf --nnodes N ranks at N nodes")


WORLD_RULE = "world at the elastic minimum"
"""How the layout rule at MIN begins (the named mask: 'world at the elastic minimum (2 nodes, 16 GPUs) % ...')."""


def elastic_pruned_sentence(invalid_by_rule: Mapping[str, int]) -> str:
    """For the exit-3 message: the layouts only the elastic minimum refused, which a fixed node count would try."""
    pruned = {rule: n for rule, n in invalid_by_rule.items() if rule.startswith(WORLD_RULE)}
    if not pruned:
        return ""
    where = next(iter(pruned)).split("(", 1)[1].split(")", 1)[0]
    return (f" {sum(pruned.values()):,} layouts were refused only because they split the model over more GPUs than "
            f"the elastic minimum has ({where}): a fixed --nnodes at the maximum, or a larger minimum, lets tune try "
            "them.")


_WORLD_RULES = ("world % (tp*pp*cp) != 0", "world % (etp*ep*pp) != 0",
                "dp*cp or expert dp % --num-distributed-optimizer-instances != 0")
"""candidate_rules.rule_masks' rules that depend on the world alone: the model grid (arguments.py), the expert grid
(parallel_state.initialize_model_parallel) and the partial distributed optimizer's shard factor."""
_BATCH_RULES = ("global_batch % (micro_batch*dp) != 0", "interleaving needs")
"""Its rules on the micro-batch count at a fixed global batch (the count grows as DP shrinks)."""


def elastic_rule_masks(cfg: TrainingConfig, job: ParsedJob) -> MaskFn:
    """The layout rules at the range's minimum, as named masks over a candidate table's columns: candidate_rules'
    world-dependent rules evaluated at MIN's world, the batch ones only where the global batch is fixed (a derived
    one follows the world the job got)."""
    least = job.elastic_min_nnodes
    if least is None or job.world_size != job.nnodes * job.nproc_per_node:
        return lambda cols: {}
    world = least * job.nproc_per_node
    where = f"({least} node{'s' * (least > 1)}, {world} GPUs)"
    fixed_batch = cfg.sources.get("global_batch_size") is not None and \
        cfg.sources["global_batch_size"].kind != SourceKind.DERIVED
    rules = _WORLD_RULES + (_BATCH_RULES if fixed_batch else ())

    def masks(cols: Mapping[str, np.ndarray]) -> Masks:
        at_min = rule_masks(cfg, cols, world_size=world)
        return {_at_min_name(name, where): mask for name, mask in at_min.items() if name.startswith(rules)}

    return masks


def _at_min_name(rule: str, where: str) -> str:
    """'world % (tp*pp*cp) != 0' -> 'world at the elastic minimum (1 node, 8 GPUs) % (tp*pp*cp) != 0'; other rules
    end with 'at the elastic minimum (...)'."""
    if rule.startswith("world "):
        return f"{WORLD_RULE} {where} {rule[len('world '):]}"
    return f"{rule} at the elastic minimum {where}"


def own_elastic_problem(cfg: TrainingConfig, job: ParsedJob) -> str | None:
    """The rule at MIN that the command's own layout breaks (it stays tune's baseline, priced at MAX), for a warning."""
    own = candidates_from_list((candidate_of(cfg),)).columns
    broken = [rule for rule, mask in elastic_rule_masks(cfg, job)(own).items() if mask[0]]
    if not broken:
        return None
    return (f"your command cannot start at the elastic minimum ({broken[0]}: Megatron / DeepSpeed stop at start-up "
            f"there); it is priced at {job.nnodes} nodes as the baseline")


def at_elastic_minimum(cfg: TrainingConfig, least_nnodes: int) -> TrainingConfig:
    """A layout's config (tune/candidate.apply_candidate's) on the range's minimum: DP = world / (TP x PP x CP) and
    the micro-batch count at the fixed global batch, or the global batch at the command's accumulation where the
    batch follows the world (HF Trainer: per-device x accumulation x world). Call only for a layout the elastic
    masks accept (its model grid divides MIN's world)."""
    world = least_nnodes * cfg.nproc_per_node
    p, b = cfg.parallel, cfg.batch
    dp = world // (p.tp * p.pp * p.cp)
    source = cfg.sources.get("global_batch_size")
    if source is not None and source.kind != SourceKind.DERIVED:
        batch = dataclasses.replace(b, num_microbatches=b.global_batch_size // (b.micro_batch_size * dp))
    else:
        batch = dataclasses.replace(b, global_batch_size=b.micro_batch_size * b.num_microbatches * dp)
    return dataclasses.replace(cfg, world_size=world, nnodes=least_nnodes, parallel=dataclasses.replace(p, dp=dp),
                               batch=batch)


def over_memory_at_minimum(job: ParsedJob, ranked: Sequence[Any], usable_bytes: float,
                           memory: Callable[[TrainingConfig], Any]) -> str | None:
    """A warning naming the listed layouts (tune/search.Evaluated, in rank order) whose peak on the range's minimum
    exceeds the usable memory (None: all fit, or a fixed node count). At fewer nodes DP is smaller, so each rank
    holds a larger share of the ZeRO / distributed-optimizer state: the job fits at MAX and runs out at MIN."""
    least = job.elastic_min_nnodes
    if least is None:
        return None
    over = []
    for rank, ev in enumerate(ranked, 1):
        try:
            peak = float(memory(at_elastic_minimum(ev.config, least)).peak_bytes_per_gpu)
        except (LlmperfError, AssertionError, ArithmeticError, ValueError):  # as search counts a model failure
            continue  # a layout the memory model cannot size at MIN: the ranking at MAX stands, unwarned
        if peak > usable_bytes:
            over.append(f"#{rank} {peak / 2**30:.1f} GiB")
    if not over:
        return None
    nodes = f"{least} node{'s' * (least > 1)}"
    return (f"at the elastic minimum ({nodes}) {len(over)} of the {len(ranked)} layouts listed "
            f"need{'s' * (len(over) == 1)} more than the "
            f"usable {usable_bytes / 2**30:.1f} GiB per GPU ({', '.join(over)}): fewer data-parallel ranks hold "
            f"larger ZeRO / distributed-optimizer shards, so they run out of memory if the job starts with {nodes}; "
            "a larger minimum, or a layout that fits there, avoids it")

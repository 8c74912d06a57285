"""Stage [6] candidate generator: the search space as one vectorised table, with the layout rules as masks.

The cross product of every knob is built with numpy (one column per knob), duplicates that the framework
would treat as the same job are merged (sequence parallel at TP = 1, block recompute of every layer, ...),
and Megatron-LM's divisibility rules are applied as boolean masks (tune/candidate_rules.py), each counted by
name so `tune` can say why candidates were pruned. These masks are necessary conditions only; every survivor is
checked again with the framework's own validation (`frameworks.validation.validate_config`) before it can be
reported.

Expert parallelism (EP, expert TP) is searched for MoE models under Megatron-LM only. Megatron-DeepSpeed's MoE
is DeepSpeed-MoE (`--ep-size`, expert groups carved out of the data-parallel group by deepspeed/utils/groups.py,
experts not tensor-split by default), which our graph does not lay out separately: its EP stays the
command's, as does a plain DeepSpeed script's (set in the script's own code).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.tune.candidate import RECOMPUTE_CODES, RECOMPUTE_NAMES, Candidate, candidate_of, hf_batch_flags
from llmperf_hook.tune.candidate_rules import MEGATRON_FRAMEWORKS, flags_needing_distopt
from llmperf_hook.tune.candidate_rules import rule_masks as rule_masks  # re-exported: its callers import it from here
from llmperf_hook.tune.search_space import SearchSpace
from llmperf_hook.tune.accelerate_fsdp_apply import plugin_checkpointing
from llmperf_hook.tune.trainer_checkpointing import trainer_switches_checkpointing

COLUMNS = ("tp", "pp", "vpp", "cp", "sp", "mbs", "rc", "rc_layers", "distopt", "zero", "ep", "etp")
_CROSS = ("tp", "pp", "vpp", "cp", "sp", "mbs", "distopt", "zero", "ep", "etp")
"""Knobs of the cross product (recompute is added as one axis of (mode, layers) pairs)."""
FOLLOW_TP = 0
"""etp value of a knob_values list meaning "no --expert-tensor-parallel-size: expert TP = TP" (the default)."""
# Block recompute fractions of the layers of one model chunk, for `recompute_block_layers: auto`.
_BLOCK_FRACTIONS = (0.25, 0.5, 0.75)


@dataclass(frozen=True)
class CandidateTable:
    """Candidates as columns (same length); see COLUMNS. `rc` holds RECOMPUTE_CODES, `etp` the expert TP run."""

    columns: Mapping[str, np.ndarray]
    num_generated: int
    """Size of the cross product before duplicates were merged."""

    def __len__(self) -> int:
        return int(self.columns["tp"].shape[0])

    def select(self, mask: np.ndarray) -> "CandidateTable":
        return CandidateTable({k: v[mask] for k, v in self.columns.items()}, self.num_generated)

    def candidate(self, i: int) -> Candidate:
        c = {k: int(v[i]) for k, v in self.columns.items()}
        mode = RECOMPUTE_NAMES[c["rc"]]
        return Candidate(
            tp=c["tp"], pp=c["pp"], vpp=c["vpp"], cp=c["cp"], sequence_parallel=bool(c["sp"]),
            micro_batch_size=c["mbs"], recompute=mode,
            recompute_num_layers=c["rc_layers"] if mode in ("full", "block") else None,
            distributed_optimizer=bool(c["distopt"]), zero_stage=c["zero"],
            ep=c["ep"], etp=None if c["etp"] == c["tp"] else c["etp"],
        )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _powers_of_two(limit: int) -> list[int]:
    return [1 << i for i in range(limit.bit_length()) if (1 << i) <= limit]


def knob_values(cfg: TrainingConfig, space: SearchSpace, gpus_per_node: int) -> dict[str, list]:
    """Values per knob for this job: `auto` resolved, knobs the framework cannot change pinned to the user's."""
    base = candidate_of(cfg)

    def pin(own: int, values, frameworks: tuple[str, ...] = MEGATRON_FRAMEWORKS) -> list[int]:
        return sorted({int(v) for v in values}) if cfg.framework in frameworks else [own]

    tp_auto = _powers_of_two(space.max_tensor_parallel or gpus_per_node)
    mbs = space.micro_batch_size or _powers_of_two(space.max_micro_batch_size)
    vals: dict[str, list] = {
        "tp": pin(base.tp, space.tensor_parallel or tp_auto),
        "pp": pin(base.pp, space.pipeline_parallel or _divisors(cfg.world_size)),
        # Megatron-DeepSpeed runs DeepSpeed's PipelineEngine (plain 1F1B, no interleaving) and has no
        # --context-parallel-size (its sequence parallelism is DeepSpeed-Ulysses): both stay the user's there.
        "vpp": pin(base.vpp, space.virtual_pipeline or range(1, space.max_virtual_pipeline + 1), ("megatron",)),
        "cp": pin(base.cp, space.context_parallel or [1, 2, 4, 8], ("megatron",)),
        "sp": pin(int(base.sequence_parallel), [int(v) for v in (space.sequence_parallel or (False, True))]),
        # auto adds the command's own micro-batch; an explicit list is searched as given (`--search` narrows):
        # the command itself is still one candidate (generate_candidates appends it).
        "mbs": sorted(set(mbs) | ({base.micro_batch_size} if not space.micro_batch_size else set()))
        if cfg.framework != "torch" or hf_batch_flags(cfg) else [base.micro_batch_size],
        "distopt": sorted({int(v) for v in space.distributed_optimizer}) if cfg.framework == "megatron"
        else [int(base.distributed_optimizer)],
        "zero": _zero_values(cfg, space, base),
        **_expert_values(cfg, space, base),
    }
    return vals


def searched_values(cfg: TrainingConfig, space: SearchSpace, gpus_per_node: int) -> dict[str, list]:
    """Values tried per knob, named as in the JSON candidates (the report's "searched" / "kept": a knob with the
    command's value alone is kept as the command has it). EP / expert TP only for MoE models; recompute as modes.
    A setting the framework does not have is not listed at all: Megatron-LM has no ZeRO stage (it shards optimizer
    state with --use-distributed-optimizer, searched), DeepSpeed scripts neither --use-distributed-optimizer (ZeRO is
    theirs) nor Megatron's --sequence-parallel; "kept: ZeRO 0" named a setting a Megatron-LM user cannot set."""
    vals, base = knob_values(cfg, space, gpus_per_node), candidate_of(cfg)
    out: dict[str, list] = {
        "micro_batch_size": vals["mbs"], "tp": vals["tp"], "pp": vals["pp"], "vpp": vals["vpp"], "cp": vals["cp"],
        "sequence_parallel": [bool(v) for v in vals["sp"]],
        "recompute": list(_recompute_modes(cfg, space)) or [base.recompute],
        "distributed_optimizer": [bool(v) for v in vals["distopt"]], "zero_stage": vals["zero"],
    }
    if cfg.framework == "megatron":
        del out["zero_stage"]
    if cfg.framework not in MEGATRON_FRAMEWORKS:  # Megatron's --use-distributed-optimizer and --sequence-parallel
        del out["distributed_optimizer"], out["sequence_parallel"]
    if cfg.model.num_experts > 0:
        out["ep"] = vals["ep"]
        out["etp"] = [None if v == FOLLOW_TP else v for v in vals["etp"]]
    return out


PIPELINE_ENGINE_ZERO = ("DeepSpeed's PipelineEngine asserts ZeRO stage < 2 ('ZeRO-2 and ZeRO-3 are incompatible with "
                        "pipeline parallelism', deepspeed/runtime/pipe/engine.py PipelineEngine.__init__)")


ULYSSES_KEPT = ("DeepSpeed-Ulysses sequence parallel kept at the command's size, not searched: predict prices its "
                "all-to-alls as context parallelism's ring exchange hidden behind attention (a warning says so), "
                "not as Ulysses runs them, so it cannot rank Ulysses sizes")


def knob_rules(cfg: TrainingConfig, space: SearchSpace) -> dict[str, str]:
    """Knob -> the framework rule that narrows or fixes it for this command, stated once as a rule (the report's
    "rules"), so a value never tried or tried only in part reads as the framework's, not as a pruned count."""
    rules: dict[str, str] = {}
    zero_2_3 = any(z >= 2 for z in space.zero_stage)
    if cfg.framework == "deepspeed" and cfg.deepspeed_pipeline_engine and zero_2_3:
        rules["zero_stage"] = (f"ZeRO 2/3 not tried: the script pipelines (PP {cfg.parallel.pp}), and "
                               f"{PIPELINE_ENGINE_ZERO}")
    elif cfg.framework == "megatron-deepspeed" and zero_2_3:
        rules["zero_stage"] = (f"ZeRO 2/3 only at PP 1, with --no-pipeline-parallel (added by --apply): "
                               f"{PIPELINE_ENGINE_ZERO}, and Megatron-DeepSpeed runs that engine whenever PP > 1")
    if cfg.framework != "megatron" and cfg.parallel.cp > 1:
        rules["cp"] = ULYSSES_KEPT
    needs = flags_needing_distopt(cfg)
    if needs and False in space.distributed_optimizer:
        rules["distributed_optimizer"] = (f"off is refused: {' and '.join(needs)} (kept by --apply) "
                                          f"need{'s' * (len(needs) == 1)} the distributed optimizer")
    return rules


def _expert_values(cfg: TrainingConfig, space: SearchSpace, base: Candidate) -> dict[str, list[int]]:
    """EP and expert TP (FOLLOW_TP = the flag left out): searched for MoE models under Megatron-LM only.

    auto EP = divisors of num_experts (arguments.py: num_experts % EP == 0). auto expert TP = the command's own
    (by default it follows TP); a list adds pinned values (MoE parallel folding, Megatron-core >= 0.10:
    parallel_state.py builds the expert grid etp-ep-edp-pp from ETP independently of the attention TP). Every
    ETP is priced as it runs (graph/moe_ops.py: each rank routes its own sequence shard and computes c x ETP
    token copies over its E/EP local experts, ffn / ETP wide; the dispatcher's traffic spans the ETP x EP
    group). ETP is not searched by default only to keep the table small: each listed value adds a copy of the
    whole cross product (list them under expert_tensor_parallel to search them).
    """
    own_etp = FOLLOW_TP if base.etp is None else base.etp
    if cfg.framework != "megatron" or cfg.model.num_experts <= 0:
        return {"ep": [base.ep], "etp": [own_etp]}
    ep = space.expert_parallel or _divisors(cfg.model.num_experts)
    etp = space.expert_tensor_parallel or ()
    own_ep = {base.ep} if not space.expert_parallel else set()
    return {"ep": sorted(set(ep) | own_ep), "etp": sorted(set(etp) | {own_etp})}


def _zero_values(cfg: TrainingConfig, space: SearchSpace, base: Candidate) -> list[int]:
    """ZeRO is a DeepSpeed setting: Megatron-LM proper and plain torch scripts keep theirs. A DeepSpeed script that
    pipelines runs PipelineEngine whatever tune changes (its PP is the script's), so ZeRO 2/3 are not values to try
    there (PIPELINE_ENGINE_ZERO); where the space holds no other, the command's own stage is kept."""
    if cfg.framework in ("megatron", "torch"):
        return [base.zero_stage]
    stages = set(space.zero_stage)
    if cfg.framework == "deepspeed" and cfg.deepspeed_pipeline_engine:
        stages = {z for z in stages if z < 2} or {base.zero_stage}
    return sorted(stages)


def _recompute_modes(cfg: TrainingConfig, space: SearchSpace) -> tuple[str, ...]:
    """Recompute modes the launch command controls: all in Megatron; Hugging Face's --gradient_checkpointing
    is full recompute of every layer (under DeepSpeed, and under DDP / FSDP where the Trainer lets it switch:
    tune/trainer_checkpointing.py); a plain DeepSpeed or torch script decides in its own code (kept as is)."""
    if cfg.framework in MEGATRON_FRAMEWORKS:
        return space.recompute
    if cfg.framework == "hf-deepspeed" or trainer_switches_checkpointing(cfg) or plugin_checkpointing(cfg):
        return tuple(m for m in space.recompute if m in ("none", "full"))  # accelerate's FSDP plugin's: its launcher
    return ()


def _recompute_options(cfg: TrainingConfig, space: SearchSpace, base: Candidate) -> list[tuple[int, float]]:
    """(code, layers) pairs; a negative layers value is a fraction of the chunk's layers, resolved per row."""
    opts: list[tuple[int, float]] = []
    modes = _recompute_modes(cfg, space)
    for mode in modes:
        if mode == "block":
            fracs = [-f for f in _BLOCK_FRACTIONS] if space.recompute_block_layers is None else []
            opts += [(RECOMPUTE_CODES["block"], v) for v in (*fracs, *(space.recompute_block_layers or ()))]
        else:
            opts.append((RECOMPUTE_CODES[mode], 1 if mode == "full" else 0))
    # The command's own (mode, layers) joins the cross product only when its mode is searched (e.g. full
    # recompute of 2-layer groups beside the space's 1): `recompute: [full]` must not bring back `none` rows.
    own = (RECOMPUTE_CODES[base.recompute], base.recompute_num_layers or 0)
    return sorted(set(opts) | ({own} if base.recompute in modes or not modes else set()))


def generate_candidates(cfg: TrainingConfig, space: SearchSpace, gpus_per_node: int,
                        extra: tuple[Candidate, ...] = ()) -> CandidateTable:
    """The cross product of the search space (plus the user's own configuration and `extra`), deduplicated."""
    vals = knob_values(cfg, space, gpus_per_node)
    rc_opts = _recompute_options(cfg, space, candidate_of(cfg))
    axes = [np.asarray(vals[k], dtype=np.int64) for k in _CROSS]
    axes.append(np.arange(len(rc_opts)))
    grids = [g.ravel() for g in np.meshgrid(*axes, indexing="ij", copy=False)]
    cols = dict(zip(_CROSS, grids[:-1]))
    # the flag left out: expert TP = TP, or 1 for Megatron-DeepSpeed's whole experts (ParallelLayout.etp_follows_tp)
    default_etp = cols["tp"] if cfg.parallel.etp_follows_tp else cfg.parallel.etp
    cols["etp"] = np.where(cols["etp"] == FOLLOW_TP, default_etp, cols["etp"])
    rc_arr = np.asarray(rc_opts, dtype=np.float64)
    cols["rc"] = rc_arr[grids[-1], 0].astype(np.int64)
    cols["rc_layers"] = _resolve_block_layers(rc_arr[grids[-1], 1], cfg.model.num_layers, cols)
    base = candidate_of(cfg)
    table = _append(cols, (base, *extra))
    if not cfg.model.num_experts:  # dense: the distributed optimizer shards over DP x CP, nothing to shard at 1
        alone = table["tp"] * table["pp"] == cfg.world_size  # DP = CP = 1
        table["distopt"] = np.where(alone, int(base.distributed_optimizer), table["distopt"])
    table["rc"] = np.where(_pipe_model_ignores_block(cfg, table), RECOMPUTE_CODES["none"], table["rc"])
    return CandidateTable(_normalise_and_dedupe(table, cfg.model.num_layers), num_generated=len(table["tp"]))


def _pipe_model_ignores_block(cfg: TrainingConfig, cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """Rows whose block recompute Megatron-DeepSpeed runs as no recompute: under DeepSpeed's PipelineEngine its
    GPTModelPipe checkpoints every activation_checkpoint_interval layers, which it sets from --checkpoint-activations
    or full *uniform* recompute only ('deepspeed's pipeline doesn't support the block recompute method', else 0:
    megatron/model/gpt_model.py GPTModelPipe.__init__), and its layers are LayerSpecs, never ParallelTransformer's
    _checkpointed_forward. The engine runs at PP > 1 and, without --no-pipeline-parallel, at PP 1 (candidate.
    _pipeline_engine); such rows are the no-recompute job, so they merge with it instead of being priced as recompute."""
    if cfg.framework != "megatron-deepspeed":
        return np.zeros(cols["rc"].shape, dtype=bool)
    engine = (cols["pp"] > 1) | ((cols["zero"] < 2) & cfg.deepspeed_pipeline_engine)
    return engine & (cols["rc"] == RECOMPUTE_CODES["block"])


def candidates_from_list(cands: tuple[Candidate, ...]) -> CandidateTable:
    """A table of exactly these candidates (used to rank a fixed set, e.g. measured configurations)."""
    empty = {k: np.zeros(0, dtype=np.int64) for k in COLUMNS}
    return CandidateTable(_append(empty, cands), num_generated=len(cands))


def _resolve_block_layers(layers: np.ndarray, num_layers: int, cols: Mapping[str, np.ndarray]) -> np.ndarray:
    per_chunk = np.maximum(num_layers // np.maximum(cols["pp"] * cols["vpp"], 1), 1)
    frac = np.floor(-layers * per_chunk).astype(np.int64)
    return np.where(layers < 0, np.maximum(frac, 1), layers.astype(np.int64))


def _append(cols: Mapping[str, np.ndarray], cands: tuple[Candidate, ...]) -> dict[str, np.ndarray]:
    rows = {k: [] for k in COLUMNS}
    for c in cands:
        row = (c.tp, c.pp, c.vpp, c.cp, int(c.sequence_parallel), c.micro_batch_size,
               RECOMPUTE_CODES[c.recompute], c.recompute_num_layers or 0, int(c.distributed_optimizer), c.zero_stage,
               c.ep, c.expert_tp)
        for k, v in zip(COLUMNS, row):
            rows[k].append(v)
    return {k: np.concatenate([np.asarray(cols[k], dtype=np.int64), np.asarray(rows[k], dtype=np.int64)])
            for k in COLUMNS}


def _normalise_and_dedupe(cols: dict[str, np.ndarray], num_layers: int) -> dict[str, np.ndarray]:
    """Merge rows the framework runs identically; keep first occurrence order (so the user's row survives)."""
    cols = dict(cols)
    cols["sp"] = np.where(cols["tp"] > 1, cols["sp"], 0)  # Megatron drops SP at TP = 1
    rc = cols["rc"]
    cols["rc_layers"] = np.where(rc >= RECOMPUTE_CODES["full"], cols["rc_layers"], 0)
    # Block recompute of every layer of a chunk is full recompute (Megatron recomputes the same layers).
    per_chunk = num_layers // np.maximum(cols["pp"] * cols["vpp"], 1)
    all_layers = (rc == RECOMPUTE_CODES["block"]) & (cols["rc_layers"] >= per_chunk)
    cols["rc"] = np.where(all_layers, RECOMPUTE_CODES["full"], rc)
    cols["rc_layers"] = np.where(all_layers, 1, cols["rc_layers"])
    matrix = np.stack([cols[k] for k in COLUMNS], axis=1)
    _, first = np.unique(matrix, axis=0, return_index=True)
    keep = np.sort(first)
    return {k: v[keep] for k, v in cols.items()}

"""Rewrite a Megatron-LM / Megatron-DeepSpeed command line for a tuned Candidate.

Flag names and semantics are Megatron-LM `megatron/training/arguments.py` (argparse, allow_abbrev=False):
--tensor-model-parallel-size, --pipeline-model-parallel-size, --context-parallel-size, --sequence-parallel
(store_true), --num-layers-per-virtual-pipeline-stage N (layers per model chunk) or the newer
--num-virtual-stages-per-pipeline-rank V, --micro-batch-size, --recompute-granularity {full,selective},
--recompute-method {uniform,block}, --recompute-num-layers, the older --recompute-activations (= selective)
and --checkpoint-activations (= full uniform, 1 layer), --use-distributed-optimizer (store_true),
--decoder-first/last-pipeline-num-layers, --expert-model-parallel-size, --expert-tensor-parallel-size (default:
TP); Megatron-DeepSpeed adds --zero-stage and --no-pipeline-parallel.
Only what the candidate changes is touched, so the rest of the user's command stays byte-identical.
"""

from __future__ import annotations

from typing import Sequence

from llmperf_hook.tune import argv_edit as ed
from llmperf_hook.tune.candidate import Candidate, keeps_distributed_saved

TP = ("--tensor-model-parallel-size",)
PP = ("--pipeline-model-parallel-size",)
CP = ("--context-parallel-size",)
SP = ("--sequence-parallel",)
VPP_LAYERS = ("--num-layers-per-virtual-pipeline-stage",)
# --virtual-pipeline-model-parallel-size: Megatron-LM's first spelling of the same count (dd88906, removed in
# dcef906, 2021), still written by NeMo-derived scripts; explain reads it as --num-virtual-stages-per-pipeline-rank
VPP_STAGES = ("--num-virtual-stages-per-pipeline-rank", "--virtual-pipeline-model-parallel-size")
MBS = ("--micro-batch-size",)
GBS = ("--global-batch-size",)
DISTOPT = ("--use-distributed-optimizer",)
ZERO = ("--zero-stage",)
EP = ("--expert-model-parallel-size",)
ETP = ("--expert-tensor-parallel-size",)
UNEVEN = ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers")
NO_PIPELINE = ("--no-pipeline-parallel",)
RC_GRANULARITY = ("--recompute-granularity",)
RC_METHOD = ("--recompute-method",)
RC_LAYERS = ("--recompute-num-layers",)
RC_OLD_SELECTIVE = ("--recompute-activations",)
RC_OLD_FULL = ("--checkpoint-activations",)
# deprecated spelling of selective + "moe" (TransformerConfig.__post_init__): it turns selective on, and raises
# ValueError under --recompute-granularity full, so a candidate that leaves selective drops it
RC_MOE_LAYER = ("--moe-layer-recompute",)
DS_ACTIVATION_CKPT = ("--deepspeed-activation-checkpointing",)
DISTRIBUTE_SAVED = ("--distribute-saved-activations",)


def rewrite_megatron_argv(argv: Sequence[str], base: Candidate, new: Candidate, num_layers: int,
                          framework: str, batch: tuple[int, int] | None = None, zero_flag: bool = True) -> list[str]:
    """`argv` with the flags of every field where `new` differs from `base` (the user's) replaced. `num_layers` is
    the count Megatron splits over stages (candidate.split_layers: with the --account-for-*-in-pipeline-split layers);
    `batch` = (world size, global batch the search held) states --global-batch-size where the command leaves it out;
    `zero_flag` False: the script's parser has no --zero-stage (its ds_config alone sets the stage, tune/fork_knobs)."""
    out = _pin_global_batch(list(argv), new, batch)
    if new.tp != base.tp:
        out = ed.set_value(out, TP, str(new.tp))
    if new.pp != base.pp:
        out = ed.set_value(out, PP, str(new.pp))
        out = ed.remove(out, UNEVEN, takes_value=True)  # stage sizes of the old pipeline no longer apply
        if new.pp > 1:
            out = ed.remove(out, NO_PIPELINE, takes_value=False)
    if new.cp != base.cp:
        out = ed.set_value(out, CP, str(new.cp))
    if new.ep != base.ep:
        out = ed.set_value(out, EP, str(new.ep))
    out = _rewrite_etp(out, base, new) if framework == "megatron" else out  # Megatron-DeepSpeed has no such flag
    # --sequence-parallel given at TP 1 is dropped by Megatron (base: off) but turns on at a tuned TP > 1
    sp_given = bool(ed.find_flag(out, SP))
    if new.sequence_parallel != base.sequence_parallel or (new.tp > 1 and sp_given != new.sequence_parallel):
        out = ed.set_switch(out, SP, new.sequence_parallel)
    if (new.vpp, new.pp) != (base.vpp, base.pp):
        out = _rewrite_vpp(out, new, num_layers)
    if new.micro_batch_size != base.micro_batch_size:
        out = ed.set_value(out, MBS, str(new.micro_batch_size))
    if (new.recompute, new.recompute_num_layers) != (base.recompute, base.recompute_num_layers):
        out = _rewrite_recompute(out, new)
    if new.distributed_optimizer != base.distributed_optimizer:
        out = ed.set_switch(out, DISTOPT, new.distributed_optimizer)
    if new.zero_stage != base.zero_stage and ((framework == "megatron-deepspeed" and zero_flag) or ed.find_flag(out, ZERO)):
        out = ed.set_value(out, ZERO, str(new.zero_stage))
    if framework == "megatron-deepspeed" and new.pp == 1 and new.zero_stage >= 2:
        out = ed.set_switch(out, NO_PIPELINE, True)  # DeepSpeed's pipeline engine rejects ZeRO-2/3
    if not keeps_distributed_saved(new):
        out = ed.remove(out, DISTRIBUTE_SAVED, takes_value=False)
    return _in_command_spelling(out, argv)


_NAMES = {ed.option_key(name) for names in (TP, PP, CP, SP, VPP_LAYERS, VPP_STAGES, MBS, GBS, DISTOPT, ZERO, EP, ETP,
                                            UNEVEN, NO_PIPELINE, RC_GRANULARITY, RC_METHOD, RC_LAYERS) for name in names}


def _in_command_spelling(out: list[str], argv: Sequence[str]) -> list[str]:
    """Flags appended to a command that spells Megatron's options with underscores (epfLLM's Megatron-LLM, whose
    argparse knows only --micro_batch_size ...) are spelled so too: `--global-batch-size` was appended there."""
    def option(word: str) -> str:
        return word.partition("=")[0]

    if not any("_" in option(w) and ed.option_key(option(w)) in _NAMES for w in argv if w.startswith("--")):
        return out
    given = set(argv)
    return ["--" + w[2:].replace("-", "_") if w.startswith("--") and w not in given and ed.option_key(w) in _NAMES
            else w for w in out]


def _pin_global_batch(argv: list[str], new: Candidate, batch: tuple[int, int] | None) -> list[str]:
    """Without --global-batch-size Megatron runs micro-batch x DP (arguments.py: args.global_batch_size =
    args.micro_batch_size * args.data_parallel_size, DP = world / (TP x PP x CP)); tune holds the command's global
    batch, so a layout whose micro-batch x DP differs states it (it ran another batch, or was refused). A
    --step-batch-size-schedule fixes the batch itself, and validate_args refuses --global-batch-size beside it."""
    if batch is None or ed.find_flag(argv, GBS) or ed.find_flag(argv, ("--step-batch-size-schedule",)):
        return argv
    world, global_batch = batch
    if new.micro_batch_size * (world // (new.tp * new.pp * new.cp)) == global_batch:
        return argv
    return [*argv, GBS[0], str(global_batch)]


def _rewrite_etp(argv: list[str], base: Candidate, new: Candidate) -> list[str]:
    """Expert TP: a pinned value is written; "follows TP" drops a flag that would pin another value (the user's
    --expert-tensor-parallel-size equal to their old TP would otherwise keep the old TP for the experts)."""
    if new.etp is not None:
        return argv if new.etp == base.etp else ed.set_value(argv, ETP, str(new.etp))
    if ed.find_flag(argv, ETP) and ed.flag_value(argv, ETP) != str(new.tp):
        return ed.remove(argv, ETP, takes_value=True)
    return argv


def _rewrite_vpp(argv: list[str], new: Candidate, num_layers: int) -> list[str]:
    if new.vpp <= 1:
        out = ed.remove(argv, VPP_LAYERS, takes_value=True)
        return ed.remove(out, VPP_STAGES, takes_value=True)
    uneven = any(ed.find_flag(argv, (flag,)) for flag in UNEVEN)
    if uneven or (ed.find_flag(argv, VPP_STAGES) and not ed.find_flag(argv, VPP_LAYERS)):
        # arguments.py: with --decoder-first/last-pipeline-num-layers, virtual stages must be given as
        # --num-virtual-stages-per-pipeline-rank (it rejects --num-layers-per-virtual-pipeline-stage there)
        out = ed.remove(argv, VPP_LAYERS, takes_value=True)
        return ed.set_value(out, VPP_STAGES, str(new.vpp))
    out = ed.remove(argv, VPP_STAGES, takes_value=True)
    return ed.set_value(out, VPP_LAYERS, str(num_layers // (new.pp * new.vpp)))


def _rewrite_recompute(argv: list[str], new: Candidate) -> list[str]:
    out = ed.remove(argv, RC_OLD_SELECTIVE, takes_value=False)
    had_old_full = bool(ed.find_flag(out, RC_OLD_FULL))
    out = ed.remove(out, RC_OLD_FULL, takes_value=False)
    if new.recompute != "selective":
        out = ed.remove(out, RC_MOE_LAYER, takes_value=False)
    if new.recompute in ("none", "selective"):
        out = ed.remove(out, RC_METHOD, takes_value=True)
        out = ed.remove(out, RC_LAYERS, takes_value=True)
        out = ed.remove(out, DS_ACTIVATION_CKPT, takes_value=False)
        if new.recompute == "none":
            return ed.remove(out, RC_GRANULARITY, takes_value=True)
        return ed.set_value(out, RC_GRANULARITY, "selective")
    if new.recompute == "full" and new.recompute_num_layers == 1 and had_old_full and not ed.find_flag(out, RC_GRANULARITY):
        return [*out, RC_OLD_FULL[0]]  # keep the user's older spelling where it says the same thing
    out = ed.set_value(out, RC_GRANULARITY, "full")
    out = ed.set_value(out, RC_METHOD, "block" if new.recompute == "block" else "uniform")
    return ed.set_value(out, RC_LAYERS, str(new.recompute_num_layers or 1))

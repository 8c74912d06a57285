"""One point of the search (a `Candidate`) and how it becomes a `TrainingConfig` of the user's job.

Candidates change only the parallel layout, micro-batch size, recompute and optimizer sharding; model,
world size and global batch stay the user's. Derived values are recomputed as the frameworks do:
dp = world / (tp * pp * cp) and num_microbatches = global_batch / (micro_batch * dp) (Megatron-LM
`arguments.py`; DeepSpeed's batch triad train_batch = micro * accumulation * dp).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from llmperf_hook.frameworks.assemble import TRAINER_MICRO_BATCH_DEFAULT
from llmperf_hook.frameworks.deepspeed_release import zero3_fields_at
from llmperf_hook.frameworks.training_config import RecomputeConfig, TrainingConfig
from llmperf_hook.provenance import Source, SourceKind

# Recompute modes as integer codes for the vectorised tables (tune/candidates.py).
RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2, "block": 3}
RECOMPUTE_NAMES = {v: k for k, v in RECOMPUTE_CODES.items()}


@dataclass(frozen=True)
class Candidate:
    """A parallel layout / batch / memory-saving choice for the user's job."""

    tp: int
    pp: int
    vpp: int
    """Virtual pipeline stages per pipeline rank (1 = plain 1F1B)."""
    cp: int
    sequence_parallel: bool
    micro_batch_size: int
    recompute: str
    """"none" | "selective" | "full" (uniform) | "block"."""
    recompute_num_layers: int | None
    """Megatron --recompute-num-layers: 1 for full/uniform, layers per stage for block, None otherwise."""
    distributed_optimizer: bool
    zero_stage: int
    ep: int = 1
    """Megatron --expert-model-parallel-size (MoE models; 1 for dense ones)."""
    etp: int | None = None
    """Megatron --expert-tensor-parallel-size; None = the flag's default, which follows tp."""

    @property
    def expert_tp(self) -> int:
        """The expert tensor-parallel degree the framework runs (etp, or tp when it follows TP)."""
        return self.tp if self.etp is None else self.etp

    def describe(self) -> str:
        rc = self.recompute if self.recompute != "block" else f"block:{self.recompute_num_layers}"
        opt = f"zero{self.zero_stage}" if self.zero_stage else ("distopt" if self.distributed_optimizer else "")
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"vpp{self.vpp}" if self.vpp > 1 else "",
                 f"cp{self.cp}" if self.cp > 1 else "", f"ep{self.ep}" if self.ep > 1 else "",
                f"etp{self.etp}" if self.etp is not None else "", "sp" if self.sequence_parallel else "",
                 f"mbs{self.micro_batch_size}", f"rc:{rc}", opt]
        return " ".join(p for p in parts if p)


def candidate_of(cfg: TrainingConfig) -> Candidate:
    """The user's own configuration as a Candidate (the baseline every gain is measured against)."""
    r = cfg.recompute
    if r.granularity == "full":
        mode = "block" if r.method == "block" else "full"
        layers = r.num_layers if r.num_layers is not None else 1
    else:
        mode, layers = r.granularity, None
    p = cfg.parallel
    return Candidate(
        tp=p.tp, pp=p.pp, vpp=p.vpp, cp=p.cp, sequence_parallel=p.sequence_parallel,
        micro_batch_size=cfg.batch.micro_batch_size, recompute=mode, recompute_num_layers=layers,
        distributed_optimizer=cfg.optimizer.distributed_optimizer, zero_stage=cfg.optimizer.zero_stage,
        ep=p.ep, etp=None if p.etp == p.tp else p.etp,
    )


def hf_batch_flags(cfg: TrainingConfig) -> bool:
    """Whether a plain torch job's (DDP / FSDP, no ds_config) micro-batch is the Hugging Face flag
    --per_device_train_batch_size (read from argv, or the Trainer's default 8 under --model_name_or_path:
    frameworks/assemble._script_batch), which --apply rewrites with --gradient_accumulation_steps; any other torch
    script sets it in its own code, so tune keeps it. So it does when ACCELERATE_GRADIENT_ACCUMULATION_STEPS sets the
    accumulation (Accelerator.__init__ reads it over the script's flag: frameworks/accelerate_plugin.
    accelerator_env_accumulation): the command cannot hold the global batch at another micro-batch."""
    src, gas = cfg.sources.get("micro_batch_size"), cfg.sources.get("num_microbatches")
    from_env = gas is not None and gas.kind == SourceKind.ENV
    return src is not None and (src.kind == SourceKind.ARGV or src.detail == TRAINER_MICRO_BATCH_DEFAULT) and not from_env


def recompute_config(c: Candidate) -> RecomputeConfig:
    if c.recompute == "none":
        return RecomputeConfig(granularity="none")
    if c.recompute == "selective":
        return RecomputeConfig(granularity="selective")
    method = "block" if c.recompute == "block" else "uniform"
    return RecomputeConfig(granularity="full", method=method, num_layers=c.recompute_num_layers)


def fixed_padded_vocab(cfg: TrainingConfig) -> bool:
    """The bigscience fork's --pad-vocab-size-to N pads to N whatever the TP (frameworks/vocab.py megatron_vocab):
    a candidate keeps N, which VocabParallelEmbedding must split over its TP."""
    source = cfg.sources.get("padded_vocab_size")
    return source is not None and "--pad-vocab-size-to" in source.detail


def split_layers(cfg: TrainingConfig) -> int:
    """The layer count Megatron splits over pipeline stages and virtual stages: --num-layers, plus one each for
    --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split (arguments.py adds them
    before dividing by PP and by --num-layers-per-virtual-pipeline-stage)."""
    p = cfg.parallel
    return cfg.model.num_layers + int(p.account_for_embedding_in_pipeline_split) + int(
        p.account_for_loss_in_pipeline_split)


def padded_vocab_at(cfg: TrainingConfig, tp: int) -> int:
    """The padded vocabulary the command's Megatron runs at tensor parallel size `tp`: Megatron `_vocab_size_with_padding`
    ceil(V / (divisible_by * TP)) * divisible_by * TP; the command's own where it fixes it (--pad-vocab-size-to) or
    states no divisor (a script that does not pad)."""
    model = cfg.model
    divisible_by = getattr(model, "make_vocab_size_divisible_by", None)
    if not divisible_by or tp == cfg.parallel.tp or fixed_padded_vocab(cfg):
        return model.padded_vocab_size
    multiple = divisible_by * tp
    return -(-model.vocab_size // multiple) * multiple


def apply_candidate(cfg: TrainingConfig, c: Candidate) -> TrainingConfig:
    """The user's TrainingConfig with this candidate's choices (dp and micro-batch count recomputed)."""
    dp = cfg.world_size // (c.tp * c.pp * c.cp)
    p = cfg.parallel
    same_pp = c.pp == p.pp
    # Expert TP follows TP unless pinned (Megatron: --expert-tensor-parallel-size defaults to TP); the user's
    # pinned value is candidate_of's etp, so a candidate that keeps it keeps the user's expert layout. Megatron-DeepSpeed
    # without --enable-expert-tensor-parallelism keeps its experts whole at any TP (ParallelLayout.etp_follows_tp).
    etp = c.expert_tp if p.etp_follows_tp else p.etp
    parallel = dataclasses.replace(
        p, tp=c.tp, pp=c.pp, vpp=c.vpp, cp=c.cp, dp=dp, ep=c.ep, etp=etp, sequence_parallel=c.sequence_parallel,
        decoder_first_pipeline_num_layers=p.decoder_first_pipeline_num_layers if same_pp else None,
        decoder_last_pipeline_num_layers=p.decoder_last_pipeline_num_layers if same_pp else None,
    )
    gbs = cfg.batch.global_batch_size
    batch = dataclasses.replace(cfg.batch, micro_batch_size=c.micro_batch_size,
                                num_microbatches=gbs // (c.micro_batch_size * dp))
    optimizer = dataclasses.replace(cfg.optimizer, distributed_optimizer=c.distributed_optimizer,
                                    zero_stage=c.zero_stage, **_zero_stage_fields(cfg, c.zero_stage))
    model = cfg.model
    if c.tp != p.tp:
        model = dataclasses.replace(model, padded_vocab_size=padded_vocab_at(cfg, c.tp))
    own = candidate_of(cfg)
    same_recompute = (c.recompute, c.recompute_num_layers) == (own.recompute, own.recompute_num_layers)
    recompute = cfg.recompute if same_recompute else recompute_config(c)
    # --distribute-saved-activations stays only where Megatron allows it (TP > 1, full recompute, no SP); the
    # rewritten command drops it elsewhere (tune/megatron_argv.py), so candidates are not refused for it.
    distribute = cfg.recompute.distribute_saved_activations and keeps_distributed_saved(c)
    recompute = dataclasses.replace(recompute, distribute_saved_activations=distribute,
                                    cpu_offloading=cfg.recompute.cpu_offloading, modules=cfg.recompute.modules,
                                    **_ds_checkpointing(cfg, c, same_recompute))
    engine = _pipeline_engine(cfg, c)
    partitioned = cfg.deepspeed_pipe_partitioned and not moe_whole_pipe_sends(cfg, c.tp, c.pp, engine)
    return dataclasses.replace(cfg, model=model, parallel=parallel, batch=batch,
                               recompute=_pipe_model_recompute(cfg, c, recompute),
                               optimizer=optimizer, pipeline_schedule=_schedule(cfg, c),
                               deepspeed_pipeline_engine=engine, deepspeed_pipe_partitioned=partitioned,
                               sources=_sources(cfg, c))


def _pipe_model_recompute(cfg: TrainingConfig, c: Candidate, recompute: RecomputeConfig) -> RecomputeConfig:
    """Block recompute under Megatron-DeepSpeed's PipelineEngine is no recompute: GPTModelPipe sets
    activation_checkpoint_interval from --checkpoint-activations or full *uniform* recompute only, else 0
    (megatron/model/gpt_model.py), as `explain` resolves the applied command (frameworks/assemble.py).
    generate_candidates merges such rows into no recompute already (candidates._pipe_model_ignores_block); this
    prices a candidate built any other way the same."""
    if cfg.framework == "megatron-deepspeed" and recompute.method == "block" and _pipeline_engine(cfg, c):
        return dataclasses.replace(recompute, granularity="none", method=None, num_layers=None)
    return recompute


def _zero_stage_fields(cfg: TrainingConfig, stage: int) -> dict[str, bool]:
    """What DeepSpeed derives from the ZeRO stage, re-derived for a candidate's stage as the rewritten command's
    ds_config (the user's, stage changed) makes frameworks/deepspeed_job.ds_optimizer derive it; kept from the command
    they priced ZeRO-3 without its default overlap and ZeRO-1 without its bucket all-reduce (Llama-2 7B on 8 H100s:
    tune said 2.743 s for ZeRO-3 where predict on the applied command says 2.631 s; 2.718 s for ZeRO-1, 2.744 s):
    - overlap_comm, unless the ds_config sets it, is on at ZeRO-3 only (deepspeed/runtime/zero/config.py
      overlap_comm_valid: `self.overlap_comm = self.stage == ZeroStageEnum.weights`);
    - ZeRO-1/2 all-reduce each gradient bucket (zero_grad_allreduce) as the command's ds_config and DeepSpeed release
      say they would (OptimizerConfig.zero_bucket_allreduce: reduce_scatter false, or use_multi_rank_bucket_allreduce
      on a release >= 0.12.4); taking DeepSpeed's defaults priced ZeRO-1 at 2.744 s where predict says 2.718 s for
      the applied command under `use_multi_rank_bucket_allreduce: false` or DeepSpeed 0.10 (Llama-2 7B, 8 H100s);
    - ZeRO-3 as the job's release runs it (frameworks/deepspeed_release.zero3_fields_at): before v0.6.0 it priced
      today's ZeRO-3 for a release whose ZeRO-3 gathers and reduces tensor by tensor."""
    o = cfg.optimizer
    if "deepspeed" not in cfg.framework or stage == o.zero_stage:
        return {}
    # A DeepSpeed release before v0.6.0 runs its own ZeRO-3 (frameworks/deepspeed_release.py): a move to ZeRO-3 takes
    # that release's fields, a move from it today's values of the fields it replaced, with their sources.
    released, origins = zero3_fields_at(stage, cfg.sources)
    allreduce = (stage == 1 and o.zero1_bucket_allreduce) or (stage == 2 and o.zero_bucket_allreduce)
    fields = {**(released if stage != 3 else {}), "zero_grad_allreduce": allreduce}
    overlap = origins.get("overlap_grad_reduce", cfg.sources.get("overlap_grad_reduce"))
    if overlap is not None and overlap.kind == SourceKind.DEFAULT and "overlap_comm" in overlap.detail:
        fields["overlap_grad_reduce"] = stage == 3
    return {**fields, **(released if stage == 3 else {})}


def _sources(cfg: TrainingConfig, c: Candidate) -> Mapping[str, Source]:
    """The command's sources, with the virtual stages' as the rewritten command gives them: a candidate that
    changes PP or VPP writes --num-layers-per-virtual-pipeline-stage for VPP > 1 and drops it for VPP 1
    (tune/megatron_argv.py), so its explain output names the flag it will run with."""
    if (c.pp, c.vpp) == (cfg.parallel.pp, cfg.parallel.vpp):
        return cfg.sources
    vpp = Source(SourceKind.DERIVED, "tune candidate") if c.vpp > 1 else Source(SourceKind.DEFAULT, "no virtual pipeline")
    return {**cfg.sources, "vpp": vpp}


def _ds_checkpointing(cfg: TrainingConfig, c: Candidate, same_recompute: bool) -> dict[str, bool]:
    """Megatron-DeepSpeed's --partition-activations / --checkpoint-in-cpu as the rewritten command resolves them: it
    keeps both flags, and --deepspeed-activation-checkpointing only where the candidate recomputes in full, uniform or
    block (tune/megatron_argv.py drops it on a move to none or selective; an unchanged recompute keeps the user's
    flags). The job records them at any granularity (frameworks/ds_checkpointing.ds_checkpointing_flags), so a move to
    full from selective or none prices them on."""
    configured = same_recompute or c.recompute in ("full", "block")  # --deepspeed-activation-checkpointing kept
    r = cfg.recompute
    return {"partition_activations": configured and r.partition_activations,
            "checkpoint_in_cpu": configured and r.checkpoint_in_cpu}


def keeps_distributed_saved(c: Candidate) -> bool:
    """Megatron's rule for --distribute-saved-activations (arguments.py, TransformerConfig)."""
    return c.tp > 1 and c.recompute in ("full", "block") and not c.sequence_parallel


def _schedule(cfg: TrainingConfig, c: Candidate) -> str:
    if (c.pp, c.vpp) == (cfg.parallel.pp, cfg.parallel.vpp):
        return cfg.pipeline_schedule
    return "interleaved" if c.vpp > 1 else ("1f1b" if c.pp > 1 else "none")


def _pipeline_engine(cfg: TrainingConfig, c: Candidate) -> bool:
    """Megatron-DeepSpeed runs DeepSpeed's PipelineEngine unless --no-pipeline-parallel, which tune adds
    only where it must: PP = 1 with ZeRO-2/3 (the engine rejects those; tune/megatron_argv.py)."""
    if cfg.framework != "megatron-deepspeed":
        return cfg.deepspeed_pipeline_engine
    if c.pp > 1:
        return True
    return False if c.zero_stage >= 2 else cfg.deepspeed_pipeline_engine


def moe_whole_pipe_sends(cfg: TrainingConfig, tp: Any, pp: Any, engine: Any) -> Any:
    """Whether (per row, for arrays) a Megatron-DeepSpeed MoE layout runs only with the ds_config's
    pipeline.pipe_partitioned and grad_partitioned both false: DeepSpeed's PipelineEngine at TP > 1 and PP > 1
    (frameworks/deepspeed_job.check_moe_pipe_partitioning, from Megatron-DeepSpeed megatron/model/gpt_model.py
    GPTModelPipe.__init__ and deepspeed/runtime/pipe/engine.py _exec_forward_pass / _exec_send_grads). --apply sets
    both false in the tuned ds_config copy (tune/ds_config_rewrite.whole_pipe_sends) and the candidate is priced with
    whole-tensor sends and no TP all-gather, as explain prices the copy (graph/build.py, surrogate._p2p_s)."""
    moe = cfg.framework == "megatron-deepspeed" and cfg.model.num_experts > 1
    return moe & engine & (tp > 1) & (pp > 1)


def changed_fields(base: Candidate, c: Candidate) -> dict[str, tuple[object, object]]:
    """Field -> (user's value, candidate's value) for every field the candidate changes."""
    out: dict[str, tuple[object, object]] = {}
    for f in dataclasses.fields(Candidate):
        a, b = getattr(base, f.name), getattr(c, f.name)
        if a != b:
            out[f.name] = (a, b)
    return out

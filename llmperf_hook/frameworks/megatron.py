"""Megatron-LM (and Megatron-DeepSpeed) training arguments -> TrainingConfig.

Derivations as megatron/training/arguments.py does them: DP = world / (TP*PP*CP); GBS defaults to MBS*DP;
micro-batches = GBS / (MBS*DP); expert-tensor-parallel-size defaults to TP; sequence parallelism is dropped
(with a warning) at TP = 1; virtual stages from --num-layers-per-virtual-pipeline-stage (layers per PP rank /
that) or --num-virtual-stages-per-pipeline-rank, never both; --recompute-activations = selective.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.ds_checkpointing import ds_checkpointing_flags
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.megatron_shape import pick, resolve_megatron_shape
from llmperf_hook.frameworks.script_defaults import with_own_defaults
from llmperf_hook.frameworks.megatron_entry_points import megatron_entry_point
from llmperf_hook.frameworks.megatron_rampup import decreased_batch
from llmperf_hook.frameworks.megatron_rules import CHOICES
from llmperf_hook.frameworks.pipeline_layout import layout_num_stages
from llmperf_hook.frameworks.script_flags import FALSE_DESTS, NOT_MODELLED
from llmperf_hook.frameworks.step_batch_schedule import StepBatchSchedule, step_batch_schedule, unsplit_batches_warning
from llmperf_hook.frameworks.step_flags import step_flag_warnings
from llmperf_hook.frameworks.training_config import (BatchConfig, ModelShape, OptimizerConfig, ParallelLayout,
                                                     RecomputeConfig)
from llmperf_hook.provenance import Source, SourceKind


@dataclass(frozen=True)
class MegatronParts:
    """Everything Megatron's flags fix; the DeepSpeed side (ZeRO, ds_config batch) is merged by the resolver."""

    model: ModelShape
    parallel: ParallelLayout
    batch: BatchConfig
    precision: str
    recompute: RecomputeConfig
    optimizer: OptimizerConfig
    attention_backend: str
    pipeline_schedule: str


def _deprecated(flags: FlagValues) -> None:
    for dest, new in (("batch_size", "--micro-batch-size"), ("model_parallel_size", "--tensor-model-parallel-size")):
        if flags.has(dest):
            raise ConfigError(f"{flags.seen_flags[dest]} {flags.get(dest)} is no longer accepted by Megatron-LM "
                              f"(arguments.py asserts it is unset); use {new} instead.")


def world_divisibility_error(world: int, world_src: Source, tp: int, pp: int, cp: int, src: dict[str, Source]) -> ConfigError:
    divisors = ", ".join(str(d) for d in range(1, world + 1) if world % d == 0)
    return ConfigError(
        f"world size {world} ({world_src}) is not divisible by tensor-model-parallel-size {tp} ({src['tp']}) x "
        f"pipeline-model-parallel-size {pp} ({src['pp']}) x context-parallel-size {cp} ({src['cp']}) = {tp * pp * cp} "
        f"(Megatron requires world % (TP*PP*CP) == 0). TP*PP*CP must be one of {divisors}; change the parallel sizes "
        "or the number of processes."
    )


def _vpp(flags: FlagValues, layers: int, pp: int, src: dict[str, Source]) -> int:
    per_stage_flag, stages_flag = flags.get("num_layers_per_virtual_pipeline_stage"), flags.get("num_virtual_stages_per_pipeline_rank")
    layout = flags.get("pipeline_model_parallel_layout")
    given = [flags.seen_flags[d] for d in ("num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
                                           "pipeline_model_parallel_layout") if flags.get(d) is not None]
    if len(given) > 1:
        both = "both " if len(given) == 2 else ""
        raise ConfigError(f"{' and '.join(given)} cannot {both}be set together; Megatron asserts 'No more than one of the "
                          "following arguments can be set at the same time: --num-layers-per-virtual-pipeline-stage, "
                          "--num-virtual-stages-per-pipeline-rank, --pipeline-model-parallel-layout' (arguments.py). "
                          "Keep one.")
    if layout is not None:
        stages = layout_num_stages(layout)
        if stages % pp:
            raise ConfigError(f"--pipeline-model-parallel-layout {layout!r} has {stages} stages, not a multiple of "
                              f"pipeline-model-parallel-size {pp} ({src['pp']}); Megatron asserts 'The length of "
                              "pipeline_model_parallel_layout must be divisible by pipeline_model_parallel_size'. Fix one.")
        src["vpp"] = Source(SourceKind.DERIVED, f"--pipeline-model-parallel-layout stages / PP = {stages}/{pp}")
        return stages // pp
    if stages_flag is not None:
        src["vpp"] = flags.source("num_virtual_stages_per_pipeline_rank")
        return stages_flag
    if per_stage_flag is None:
        src["vpp"] = Source(SourceKind.DEFAULT, "no virtual pipeline")
        return 1
    if flags.has("decoder_first_pipeline_num_layers") or flags.has("decoder_last_pipeline_num_layers"):
        raise ConfigError("with uneven pipeline stages (--decoder-first/last-pipeline-num-layers) Megatron needs "
                          "--num-virtual-stages-per-pipeline-rank, not --num-layers-per-virtual-pipeline-stage.")
    extra = int(bool(flags.get("account_for_embedding_in_pipeline_split"))) + int(bool(flags.get("account_for_loss_in_pipeline_split")))
    per_rank, rem = divmod(layers + extra, pp)
    if rem or per_stage_flag <= 0 or per_rank % per_stage_flag:
        raise ConfigError(
            f"{layers + extra} layers over pipeline-model-parallel-size {pp} ({src['pp']}) give {(layers + extra) / pp:g} per rank, "
            f"which --num-layers-per-virtual-pipeline-stage {per_stage_flag} must divide (Megatron). "
            f"Choose a value dividing {per_rank if not rem else 'a whole number of layers per rank'}."
        )
    src["vpp"] = Source(SourceKind.DERIVED, f"(layers / PP) / --num-layers-per-virtual-pipeline-stage = {per_rank}/{per_stage_flag}")
    return per_rank // per_stage_flag


def _deepspeed_expert_tp(flags: FlagValues, tp: int) -> tuple[int, Source]:
    """Expert TP of Megatron-DeepSpeed, whose MoE layers are DeepSpeed's: ParallelTransformerLayer builds
    MoE(ParallelMLP(config, moe=True, enable_expert_tensor_parallelism=args.enable_expert_tensor_parallelism))
    (megatron/model/transformer.py), and its Column/RowParallelLinear take `world_size = 1` for an expert unless
    the flag is on (megatron/core/tensor_parallel/layers.py `if moe and (not enable_expert_tensor_parallelism)`):
    every TP rank holds its EP rank's experts whole. --enable-expert-tensor-parallelism (store_true, default off,
    megatron/arguments.py) splits them over TP as the dense MLP. Megatron-DeepSpeed 4efb479d."""
    if flags.get("enable_expert_tensor_parallelism"):
        return tp, flags.source("enable_expert_tensor_parallelism")
    return 1, Source(SourceKind.DEFAULT, "Megatron-DeepSpeed: experts whole on every TP rank "
                                         "(no --enable-expert-tensor-parallelism)")


def _layout(flags: FlagValues, world: int, world_src: Source, src: dict[str, Source], warnings: list[str],
            ds_flavour: bool = False) -> ParallelLayout:
    tp, src["tp"] = pick(flags, "tensor_model_parallel_size", 1, "Megatron: 1")
    pp, src["pp"] = pick(flags, "pipeline_model_parallel_size", 1, "Megatron: 1")
    cp, src["cp"] = pick(flags, "context_parallel_size", 1, "Megatron: 1")
    if ds_flavour and flags.has("ds_sequence_parallel_size"):  # Megatron-DeepSpeed: DP = world / (TP*PP*SP)
        cp, src["cp"] = flags.get("ds_sequence_parallel_size"), flags.source("ds_sequence_parallel_size")
        warnings.append("--ds-sequence-parallel-size: DeepSpeed-Ulysses all-to-all modelled as context parallelism")
    ep, src["ep"] = pick(flags, "expert_model_parallel_size", 1, "Megatron: 1")
    etp, src["etp"] = (_deepspeed_expert_tp(flags, tp) if ds_flavour else
                       pick(flags, "expert_tensor_parallel_size", tp, "Megatron: tensor-model-parallel-size"))
    for key, value in (("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep), ("etp", etp)):
        if value < 1:
            raise ConfigError(f"{key} {value} ({src[key]}) must be at least 1.")
    if world % (tp * pp * cp):
        raise world_divisibility_error(world, world_src, tp, pp, cp, src)
    src["dp"] = Source(SourceKind.DERIVED, f"world / (TP*PP*CP) = {world}/{tp * pp * cp}")
    sp, src["sequence_parallel"] = pick(flags, "sequence_parallel", False, "Megatron: off")
    if sp and tp == 1:
        warnings.append("Disabling sequence parallelism because tensor model parallelism is disabled (Megatron, TP = 1)")
        sp, src["sequence_parallel"] = False, Source(SourceKind.DERIVED, "dropped at TP = 1 (Megatron)")
    layers = flags.get("num_layers") or flags.get("encoder_num_layers") or 0
    return ParallelLayout(
        tp=tp, pp=pp, vpp=_vpp(flags, layers, pp, src), cp=cp, dp=world // (tp * pp * cp), ep=ep, etp=etp,
        etp_follows_tp=not ds_flavour or bool(flags.get("enable_expert_tensor_parallelism")),
        sequence_parallel=bool(sp), decoder_first_pipeline_num_layers=flags.get("decoder_first_pipeline_num_layers"),
        decoder_last_pipeline_num_layers=flags.get("decoder_last_pipeline_num_layers"),
        account_for_embedding_in_pipeline_split=bool(flags.get("account_for_embedding_in_pipeline_split")),
        account_for_loss_in_pipeline_split=bool(flags.get("account_for_loss_in_pipeline_split")),
        pipeline_layout=flags.get("pipeline_model_parallel_layout"),
        microbatch_group_size=flags.get("microbatch_group_size_per_virtual_pipeline_stage"),
        overlap_p2p_comm=bool(flags.get("overlap_p2p_comm", True)),
        pp_partition_method=flags.get("pp_partition_method"),
    )


def megatron_step_schedule(flags: FlagValues) -> StepBatchSchedule:
    """--step-batch-size-schedule with its thresholds in tokens of args.seq_length (validate_args sets it from
    --encoder-seq-length when not given)."""
    seq = flags.get("seq_length") or flags.get("encoder_seq_length")
    return step_batch_schedule(str(flags.get("step_batch_size_schedule")), int(seq) if seq else None)


def megatron_batch(flags: FlagValues, dp: int, src: dict[str, Source]) -> BatchConfig:
    if not flags.has("micro_batch_size"):
        raise ConfigError("Megatron requires --micro-batch-size (arguments.py asserts it is set) and the command does not "
                          "give it; add --micro-batch-size N (samples per GPU per micro-batch).")
    mbs, src["micro_batch_size"] = flags.get("micro_batch_size"), flags.source("micro_batch_size")
    if flags.has("global_batch_size"):
        gbs, src["global_batch_size"] = flags.get("global_batch_size"), flags.source("global_batch_size")
    elif flags.has("step_batch_size_schedule"):
        gbs = megatron_step_schedule(flags).final_batch
        src["global_batch_size"] = Source(SourceKind.ARGV, f"{flags.seen_flags['step_batch_size_schedule']}: its final "
                                                           f"batch {gbs}, the step priced")
    else:
        gbs, src["global_batch_size"] = mbs * dp, Source(SourceKind.DERIVED, f"Megatron default MBS * DP = {mbs}*{dp}")
    if mbs < 1 or gbs < 1:
        raise ConfigError(f"micro batch size {mbs} ({src['micro_batch_size']}) and global batch size {gbs} "
                          f"({src['global_batch_size']}) must be at least 1.")
    src["num_microbatches"] = Source(SourceKind.DERIVED, f"GBS / (MBS*DP) = {gbs}/({mbs}*{dp})")
    return BatchConfig(micro_batch_size=mbs, global_batch_size=gbs, num_microbatches=max(gbs // (mbs * dp), 1))


def megatron_precision(flags: FlagValues, src: dict[str, Source], warnings: list[str]) -> str:
    if flags.get("fp16") and flags.get("bf16"):
        raise ConfigError(f"{flags.seen_flags['fp16']} and {flags.seen_flags['bf16']} are both set; Megatron accepts one "
                          "(arguments.py asserts not both). Keep one.")
    legacy = [flags.seen_flags[d] for d in ("fp8_e4m3", "fp8_hybrid") if flags.get(d)]
    if legacy:
        return _legacy_fp8(flags, legacy, src)
    if flags.get("fp8_format") and flags.get("transformer_impl") == "local":
        # FP8 runs inside Transformer Engine modules; the local spec's torch layers ignore it (gpt_layer_specs.py).
        warnings.append("--fp8-format has no effect with --transformer-impl local (only Transformer Engine layers run "
                        "FP8): priced in the --bf16/--fp16 precision")
    elif flags.get("fp8_format"):
        src["precision"] = flags.source("fp8_format")
        return "fp8"
    return flag_precision(flags, src, "Megatron: fp32 (no --fp16/--bf16)")


def _legacy_fp8(flags: FlagValues, given: list[str], src: dict[str, Source]) -> str:
    """--fp8-e4m3 / --fp8-hybrid (Megatron-DeepSpeed, Megatron-LM of 2023): validate_args asserts one of them only,
    and --transformer-impl transformer_engine (the default there is local)."""
    if len(given) > 1:
        raise ConfigError(f"{' and '.join(given)} are both set; Megatron asserts 'cannot train with both fp8 e4m3 and "
                          "hybrid formatting'. Keep one.")
    if flags.get("transformer_impl") != "transformer_engine":
        raise ConfigError(f"{given[0]} needs --transformer-impl transformer_engine (validate_args: 'transformer-engine "
                          "required for fp8 training and inference'; the default implementation there is local).")
    src["precision"] = flags.source("fp8_e4m3" if flags.get("fp8_e4m3") else "fp8_hybrid")
    return "fp8"


def flag_precision(flags: FlagValues, src: dict[str, Source], default_detail: str) -> str:
    """bf16 or fp16 from their flags (bf16 first, as Megatron checks), else fp32 from the stated default."""
    for name in ("bf16", "fp16"):
        if flags.get(name):
            src["precision"] = flags.source(name)
            return name
    src["precision"] = Source(SourceKind.DEFAULT, default_detail)
    return "fp32"


RECOMPUTE_MODULES_PRICED = frozenset({"core_attn", "mlp", "moe", "moe_act", "shared_experts"})
"""--recompute-modules whose saved tensors schedule/activations.py drops; layernorm and mla_up_proj are kept."""
RECOMPUTE_MODULES_TIMED = frozenset({"core_attn", "layernorm", "mlp", "moe", "moe_act", "shared_experts"})
"""--recompute-modules whose recomputed forward the graph replays (graph/backward.py _module_replays)."""


def _recompute_modules(flags: FlagValues, granularity: str | None, src: dict[str, Source],
                       warnings: list[str]) -> tuple[str, ...]:
    """TransformerConfig.recompute_modules: kept whatever the granularity (a tuned command that moves to selective
    runs them), read only by the selective recompute, which alone is warned about."""
    given = flags.get("recompute_modules")
    modules = ("core_attn",) if given is None else (given,) if isinstance(given, str) else tuple(given)
    if flags.get("moe_layer_recompute") and "moe" not in modules:  # TransformerConfig appends it
        modules += ("moe",)
    if given is not None:
        src["recompute_modules"] = flags.source("recompute_modules")
    untimed = [m for m in modules if m not in RECOMPUTE_MODULES_TIMED] if granularity == "selective" else []
    kept = sorted(set(modules) - RECOMPUTE_MODULES_PRICED) if granularity == "selective" else []
    if untimed or kept:
        spelling = flags.seen_flags.get("recompute_modules") or flags.seen_flags.get("moe_layer_recompute", "")
        parts = ([f"{' '.join(untimed)}: the recomputed forward is not timed"] if untimed else []) + \
            ([f"{', '.join(kept)} priced as if kept in memory"] if kept else [])
        warnings.append(f"{spelling} (recompute modules {' '.join(modules)}): {'; '.join(parts)}")
    return modules


def _block_of_no_layers(flags: FlagValues, src: dict[str, Source], warnings: list[str]) -> tuple[None, None, None]:
    """--recompute-method block --recompute-num-layers 0 starts (TransformerConfig checks only that a count is given)
    and recomputes nothing: transformer_block.py _checkpointed_forward checkpoints layer i only while i <
    recompute_num_layers (core_v0.16.1 :544-563). Uniform with 0 never advances: validation refuses it."""
    src["recompute"] = flags.source("recompute_num_layers")
    warnings.append(f"{flags.seen_flags['recompute_num_layers']} 0 with --recompute-method block recomputes no layer "
                    "(Megatron's block recompute checkpoints the first N layers of each pipeline chunk): priced as no "
                    "recompute. Give a positive count to recompute, or drop the recompute flags.")
    return None, None, None


def megatron_recompute(flags: FlagValues, src: dict[str, Source], warnings: list[str]) -> RecomputeConfig:
    if flags.get("checkpoint_activations"):  # older Megatron / Megatron-DeepSpeed: full, uniform, chunks of N layers
        src["recompute"] = flags.source("checkpoint_activations")
        return RecomputeConfig("full", "uniform", flags.get("checkpoint_num_layers", 1),
                               **ds_checkpointing_flags(flags, src))
    granularity, src["recompute"] = pick(flags, "recompute_granularity", None, "Megatron: no recomputation")
    if flags.get("recompute_activations"):
        granularity, src["recompute"] = "selective", flags.source("recompute_activations")
    if flags.get("moe_layer_recompute"):  # TransformerConfig: deprecated spelling of selective + 'moe'
        if granularity == "full":
            raise ConfigError("--moe-layer-recompute cannot be combined with --recompute-granularity full (Megatron "
                              "TransformerConfig raises ValueError). Drop one of them.")
        if granularity != "selective":  # selective already: TransformerConfig checked the modules before it
            src["recompute"] = flags.source("moe_layer_recompute")  # (megatron_recompute_modules._after_the_checks)
        granularity = "selective"
    if granularity not in (None, "full", "selective"):
        raise ConfigError(f"--recompute-granularity {granularity} must be full or selective (Megatron).")
    method = flags.get("recompute_method")
    if method not in (None, "uniform", "block"):
        raise ConfigError(f"--recompute-method {method} must be uniform or block (Megatron).")
    if flags.has("recompute_method"):
        src["recompute_method"] = flags.source("recompute_method")
    if flags.has("recompute_num_layers"):
        src["recompute_num_layers"] = flags.source("recompute_num_layers")
    layers = flags.get("recompute_num_layers")
    if granularity is None and (flags.has("recompute_method") or flags.has("recompute_num_layers")):
        given = " / ".join(flags.spelling(k) for k in ("recompute_method", "recompute_num_layers") if flags.has(k))
        # TransformerConfig reads the method and layer count only under `if self.recompute_granularity is not None`
        # (megatron/core/transformer/transformer_config.py __post_init__): alone they recompute nothing.
        warnings.append(f"{given} without --recompute-granularity recomputes nothing (Megatron reads them only under "
                        "a granularity); priced without recomputation. Add --recompute-granularity full if you meant "
                        "full recomputation.")
    if granularity == "full" and method == "block" and layers == 0:
        granularity, method, layers = _block_of_no_layers(flags, src, warnings)
    modules = _recompute_modules(flags, granularity, src, warnings)
    return RecomputeConfig(granularity or "none", method, layers, modules=modules, **ds_checkpointing_flags(flags, src),
                           distribute_saved_activations=bool(flags.get("distribute_saved_activations", False)),
                           cpu_offloading=bool(flags.get("cpu_offloading") or flags.get("cpu_offloading_num_layers", 0) > 0),
                           cpu_offloading_num_layers=int(flags.get("cpu_offloading_num_layers", 0)))


# arguments.py --optimizer choices (Megatron-LM 2026): those llmperf prices, and those it prices as Adam.
_OPTIMIZERS_MODELLED = ("adam", "sgd")
_OPTIMIZERS_AS_ADAM = ("muon", "dist_muon", "lion", "soap", "adaptive_muon")


def _fused_sgd_step(flags: FlagValues, ds_flavour: bool, src: dict[str, Source],
                    warnings: list[str] | None) -> dict[str, str]:
    """Megatron-LM's --optimizer sgd: Transformer Engine's FusedSGD, else apex's, else torch.optim.SGD
    (core/optimizer/__init__.py imports, core_v0.16.1 to HEAD), built with momentum=--sgd-momentum (arguments.py
    default 0.9). Both fused ones keep a momentum_buffer for every parameter whatever the momentum (FusedSGD.get_momentums
    allocates torch.zeros_like(p) on the first step), so --sgd-momentum 0 still holds one state; their kernel's
    accesses are graph/megatron_step.FUSED_SGD_ACCESSES. Only the bare-torch fallback (neither TE nor apex importable,
    possible only under --transformer-impl local) keeps none (torch/optim/sgd.py _init_group): warned there.
    Megatron-DeepSpeed's own optimizer module is not read ({})."""
    if ds_flavour or str(flags.get("optimizer", "adam")) != "sgd":
        return {}
    momentum = float(flags.get("sgd_momentum", 0.9))
    src["torch_optimizer_impl"] = Source(SourceKind.DERIVED, f"--optimizer sgd, --sgd-momentum {momentum:g}: "
                                                             "Transformer Engine / apex FusedSGD")
    if momentum == 0 and flags.get("transformer_impl", "transformer_engine") == "local" and warnings is not None:
        warnings.append("--optimizer sgd --sgd-momentum 0 under --transformer-impl local: priced as Transformer "
                        "Engine's / apex's FusedSGD, which keeps a zero momentum buffer per parameter; without either "
                        "installed Megatron falls back to torch.optim.SGD, which keeps none (4 B per parameter less)")
    return {"torch_optimizer_impl": "fused_sgd_momentum" if momentum else "fused_sgd"}


def megatron_optimizer(flags: FlagValues, src: dict[str, Source], warnings: list[str] | None = None,
                       ds_flavour: bool = False) -> OptimizerConfig:
    name = str(flags.get("optimizer", "adam"))
    if name in _OPTIMIZERS_AS_ADAM:
        if warnings is not None:
            warnings.append(f"--optimizer {name}: its step and states are modelled as Adam's")
        name = "adam"
    if name not in _OPTIMIZERS_MODELLED:
        raise ConfigError(f"--optimizer {name} is not one Megatron-LM offers (arguments.py choices: "
                          f"{', '.join(_OPTIMIZERS_MODELLED + _OPTIMIZERS_AS_ADAM)}). Pick one of them.")
    # validate_args switches the NaN check off for fp16 under dynamic loss scaling (no --loss-scale): the scaler's
    # overflow check stands in for it
    dynamic_fp16 = bool(flags.get("fp16")) and not flags.get("loss_scale")
    grad_scale = "tokens" if flags.get("calculate_per_token_loss") else \
        "none" if flags.get("ddp_average_in_collective") else "dp"
    return OptimizerConfig(
        name=name,  # type: ignore[arg-type]
        distributed_optimizer=_sharded_optimizer(flags, src),
        fsdp="megatron_fsdp" if flags.get("use_megatron_fsdp") else "torch_fsdp2" if flags.get("use_torch_fsdp2") else "none",
        zero_stage=fsdp_zero_stage(flags, src),
        overlap_grad_reduce=bool(flags.get("overlap_grad_reduce", False)),
        overlap_param_gather=bool(flags.get("overlap_param_gather", False)),
        overlap_param_gather_with_optimizer_step=bool(flags.get("overlap_param_gather_with_optimizer_step", False)),
        tp_comm_overlap=bool(flags.get("tp_comm_overlap", False)), grad_bucket_size_elems=flags.get("ddp_bucket_size"),
        grad_num_buckets=_ddp_num_buckets(flags),
        offload_optimizer="cpu" if flags.get("optimizer_cpu_offload") else "none",
        # HybridDeviceOptimizer(offload_fraction=--optimizer-offload-fraction, arguments.py default 1.0); the fraction
        # means nothing without --optimizer-cpu-offload (core/optimizer/__init__.py builds it only then)
        offload_optimizer_ratio=float(flags.get("optimizer_offload_fraction", 1.0)) if flags.get("optimizer_cpu_offload")
        else 1.0,
        distopt_instances=int(flags.get("num_distributed_optimizer_instances") or 1),
        pin_cpu_grads=bool(flags.get("pin_cpu_grads", True)), pin_cpu_params=bool(flags.get("pin_cpu_params", True)),
        gradient_clipping=float(flags.get("clip_grad", 1.0)),
        # DDP's per-bucket NaN check and its gradient scaling pass (graph/megatron_step.py)
        grad_nan_check=bool(flags.get("check_for_nan_in_loss_and_grad", True)) and not dynamic_fp16,
        grad_scale=grad_scale,  # type: ignore[arg-type]
        # Megatron arguments.py: bf16 sets accumulate_allreduce_grads_in_fp32 unless --grad-reduce-in-bf16 (which
        # clears it: bf16 main grads, bf16 reduction); otherwise main_grad keeps the param dtype (fp16 grads, fp16
        # all-reduce) unless --accumulate-allreduce-grads-in-fp32 is given.
        # --main-grads-dtype bf16 (precision-aware optimizer) leaves accumulate_allreduce_grads_in_fp32 unset too
        # (arguments.py: it is set only while main_grads_dtype is fp32).
        fp32_main_grads=(not flags.get("grad_reduce_in_bf16", False) and flags.get("main_grads_dtype", "fp32") == "fp32"
                         if flags.get("bf16", False) else
                         bool(flags.get("accumulate_allreduce_grads_in_fp32", False)) or not flags.get("fp16", False)),
        fp8_param_gather=bool(flags.get("fp8_param_gather", False)),
        precision_aware=bool(flags.get("use_precision_aware_optimizer", False)),
        main_params_dtype=str(flags.get("main_params_dtype", "fp32")),
        exp_avg_dtype=str(flags.get("exp_avg_dtype", "fp32")),
        exp_avg_sq_dtype=str(flags.get("exp_avg_sq_dtype", "fp32")),
        **_fused_sgd_step(flags, ds_flavour, src, warnings),
    )


# Megatron FSDP --data-parallel-sharding-strategy (arguments.py, default optim_grads_params) as the ZeRO stage it is.
FSDP_SHARDING_STAGES = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}


def fsdp_zero_stage(flags: FlagValues, src: dict[str, Source]) -> int:
    """What an FSDP shards, as a ZeRO stage: torch FSDP2's fully_shard everything (3); Megatron FSDP what
    --data-parallel-sharding-strategy says (default optim_grads_params = 3). Without FSDP: 0 (no ZeRO)."""
    if flags.get("use_megatron_fsdp"):
        strategy = str(flags.get("data_parallel_sharding_strategy", "optim_grads_params"))
        if strategy not in FSDP_SHARDING_STAGES:
            raise ConfigError(f"--data-parallel-sharding-strategy {strategy} is not a choice Megatron offers "
                              f"({', '.join(FSDP_SHARDING_STAGES)}). Pick one of them.")
        src["zero_stage"] = flags.source("data_parallel_sharding_strategy", "Megatron FSDP: optim_grads_params")
        return FSDP_SHARDING_STAGES[strategy]
    if flags.get("use_torch_fsdp2"):
        src["zero_stage"] = Source(SourceKind.ARGV, f"{flags.seen_flags['use_torch_fsdp2']} (fully_shard: params, "
                                                    "gradients and optimizer states)")
        return 3
    return 0


def _ddp_num_buckets(flags: FlagValues) -> int | None:
    """--ddp-num-buckets as Megatron-Core's DistributedDataParallelConfig.__post_init__ takes it (training.py
    get_megatron_ddp_config passes num_buckets and bucket_size): 'Cannot specify both num_buckets and
    bucket_size' (a count below 1 is refused with the other step integers, step_flags.py)."""
    n = flags.get("ddp_num_buckets")
    if n is None:
        return None
    given = flags.spelling("ddp_num_buckets")
    if flags.get("ddp_bucket_size") is not None:
        raise ConfigError(f"{given} {n} and {flags.spelling('ddp_bucket_size')} "
                          f"{flags.get('ddp_bucket_size')} are both given; Megatron-Core's DistributedDataParallelConfig "
                          "asserts 'Cannot specify both num_buckets and bucket_size'. Keep one of them.")
    return int(n)


def _sharded_optimizer(flags: FlagValues, src: dict[str, Source]) -> bool:
    """--use-distributed-optimizer, or an FSDP that shards the optimizer states (torch FSDP2, Megatron FSDP; the
    latter's v1 turns the distributed optimizer on itself in validate_args): modelled as the distributed optimizer."""
    for dest in ("use_megatron_fsdp", "use_torch_fsdp2"):
        if flags.get(dest):
            src["distributed_optimizer"] = Source(SourceKind.ARGV, f"{flags.seen_flags[dest]} (sharded optimizer states)")
            return True
    src["distributed_optimizer"] = flags.source("use_distributed_optimizer", "Megatron: off")
    return bool(flags.get("use_distributed_optimizer", False))


def megatron_attention(flags: FlagValues, src: dict[str, Source], ds_flavour: bool = False, script: str = "") -> str:
    """The attention kernels the job runs. `--transformer-impl local` builds megatron-core's local layer spec,
    whose DotProductAttention is unfused whatever --attention-backend says (gpt_builders.py
    _get_transformer_layer_spec -> get_gpt_layer_local_spec; core/transformer/dot_product_attention.py: baddbmm,
    FusedScaleMaskSoftmax, bmm); Megatron-DeepSpeed's own entry points (pretrain_gpt.py, ...) build ParallelAttention,
    which runs its unfused CoreAttention unless a --use-flash-attn* flag is given (megatron/model/transformer.py).
    Another script that only takes Megatron-style flags builds its own attention: the Megatron default stands."""
    backend = flags.get("attention_backend")
    if flags.get("transformer_impl") == "local" and not ds_flavour:
        flag = flags.spelling("transformer_impl")
        src["attention_backend"] = Source(SourceKind.ARGV, f"{flag} local: megatron-core's local DotProductAttention "
                                          "(unfused)")
        return "unfused"
    if backend is not None:
        src["attention_backend"] = flags.source("attention_backend")
        return {"local": "unfused"}.get(backend, backend) if backend in ("flash", "fused", "unfused", "local", "auto") else "auto"
    for name in ("use_flash_attn", "use_flash_attn_v2", "use_flash_attn_triton"):
        if flags.get(name):
            src["attention_backend"] = flags.source(name)
            return "flash"
    if ds_flavour and megatron_entry_point(script):
        src["attention_backend"] = Source(SourceKind.DEFAULT, "Megatron-DeepSpeed: CoreAttention (unfused) "
                                          "without --use-flash-attn")
        return "unfused"
    src["attention_backend"] = Source(SourceKind.DEFAULT, "Megatron: auto")
    return "auto"


def not_modelled_warnings(flags: FlagValues) -> list[str]:
    """One line per accepted flag that changes step time or memory but that llmperf does not model: a store_true
    or valued flag when set (not None / False / 0), a store_false one (`--no-X`) when given (False)."""
    modelled = {"cuda_graph_impl": ("none",),
                "position_embedding_type": tuple(c for c in CHOICES["position_embedding_type"] if c != "relative")}
    off = {d: ((True, None) if d in FALSE_DESTS else (None, False)) for d in NOT_MODELLED}
    return [f"{flags.seen_flags[d]}: {why}" for d, why in NOT_MODELLED.items()
            if flags.get(d) not in off[d] and flags.get(d) not in modelled.get(d, ())] + step_flag_warnings(flags)


def resolve_megatron(flags: FlagValues, world: int, world_src: Source, src: dict[str, Source], warnings: list[str],
                     ds_flavour: bool = False, shape_model: str | None = None, script: str = "") -> MegatronParts:
    """All of Megatron's side of the configuration; `src` and `warnings` are filled in place. `shape_model`
    (llmperf --model, for a Megatron-style script without model-shape flags) gives the model shape."""
    _deprecated(flags)
    if shape_model:
        flags = _with_preset_counts(flags, shape_model)
    elif script:  # a script with its own argparse parser runs with its own defaults (frameworks/script_defaults.py)
        flags = with_own_defaults(flags, script)
    parallel = _layout(flags, world, world_src, src, warnings, ds_flavour)
    if shape_model:
        model = preset_megatron_shape(flags, shape_model, parallel.tp, src, warnings)
    else:
        model = resolve_megatron_shape(flags, parallel.tp, src, warnings, ds_flavour, script)
    batch = megatron_batch(flags, parallel.dp, src)
    if flags.get("decrease_batch_size_if_needed") and not ds_flavour and not flags.has("step_batch_size_schedule"):
        batch = decreased_batch(batch, parallel.dp, src, warnings)
    if flags.has("step_batch_size_schedule") and not flags.has("global_batch_size"):
        warnings.extend(unsplit_batches_warning(megatron_step_schedule(flags), batch.micro_batch_size, parallel.dp))
    schedule = "none" if parallel.pp == 1 else "interleaved" if parallel.vpp > 1 else "1f1b"
    warnings.extend(not_modelled_warnings(flags))
    return MegatronParts(model, parallel, batch, megatron_precision(flags, src, warnings),
                         megatron_recompute(flags, src, warnings),
                         megatron_optimizer(flags, src, warnings, ds_flavour), megatron_attention(flags, src, ds_flavour, script),
                         schedule)


def preset_megatron_shape(flags: FlagValues, shape_model: str, tp: int, src: dict[str, Source],
                          warnings: list[str]) -> ModelShape:
    """The --model preset's shape with Megatron's vocabulary padding (arguments.py: ceil(V / (divisible * TP)))."""
    from dataclasses import replace

    from llmperf_hook.frameworks.script_shape import resolve_script_shape
    from llmperf_hook.frameworks.vocab import pad_vocab_size

    model = resolve_script_shape(flags, shape_model, src, warnings)
    if model.num_experts:  # the script is Megatron's: its dispatcher flags (default allgather) apply to the preset
        from llmperf_hook.frameworks.megatron_shape import resolve_moe_dispatch

        model = replace(model, moe_dispatch=resolve_moe_dispatch(flags, src, warnings))
    divisible = flags.get("make_vocab_size_divisible_by", 128)
    src["padded_vocab_size"] = Source(SourceKind.DERIVED, f"ceil({model.vocab_size} / ({divisible} * TP {tp})) * {divisible * tp}")
    return replace(model, padded_vocab_size=pad_vocab_size(model.vocab_size, divisible, tp),
                   make_vocab_size_divisible_by=divisible)


def _with_preset_counts(flags: FlagValues, shape_model: str) -> FlagValues:
    """A copy of `flags` holding the preset's layer and expert counts, as if given as Megatron flags: the layout
    rules (layers per stage, virtual stages, num_experts % EP) read them there."""
    from dataclasses import replace

    from llmperf_hook.frameworks.presets import load_model_preset

    raw, source = load_model_preset(shape_model), Source(SourceKind.OVERRIDE, f"--model {shape_model}")
    values, sources = dict(flags.values), dict(flags.sources)
    for dest in ("num_layers", "num_experts"):
        if raw.get(dest) and dest not in values:
            values[dest], sources[dest] = int(raw[dest]), source
    return replace(flags, values=values, sources=sources)

"""Megatron-LM's and DeepSpeed's layout rules as one pure, fast function (the tuner calls it per candidate).

Rules and their sources: megatron/training/arguments.py `validate_args` (world % (TP*PP*CP), layers across
pipeline and virtual stages, interleaving needs PP > 1, CP needs seq % 2CP, overlap-param-gather needs the
distributed optimizer, tp-comm-overlap needs sequence parallelism, experts % EP, virtual stages without p2p
overlap need PP > 2, --distribute-saved-activations needs TP > 1 and full recompute), megatron/core
transformer_config.py (heads % TP, query groups a multiple or divisor of TP, uneven first/last stages,
recompute method/num-layers, --overlap-moe-expert-parallel-comm's layout asserts), the flex token dispatcher
(DeepEP / NCCL EP need ETP x EP > 1), parallel_state.py (world % (ETP*EP*PP)), the microbatch calculator
(GBS % (MBS*DP)), pipeline schedules.py (interleaving needs M % PP == 0), DeepSpeed runtime/config.py
`_batch_assertion` and pipe/engine.py (ZeRO-2/3 incompatible with the pipeline engine), Megatron-DeepSpeed's
initialize.py (DeepSpeed-Ulysses refuses Megatron's sequence parallelism).
"""

from __future__ import annotations

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.megatron_recompute_modules import check_recompute_modules
from llmperf_hook.frameworks.pipeline_layout import check_layout, layout_num_stages
from llmperf_hook.frameworks.training_config import TrainingConfig

_MEGATRON = ("megatron", "megatron-deepspeed")


def _at(cfg: TrainingConfig, key: str, value: object) -> str:
    """`4 (argv --tensor-model-parallel-size)`: a value with its origin."""
    source = cfg.sources.get(key)
    return f"{value} ({source})" if source else str(value)


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _check_positive(cfg: TrainingConfig) -> None:
    p, b = cfg.parallel, cfg.batch
    for key, value in (("tp", p.tp), ("pp", p.pp), ("cp", p.cp), ("dp", p.dp), ("ep", p.ep), ("vpp", p.vpp),
                       ("etp", p.etp), ("micro_batch_size", b.micro_batch_size), ("global_batch_size", b.global_batch_size),
                       ("num_layers", cfg.model.num_layers), ("num_attention_heads", cfg.model.num_attention_heads)):
        if value < 1:
            raise ConfigError(f"{key} {_at(cfg, key, value)} must be at least 1.")


def _check_world(cfg: TrainingConfig) -> None:
    p = cfg.parallel
    model_ranks = p.tp * p.pp * p.cp
    if cfg.world_size % model_ranks != 0 or p.tp * p.pp * p.cp * p.dp != cfg.world_size:
        raise ConfigError(
            f"world size {_at(cfg, 'world_size', cfg.world_size)} is not divisible by tensor-model-parallel-size "
            f"{_at(cfg, 'tp', p.tp)} x pipeline-model-parallel-size {_at(cfg, 'pp', p.pp)} x context-parallel-size "
            f"{_at(cfg, 'cp', p.cp)} = {model_ranks} (Megatron requires world % (TP*PP*CP) == 0; DP = world / (TP*PP*CP)). "
            f"TP*PP*CP must divide {cfg.world_size}: one of {_divisors(cfg.world_size)}."
        )


def _check_heads(cfg: TrainingConfig) -> None:
    m, tp = cfg.model, cfg.parallel.tp
    if m.num_attention_heads % tp != 0:
        valid = ", ".join(str(d) for d in range(1, m.num_attention_heads + 1) if m.num_attention_heads % d == 0 and cfg.world_size % d == 0)
        raise ConfigError(
            f"tensor-model-parallel-size {_at(cfg, 'tp', tp)} does not divide num-attention-heads "
            f"{_at(cfg, 'num_attention_heads', m.num_attention_heads)} (Megatron requires heads % TP == 0). "
            f"Valid TP for this model and world size: {valid}. Change --tensor-model-parallel-size."
        )
    groups = m.num_query_groups
    if groups % tp != 0 and tp % groups != 0:
        raise ConfigError(
            f"num-query-groups {_at(cfg, 'num_query_groups', groups)} must be a multiple or a divisor of "
            f"tensor-model-parallel-size {_at(cfg, 'tp', tp)} (Megatron TransformerConfig). "
            f"Use a TP among {_divisors(groups)} or a multiple of {groups}."
        )
    if groups > 0 and m.num_attention_heads % groups:
        # Megatron-Core's attention views the fused QKV output as groups x (heads/groups + 2) heads; TE's
        # DotProductAttention asserts 'The number of attention heads must be divisible by the number of GQA groups!'
        raise ConfigError(
            f"num-attention-heads {_at(cfg, 'num_attention_heads', m.num_attention_heads)} is not a multiple of "
            f"num-query-groups {_at(cfg, 'num_query_groups', groups)}: each key/value head serves heads / groups query "
            f"heads (Transformer Engine asserts heads % groups == 0). Use a group count among "
            f"{_divisors(m.num_attention_heads)}."
        )


def _check_pipeline_layers(cfg: TrainingConfig) -> None:
    p, layers = cfg.parallel, cfg.model.num_layers
    extra = int(p.account_for_embedding_in_pipeline_split) + int(p.account_for_loss_in_pipeline_split)
    first, last = p.decoder_first_pipeline_num_layers, p.decoder_last_pipeline_num_layers
    if p.pipeline_layout:
        check_layout(p.pipeline_layout, p.pp, layers, cfg.model.mtp_num_layers)
        if layout_num_stages(p.pipeline_layout) != p.pp * p.vpp:
            raise ConfigError(f"--pipeline-model-parallel-layout {p.pipeline_layout!r} has "
                              f"{layout_num_stages(p.pipeline_layout)} stages, but the layout is PP {_at(cfg, 'pp', p.pp)} x "
                              f"VPP {_at(cfg, 'vpp', p.vpp)}: Megatron derives the virtual stages from the layout. Keep them "
                              "in step.")
        return
    if first is None and last is None:
        total = layers + extra
        if total % p.pp != 0 and cfg.deepspeed_pipeline_engine and p.vpp == 1 and not extra:
            return  # DeepSpeed's PipelineModule splits any layer count (graph/stages.deepspeed_pipeline_partition)
        if total % p.pp != 0:
            valid = ", ".join(str(d) for d in range(1, total + 1) if total % d == 0 and cfg.world_size % d == 0)
            raise ConfigError(
                f"num-layers {_at(cfg, 'num_layers', layers)}{f' (+{extra} for embedding/loss)' if extra else ''} is not divisible by "
                f"pipeline-model-parallel-size {_at(cfg, 'pp', p.pp)} (Megatron requires layers % PP == 0 without "
                f"--decoder-first/last-pipeline-num-layers). Valid PP: {valid}; or set the first/last stage sizes."
            )
        if (total // p.pp) % p.vpp != 0:
            raise ConfigError(
                f"{total // p.pp} layers per pipeline rank are not divisible by {p.vpp} virtual stages "
                f"({_at(cfg, 'vpp', p.vpp)}); Megatron requires (layers / PP) % VPP == 0. "
                f"Use a VPP among {_divisors(total // p.pp)}."
            )
        return
    _check_uneven(cfg, layers, first, last)


def _check_uneven(cfg: TrainingConfig, layers: int, first: int | None, last: int | None) -> None:
    """transformer_config.py 'Uneven PP': first/last stages take their layers, the middle split evenly."""
    p = cfg.parallel
    middle_layers, middle_stages = layers, p.pp
    for key, count in (("decoder_first_pipeline_num_layers", first), ("decoder_last_pipeline_num_layers", last)):
        if count is None:
            continue
        if count <= 0 or count % p.vpp != 0:
            raise ConfigError(f"{key.replace('_', '-')} {_at(cfg, key, count)} must be positive and divisible by the virtual pipeline size {p.vpp}.")
        middle_layers, middle_stages = middle_layers - count, middle_stages - 1
    if middle_layers < 0 or bool(middle_layers) != bool(middle_stages) or (middle_stages and (middle_layers % middle_stages or (middle_layers // middle_stages) % p.vpp)):
        raise ConfigError(
            f"uneven pipeline split does not add up: {layers} layers, first stage {first}, last stage {last}, "
            f"leaves {middle_layers} layers for {middle_stages} middle stages (with VPP {p.vpp}); Megatron requires "
            "the remaining layers to split evenly over the middle stages and their virtual chunks."
        )


def _check_batch(cfg: TrainingConfig) -> None:
    p, b = cfg.parallel, cfg.batch
    per_step = b.micro_batch_size * p.dp
    if b.global_batch_size % per_step != 0 or b.num_microbatches * per_step != b.global_batch_size:
        ok = [g for g in range(per_step, 8 * per_step + 1, per_step)][:4]
        raise ConfigError(
            f"global batch size {_at(cfg, 'global_batch_size', b.global_batch_size)} is not divisible by micro batch "
            f"size {_at(cfg, 'micro_batch_size', b.micro_batch_size)} x data parallel size {p.dp} = {per_step} "
            f"(Megatron: GBS % (MBS*DP) == 0; DeepSpeed: train_batch_size == micro * grad_acc * DP). "
            f"Valid global batch sizes: multiples of {per_step}, e.g. {', '.join(map(str, ok))}."
        )
    if p.vpp > 1 and cfg.framework in _MEGATRON:
        _check_microbatch_groups(cfg)


def _check_pipeline_kinds(cfg: TrainingConfig) -> None:
    p, seq = cfg.parallel, cfg.model.seq_length
    if p.vpp > 1 and p.pp < 2:
        raise ConfigError(
            f"virtual pipeline stages {_at(cfg, 'vpp', p.vpp)} need pipeline-model-parallel-size > 1, got "
            f"{_at(cfg, 'pp', p.pp)} (Megatron: interleaved schedule needs PP > 1). Drop the virtual-stage flag or raise PP."
        )
    _check_interleaving_pp2(cfg)
    if p.cp > 1 and cfg.framework == "megatron" and cfg.transformer_impl == "local":
        raise ConfigError(
            f"context-parallel-size {_at(cfg, 'cp', p.cp)} with --transformer-impl local: Megatron's local attention "
            "asserts 'Context parallelism is only supported by TEDotProductAttention!' "
            "(megatron/core/transformer/dot_product_attention.py). Use --transformer-impl transformer_engine or CP 1.")
    if p.cp > 1 and seq % (2 * p.cp) != 0:
        raise ConfigError(
            f"seq-length {_at(cfg, 'seq_length', seq)} is not a multiple of 2 x context-parallel-size "
            f"{_at(cfg, 'cp', p.cp)} (Megatron: seq % (2*CP) == 0 for load-balanced causal attention)."
        )
    if p.sequence_parallel and p.tp > 1 and (seq // p.cp) % p.tp != 0:
        raise ConfigError(
            f"--sequence-parallel splits each rank's sequence (seq-length {_at(cfg, 'seq_length', seq)} / "
            f"context-parallel-size {p.cp} = {seq // p.cp} tokens) over tensor-model-parallel-size "
            f"{_at(cfg, 'tp', p.tp)}, which does not divide it. Megatron-LM's and Megatron-DeepSpeed's validate_args "
            "accept this; the job stops at its first forward on the assertion 'First dimension of the tensor should be "
            "divisible by tensor parallel size' (megatron/core/tensor_parallel/mappings.py _split_along_first_dim, in "
            "both). Use a seq-length that is a multiple of TP x CP, another TP, or drop --sequence-parallel.")
    if cfg.optimizer.tp_comm_overlap and not p.sequence_parallel:
        raise ConfigError("--tp-comm-overlap needs --sequence-parallel (Megatron: TP communication/GEMM overlap only "
                          f"with sequence parallelism), and sequence parallelism needs TP > 1 (TP is {_at(cfg, 'tp', p.tp)}).")


def _check_interleaving_pp2(cfg: TrainingConfig) -> None:
    """arguments.py validate_args: with virtual stages and without p2p overlap (--no-overlap-p2p-communication;
    Megatron-DeepSpeed has no overlap) PP must exceed 2, so two ranks never exchange several sends per batch."""
    p = cfg.parallel
    no_overlap = cfg.framework == "megatron-deepspeed" or (cfg.framework == "megatron" and not p.overlap_p2p_comm)
    if p.vpp > 1 and p.pp == 2 and no_overlap:
        why = ("Megatron-DeepSpeed's interleaved schedule" if cfg.framework == "megatron-deepspeed"
               else "with --no-overlap-p2p-communication, Megatron's interleaved schedule")
        raise ConfigError(
            f"virtual pipeline stages {_at(cfg, 'vpp', p.vpp)} with pipeline-model-parallel-size {_at(cfg, 'pp', p.pp)}: "
            f"{why} needs PP > 2 (arguments.py validate_args asserts it). Use PP > 2, drop the virtual stages"
            f"{'' if cfg.framework == 'megatron-deepspeed' else ', or drop --no-overlap-p2p-communication'}.")


def _check_experts(cfg: TrainingConfig) -> None:
    p, experts = cfg.parallel, cfg.model.num_experts
    if experts > 0 and p.tp > 1 and not p.sequence_parallel and cfg.framework == "megatron":
        raise ConfigError(
            f"MoE ({_at(cfg, 'num_experts', experts)} experts) with tensor-model-parallel-size {_at(cfg, 'tp', p.tp)} "
            "needs --sequence-parallel: Megatron's MoE layer raises ValueError at the first training step otherwise "
            "(megatron/core/transformer/moe/moe_layer.py). Add --sequence-parallel or use TP 1."
        )
    if p.ep > 1 and experts <= 0:
        raise ConfigError(f"expert-model-parallel-size {_at(cfg, 'ep', p.ep)} needs --num-experts (Megatron: "
                          "num_experts must be set to use expert model parallelism).")
    if experts > 0 and experts % p.ep != 0 and cfg.framework == "megatron-deepspeed":
        raise ConfigError(
            f"num-experts {_at(cfg, 'num_experts', experts)} is not a multiple of the expert-parallel size "
            f"{_at(cfg, 'ep', p.ep)} (DeepSpeed's MoE layer asserts 'Number of experts should be divisible by expert "
            f"parallel size', deepspeed/moe/layer.py). Use an expert-parallel size among {_divisors(experts)}.")
    if experts > 0 and experts % p.ep != 0:
        raise ConfigError(
            f"num-experts {_at(cfg, 'num_experts', experts)} is not a multiple of expert-model-parallel-size "
            f"{_at(cfg, 'ep', p.ep)} (Megatron requires experts % EP == 0). Valid EP: {_divisors(experts)}."
        )
    pattern, layers = cfg.model.moe_layer_pattern, cfg.model.num_layers
    if experts > 0 and pattern and len(pattern) != layers:
        raise ConfigError(f"the --moe-layer-freq pattern has {len(pattern)} entries but the model has {layers} layers "
                          f"({_at(cfg, 'num_layers', layers)}); Megatron asserts one entry per layer (gpt_layer_specs.py).")
    if experts > 0 and cfg.framework == "megatron":
        if cfg.model.moe_dispatch.overlap_ep_comm:
            _check_ep_overlap(cfg)
        _check_flex_group(cfg)
    if cfg.framework == "megatron-deepspeed":
        return _check_deepspeed_expert_groups(cfg)
    expert_ranks = p.etp * p.ep * p.pp
    if cfg.world_size % expert_ranks != 0:
        raise ConfigError(
            f"world size {_at(cfg, 'world_size', cfg.world_size)} is not divisible by expert-tensor-parallel-size "
            f"{_at(cfg, 'etp', p.etp)} x expert-model-parallel-size {_at(cfg, 'ep', p.ep)} x pipeline-model-parallel-size "
            f"{p.pp} = {expert_ranks} (Megatron parallel_state: world % (ETP*EP*PP) == 0). Change EP or ETP."
        )


def _check_deepspeed_expert_groups(cfg: TrainingConfig) -> None:
    """Megatron-DeepSpeed's MoE layers are DeepSpeed's (deepspeed/moe/layer.py MoE._create_process_groups), whose
    expert groups split each pipeline stage's ranks: deepspeed/utils/groups.py _create_expert_and_data_parallel
    `_ensure_divisibility(world_size // pp_size, ep_size)` ('N is not divisible by EP'); with
    --enable-expert-tensor-parallelism (at any TP: Megatron-DeepSpeed always gives DeepSpeed an mpu)
    _create_expert_data_and_model_parallel asserts `_ensure_divisibility(dp_world_size, expert_parallel_size_)`
    instead, the mpu's DP (world / (TP x PP x Ulysses SP), megatron/core/parallel_state.py)."""
    p = cfg.parallel
    _check_deepspeed_moe_sequence_parallel(cfg)
    if p.etp_follows_tp and p.dp % p.ep:
        raise ConfigError(
            f"data-parallel size {p.dp} is not divisible by the expert-parallel size {_at(cfg, 'ep', p.ep)}: with "
            f"--enable-expert-tensor-parallelism DeepSpeed asserts '{p.dp} is not divisible by {p.ep}' "
            "(deepspeed/utils/groups.py _create_expert_data_and_model_parallel). Use an expert-parallel size among "
            f"{_divisors(p.dp)}, or drop --enable-expert-tensor-parallelism.")
    per_stage = cfg.world_size // p.pp
    if per_stage % p.ep:
        raise ConfigError(
            f"world size {_at(cfg, 'world_size', cfg.world_size)} / pipeline-model-parallel-size "
            f"{_at(cfg, 'pp', p.pp)} = {per_stage} ranks per stage is not divisible by the expert-parallel size {_at(cfg, 'ep', p.ep)}: "
            f"DeepSpeed's MoE builds its expert groups within a stage and asserts '{per_stage} is not divisible by "
            f"{p.ep}' (deepspeed/utils/groups.py _create_expert_and_data_parallel). Use an expert-parallel size among "
            f"{_divisors(per_stage)}.")


def _check_deepspeed_moe_sequence_parallel(cfg: TrainingConfig) -> None:
    """Megatron-DeepSpeed's --sequence-parallel with DeepSpeed's MoE at TP > 1 (neither asserts against it): the
    MoE input is each TP rank's own sequence shard, but MOELayer.forward (deepspeed/moe/sharded_moe.py, 0.19.8)
    takes the TP ranks' E x C slots as copies, keeps 1/TP of them (drop_tokens) and fills the rest from the other
    ranks (gather_tokens). Without --enable-expert-tensor-parallelism the experts' RowParallelLinear still reads
    config.sequence_parallel and reduce-scatters their output over TP (megatron/core/tensor_parallel/layers.py
    RowParallelLinear.forward, before its is_expert_without_slicing branch): 'First dimension of the tensor should be
    divisible by tensor parallel size' or a shape error in MOELayer.forward's view at the first step. With it the
    layer runs, but each rank combines slots the other TP ranks filled with their own tokens."""
    p = cfg.parallel
    if cfg.model.num_experts <= 0 or not p.sequence_parallel or p.tp <= 1:
        return
    if p.etp_follows_tp:
        why = ("the layer runs, but gather_tokens fills this rank's E x C slots from the other TP ranks' tokens "
               "(deepspeed/moe/sharded_moe.py MOELayer.forward, mappings.py): each rank's output mixes in other TP "
               "ranks' tokens")
    else:
        why = ("the experts' RowParallelLinear still reduce-scatters their output over TP under "
               "--sequence-parallel (Megatron-DeepSpeed megatron/core/tensor_parallel/layers.py: "
               "reduce_scatter_to_sequence_parallel_region before the is_expert_without_slicing branch), which breaks "
               "MOELayer.forward's shapes at the first step")
    raise ConfigError(
        f"--sequence-parallel with DeepSpeed's MoE ({_at(cfg, 'num_experts', cfg.model.num_experts)} experts) at "
        f"tensor-model-parallel-size {_at(cfg, 'tp', p.tp)}: each TP rank holds its own sequence shard, but "
        f"DeepSpeed's MoE layer takes the TP ranks' tokens as copies of each other; {why}. Drop --sequence-parallel.")


def virtual_stages_given(cfg: TrainingConfig) -> bool:
    """Megatron's virtual_pipeline_model_parallel_size is set (not None): more than one virtual stage, from the
    virtual-stage flags or a --pipeline-model-parallel-layout of more stages than PP (arguments.py derives the size
    from either and resets a size of 1 to None; frameworks/megatron.py _vpp does the same)."""
    return cfg.parallel.vpp > 1


def _check_ep_overlap(cfg: TrainingConfig) -> None:
    """--overlap-moe-expert-parallel-comm: the layout-dependent asserts of TransformerConfig.__post_init__ (EP > 1,
    virtual stages when PP > 1, no full recomputation / recompute method; frameworks/megatron_shape.py checks the
    others on the command), so that a re-laid-out configuration (tune) obeys them too."""
    p, r = cfg.parallel, cfg.recompute
    broken = [
        (p.ep <= 1, f"expert-model-parallel-size {_at(cfg, 'ep', p.ep)}",
         "'overlap_moe_expert_parallel_comm is only supported with expert model parallelism'",
         "set --expert-model-parallel-size > 1"),
        (p.pp > 1 and not virtual_stages_given(cfg), f"pipeline-model-parallel-size {_at(cfg, 'pp', p.pp)} without "
         "virtual stages", "'virtual_pipeline_model_parallel_size must be specified when pipeline_model_parallel_size "
         "> 1'", "add --num-layers-per-virtual-pipeline-stage or use PP 1"),
        (r.granularity == "full" or r.method is not None, f"recompute {_at(cfg, 'recompute', r.granularity)}, method "
         f"{_at(cfg, 'recompute_method', r.method)}", "'disable full recomputation when enabling "
         "overlap_moe_expert_parallel_comm'",
         "drop the full recompute flags (selective recompute is allowed)"),
    ]
    for bad, what, quote, fix in broken:
        if bad:
            raise ConfigError(f"--overlap-moe-expert-parallel-comm with {what}: Megatron asserts {quote} "
                              f"(TransformerConfig.__post_init__). To keep the overlap, {fix}.")


def _check_flex_group(cfg: TrainingConfig) -> None:
    """MoEFlexTokenDispatcher.__init__: DeepEP and NCCL EP assert 'requires TPxEP > 1' (the ETP x EP group)."""
    d, p = cfg.model.moe_dispatch, cfg.parallel
    if d.token_dispatcher == "flex" and d.flex_backend in ("deepep", "ncclep") and p.etp * p.ep <= 1:
        raise ConfigError(
            f"--moe-token-dispatcher-type flex with backend {d.flex_backend} at expert-tensor-parallel-size "
            f"{_at(cfg, 'etp', p.etp)} x expert-model-parallel-size {_at(cfg, 'ep', p.ep)} = 1: Megatron asserts "
            f"'{'DeepEP' if d.flex_backend == 'deepep' else 'NCCL EP'} dispatcher requires TPxEP > 1'. Set "
            "--expert-model-parallel-size > 1, "
            "or another --moe-token-dispatcher-type.")


def _check_microbatch_groups(cfg: TrainingConfig) -> None:
    """Megatron's interleaved schedule (core/pipeline_parallel/schedules.py): the group of contiguous micro-batches
    per model chunk, N (--microbatch-group-size-per-virtual-pipeline-stage, default PP), lies in [PP, M], and the
    last group, M % N, is empty or at least PP. With the default N = PP this is M % PP == 0."""
    p, m = cfg.parallel, cfg.batch.num_microbatches
    group = p.vpp_group
    how = f"--microbatch-group-size-per-virtual-pipeline-stage {group}"
    counts = f"{m} micro-batches (GBS {cfg.batch.global_batch_size} / (MBS {cfg.batch.micro_batch_size} x DP {p.dp}))"
    if not p.microbatch_group_size and m % p.pp:
        raise ConfigError(
            f"the interleaved schedule needs the number of micro-batches ({m} = GBS {cfg.batch.global_batch_size} / "
            f"(MBS {cfg.batch.micro_batch_size} x DP {p.dp})) to be a multiple of pipeline-model-parallel-size {p.pp} "
            "(Megatron schedules.py, groups of PP micro-batches per model chunk). Change --global-batch-size or the "
            "virtual pipeline size, or set --microbatch-group-size-per-virtual-pipeline-stage.")
    if not p.pp <= group <= m:
        raise ConfigError(
            f"the interleaved schedule runs {how} micro-batches per model chunk, which must lie between PP {p.pp} and the "
            f"{counts} (Megatron schedules.py). Change --global-batch-size or the group size.")
    if 0 < m % group < p.pp:
        raise ConfigError(
            f"the interleaved schedule with {how} leaves a last group of {m % group} of the {counts}; Megatron needs it "
            f"empty or at least PP {p.pp} (schedules.py). Use a multiple of {group} micro-batches or another group size.")


def _check_recompute(cfg: TrainingConfig) -> None:
    r, p = cfg.recompute, cfg.parallel
    per_rank = cfg.model.num_layers // p.pp
    if r.granularity == "selective" and (r.method is not None or r.num_layers is not None):
        raise ConfigError("--recompute-granularity selective takes neither --recompute-method nor --recompute-num-layers "
                          f"(Megatron), got method {_at(cfg, 'recompute_method', r.method)}, num-layers {r.num_layers}.")
    if r.granularity == "full" and (r.method is None or r.num_layers is None):
        raise ConfigError("--recompute-granularity full needs --recompute-method uniform|block and --recompute-num-layers "
                          f"between 1 and the layers per pipeline rank ({per_rank}) (Megatron TransformerConfig).")
    if r.granularity == "full" and (r.num_layers or 0) < 1:
        raise ConfigError(f"--recompute-num-layers {_at(cfg, 'recompute_num_layers', r.num_layers)} must be at least 1 "
                          "under full recompute: the uniform method's loop never advances past the first layer "
                          "(transformer_block.py _checkpointed_forward). Give a positive count.")
    # More block layers than a chunk holds recompute all of them (megatron/core/recompute.py): no upper bound.
    check_recompute_modules(cfg)
    if r.distribute_saved_activations:
        _check_distributed_saved(cfg)
    if r.cpu_offloading and (p.pp > 1 or r.granularity != "none"):
        raise ConfigError(
            f"--cpu-offloading (activations to the host) with pipeline-model-parallel-size {_at(cfg, 'pp', p.pp)} and "
            f"recompute {_at(cfg, 'recompute', r.granularity)}: Megatron's TransformerConfig refuses CPU offloading with "
            "pipeline parallelism and with activation recomputation. Drop the offloading or use PP 1 without recompute.")


def _check_distributed_saved(cfg: TrainingConfig) -> None:
    """--distribute-saved-activations: validate_args asserts TP > 1 and full granularity with a method;
    TransformerConfig raises when sequence parallelism is on."""
    r, p = cfg.recompute, cfg.parallel
    if p.tp < 2 or r.granularity != "full" or r.method is None or p.sequence_parallel:
        raise ConfigError(
            "--distribute-saved-activations splits full-recompute checkpoints over the tensor-parallel group: Megatron "
            "requires tensor-model-parallel-size > 1, --recompute-granularity full with a --recompute-method, and no "
            f"--sequence-parallel (arguments.py, TransformerConfig); got TP {_at(cfg, 'tp', p.tp)}, recompute "
            f"{r.granularity} (method {r.method}), sequence parallel {p.sequence_parallel}. Drop the flag or meet the rule.")


def _check_ulysses(cfg: TrainingConfig) -> None:
    """Megatron-DeepSpeed's sequence parallelism is DeepSpeed-Ulysses (--ds-sequence-parallel-size, our CP): its
    initialize.py raises when Megatron's --sequence-parallel is on as well (kept only at TP > 1). Its ParallelAttention
    asserts num_attention_heads % sp == 0 (megatron/model/transformer.py), and DeepSpeed's single_all_to_all
    (deepspeed/sequence/layer.py) scatters one tensor-parallel rank's heads over the sp ranks: evenly, or unevenly
    when there are more heads than ranks ('Number of heads ... must be larger than sequence parallel size'). Its
    ParallelAttention.forward asserts projection_size == kv_projection_size under Ulysses (transformer.py, HEAD of
    deepspeedai/ and microsoft/Megatron-DeepSpeed): grouped-query attention does not run with it."""
    p = cfg.parallel
    if cfg.framework != "megatron-deepspeed" or p.cp == 1:
        return
    heads = cfg.model.num_attention_heads
    local = heads // p.tp
    if heads % p.cp or (local % p.cp and local <= p.cp):
        raise ConfigError(
            f"--ds-sequence-parallel-size {_at(cfg, 'cp', p.cp)} with {_at(cfg, 'num_attention_heads', heads)} heads "
            f"and tensor-model-parallel-size {_at(cfg, 'tp', p.tp)} ({local} heads per tensor-parallel rank): "
            "Megatron-DeepSpeed asserts num_attention_heads % ds_sequence_parallel_size == 0 and DeepSpeed-Ulysses "
            "scatters each tensor-parallel rank's heads over the sequence-parallel ranks, so they must divide or "
            "outnumber them. Lower --ds-sequence-parallel-size or the tensor-parallel size.")
    groups = cfg.model.num_query_groups
    if groups != heads:
        raise ConfigError(
            f"--ds-sequence-parallel-size {_at(cfg, 'cp', p.cp)} with grouped-query attention "
            f"({_at(cfg, 'num_query_groups', groups)} key/value heads for {heads} query heads): Megatron-DeepSpeed's "
            "ParallelAttention asserts projection_size == kv_projection_size when DeepSpeed-Ulysses is on, so the "
            "first training step fails. Drop --ds-sequence-parallel-size: this model runs without Ulysses.")
    if p.sequence_parallel:
        raise ConfigError(
            f"--ds-sequence-parallel-size {_at(cfg, 'cp', p.cp)} with --sequence-parallel (tensor-model-parallel-size "
            f"{_at(cfg, 'tp', p.tp)}): Megatron-DeepSpeed's initialize raises 'sequence_parallel_size > 1 enables "
            "DeepSpeed's sequence parallel, which is not compatible with Megatron-LM's sequence parallel'. Drop "
            "--sequence-parallel or --ds-sequence-parallel-size.")


def _check_param_gather_with_step(cfg: TrainingConfig) -> None:
    """Megatron validate_args (core_r0.9 to HEAD): --overlap-param-gather-with-optimizer-step asserts the distributed
    optimizer, --overlap-param-gather and the interleaved schedule; its no-distributed-checkpointing assert is read from
    the flags (megatron_rules._check_param_gather_checkpoints), as no layout tune changes moves it."""
    o, p = cfg.optimizer, cfg.parallel
    missing = [need for ok, need in ((o.distributed_optimizer, "--use-distributed-optimizer"),
                                     (o.overlap_param_gather, "--overlap-param-gather"),
                                     (p.vpp > 1, "an interleaved pipeline (virtual stages: --num-virtual-stages-per-"
                                                 f"pipeline-rank > 1; now {_at(cfg, 'vpp', p.vpp)})")) if not ok]
    if missing:
        raise ConfigError("--overlap-param-gather-with-optimizer-step needs " + ", ".join(missing) + " (Megatron "
                          "validate_args asserts each). Add them or drop --overlap-param-gather-with-optimizer-step.")


def _check_optimizer(cfg: TrainingConfig) -> None:
    o = cfg.optimizer
    if cfg.framework in _MEGATRON and o.overlap_param_gather and not (o.distributed_optimizer and o.overlap_grad_reduce):
        raise ConfigError("--overlap-param-gather needs --use-distributed-optimizer and --overlap-grad-reduce (Megatron "
                          f"validate_args); distributed optimizer {o.distributed_optimizer}, overlap-grad-reduce {o.overlap_grad_reduce}.")
    if cfg.framework in _MEGATRON and o.overlap_param_gather_with_optimizer_step:
        _check_param_gather_with_step(cfg)
    if o.fsdp != "none":
        _check_fsdp_layout(cfg)
    if not 0 <= o.zero_stage <= 3:
        raise ConfigError(f"ZeRO stage {_at(cfg, 'zero_stage', o.zero_stage)} must be 0, 1, 2 or 3.")
    if cfg.framework == "megatron-deepspeed" and cfg.model.num_experts > 0 and o.zero_stage == 3:
        raise ConfigError(
            f"ZeRO stage {_at(cfg, 'zero_stage', o.zero_stage)} with DeepSpeed-MoE ({cfg.model.num_experts} experts, "
            f"{cfg.sources.get('num_experts')}): DeepSpeed's engine raises 'MoE not supported with Stage 3' (0.19.8: 'Native "
            "DeepSpeed MoE is not supported with ZeRO Stage 3'). Use ZeRO stage 1 or 2.")
    if (cfg.framework == "megatron-deepspeed" and cfg.model.num_experts > 0 and o.zero_stage == 2
            and not o.contiguous_gradients and o.offload_optimizer == "none"):
        raise ConfigError(
            f"ZeRO stage 2 with DeepSpeed-MoE ({cfg.model.num_experts} experts) and contiguous_gradients false "
            f"({cfg.sources.get('contiguous_gradients', 'ds_config')}): DeepSpeed's ZeRO optimizer asserts 'Contiguous "
            "Gradients in ZeRO Stage 2 must be set to True for MoE' (stage_1_and_2.py _configure_moe_settings; an "
            "optimizer offload turns it on). Set zero_optimization.contiguous_gradients true.")
    if cfg.deepspeed_pipeline_engine and o.zero_stage >= 2:
        raise ConfigError(
            f"ZeRO stage {_at(cfg, 'zero_stage', o.zero_stage)} with DeepSpeed's pipeline engine: DeepSpeed rejects it "
            "('ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism'). Use ZeRO 0/1, or (Megatron-DeepSpeed) "
            "--no-pipeline-parallel with --pipeline-model-parallel-size 1."
        )


def _check_fsdp_layout(cfg: TrainingConfig) -> None:
    """FSDP shards the optimizer states (modelled as the distributed optimizer); torch FSDP2 also refuses pipeline
    and expert parallelism (arguments.py validate_args)."""
    p, o = cfg.parallel, cfg.optimizer
    if not o.distributed_optimizer:
        flag = "--use-torch-fsdp2" if o.fsdp == "torch_fsdp2" else "--use-megatron-fsdp"
        raise ConfigError(f"{flag} shards the optimizer states: a layout without the distributed optimizer cannot "
                          "keep FSDP.")
    if o.fsdp == "torch_fsdp2" and (p.pp > 1 or p.ep > 1):
        raise ConfigError(f"--use-torch-fsdp2 with pipeline-model-parallel-size {_at(cfg, 'pp', p.pp)} and "
                          f"expert-model-parallel-size {_at(cfg, 'ep', p.ep)}: Megatron's validate_args refuses FSDP2 with "
                          "pipeline or expert parallelism. Use PP 1 and EP 1, or drop --use-torch-fsdp2.")


def validate_config(cfg: TrainingConfig) -> None:
    """Raise ConfigError for a layout the framework itself would reject; return None otherwise. Pure and fast."""
    _check_positive(cfg)
    _check_world(cfg)
    _check_heads(cfg)
    _check_pipeline_kinds(cfg)
    _check_pipeline_layers(cfg)
    _check_batch(cfg)
    _check_experts(cfg)
    if cfg.framework in _MEGATRON:
        _check_recompute(cfg)
    _check_ulysses(cfg)
    _check_optimizer(cfg)

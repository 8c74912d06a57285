"""The layout rules of a candidate table as named boolean masks (True = the framework refuses that candidate).

Each mask is a vectorised form of a check that Megatron-LM, Megatron-DeepSpeed or DeepSpeed makes (its source is cited
at the mask) and that frameworks/validation.py makes per configuration for explain; tests/tune's mask_disagreements
holds the two to the same answer. candidates.py builds the table; search.py counts each rule by name so `tune` can
say why candidates were pruned. Rules that only the command's script words bring in are in tune/command_rules.py.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.tune.candidate import RECOMPUTE_CODES, fixed_padded_vocab, split_layers

MEGATRON_FRAMEWORKS = ("megatron", "megatron-deepspeed")


def rule_masks(cfg: TrainingConfig, cols: Mapping[str, np.ndarray],
               world_size: int | None = None) -> dict[str, np.ndarray]:
    """Named layout rules (True = violates), Megatron-LM `arguments.py` / `parallel_state.py` divisibility checks;
    `world_size`: the GPUs the job starts with where not the config's (an elastic minimum: tune/elastic.py)."""
    world = cfg.world_size if world_size is None else world_size
    m = cfg.model
    tp, pp, vpp, cp, mbs = cols["tp"], cols["pp"], cols["vpp"], cols["cp"], cols["mbs"]
    model_parallel = tp * pp * cp
    dp = np.maximum(world // np.maximum(model_parallel, 1), 1)
    p = cfg.parallel
    uneven = p.decoder_first_pipeline_num_layers or p.decoder_last_pipeline_num_layers
    total = split_layers(cfg)  # Megatron counts the embedding / loss as a layer if asked to (--account-for-...-split)
    even = (total % pp == 0) & ((total // pp) % vpp == 0)
    # DeepSpeed's PipelineEngine splits any layer count (graph/stages.deepspeed_pipeline_partition); it runs for
    # every Megatron-DeepSpeed candidate with PP > 1 (candidate._pipeline_engine) and never interleaves.
    engine = (pp > 1) if cfg.framework == "megatron-deepspeed" else np.full(pp.shape, cfg.deepspeed_pipeline_engine)
    # --pipeline-model-parallel-layout places every layer itself (the command's PP and VPP only, rule below), so
    # Megatron's even split is not asked of it: Et|(tt|)*6mL runs 13 layers + MTP over PP 2 x VPP 4.
    own_layout = bool(p.pipeline_layout) & (pp == p.pp) & (vpp == p.vpp)
    layers_ok = even | ((pp == p.pp) & bool(uneven)) | (engine & (vpp == 1) & (total == m.num_layers)) | own_layout
    return {
        "world % (tp*pp*cp) != 0": world % model_parallel != 0,
        "num_attention_heads % tp != 0": m.num_attention_heads % tp != 0,
        "num_query_groups neither a multiple nor a divisor of tp": (m.num_query_groups % tp != 0) & (tp % m.num_query_groups != 0),
        "virtual pipeline needs pp > 1": (vpp > 1) & (pp == 1),
        "layers do not split evenly over pp (and vpp)": ~layers_ok,
        "global_batch % (micro_batch*dp) != 0": cfg.batch.global_batch_size % (mbs * dp) != 0,
        # deepspeed/runtime/pipe/engine.py PipelineEngine.__init__ asserts 'ZeRO-2 and ZeRO-3 are incompatible with
        # pipeline parallelism'; Megatron-DeepSpeed at PP 1 runs them without the engine (--no-pipeline-parallel).
        "ZeRO-2/3 with DeepSpeed's pipeline engine (pp > 1)": engine & (cols["zero"] >= 2),
        **_interleaving_masks(cfg, vpp, pp, cfg.batch.global_batch_size // np.maximum(mbs * dp, 1)),
        **_uneven_stage_masks(cfg, total, pp, vpp),
        **_kept_flag_masks(cfg, cols, world),
        "seq_length % (2*cp) != 0": (cp > 1) & (m.seq_length % (2 * cp) != 0),
        # tensor_parallel/mappings.py _split_along_first_dim asserts the rank's sequence divides by TP under SP
        "sequence parallel needs (seq_length / cp) % tp == 0": (cols["sp"] > 0) & ((m.seq_length // cp) % tp != 0),
        # --pipeline-model-parallel-layout names every stage's layers: it fixes PP and the virtual stages
        # (arguments.py: VPP = its stages // PP); the rewritten command keeps it, so only the command's (pp, vpp).
        "custom pipeline layout fixes pp and vpp": np.full(pp.shape, bool(p.pipeline_layout)) & (
            (pp != p.pp) | (vpp != p.vpp)),
        **_param_gather_masks(cfg, cols),
        **_expert_masks(cfg, cols, world),
        **_ulysses_masks(cfg, cols),
        **_fixed_vocab_masks(cfg, cols),
    }


def _kept_flag_masks(cfg: TrainingConfig, cols: Mapping[str, np.ndarray], world: int) -> dict[str, np.ndarray]:
    """Rules a flag of the command brings in, which --apply keeps (validation.py refuses the same layouts): only
    where the command gives the flag, so no empty rule is named."""
    o, sp, pp, cp = cfg.optimizer, cols["sp"], cols["pp"], cols["cp"]
    masks: dict[str, np.ndarray] = {}
    if o.tp_comm_overlap:  # TP collectives overlap the GEMMs only under sequence parallelism
        masks["--tp-comm-overlap needs sequence parallel (tp > 1)"] = sp == 0
    if cfg.framework == "megatron" and cfg.transformer_impl == "local":  # only TEDotProductAttention splits CP
        masks["--transformer-impl local refuses cp > 1"] = cp > 1
    te_unfused = cfg.transformer_impl == "transformer_engine" and cfg.attention_backend == "unfused"
    if cfg.framework == "megatron" and te_unfused:  # TE disables UnfusedDotProductAttention under CP
        masks["--attention-backend unfused refuses cp > 1 under Transformer Engine"] = cp > 1
    if cfg.recompute.cpu_offloading:  # TransformerConfig: activation offloading without PP or recompute
        masks["--cpu-offloading refuses pp > 1 and recompute"] = (pp > 1) | (cols["rc"] != RECOMPUTE_CODES["none"])
    if cfg.framework == "megatron" and not cfg.parallel.overlap_p2p_comm:  # validate_args: interleaving needs PP > 2
        masks["--no-overlap-p2p-communication refuses virtual stages at pp 2"] = (cols["vpp"] > 1) & (pp == 2)
    if cfg.framework in MEGATRON_FRAMEWORKS and o.overlap_param_gather_with_optimizer_step:  # validate_args asserts
        masks["--overlap-param-gather-with-optimizer-step needs distopt and virtual stages"] = (
            (cols["distopt"] == 0) | (cols["vpp"] == 1))
    if o.distopt_instances > 1:  # parallel_state.initialize_model_parallel asserts both ('... divisible by partial
        # DistOpt shard factor'); the expert data-parallel size is world / (expert TP x EP x PP)
        dp_cp, expert_dp = world // (cols["tp"] * pp), world // (cols["etp"] * cols["ep"] * pp)
        masks["dp*cp or expert dp % --num-distributed-optimizer-instances != 0"] = (
            (dp_cp % o.distopt_instances != 0) | (expert_dp % o.distopt_instances != 0))
    for flag in flags_needing_distopt(cfg):  # --apply keeps the flag: dropping --use-distributed-optimizer is refused
        masks[f"{flag} needs the distributed optimizer"] = cols["distopt"] == 0
    if o.fsdp != "none":  # FSDP shards the optimizer states; FSDP2 also refuses PP and EP (validate_args)
        masks["FSDP needs the distributed optimizer"] = cols["distopt"] == 0
        if o.fsdp == "torch_fsdp2":
            masks["--use-torch-fsdp2 refuses pp > 1 and ep > 1"] = (pp > 1) | (cols["ep"] > 1)
    return masks


def flags_needing_distopt(cfg: TrainingConfig) -> list[str]:
    """The command's flags that Megatron refuses without --use-distributed-optimizer (megatron_validate_args, explain's
    rules; under FSDP its own rule says it): DistributedDataParallel asserts 'Partial DistOpt cannot be used without
    DistOpt' for --num-distributed-optimizer-instances N > 1; validate_args '--fp8-param-gather only supported with
    distributed optimizer, torch fsdp2, megatron fsdp, or inference mode'; OptimizerConfig / get_megatron_optimizer
    '--use-precision-aware-optimizer only supported with distributed optimizer' (--optimizer-cpu-offload needs it)."""
    o = cfg.optimizer
    if cfg.framework != "megatron" or o.fsdp != "none":
        return []
    given = (("--num-distributed-optimizer-instances > 1", o.distopt_instances > 1),
             ("--fp8-param-gather", o.fp8_param_gather), ("--use-precision-aware-optimizer", o.precision_aware))
    return [flag for flag, on in given if on]


def _uneven_stage_masks(cfg: TrainingConfig, total: int, pp: np.ndarray, vpp: np.ndarray) -> dict[str, np.ndarray]:
    """A command's --decoder-first/last-pipeline-num-layers stay at its own PP (apply drops them elsewhere), where
    transformer_config.py splits each stage's layers over the virtual chunks: the first / last counts and the
    middle stages' share must each divide by VPP (validation._check_uneven)."""
    p = cfg.parallel
    given = [n for n in (p.decoder_first_pipeline_num_layers, p.decoder_last_pipeline_num_layers) if n]
    if not given or p.pipeline_layout:
        return {}
    middle_stages = p.pp - len(given)
    share = (total - sum(given)) // middle_stages if middle_stages > 0 else 0
    bad = np.zeros(vpp.shape, dtype=bool)
    for count in (*given, share):
        bad |= count % vpp != 0
    return {"uneven first/last stages need their layers divisible by vpp": (pp == p.pp) & bad}


def _interleaving_masks(cfg: TrainingConfig, vpp: np.ndarray, pp: np.ndarray, num_mb: np.ndarray) -> dict[str, np.ndarray]:
    """Megatron schedules.py: the interleaved schedule runs groups of N contiguous micro-batches per model chunk
    (--microbatch-group-size-per-virtual-pipeline-stage, default PP), PP <= N <= M and M % N either 0 or >= PP;
    with the default N = PP that is M % PP == 0 (validation._check_microbatch_groups, the same rules)."""
    interleaved = (vpp > 1) & (cfg.framework in MEGATRON_FRAMEWORKS)
    group = cfg.parallel.microbatch_group_size
    if not group:
        return {"interleaving needs num_microbatches % pp == 0": interleaved & (num_mb % pp != 0)}
    rest = num_mb % group
    fits = (pp <= group) & (group <= num_mb) & ((rest == 0) | (rest >= pp))
    return {"interleaving needs pp <= micro-batch group <= num_microbatches, remainder 0 or >= pp": interleaved & ~fits}


def _fixed_vocab_masks(cfg: TrainingConfig, cols: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    if not fixed_padded_vocab(cfg):
        return {}
    return {"--pad-vocab-size-to % tp != 0 (VocabParallelEmbedding)": cfg.model.padded_vocab_size % cols["tp"] != 0}


def _expert_masks(cfg: TrainingConfig, cols: Mapping[str, np.ndarray], world: int) -> dict[str, np.ndarray]:
    """Megatron-LM's expert-layout rules (True = violates)."""
    experts = cfg.model.num_experts
    ep, etp, tp, pp = cols["ep"], cols["etp"], cols["tp"], cols["pp"]
    return {
        # arguments.py validate_args: EP > 1 needs --num-experts, and num_experts % EP == 0.
        "num_experts % ep != 0": (ep > 1) & ((experts <= 0) | (max(experts, 1) % ep != 0)),
        # parallel_state.initialize_model_parallel: the expert grid ETP x EP x (expert DP) x PP spans the world.
        "world % (etp*ep*pp) != 0": world % (etp * ep * pp) != 0,
        # moe_layer.py MoELayer.forward raises ValueError in training when MoE runs with TP > 1 and no
        # --sequence-parallel (Megatron-LM; DeepSpeed-MoE has no such rule).
        "MoE with tp > 1 needs sequence parallel": (cfg.framework == "megatron") & (experts > 0) & (tp > 1) & (
            cols["sp"] == 0),
        # deepspeed/runtime/engine.py: native DeepSpeed-MoE (Megatron-DeepSpeed --num-experts) refuses ZeRO-3.
        "DeepSpeed-MoE with ZeRO-3": (cfg.framework == "megatron-deepspeed") & (experts > 0) & (cols["zero"] == 3),
        # stage_1_and_2.py _configure_moe_settings: ZeRO-2 with MoE asserts contiguous gradients (offload forces them).
        "DeepSpeed-MoE ZeRO-2 without contiguous_gradients": (cfg.framework == "megatron-deepspeed") & (experts > 0) & (
            cols["zero"] == 2) & (not cfg.optimizer.contiguous_gradients) & (cfg.optimizer.offload_optimizer == "none"),
        **_dispatcher_masks(cfg, cols),
        **_deepspeed_moe_masks(cfg, cols, world),
    }


def _deepspeed_moe_masks(cfg: TrainingConfig, cols: Mapping[str, np.ndarray], world: int) -> dict[str, np.ndarray]:
    """Megatron-DeepSpeed's MoE layers (DeepSpeed's) at a TP the search tries: --sequence-parallel at TP > 1 breaks
    or mixes their tokens, and --enable-expert-tensor-parallelism asserts DP % EP (validation.py
    _check_deepspeed_moe_sequence_parallel and _check_deepspeed_expert_groups say why)."""
    if cfg.framework != "megatron-deepspeed" or cfg.model.num_experts <= 0:
        return {}
    tp, ep = cols["tp"], cols["ep"]
    masks = {"Megatron-DeepSpeed MoE refuses sequence parallel": (cols["sp"] > 0) & (tp > 1)}
    if cfg.parallel.etp_follows_tp:
        dp = world // np.maximum(tp * cols["pp"] * cols["cp"], 1)
        masks["--enable-expert-tensor-parallelism needs dp % ep == 0"] = (dp < 1) | (dp % ep != 0)
    return masks


def _dispatcher_masks(cfg: TrainingConfig, cols: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Megatron-Core's token-dispatcher rules that depend on the layout, where the command's flags bring them in
    (frameworks/validation.py _check_ep_overlap and _check_flex_group say the same per configuration)."""
    d = cfg.model.moe_dispatch
    if cfg.framework != "megatron" or cfg.model.num_experts <= 0:
        return {}
    masks: dict[str, np.ndarray] = {}
    if d.overlap_ep_comm:
        ep, pp, vpp, rc = cols["ep"], cols["pp"], cols["vpp"], cols["rc"]
        # TransformerConfig.__post_init__ asserts for --overlap-moe-expert-parallel-comm.
        masks["EP comm overlap needs ep > 1"] = ep <= 1
        # vpp counts a --pipeline-model-parallel-layout's virtual stages too (frameworks/megatron.py _vpp).
        masks["EP comm overlap needs vpp when pp > 1"] = (pp > 1) & (vpp == 1)
        masks["EP comm overlap refuses full recompute"] = (rc == RECOMPUTE_CODES["full"]) | (rc == RECOMPUTE_CODES["block"])
    if d.token_dispatcher == "flex" and d.flex_backend in ("deepep", "ncclep"):
        # MoEFlexTokenDispatcher.__init__: 'DeepEP dispatcher requires TPxEP > 1' (NCCL EP likewise).
        masks["flex DeepEP / NCCL EP need etp*ep > 1"] = cols["etp"] * cols["ep"] <= 1
    return masks


def _param_gather_masks(cfg: TrainingConfig, cols: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """arguments.py validate_args: --overlap-param-gather needs the distributed optimizer (a knob tune flips)."""
    if cfg.framework not in MEGATRON_FRAMEWORKS or not cfg.optimizer.overlap_param_gather:
        return {}
    return {"overlap-param-gather needs distributed optimizer": cols["distopt"] == 0}


def _ulysses_masks(cfg: TrainingConfig, cols: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Megatron-DeepSpeed's initialize.py: DeepSpeed-Ulysses (--ds-sequence-parallel-size, our CP) refuses
    Megatron's --sequence-parallel (kept at TP > 1 only; _normalise_and_dedupe drops it at TP 1). Its attention
    asserts heads % sp == 0 and DeepSpeed's single_all_to_all scatters each tensor-parallel rank's heads over the sp
    ranks, evenly or, with more heads than ranks, unevenly (validation._check_ulysses, the same rule): a TP the
    search tries can leave too few heads per rank."""
    if cfg.framework != "megatron-deepspeed":
        return {}
    cp, heads = cols["cp"], cfg.model.num_attention_heads
    local = heads // cols["tp"]
    return {"DeepSpeed-Ulysses refuses sequence parallel": (cp > 1) & (cols["sp"] > 0),
            "DeepSpeed-Ulysses needs heads % sp == 0 and heads per TP rank divisible by or more than sp": (cp > 1) & (
                (heads % cp != 0) | ((local % cp != 0) & (local <= cp)))}

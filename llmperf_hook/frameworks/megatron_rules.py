"""Megatron-LM rules on single flags and flag pairs that no layout change can fix, checked once per command.

Each rule is Megatron's own, cited where it lives: argparse `choices` (megatron/training/arguments.py, and the
TransformerConfig fields whose `Literal[...]` types become choices through megatron/training/argument_utils.py),
`validate_args` asserts, and TransformerConfig.__post_init__ ValueErrors (megatron/core/transformer/
transformer_config.py). Rules that `tune` may break by changing the layout live in validation.py (those here
read the command's own layout only where the flag itself pins it, e.g. torch FSDP2). Rules only Megatron-LM
releases since 2025 enforce are warnings, as older releases accept the command.
"""

from __future__ import annotations

from typing import Sequence

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.fpdt import fpdt_warnings
from llmperf_hook.frameworks.megatron_shape import FLEX_BACKENDS, ROUTER_DTYPES
from llmperf_hook.frameworks.te_attention_rules import check_te_attention_backend
from llmperf_hook.frameworks.training_config import ModelShape, ParallelLayout

# argparse choices, the union over Megatron-LM releases (and Megatron-DeepSpeed where it defines the flag).
CHOICES: dict[str, tuple[str, ...]] = {
    "fp8_format": ("e4m3", "hybrid"),
    "fp8_recipe": ("tensorwise", "delayed", "mxfp8", "blockwise", "custom"),
    "transformer_impl": ("local", "transformer_engine", "inference_optimized"),
    "attention_backend": ("flash", "fused", "unfused", "local", "auto"),  # AttnBackend enum
    # absolute / rotary / alibi: the bigscience Megatron-DeepSpeed fork's PositionEmbeddingType (BLOOM: alibi).
    "position_embedding_type": ("learned_absolute", "rope", "yarn", "mrope", "relative", "none", "absolute", "rotary",
                                "alibi"),
    "moe_token_dispatcher_type": ("allgather", "alltoall", "flex", "alltoall_seq"),  # alltoall_seq: before 2025
    "moe_router_score_function": ("softmax", "sigmoid", "sqrtsoftplus"),
    "softmax_type": ("vanilla", "off-by-one", "learnable"),  # TransformerConfig.softmax_type Literal
    "ckpt_format": ("torch", "torch_dist", "zarr", "torch_dcp", "fsdp_dtensor"),  # zarr: core_r0.6-0.9
    "timing_log_level": ("0", "1", "2"),  # choices=range(0, 3); Literal[0, 1, 2] in training_config.py
    "empty_unused_memory_level": ("0", "1", "2"),
    "DDP_impl": ("local", "torch", "FSDP"),  # Megatron-DeepSpeed and Megatron-LM before 2023
    "cross_entropy_fusion_impl": ("native", "te"),
    "cuda_graph_impl": ("none", "local", "transformer_engine", "full_iteration"),  # full_iteration: core_v0.18.0+
    "data_parallel_sharding_strategy": ("no_shard", "optim", "optim_grads", "optim_grads_params"),
    "fp4_format": ("e2m1",),
    "main_grads_dtype": ("fp32", "bf16"),
    "main_params_dtype": ("fp32", "fp16"),
    "exp_avg_dtype": ("fp32", "fp16", "bf16", "fp8"),
    "exp_avg_sq_dtype": ("fp32", "fp16", "bf16", "fp8"),
    "moe_router_dtype": ROUTER_DTYPES,
    "moe_flex_dispatcher_backend": FLEX_BACKENDS,
    # nargs='+', each value a choice; global_aux_loss since 2025, quantile_balancing in two 2026 releases
    "moe_router_load_balancing_type": ("aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "quantile_balancing",
                                       "none"),
}
"""The entries below DDP_impl: the union of each option's choices over Megatron-LM's core_v0.x / core_r0.x tags and
HEAD (2026-08), read from their arguments.py; tests/frameworks/test_megatron_arguments_table.py checks that every
table holds core_v0.16.1's parser's choices. --tokenizer-type is left to frameworks/vocab.py (each fork adds its own
tokenizers)."""


def list_values(script_args: Sequence[str], flag: str) -> list[str] | None:
    """The words after the last `flag` up to the next option (argparse nargs='*'/'+'), or None if absent."""
    found: list[str] | None = None
    for i, word in enumerate(script_args):
        name, eq, value = word.partition("=")
        if name.replace("_", "-") != flag:
            continue
        found = [value] if eq else []
        for nxt in script_args[i + 1:]:
            if nxt.startswith("--") or eq:
                break
            found.append(nxt)
    return found


def check_choices(flags: FlagValues) -> None:
    for dest, allowed in CHOICES.items():
        value = flags.get(dest)
        if isinstance(value, tuple):  # nargs='+': argparse checks each value
            value = next((item for item in value if str(item) not in allowed), None)
        if value is not None and str(value) not in allowed:
            raise ConfigError(
                f"{flags.seen_flags[dest]} {value} (argv) is not a choice Megatron offers ({', '.join(allowed)}); its "
                "argument parser stops the job at start-up ('invalid choice'). Pick one of them.")
    if flags.get("position_embedding_type") == "relative" and flags.get("transformer_impl") == "local":
        raise ConfigError("--position-embedding-type relative needs --transformer-impl transformer_engine (arguments.py "
                          "validate_args: the local implementation has no attention-bias position embeddings).")


_RECENT = "Megatron-LM {since} and later refuse this at start-up (TransformerConfig: {quote}); older releases accept it"


def _router_warnings(flags: FlagValues, model: ModelShape, etp: int) -> list[str]:
    topk, experts = model.moe_router_topk, model.num_experts
    if topk > experts:
        raise ConfigError(f"--moe-router-topk {topk} ({flags.source('moe_router_topk')}) exceeds --num-experts {experts}: "
                          "the router's top-k over the experts fails at the first step (torch.topk). Use at most "
                          f"{experts}.")
    out: list[str] = []
    score = flags.get("moe_router_score_function", "softmax")
    balancing = flags.get("moe_router_load_balancing_type", "aux_loss")
    if topk == 1 and score == "softmax" and not flags.get("moe_router_pre_softmax") and balancing != "sinkhorn":
        out.append("--moe-router-topk 1 without --moe-router-pre-softmax: " + _RECENT.format(
            since="2025-02", quote="'Please use --moe-router-pre-softmax when topk is 1'"))
    if model.add_bias_linear and etp > 1:  # 2025-04: no bias in MoE at all; 2025-09: bias only with ETP 1
        out.append(f"MoE with linear biases (no --disable-bias-linear) and expert-tensor-parallel-size {etp}: " + _RECENT.format(
            since="2025-04", quote="'Bias in Moe is only supported when ETP==1'") + "; add --disable-bias-linear")
    return out


def _moe_config_rules(flags: FlagValues) -> None:
    """TransformerConfig.__post_init__ rules that hold whether or not the model has experts."""
    factor = flags.get("moe_expert_capacity_factor")
    if flags.get("moe_pad_expert_input_to_capacity") and (factor is None or factor < 0):
        given = "none given" if factor is None else f"{factor} given, which Megatron sets to None (dropless)"
        raise ConfigError(f"--moe-pad-expert-input-to-capacity needs a --moe-expert-capacity-factor ({given}): Megatron "
                          "raises 'moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity'. Give a "
                          "positive capacity factor or drop the flag.")
    types, coeff = flags.get("moe_router_load_balancing_type"), flags.get("moe_aux_loss_coeff")
    if isinstance(types, tuple) and not (isinstance(coeff, tuple) and len(coeff) == len(types)):
        raise ConfigError(f"--moe-router-load-balancing-type {' '.join(types)} with --moe-aux-loss-coeff "
                          f"{' '.join(map(str, coeff)) if isinstance(coeff, tuple) else coeff if coeff is not None else '(default 0.0)'}: "
                          "Megatron asserts 'moe_aux_loss_coeff must be a list of the same length as "
                          f"moe_router_load_balancing_type'. Give {len(types)} coefficients, one per type.")
    if flags.get("moe_router_padding_for_quantization") and not any(
            flags.get(d) for d in ("fp8_format", "fp4_format", "fp8_e4m3", "fp8_hybrid")):
        raise ConfigError(f"{flags.seen_flags['moe_router_padding_for_quantization']} without --fp8-format or "
                          "--fp4-format: Megatron raises 'fp8/fp4 must be specified when moe_router_padding_for_quantization "
                          "is True' (TransformerConfig). Add the FP8 / FP4 format or drop the flag.")
    if flags.get("moe_enable_deepep") and flags.get("moe_token_dispatcher_type", "allgather") != "flex":
        raise ConfigError(f"--moe-enable-deepep with --moe-token-dispatcher-type "
                          f"{flags.get('moe_token_dispatcher_type', 'allgather (the default)')}: Megatron raises 'DeepEP "
                          "backend is only supported with flex token dispatcher' (TransformerConfig). Add "
                          "--moe-token-dispatcher-type flex.")


def _moe_warnings(flags: FlagValues, model: ModelShape, etp: int) -> list[str]:
    _moe_config_rules(flags)
    if model.num_experts > 0:
        return _router_warnings(flags, model, etp)
    if flags.has("moe_ffn_hidden_size") and str(flags.get("moe_layer_freq", "1")) == "1":
        return ["--moe-ffn-hidden-size without --num-experts is ignored (dense model); " + _RECENT.format(
            since="2026-04", quote="'moe_ffn_hidden_size is set but num_moe_experts is None'")]
    return []


def _check_pipeline(flags: FlagValues) -> None:
    uneven = [flags.seen_flags[d] for d in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers")
              if flags.has(d)]
    accounted = [flags.seen_flags[d] for d in ("account_for_embedding_in_pipeline_split",
                                               "account_for_loss_in_pipeline_split") if flags.get(d)]
    if uneven and accounted:
        raise ConfigError(
            f"{' and '.join(uneven)} cannot be combined with {' and '.join(accounted)} (Megatron TransformerConfig raises "
            "ValueError: the first/last stage sizes already place the embedding and loss). Keep one way of splitting.")
    if flags.has("pipeline_model_parallel_layout") and (uneven or accounted):
        raise ConfigError(
            f"--pipeline-model-parallel-layout cannot be set with {', '.join(uneven + accounted)} (Megatron "
            "TransformerConfig: 'pipeline_model_parallel_layout cannot be set with other pipeline layout arguments').")


def _check_context_parallel(flags: FlagValues, script_args: Sequence[str], model: ModelShape,
                            parallel: ParallelLayout) -> None:
    """validate_args' --hierarchical-context-parallel-sizes assert; TransformerConfig asserts that a --cp-comm-type
    list (more than one value: validate_args unwraps one) names one type per layer, under CP > 1 (transformer_config.py
    HEAD :3103-3108, core_v0.16.1 :1928-1933; since 91a8a4c8dc, 2024-10, with the per-layer list)."""
    types = list_values(script_args, "--cp-comm-type") or []
    num_layers = model.num_layers
    if len(types) > 1 and flags.get("context_parallel_size", 1) > 1 and len(types) != num_layers:
        raise ConfigError(f"--cp-comm-type {' '.join(types)} (argv) gives {len(types)} types for {num_layers} layers: "
                          f"Megatron's TransformerConfig asserts 'Length of cp_comm_type ({len(types)}) should equal to "
                          f"the total number of transformer layers ({num_layers})'. Give one type for all layers or one "
                          "per layer.")
    if any("a2a+p2p" in t for t in types) and not flags.has("hierarchical_context_parallel_sizes"):
        raise ConfigError("--cp-comm-type a2a+p2p needs --hierarchical-context-parallel-sizes (arguments.py validate_args "
                          "asserts it). Give the two-level sizes, e.g. --hierarchical-context-parallel-sizes 2 4.")
    _check_a2a_heads(types, script_args, model, parallel)


def _check_a2a_heads(types: Sequence[str], script_args: Sequence[str], model: ModelShape, parallel: ParallelLayout) -> None:
    """All-to-all context parallelism (--cp-comm-type a2a, Ulysses-style; the a2a level of a2a+p2p, whose size is
    the first --hierarchical-context-parallel-sizes) spreads each rank's heads over its group: Transformer Engine's
    AttnFuncWithCPAndQKVOA2A asserts 'The number of attention heads needs to be divisible by CP size!' for the query
    heads and the key/value heads of each tensor-parallel rank (transformer_engine/pytorch/attention/
    dot_product_attention/context_parallel.py; TE 2.16 on words it "cp_comm_type='a2a' requires num_heads % cp_size
    == 0 for Q, K, V"), at the first forward. Key/value groups fewer than TP are one per rank (attention.py: the
    rank keeps one key/value head and num_attention_heads / TP query heads)."""
    levels = list_values(script_args, "--hierarchical-context-parallel-sizes") or []
    size = parallel.cp if any(t == "a2a" for t in types) else int(levels[0]) if levels and any(
        t == "a2a+p2p" for t in types) else 1
    heads, groups = model.num_attention_heads // parallel.tp, max(model.num_query_groups // parallel.tp, 1)
    if parallel.cp > 1 and size > 1 and (heads % size or groups % size):
        raise ConfigError(f"--cp-comm-type {' '.join(types)} spreads each rank's {heads} query heads and {groups} "
                          f"key/value heads (of {model.num_attention_heads} / {model.num_query_groups} over "
                          f"tensor-model-parallel-size {parallel.tp}) over an all-to-all group of {size}: Transformer "
                          "Engine asserts 'The number of attention heads needs to be divisible by CP size!' (TE 2.16 "
                          "on: \"cp_comm_type='a2a' requires num_heads % cp_size == 0 for Q, K, V\") at the first "
                          "forward. Use --cp-comm-type p2p, a smaller context-parallel (a2a) size, or a smaller TP.")


def _switched_on(script_args: Sequence[str], flag: str) -> bool:
    """A store_true option of Megatron's generated parser (argument_utils.py) that SCRIPT_FLAGS does not read: the
    last of `flag`, `--no-X` / `--disable-X` wins."""
    name = flag[2:]
    on = False
    for word in script_args:
        spelled = word.split("=", 1)[0].replace("_", "-")
        if spelled == flag:
            on = True
        elif spelled in (f"--no-{name}", f"--disable-{name}"):
            on = False
    return on


def _selective(flags: FlagValues) -> bool:
    """What TransformerConfig sees when it checks the modules: --recompute-granularity selective, or
    --recompute-activations, which validate_args turns into it (arguments.py HEAD :607-609). --moe-layer-recompute
    turns it on only after the module checks (transformer_config.py HEAD :2012-2025)."""
    return flags.get("recompute_granularity") == "selective" or bool(flags.get("recompute_activations"))


def _check_recompute_module_needs(flags: FlagValues, script_args: Sequence[str]) -> None:
    """The --recompute-modules checks on settings TrainingConfig does not carry (hyper-connections, the
    gated-delta-net variant, fine-grained offloading), under the command's own selective recompute; the set and
    the checks on the modelled settings are megatron_recompute_modules', as tune changes the granularity.
    Each came with the module it checks (transformer_config.py HEAD d98e8a6)."""
    modules = set(list_values(script_args, "--recompute-modules") or [])
    if not modules or not _selective(flags):
        return
    offloaded = set(list_values(script_args, "--offload-modules") or []) \
        if _switched_on(script_args, "--fine-grained-activation-offloading") else set()
    variant = (list_values(script_args, "--experimental-attention-variant") or [""])[-1]
    layers = (list_values(script_args, "--mhc-recompute-layer-num") or ["1"])[-1]
    refused = next(((quote, fix) for cond, quote, fix in (
        # is_gated_delta_net_variant: GDN_ATTENTION_VARIANTS and the deprecated gated_delta_net alias
        # (models/gpt/experimental_attention_variant_module_specs.py :61-64, :378-387)
        ("gdn_norm_out" in modules and variant not in ("gdn", "gdn2", "gated_delta_net"),  # :1975-1981
         "gdn_norm_out in recompute_modules is only supported with experimental_attention_variant='gdn' or 'gdn2'",
         "add --experimental-attention-variant gdn or drop gdn_norm_out"),
        ("mhc" in modules and not _switched_on(script_args, "--enable-mhc-connections"),  # :2028-2030
         "'mhc' in recompute_modules requires enable_mhc_connections=True", "add --enable-mhc-connections or drop mhc"),
        ("mhc" in modules and "mlp" in modules,  # :2031-2035
         "'mhc' and 'mlp' in recompute_modules cannot be used together", "keep one of mhc and mlp"),
        ("mhc" in modules and not (layers.isdigit() and int(layers) >= 1),  # :2036-2044
         "mhc_recompute_layer_num must be a positive integer when 'mhc' is in recompute_modules",
         "give --mhc-recompute-layer-num a positive integer"),
        ("mhc" in modules and _switched_on(script_args, "--fine-grained-activation-offloading"),  # :2045-2051
         "'mhc' in recompute_modules + fine_grained_activation_offloading is not yet supported",
         "drop --fine-grained-activation-offloading or mhc"),
        ("gdp_qkv" in offloaded and "gdp_in_proj" in modules,  # :2155-2164
         "gdp_qkv cannot be set in offload_modules together with gdp_in_proj in recompute_modules",
         "drop gdp_qkv from --offload-modules or gdp_in_proj from --recompute-modules"),
        ("moe" in modules and offloaded & {"moe_act", "expert_fc1", "fused_group_mlp"},  # :2165-2175
         "Cannot offload ... while recomputing the entire MoE layer",
         "drop moe from --recompute-modules or the MoE parts from --offload-modules")) if cond), None)
    if refused:
        quote, fix = refused
        raise ConfigError(f"--recompute-modules {' '.join(sorted(modules))} (argv) under selective recompute: Megatron's "
                          f"TransformerConfig raises '{quote}' (transformer_config.py). To start, {fix}.")


def _recompute_warnings(flags: FlagValues, script_args: Sequence[str]) -> list[str]:
    """TransformerConfig asserts "moe" not in recompute_modules under --overlap-moe-expert-parallel-comm, at any
    granularity, since 45b8eac955 (2026-03-20; HEAD transformer_config.py :3030-3032), seven months after the overlap
    came (ae1c88296f, 2025-08): megatron-core 0.16.1 runs it. --moe-layer-recompute appends "moe" before the check."""
    modules = list_values(script_args, "--recompute-modules") or []
    if not flags.get("overlap_moe_expert_parallel_comm") or not ("moe" in modules or flags.get("moe_layer_recompute")):
        return []
    given = "--recompute-modules ... moe" if "moe" in modules else flags.seen_flags["moe_layer_recompute"]
    return [f"{given} with --overlap-moe-expert-parallel-comm: " + _RECENT.format(
        since="2026-03", quote="'disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm'") +
        "; drop moe from the recompute modules"]


def _legacy_model_warnings(flags: FlagValues, script_args: Sequence[str]) -> list[str]:
    """--use-legacy-models (9ad1a56f82, 2024-05): validate_args asserts ckpt_format == "torch" with it from
    3750d21d23 (2025-01-25; core_v0.16.1 arguments.py:309-311) until 39ec5ebeb4 (2026-05-06) removed the legacy
    GPT code and the flag. --ckpt-format defaults to torch_dist."""
    fmt = flags.get("ckpt_format") or "torch_dist"
    if not _switched_on(script_args, "--use-legacy-models") or fmt == "torch":
        return []
    return [f"--use-legacy-models with --ckpt-format {fmt}: Megatron-LM 2025-01 to 2026-05 (core_v0.16.1 among them) "
            "refuse it at start-up (validate_args: 'legacy model format only supports the 'torch' checkpoint "
            "format'); older releases accept it and newer ones no longer define --use-legacy-models. Add "
            "--ckpt-format torch, or drop --use-legacy-models (priced as Megatron-Core's GPT model either way)"]


def _check_cpu_offloading(flags: FlagValues, model: ModelShape) -> None:
    """TransformerConfig: offloaded layers below num_layers (PP and recompute: validation.py, tune changes them)."""
    layers = flags.get("cpu_offloading_num_layers", 0)
    if (flags.get("cpu_offloading") or layers > 0) and layers >= model.num_layers:
        raise ConfigError(f"--cpu-offloading-num-layers {layers} must be below num-layers {model.num_layers} (Megatron "
                          "TransformerConfig: 'CPU offloading can be done only for layers less than num_layers').")


def _check_fsdp(flags: FlagValues, parallel: ParallelLayout, precision_fp16: bool, untied: bool) -> None:
    """validate_args for --use-torch-fsdp2 (each assert since the flag came, e1993fa6f7 2024-11, among them `not
    args.gradient_accumulation_fusion`, which is on unless --no-gradient-accumulation-fusion, and
    `args.untie_embeddings_and_output_weights`, read from the resolved shape's `untied`: a --model preset or file
    that unties them stands for the flag the job passes), for --use-megatron-fsdp
    (which came with its `ckpt_format == "fsdp_dtensor"` assert, af28b5a559 2025-08; --ckpt-format defaults to
    torch_dist) and for the torch_dcp/fsdp_dtensor formats."""
    fmt = flags.get("ckpt_format")
    if fmt == "torch_dcp" and not (flags.get("use_torch_fsdp2") and parallel.tp == 1 and parallel.pp == 1):
        raise ConfigError("--ckpt-format torch_dcp needs --use-torch-fsdp2 with tensor- and pipeline-model-parallel-size 1 "
                          f"(arguments.py validate_args); got TP {parallel.tp}, PP {parallel.pp}. Use --ckpt-format torch_dist.")
    if fmt == "fsdp_dtensor" and not flags.get("use_megatron_fsdp"):
        raise ConfigError("--ckpt-format fsdp_dtensor needs --use-megatron-fsdp (arguments.py validate_args).")
    if flags.get("use_megatron_fsdp") and fmt != "fsdp_dtensor":
        given = f"--ckpt-format {fmt}" if fmt else "the default --ckpt-format torch_dist"
        raise ConfigError(f"--use-megatron-fsdp with {given}: Megatron's validate_args asserts 'Megatron FSDP only "
                          "supports fsdp_dtensor checkpoint format' (every release with the flag). Add --ckpt-format "
                          "fsdp_dtensor.")
    if not flags.get("use_torch_fsdp2"):
        return
    refused = [why for bad, why in (
        (parallel.pp > 1, f"pipeline-model-parallel-size {parallel.pp}"), (parallel.ep > 1, f"expert-model-parallel-size {parallel.ep}"),
        (bool(flags.get("use_distributed_optimizer")), "--use-distributed-optimizer"), (precision_fp16, "--fp16"),
        (bool(flags.get("gradient_accumulation_fusion", True)), "gradient accumulation fusion (on by default)"),
        (not untied, "tied embeddings (no --untie-embeddings-and-output-weights)"),
        (fmt not in (None, "torch_dist", "torch_dcp"), f"--ckpt-format {fmt}")) if bad]
    if refused:
        raise ConfigError(f"--use-torch-fsdp2 is refused by Megatron's validate_args with {', '.join(refused)}: torch FSDP2 "
                          "needs PP 1, EP 1, no distributed optimizer, no fp16, --no-gradient-accumulation-fusion, untied "
                          "embeddings and --ckpt-format torch_dist or torch_dcp. Change those settings or drop "
                          "--use-torch-fsdp2.")


def _check_deferred_embedding_wgrad(flags: FlagValues, parallel: ParallelLayout) -> None:
    """ModelParallelConfig.__post_init__ raises ValueError for --defer-embedding-wgrad-compute without pipeline
    parallelism or without gradient accumulation fusion (megatron/core/model_parallel_config.py, core_v0.16.1
    :425-433): the deferred GEMMs run during the pipeline flush, into the fused main_grad accumulation."""
    if not flags.get("defer_embedding_wgrad_compute"):
        return
    refusals = [says for bad, says in (
        (parallel.pp == 1, f"pipeline-model-parallel-size {parallel.pp}: 'Cannot defer embedding wgrad compute when "
                           "pipeline model parallel is not used'"),
        (not flags.get("gradient_accumulation_fusion", True), "--no-gradient-accumulation-fusion: 'Cannot defer "
                                                              "embedding wgrad compute when gradient accumulation fusion is not used'"))
        if bad]
    if refusals:
        raise ConfigError(f"--defer-embedding-wgrad-compute with {'; '.join(refusals)} (Megatron ModelParallelConfig "
                          "raises ValueError at start-up). Drop the flag, or use pipeline parallelism with gradient "
                          "accumulation fusion.")


def _check_param_gather_checkpoints(flags: FlagValues) -> None:
    """validate_args (core_r0.9.0, the release that added --overlap-param-gather-with-optimizer-step, to HEAD d98e8a6)
    asserts `not args.use_dist_ckpt` for it, after update_use_dist_ckpt set use_dist_ckpt = ckpt_format != "torch"
    (training/utils.py; utils/common_utils.py today), and --ckpt-format defaults to torch_dist in every one of those
    releases (arguments.py; TrainingConfig.ckpt_format since core_v0.16.0): only --ckpt-format torch passes. Its
    other asserts (distributed optimizer, --overlap-param-gather, virtual stages) are validation.py's, as tune
    changes them; no layout changes this one."""
    if not flags.get("overlap_param_gather_with_optimizer_step"):
        return
    fmt = flags.get("ckpt_format") or "torch_dist"
    if fmt != "torch":
        given = "--ckpt-format " + fmt if flags.get("ckpt_format") else "the default --ckpt-format torch_dist"
        raise ConfigError(f"--overlap-param-gather-with-optimizer-step with {given}: Megatron's validate_args asserts "
                          "'--overlap-param-gather-with-optimizer-step not supported with distributed checkpointing "
                          "yet', and every checkpoint format but torch is distributed (use_dist_ckpt = ckpt_format != "
                          "'torch', since core_r0.9.0 where the flag came). Add --ckpt-format torch (the legacy "
                          "per-rank checkpoints) or drop --overlap-param-gather-with-optimizer-step.")


def _check_step_batch_schedule(flags: FlagValues) -> None:
    """validate_args raises ValueError('Cannot specify both --step-batch-size-schedule and --global-batch-size') in
    every release that has the schedule (it came with the check, core_v0.18.0: 532ad926b4; older releases refuse
    the flag as unrecognized). Megatron-LM's own examples/gpt3/train_gpt3_175b_distributed.sh gives both."""
    if flags.has("step_batch_size_schedule") and flags.has("global_batch_size"):
        raise ConfigError(f"--step-batch-size-schedule {flags.get('step_batch_size_schedule')!r} with --global-batch-size "
                          f"{flags.get('global_batch_size')}: Megatron-LM's validate_args raises 'Cannot specify both "
                          "--step-batch-size-schedule and --global-batch-size' (core_v0.18.0 on, the releases with the "
                          "schedule). Drop --global-batch-size (the schedule sets the batch size at each step) or "
                          "the schedule.")


def _check_megatron_deepspeed(flags: FlagValues, script_args: Sequence[str], parallel: ParallelLayout) -> list[str]:
    """Megatron-DeepSpeed's own start-up refusals: Ulysses with Megatron sequence parallelism (initialize.py raises
    once arguments.py has dropped --sequence-parallel at TP 1), FPDT's chunking (fpdt.py), and the --num-experts list
    form, which get_num_experts_per_layer (model/transformer.py) asserts is one value or one per MoE layer."""
    if flags.get("ds_sequence_parallel_size", 1) > 1 and parallel.sequence_parallel:
        raise ConfigError(f"--ds-sequence-parallel-size {flags.get('ds_sequence_parallel_size')} with --sequence-parallel "
                          f"(tensor-model-parallel-size {parallel.tp}): Megatron-DeepSpeed's initialize raises 'sequence_parallel_size "
                          "> 1 enables DeepSpeed's sequence parallel, which is not compatible with Megatron-LM's sequence "
                          "parallel'. Drop --sequence-parallel or --ds-sequence-parallel-size.")
    warnings = fpdt_warnings(flags)
    experts = list_values(script_args, "--num-experts") or []
    if len(experts) <= 1:
        return warnings
    layers, interval = flags.get("num_layers") or 0, flags.get("ds_moe_expert_interval", 2)
    moe_layers = layers // max(interval, 1)
    if len(experts) != moe_layers:
        raise ConfigError(f"--num-experts gives {len(experts)} values ({' '.join(experts)}) but --num-layers {layers} with "
                          f"--expert-interval {interval} has {moe_layers} MoE layers; Megatron-DeepSpeed asserts 'num_experts "
                          "must be either a single value or a list of the same length as the number of MoE layers'. Give "
                          f"one value or {moe_layers}.")
    if len(set(experts)) > 1:
        warnings.append(f"--num-experts {' '.join(experts)}: per-layer expert counts differ; every MoE layer priced with "
                        f"{flags.get('num_experts')} experts")
    return warnings


def check_megatron_flags(flags: FlagValues, script_args: Sequence[str], model: ModelShape, parallel: ParallelLayout,
                         ds_flavour: bool) -> list[str]:
    """ConfigError for what Megatron-LM refuses at start-up or at its first step (see the module docstring);
    warnings for what only its releases since 2025 refuse."""
    check_choices(flags)
    _check_pipeline(flags)
    if ds_flavour:  # Megatron-DeepSpeed: DeepSpeed-MoE and its own recompute/offload flags
        return _check_megatron_deepspeed(flags, script_args, parallel)
    _check_context_parallel(flags, script_args, model, parallel)
    _check_recompute_module_needs(flags, script_args)
    _check_cpu_offloading(flags, model)
    _check_fsdp(flags, parallel, bool(flags.get("fp16")), model.untie_embeddings)
    _check_param_gather_checkpoints(flags)
    _check_deferred_embedding_wgrad(flags, parallel)
    _check_step_batch_schedule(flags)
    check_te_attention_backend(flags)
    return [*ignored_flag_warnings(flags), *_cross_entropy_warnings(flags), *_moe_warnings(flags, model, parallel.etp),
            *_recompute_warnings(flags, script_args), *_legacy_model_warnings(flags, script_args),
            *_p2p_spelling_warnings(flags), *_gelu_flag_warnings(flags, script_args)]


def _p2p_spelling_warnings(flags: FlagValues) -> list[str]:
    """--overlap-p2p-communication: Megatron-LM defined it (store_true, default off) from f9283c5a8a (2023-05-31) until
    4eeff55d1f (2023-10-23, 'Make overlap_p2p_comm the default'); core_r0.4.0 and every release since (core_v0.16.1
    arguments.py :2232, HEAD alike) define only --no-overlap-p2p-communication, and allow_abbrev=False parsing stops
    on the old spelling ('unrecognized arguments'). Megatron-DeepSpeed still defines it (megatron/arguments.py)."""
    if flags.seen_flags.get("overlap_p2p_comm") != "--overlap-p2p-communication" or not flags.get("overlap_p2p_comm"):
        return []
    return ["--overlap-p2p-communication: Megatron-LM accepted it only from 2023-05 to 2023-10 (f9283c5a8a .. "
            "4eeff55d1f); core_r0.4.0 and later (core_v0.16.1 among them) stop at start-up with 'unrecognized "
            "arguments', the overlap being their default (switched off by --no-overlap-p2p-communication). Priced "
            "with the overlap on; drop the flag"]


def _gelu_flag_warnings(flags: FlagValues, script_args: Sequence[str]) -> list[str]:
    """--openai-gelu / --onnx-safe: Megatron-LM's parser defines both in every release to HEAD (core_v0.16.1
    arguments.py :1681/:1691), but only its legacy models read them (core_v0.16.1 megatron/legacy/model/transformer.py
    ParallelMLP: `if args.openai_gelu: openai_gelu elif args.onnx_safe: erf_gelu`; removed with the legacy GPT code,
    39ec5ebeb4, 2026-05). Megatron-Core's MLP runs TransformerConfig.activation_func (core/transformer/mlp.py), which
    core_transformer_config_from_args never sets from them. --onnx-safe is type=bool: any non-empty value is True."""
    given = [flags.seen_flags[dest] for dest in ("openai_gelu", "onnx_safe") if flags.get(dest)]
    if not given:
        return []
    legacy = _switched_on(script_args, "--use-legacy-models")
    what = ("with --use-legacy-models the legacy ParallelMLP runs its own GELU (openai_gelu: tanh, erf_gelu: exact), "
            "but llmperf prices the model as Megatron-Core's with Megatron-Core's GELU" if legacy else
            "accepted and ignored: Megatron-Core's MLP never reads it (only the legacy models did); priced with "
            "Megatron-Core's GELU (the fused bias-GELU's tanh, or F.gelu without biases)")
    return [f"{' and '.join(given)}: {what}"]


def ignored_flag_warnings(flags: FlagValues) -> list[str]:
    """Flags today's Megatron-LM accepted for a while but ignored, priced as ignored. --no-async-tensor-model-
    parallel-allreduce: 'DEPRECATED. This flag is ignored.' since 5fffdfc737 (2024-04-29; Megatron-Core runs the
    async grad-input all-reduce whenever TP > 1 without sequence parallelism, tensor_parallel/layers.py
    allreduce_dgrad); 639c08ab82 (2026-01-29) dropped its argparse line, the generated --no- / --disable- spelling of
    the ignored ModelParallelConfig field stood in until 82cbd829dd (2026-02-23) removed the field, since when
    argparse refuses it ('unrecognized arguments'). Megatron-DeepSpeed defines it, but its --deepspeed turns the
    all-reduce off anyway (frameworks/step_flags.step_fusions): not checked here."""
    dest = "async_tensor_model_parallel_allreduce"
    if flags.get(dest, True) is not False:
        return []
    return [f"{flags.seen_flags[dest]}: ignored, as Megatron-LM has ignored it since 5fffdfc737 (2024-04-29, "
            "'DEPRECATED. This flag is ignored.'): the grad-input all-reduce is priced asynchronous, beside the "
            "weight-grad GEMM, as Megatron-Core always runs it under TP > 1 without sequence parallelism. Releases "
            "since 82cbd829dd (2026-02-23) no longer define it and stop at start-up with 'unrecognized arguments'; "
            "drop the flag"]


def _cross_entropy_warnings(flags: FlagValues) -> list[str]:
    """validate_args asserts `not (cross_entropy_loss_fusion and cross_entropy_fusion_impl == 'te')` since
    168cb15d70 (2026-06-03, 'Disable TE cross entropy loss fusion', first in core_v0.19.0); older releases run TE's
    fused cross-entropy."""
    if flags.get("cross_entropy_loss_fusion") and flags.get("cross_entropy_fusion_impl") == "te":
        return ["--cross-entropy-loss-fusion with --cross-entropy-fusion-impl te: Megatron-LM core_v0.19.0 (2026-06) "
                "and later refuse this at start-up (validate_args: 'Transformer Engine cross entropy loss fusion is "
                "disabled due to stability issues'); older releases accept it. Use --cross-entropy-fusion-impl native"]
    return []

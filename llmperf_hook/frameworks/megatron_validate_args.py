"""Megatron `validate_args` asserts decided by the command alone that the other rule modules do not hold.

Each rule is megatron/training/arguments.py `validate_args` (core_v0.16.1 and HEAD d98e8a6 alike, or the
TransformerConfig checks it leads to), cited by the commit that brought it: one of 2023 or before, or one that
came with the flags it reads, is an error (exit 2), as the releases that accept those flags refuse the command; one
that only releases since 2025 enforce on flags older releases accept is a warning (as megatron_rules.py does).
The flags llmperf does not price (--lr, --save, --train-iters, ...) are read from the script's own words as
argparse reads them (the last one given wins, `--flag=value` equal to `--flag value`), with argparse's defaults:
--min-lr 0.0, --lr-warmup-iters 0, --lr-warmup-samples 0, the rest None.
"""

from __future__ import annotations

from typing import Sequence

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.megatron_rampup import rampup_divisor
from llmperf_hook.frameworks.megatron_rules import list_values
from llmperf_hook.frameworks.megatron_unpriced_layers import check_distillation, unpriced_layer_warnings
from llmperf_hook.frameworks.training_config import ParallelLayout
from llmperf_hook.launch.argv_words import unexpanded_hint


def _value(script_args: Sequence[str], *names: str) -> str | None:
    """The value after the last of `names` given (argparse: the last occurrence wins), or None."""
    value = None
    for i, word in enumerate(script_args):
        key, eq, attached = word.partition("=")
        if key.replace("_", "-") in names:
            value = attached if eq else script_args[i + 1] if i + 1 < len(script_args) else None
    return value


def _number(script_args: Sequence[str], *names: str, default: float | None = None) -> float | None:
    text = _value(script_args, *names)
    if text is None:
        return default
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{names[0]} {text!r} (argv) is not a number{unexpanded_hint(text)}: Megatron's argument "
                          "parser stops at start-up ('invalid value'). Give a number.") from None


def _given(script_args: Sequence[str], name: str) -> bool:
    return list_values(script_args, name) is not None


def _check_training_length(script_args: Sequence[str]) -> None:
    """validate_args 'Iteration-based training' / 'Sample-based training' (9321d5c693, 2020-12): the run length,
    the learning-rate decay and its warmup counted in one unit, and one warmup form; --skip-train skips it (HEAD)."""
    if _given(script_args, "--skip-train"):
        return
    for unit, other in (("iters", "samples"), ("samples", "iters")):
        length = _number(script_args, f"--train-{unit}")
        if not length:  # `if args.train_iters:` - absent or 0
            continue
        clashes = {f"--train-{other}": _number(script_args, f"--train-{other}"),
                   f"--lr-decay-{other}": _number(script_args, f"--lr-decay-{other}"),
                   f"--lr-warmup-{other}": _number(script_args, f"--lr-warmup-{other}", default=0) or None}
        given = [f"{flag} {value:g}" for flag, value in clashes.items() if value is not None]
        if given:
            raise ConfigError(f"--train-{unit} {length:g} with {', '.join(given)}: Megatron's validate_args asserts "
                              f"'expected {'iteration' if unit == 'iters' else 'sample'}-based training' (the run "
                              "length, learning-rate decay and warmup in one unit). Give the "
                              f"--lr-*-{unit} forms only.")
        warmup, fraction = _number(script_args, f"--lr-warmup-{unit}", default=0), _number(script_args, "--lr-warmup-fraction")
        if fraction is not None and warmup:
            raise ConfigError(f"--lr-warmup-fraction {fraction:g} with --lr-warmup-{unit} {warmup:g}: Megatron's "
                              f"validate_args asserts 'can only specify one of lr-warmup-fraction and lr-warmup-{unit}'. "
                              "Keep one of them.")


def _check_lr_and_save(script_args: Sequence[str]) -> list[str]:
    """validate_args: min_lr <= lr when --lr is given (94e2ca575c, 2020-03; --min-lr defaults to 0.0); --save needs
    --save-interval (alias --persistent-save-interval), positive since 2025-07 (a warning)."""
    lr, min_lr = _number(script_args, "--lr"), _number(script_args, "--min-lr", default=0.0)
    if lr is not None and min_lr is not None and min_lr > lr:
        raise ConfigError(f"--min-lr {min_lr:g} exceeds --lr {lr:g} (argv); Megatron's validate_args asserts "
                          "min_lr <= lr. Lower --min-lr or raise --lr.")
    if _value(script_args, "--save") is None:
        return []
    interval = _number(script_args, "--save-interval", "--persistent-save-interval")
    if interval is None:
        raise ConfigError("--save without --save-interval: Megatron's validate_args asserts save_interval is not None "
                          "when --save is given. Add --save-interval N (iterations between checkpoints).")
    _check_retain_interval(_number(script_args, "--save-retain-interval"), interval)
    if interval <= 0:  # 78af90cb77 (2025-07) asserts > 0; before, `args.save_interval and ...` never saved
        return [f"--save-interval {interval:g}: Megatron-LM since 2025-07 stops at start-up (validate_args asserts "
                "save_interval > 0); older releases never save. Give a positive interval"]
    return []


def _check_retain_interval(retain: float | None, interval: float) -> None:
    """--save-retain-interval came with validate_args' `assert args.save_interval > 0`, `assert
    args.save_retain_interval > 0` and `% args.save_interval == 0` (78af90cb77, 2025-07; core_v0.16.1 arguments.py
    :839-842), so a release that takes the flag refuses a --save-interval <= 0 too. Megatron-LM CI's
    mixtral/deepseekv3_proxy_flex_tp1pp4emp16etp1cp1_release_sm config (2500 with --save-interval 5000) fails it."""
    if retain is not None and interval <= 0:
        raise ConfigError(f"--save-interval {interval:g} with --save-retain-interval {retain:g} (argv): the "
                          "Megatron-LM releases that have --save-retain-interval assert save_interval > 0 at start-up. "
                          "Give a positive --save-interval.")
    if retain is not None and (retain <= 0 or retain % interval):
        raise ConfigError(f"--save-retain-interval {retain:g} with --save-interval {interval:g} (argv): Megatron's "
                          "validate_args asserts save_retain_interval > 0 and save_retain_interval % save_interval == 0. "
                          "Make it a positive multiple of --save-interval.")


def _check_weight_decay(script_args: Sequence[str]) -> None:
    """validate_args (53931b8b07, 2022-01; Megatron-DeepSpeed alike): --weight-decay-incr-style constant (the default)
    takes neither --start-weight-decay nor --end-weight-decay, linear and cosine need both."""
    style = _value(script_args, "--weight-decay-incr-style") or "constant"
    given = [f for f in ("--start-weight-decay", "--end-weight-decay") if _value(script_args, f) is not None]
    if (given if style == "constant" else len(given) < 2):
        need = f"takes neither (given: {', '.join(given)})" if style == "constant" else "needs both"
        raise ConfigError(f"--weight-decay-incr-style {style} {need} --start-weight-decay and --end-weight-decay: "
                          "Megatron's validate_args asserts it. Give both with linear or cosine, none with constant.")


def _check_kernels(flags: FlagValues, script_args: Sequence[str]) -> None:
    """validate_args, each since its flag came: --attention-backend local only with --spec local (fa0dcc4872,
    2024-12); --fine-grained-activation-offloading only with Transformer Engine (b97184db56, 2026-01)."""
    spec = list_values(script_args, "--spec") or [None]
    if flags.get("attention_backend") == "local" and spec[0] != "local":
        raise ConfigError("--attention-backend local without --spec local: Megatron's validate_args asserts "
                          "'--attention-backend local is only supported with --spec local'. Add --spec local or use "
                          "--attention-backend unfused.")
    if _given(script_args, "--fine-grained-activation-offloading") and flags.get("transformer_impl") == "local":
        raise ConfigError("--fine-grained-activation-offloading with --transformer-impl local: Megatron's validate_args "
                          "asserts 'Fine-grained activation offloading is only supported with transformer_engine "
                          "implementation'. Drop one of them.")


def _check_mla_local_core(flags: FlagValues, script_args: Sequence[str]) -> None:
    """MLA under --transformer-impl local (Megatron's own spec, no --spec / --use-kitchen): get_gpt_layer_local_spec
    gives MLASelfAttention megatron-core's DotProductAttention as its core (gpt_layer_specs.py), and MLASelfAttention
    builds it with k_channels= / v_channels=, which DotProductAttention.__init__ does not take (core_v0.13.0 to
    core_v0.19.0): a TypeError at model build."""
    if not flags.get("multi_latent_attention") or flags.get("transformer_impl") != "local":
        return
    if _given(script_args, "--spec") or _given(script_args, "--use-kitchen"):
        return
    raise ConfigError(f"{flags.spelling('multi_latent_attention')} with {flags.spelling('transformer_impl')} local: "
                      "Megatron's local layer spec builds MLA's core as megatron-core's DotProductAttention, which "
                      "does not take MLA's k_channels / v_channels, so the model build raises 'TypeError: ... "
                      "unexpected keyword argument 'k_channels' when instantiating DotProductAttention'. Use "
                      "--transformer-impl transformer_engine (add --attention-backend unfused for unfused attention).")


def _check_mixed_precision(flags: FlagValues, script_args: Sequence[str]) -> None:
    """fp16_lm_cross_entropy needs --fp16 (197c132e9a, 2020-06); --fp32-residual-connection needs --fp16 or --bf16
    (62632d3936, 2020-12)."""
    if flags.get("fp16_lm_cross_entropy") and not flags.get("fp16"):
        raise ConfigError("--fp16-lm-cross-entropy without --fp16: Megatron's validate_args asserts 'lm cross entropy in "
                          "fp16 only support in fp16 mode'. Add --fp16 or drop the flag.")
    if _given(script_args, "--fp32-residual-connection") and not (flags.get("fp16") or flags.get("bf16")):
        raise ConfigError("--fp32-residual-connection without --fp16 or --bf16: Megatron's validate_args asserts "
                          "'residual connection in fp32 only supported when using fp16 or bf16'. Add one of them or "
                          "drop the flag.")


def _check_low_precision(flags: FlagValues, script_args: Sequence[str]) -> None:
    """--fp4-format excludes --fp8-format and --fp4-param-gather needs --fp4-format (a99f647421, 2025-09, with the
    FP4 flags); --fp8-param-gather needs a sharded optimizer (033d8b0de5, 2024-09, with the flag); FP8 with
    --first-last-layers-bf16 refuses delayed scaling (TransformerConfig.__post_init__, 3db741160b, 2025-03: with
    --fp8-recipe and --num-layers-at-start/end-in-bf16; --first-last-layers-bf16 itself came 5 days before, in
    b957578e76, and both first ship in core_v0.12.0, so no release takes the flag without the refusal)."""
    if flags.get("fp4_format") and flags.get("fp8_format"):
        raise ConfigError(f"--fp4-format {flags.get('fp4_format')} with --fp8-format {flags.get('fp8_format')}: Megatron "
                          "raises '--fp4-format and --fp8-format cannot be used simultaneously'. Keep one.")
    if (_given(script_args, "--fp4-param-gather") or _given(script_args, "--fp4-param")) and not flags.get("fp4_format"):
        raise ConfigError("--fp4-param-gather without --fp4-format: Megatron raises '--fp4-param-gather must be used "
                          "together with --fp4-format'. Add --fp4-format e2m1 or drop the flag.")
    sharded = any(flags.get(d) for d in ("use_distributed_optimizer", "use_torch_fsdp2", "use_megatron_fsdp"))
    if flags.get("fp8_param_gather") and not sharded:
        raise ConfigError("--fp8-param-gather without --use-distributed-optimizer (or an FSDP): Megatron's validate_args "
                          "asserts '--fp8-param-gather only supported with distributed optimizer, torch fsdp2, megatron "
                          "fsdp, or inference mode'. Add --use-distributed-optimizer or drop the flag.")
    recipe = flags.get("fp8_recipe") or "delayed"
    if flags.get("first_last_layers_bf16") and flags.get("fp8_format") and recipe == "delayed":
        raise ConfigError("--first-last-layers-bf16 with --fp8-recipe delayed (Megatron's default): TransformerConfig "
                          "raises 'Delayed scaling does not support first / last layer in BF16.' Add --fp8-recipe "
                          "tensorwise (or another recipe) or drop --first-last-layers-bf16.")
    _check_bf16_edge_layers(flags)


def _check_bf16_edge_layers(flags: FlagValues) -> None:
    """TransformerConfig.__post_init__ (fp8 with first_last_layers_bf16; 3db741160b, with the flags): each of
    --num-layers-at-start-in-bf16 and --num-layers-at-end-in-bf16 (default 1) must lie between 0 and num_layers //
    pipeline size."""
    if not (flags.get("first_last_layers_bf16") and flags.get("fp8_format")):
        return
    per_stage = int(flags.get("num_layers") or 0) // int(flags.get("pipeline_model_parallel_size") or 1)
    for dest, flag in (("num_layers_at_start_in_bf16", "--num-layers-at-start-in-bf16"),
                       ("num_layers_at_end_in_bf16", "--num-layers-at-end-in-bf16")):
        value = flags.get(dest)
        if value is not None and int(value) > per_stage:
            raise ConfigError(f"{flag} {value} (argv) with --num-layers {flags.get('num_layers')} over "
                              f"--pipeline-model-parallel-size {flags.get('pipeline_model_parallel_size') or 1}: "
                              f"TransformerConfig raises '{dest} ({value}) must be between 0 and number of layers per "
                              f"pipeline stage ({per_stage})'. Use at most {per_stage}.")


def _check_feature_pairs(flags: FlagValues) -> list[str]:
    """--optimizer-cpu-offload needs --use-precision-aware-optimizer (60007c93d3, 2025-02, with the flag);
    --enable-cuda-graph / --external-cuda-graph, deprecated spellings of --cuda-graph-impl, exclude any impl but none
    (5769804591, 2025-10, with --cuda-graph-impl), and each other since 2b6b46b796 (2025-08; a warning, the releases
    of 2025-03 to then take both)."""
    if flags.get("optimizer_cpu_offload") and not flags.get("use_precision_aware_optimizer"):
        raise ConfigError("--optimizer-cpu-offload without --use-precision-aware-optimizer: Megatron's validate_args "
                          "asserts 'The optimizer cpu offload must be used in conjunction with "
                          "`--use-precision-aware-optimizer`'. Add it.")
    old = [f for f, d in (("--enable-cuda-graph", "enable_cuda_graph"), ("--external-cuda-graph", "external_cuda_graph"))
           if flags.get(d)]
    impl = flags.get("cuda_graph_impl", "none")
    if old and impl != "none":
        raise ConfigError(f"{' and '.join(old)} with --cuda-graph-impl {impl}: Megatron's validate_args asserts 'Do not "
                          "use --enable-cuda-graph or --external-cuda-graph with --cuda-graph-impl'. Keep --cuda-graph-impl "
                          "(local was --enable-cuda-graph, transformer_engine --external-cuda-graph).")
    if len(old) == 2:
        return ["--enable-cuda-graph and --external-cuda-graph: Megatron-LM since 2025-08 stops at start-up "
                "('enable_cuda_graph and external_cuda_graph cannot be enabled at the same time'); CUDA graphs are "
                "not modelled either way. Keep one"]
    return []


DTYPE_FLAGS = ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
"""The precision-aware optimizer's dtype flags (arguments.py, default fp32 each)."""


def _check_precision_aware_optimizer(flags: FlagValues) -> None:
    """OptimizerConfig.__post_init__ asserts Adam and the distributed optimizer for --use-precision-aware-optimizer
    (47a175b4c4, 2024-12, with the flag; HEAD raises the second in get_megatron_optimizer). Megatron FSDP is exempt:
    HEAD's validate_args turns the distributed optimizer on for it. Without the flag it asserts every
    --main-grads-dtype / --main-params-dtype / --exp-avg(-sq)-dtype is fp32 ('... can only be fp32 when not using
    precision-aware optimizer'); under --bf16, validate_args asserts --main-grads-dtype fp32 with
    --accumulate-allreduce-grads-in-fp32."""
    lowered = [f"{flags.seen_flags[d]} {flags.get(d)}" for d in DTYPE_FLAGS if flags.get(d, "fp32") != "fp32"]
    if not flags.get("use_precision_aware_optimizer"):
        if lowered:
            raise ConfigError(f"{', '.join(lowered)} without --use-precision-aware-optimizer: Megatron's OptimizerConfig "
                              "asserts these dtypes 'can only be fp32 when not using precision-aware optimizer'. Add "
                              "--use-precision-aware-optimizer (with --use-distributed-optimizer) or drop them.")
        return
    if flags.get("bf16") and flags.get("accumulate_allreduce_grads_in_fp32") and flags.get("main_grads_dtype") == "bf16":
        raise ConfigError("--main-grads-dtype bf16 with --accumulate-allreduce-grads-in-fp32: Megatron's validate_args "
                          "asserts '--main-grads-dtype can only be fp32 when --accumulate-allreduce-grads-in-fp32 is "
                          "set'. Drop one of them.")
    name = flags.get("optimizer", "adam")
    if name != "adam":
        raise ConfigError(f"--use-precision-aware-optimizer with --optimizer {name}: Megatron's OptimizerConfig asserts "
                          "'--use-precision-aware-optimizer only supported with adam' (--optimizer-cpu-offload needs "
                          "it too). Use --optimizer adam or drop the precision-aware optimizer and the offload.")
    if not (flags.get("use_distributed_optimizer") or flags.get("use_megatron_fsdp")):
        raise ConfigError("--use-precision-aware-optimizer without --use-distributed-optimizer: Megatron raises "
                          "'--use-precision-aware-optimizer only supported with distributed optimizer' (OptimizerConfig, "
                          "get_megatron_optimizer). Add --use-distributed-optimizer or drop the flag.")


def _check_muon(flags: FlagValues) -> list[str]:
    """--optimizer muon / dist_muon (core_v0.16.0 on, 5548cdc57b 2026-01): every release asserts no Torch-FSDP2 and no
    Megatron FSDP ('Muon optimizer does not support ...'; core_v0.18.0 on: 'Emerging optimizer does not support ...'
    for every optimizer but sgd / adam, so also soap and adaptive_muon, which came with it) and --ckpt-format torch or
    torch_dist. core_v0.16.x asserts no --use-distributed-optimizer and no overlapped gradient reduce / parameter
    gather; core_v0.17.x the same, the overlap ones for `muon` only ('Use dist_muon instead'); core_v0.18.0 on turn the
    distributed optimizer into the layer-wise one (5b512b45d1, 2026-04): a warning naming the releases that refuse."""
    name = str(flags.get("optimizer", "adam"))
    if "muon" not in name and name != "soap":
        return []
    fsdp = [f for f, d in (("--use-torch-fsdp2", "use_torch_fsdp2"), ("--use-megatron-fsdp", "use_megatron_fsdp"))
            if flags.get(d)]
    if fsdp:  # (its --ckpt-format torch / torch_dist assert: the other formats need an FSDP, refused elsewhere)
        raise ConfigError(f"--optimizer {name} with {' and '.join(fsdp)}: Megatron's validate_args asserts 'Muon "
                          "optimizer does not support Torch-FSDP2 / Megatron-FSDP for now' (core_v0.18.0 on: "
                          "'Emerging optimizer does not support ...'). Drop "
                          f"{' and '.join(fsdp)} or use --optimizer adam.")
    distopt = bool(flags.get("use_distributed_optimizer"))
    overlap = [f for f, d in (("--overlap-grad-reduce", "overlap_grad_reduce"),
                              ("--overlap-param-gather", "overlap_param_gather")) if flags.get(d)]
    if name not in ("muon", "dist_muon") or not (distopt or overlap):
        return []
    given = ["--use-distributed-optimizer"] * distopt + overlap
    refusing = "core_v0.16 / 0.17 stop" if distopt or name == "muon" else "core_v0.16 stops"
    return [f"--optimizer {name} with {', '.join(given)}: Megatron-LM {refusing} at start-up ('Muon optimizer does "
            "not support ...'); core_v0.18.0 and later run it" + (" (the distributed optimizer becomes the layer-wise "
            "one). Priced as Adam with the distributed optimizer" if distopt else ". Priced as Adam")]


def _check_hierarchical_cp(script_args: Sequence[str], parallel: ParallelLayout) -> None:
    """validate_args asserts context_parallel_size == prod(--hierarchical-context-parallel-sizes) (645c329d07,
    2024-11, with the flag)."""
    sizes = list_values(script_args, "--hierarchical-context-parallel-sizes")
    if not sizes:
        return
    try:
        product = 1
        for size in sizes:
            product *= int(size)
    except ValueError:
        raise ConfigError(f"--hierarchical-context-parallel-sizes {' '.join(sizes)}: integers expected (argparse "
                          "'invalid int value'). Give the sizes as integers.") from None
    if product != parallel.cp:
        raise ConfigError(f"--hierarchical-context-parallel-sizes {' '.join(sizes)} multiply to {product}, not "
                          f"context-parallel-size {parallel.cp}: Megatron's validate_args asserts context_parallel_size "
                          "== prod(hierarchical_context_parallel_sizes). Make them agree.")


def _check_router(flags: FlagValues, script_args: Sequence[str]) -> None:
    """TransformerConfig.__post_init__, each rule with its flags: --moe-router-enable-expert-bias needs the sigmoid
    score function (c6e3b0c5bb, 2025-02; --moe-router-score-function defaults to softmax) or sqrtsoftplus, which came
    with its own permission (eb80b74912, 2026-04); group-limited routing
    (b1022a3230, 2025-02) needs --moe-router-num-groups dividing the experts and at least --moe-router-group-topk."""
    score = flags.get("moe_router_score_function", "softmax")
    if _given(script_args, "--moe-router-enable-expert-bias") and score not in ("sigmoid", "sqrtsoftplus"):
        raise ConfigError(f"--moe-router-enable-expert-bias with --moe-router-score-function {score}: Megatron raises "
                          "'Expert bias for aux-loss-free routing only supports sigmoid score function' (HEAD: "
                          "'sigmoid' and 'sqrtsoftplus'). Add --moe-router-score-function sigmoid.")
    experts, groups, group_topk = flags.get("num_experts"), flags.get("moe_router_num_groups"), flags.get("moe_router_group_topk")
    if not (experts and group_topk):
        return
    if not groups:
        raise ConfigError(f"--moe-router-group-topk {group_topk} without --moe-router-num-groups: Megatron raises 'When "
                          "using group limited routing, moe_router_num_groups must be specified'. Add it.")
    if experts % groups or group_topk > groups:
        raise ConfigError(f"--num-experts {experts}, --moe-router-num-groups {groups}, --moe-router-group-topk {group_topk}: "
                          "Megatron asserts the experts split evenly into the groups and the group top-k is at most the "
                          "number of groups (TransformerConfig). Change the group settings.")


def _check_rampup(flags: FlagValues, script_args: Sequence[str], dp: int) -> None:
    """--rampup-batch-size START INCREMENT SAMPLES, in the releases that have it (to core_v0.17; core_v0.18 replaced
    it with --step-batch-size-schedule, c9e03d0c3b): validate_args asserts 'expected no batch-size rampup for
    iteration-based training' (22ab91bbf9, 2020-12), and RampupBatchsizeNumMicroBatchesCalculator
    (core/num_microbatches_calculator.py) positive START and INCREMENT, non-negative SAMPLES, GBS - START a
    non-negative multiple of INCREMENT; its __init__ divides SAMPLES by (GBS - START) / INCREMENT and update() the
    consumed samples by SAMPLES per increment, so START = GBS or SAMPLES = 0 stop the job with a ZeroDivisionError;
    and at every step (update(..., consistency_check=True)) the step's batch must divide by MBS x DP unless
    --decrease-batch-size-if-needed (frameworks/megatron_rampup.py: which batches the steps run at)."""
    words = flags.get("rampup_batch_size")
    if not words:
        return
    ramp = " ".join(words)
    iters = _number(script_args, "--train-iters")
    if iters:
        raise ConfigError(f"--rampup-batch-size {ramp} with --train-iters {iters:g}: Megatron's validate_args "
                          "asserts 'expected no batch-size rampup for iteration-based training'. Give --train-samples "
                          "(and the --lr-*-samples forms) instead.")
    try:
        start, step, samples = (int(w) for w in words)
    except ValueError:
        raise ConfigError(f"--rampup-batch-size {ramp}: three integers expected (start batch size, "
                          "increment, ramp-up samples).") from None
    mbs = flags.get("micro_batch_size", 1)
    gbs = flags.get("global_batch_size", mbs * dp)
    if start <= 0 or step <= 0 or samples < 0 or gbs < start or (gbs - start) % step:
        raise ConfigError(f"--rampup-batch-size {ramp} with global batch size {gbs}: Megatron's ramp-up "
                          "calculator asserts a positive start and increment, non-negative ramp-up samples and "
                          "(global - start) a non-negative multiple of the increment. Change the ramp-up or "
                          "--global-batch-size.")
    if start == gbs or samples == 0:
        raise ConfigError(f"--rampup-batch-size {ramp} with global batch size {gbs}: "
                          f"{'the ramp has no increments' if start == gbs else 'the ramp lasts 0 samples'}, and "
                          "Megatron's ramp-up calculator divides by that (ZeroDivisionError at start-up). Start below "
                          "the global batch with a positive number of ramp-up samples, or drop --rampup-batch-size.")
    if _given(script_args, "--decrease-batch-size-if-needed"):
        return
    divisor = rampup_divisor(words, gbs)
    if divisor % (mbs * dp):
        raise ConfigError(f"--rampup-batch-size {ramp} with global batch size {gbs}: the ramp-up runs steps at "
                          f"global batches whose greatest common divisor is {divisor}, not a multiple of micro batch "
                          f"size {mbs} x data parallel size {dp} = {mbs * dp}: Megatron asserts each step's batch is "
                          "('current global batch size ... is not divisible by micro-batch-size times data parallel "
                          "size'). Choose START and INCREMENT multiples of it, or add --decrease-batch-size-if-needed.")


def _check_batch_flags(flags: FlagValues, script_args: Sequence[str], dp: int) -> list[str]:
    """The batch rules of Megatron-LM core_v0.18.0 on (HEAD d98e8a6; core_v0.16.1 and core_v0.17 have neither flag nor
    check: their arguments.py has no eval_global_batch_size):
    - validate_args (#4014, d85365bd): with no --global-batch-size (a --step-batch-size-schedule gives none) it sets
      args.global_batch_size = MBS x DP, then --eval-global-batch-size defaults to that global batch and
      --eval-micro-batch-size to the micro-batch, and asserts eval_global_batch_size % (eval_micro_batch_size x DP
      [x gtp_weight_remat_size: since df197a816f, 2026-08, derived from --tensor-parallel-num-weight-shards, which
      llmperf does not model]) == 0, whatever --decrease-batch-size-if-needed says. With an eval flag or a schedule
      (flags only those releases have) a batch it refuses is an error; with --decrease-batch-size-if-needed alone
      (core_v0.16.1 has it: ConstantNumMicroBatchesCalculator rounds the batch down and runs) a warning. Without any
      of these the rule is the global batch's own (validation._check_batch): not repeated.
    - StepBatchsizeNumMicroBatchesCalculator.__init__ raises ValueError('Step batch size schedules do not support
      decrease_batch_size_if_needed')."""
    decrease = bool(flags.get("decrease_batch_size_if_needed"))
    if decrease and flags.has("step_batch_size_schedule"):
        raise ConfigError("--step-batch-size-schedule with --decrease-batch-size-if-needed: Megatron's "
                          "StepBatchsizeNumMicroBatchesCalculator raises 'Step batch size schedules do not support "
                          "decrease_batch_size_if_needed' (megatron/core/num_microbatches_calculator.py). Drop "
                          "--decrease-batch-size-if-needed and give batches micro-batch x DP divides.")
    eval_global = _number(script_args, "--eval-global-batch-size")
    eval_micro = _number(script_args, "--eval-micro-batch-size")
    if eval_global is None and eval_micro is None and not decrease:
        return []
    mbs = flags.get("micro_batch_size", 1)
    gbs = flags.get("global_batch_size", mbs * dp)  # a schedule's batch is not args.global_batch_size here
    e_global, e_micro = int(eval_global or gbs), int(eval_micro or mbs)
    if e_global % (e_micro * dp) == 0:
        return []
    if eval_global is None and eval_micro is None:  # --decrease-batch-size-if-needed alone, older releases run it
        return [f"--decrease-batch-size-if-needed with global batch size {gbs}: Megatron-LM core_v0.17 and earlier "
                f"run it rounded down (priced so), but core_v0.18.0 and later refuse it at start-up: validate_args "
                f"asserts 'eval_global_batch_size ({gbs}) must be divisible by eval_micro_batch_size ({mbs}) * "
                f"data_parallel_size ({dp})', the eval batch defaulting to the unrounded global batch. On those "
                f"releases add --eval-global-batch-size with a multiple of {mbs * dp}"]
    where = "--eval-global-batch-size" if eval_global else ("--global-batch-size" if flags.has(
        "global_batch_size") else f"the default MBS x DP = {mbs} x {dp}")
    raise ConfigError(f"eval global batch size {e_global} ({where}) is not divisible by eval micro batch size "
                      f"{e_micro} x data parallel size {dp} = {e_micro * dp}: Megatron-LM's validate_args asserts "
                      "'eval_global_batch_size ... must be divisible by eval_micro_batch_size * data_parallel_size' "
                      "at start-up (core_v0.18.0 on; --decrease-batch-size-if-needed rounds only the training "
                      f"batch). Give --eval-global-batch-size a multiple of {e_micro * dp}"
                      + (" or a --global-batch-size micro x DP divides." if not eval_global
                         and not flags.has("step_batch_size_schedule") else "."))


def _weight_shard_warnings(script_args: Sequence[str], parallel: ParallelLayout) -> list[str]:
    """Generalized Tensor Parallelism (--tensor-parallel-num-weight-shards, Megatron-LM core_v0.19.0 on, #4967;
    no --gtp-weight-remat-size flag in any release: validate_args derives gtp_weight_remat_size = shards // TP,
    model_parallel_config.resolve_tensor_parallel_weight_shards) adds a model-parallel axis: data_parallel_size =
    world // (TP x PP x CP x gtp), and the eval batch must divide by eval micro x DP x gtp (df197a816f). llmperf does
    not model the axis: one warning, with the DP Megatron would run. The flag's own rules refuse (exit 2):
    resolve_tensor_parallel_weight_shards raises ValueError for shards below TP or not divisible by it, and
    validate_args asserts 'world size (W) is not divisible by total_model_size' (TP x PP x CP x gtp)."""
    shards = _number(script_args, "--tensor-parallel-num-weight-shards")
    if shards is None or shards == parallel.tp:
        return []
    tp, shards = parallel.tp, int(shards)
    if shards < tp or shards % tp:
        raise ConfigError(f"--tensor-parallel-num-weight-shards {shards} with --tensor-model-parallel-size {tp}: "
                          "Megatron-LM's resolve_tensor_parallel_weight_shards (core/model_parallel_config.py) raises "
                          f"'tensor_parallel_num_weight_shards ({shards}) must be "
                          + (f">= tensor_model_parallel_size ({tp})'" if shards < tp else
                             f"divisible by tensor_model_parallel_size ({tp})'") + f". Give a multiple of {tp}.")
    gtp = shards // tp
    if parallel.dp % gtp:
        world = parallel.dp * tp * parallel.pp * parallel.cp
        raise ConfigError(f"--tensor-parallel-num-weight-shards {shards} ({gtp} weight shards per TP rank): "
                          f"Megatron-LM's validate_args asserts 'world size ({world}) is not divisible by "
                          f"total_model_size' = TP x PP x CP x {gtp} = {world // parallel.dp * gtp}. Use fewer weight "
                          "shards or more GPUs.")
    return [f"--tensor-parallel-num-weight-shards {int(shards)} (Generalized Tensor Parallelism, {gtp} weight shards "
            f"per TP rank) is not modelled: Megatron's data-parallel size is then world / (TP x PP x CP x {gtp}) = "
            f"{parallel.dp // gtp}, its eval batch must divide by eval micro x DP x {gtp}; priced as DP {parallel.dp} "
            "without the weight-shard axis"]


def _check_distopt_instances(flags: FlagValues, parallel: ParallelLayout) -> list[str]:
    """parallel_state.py initialize_model_parallel asserts '(data_parallel_size * context_parallel_size) %
    num_distributed_optimizer_instances == 0' ('Data parallel size should be divisible by partial DistOpt shard
    factor'): each instance shards the optimizer state over dp x cp / N ranks (schedule/memory.py); the DDP wrapper
    asserts 'Partial DistOpt cannot be used without DistOpt' (both with the flag, bb84eb93fa 2024-11; the FSDPs wrap
    their own). The same for the expert data-parallel size, world / (PP x expert TP x EP), only since 8c1e094afe
    (2025-04; a warning: core_v0.12 refused expert parallelism with N > 1, core_v0.10 and v0.11 start either way)."""
    n = int(flags.get("num_distributed_optimizer_instances") or 1)
    sharded = any(flags.get(d) for d in ("use_distributed_optimizer", "use_torch_fsdp2", "use_megatron_fsdp"))
    if n > 1 and not sharded:
        raise ConfigError(f"--num-distributed-optimizer-instances {n} without --use-distributed-optimizer: Megatron's "
                          "DistributedDataParallel asserts 'Partial DistOpt cannot be used without DistOpt'. Add "
                          "--use-distributed-optimizer or drop the flag.")
    if n < 1 or (parallel.dp * parallel.cp) % n:
        raise ConfigError(f"--num-distributed-optimizer-instances {n} does not divide data-parallel x context-parallel "
                          f"size {parallel.dp} x {parallel.cp} = {parallel.dp * parallel.cp}: Megatron's "
                          "initialize_model_parallel asserts 'Data parallel size should be divisible by partial DistOpt "
                          "shard factor'. Use a divisor of it.")
    expert_dp = parallel.tp * parallel.cp * parallel.dp // (parallel.etp * parallel.ep)
    if expert_dp % n:
        return [f"--num-distributed-optimizer-instances {n} does not divide the expert data-parallel size {expert_dp} "
                f"(world / (PP x expert TP {parallel.etp} x EP {parallel.ep})): Megatron-LM since 2025-04 stops at "
                "start-up ('Expert data parallel size should be divisible by partial DistOpt shard factor'); core_v0.10 "
                "and v0.11 start it (core_v0.12 too at EP 1). Use a divisor of it"]
    return []


def _check_position_embedding(flags: FlagValues) -> None:
    """validate_args, after --use-rotary-position-embeddings has set rope: RuntimeError('--no-position-embedding is
    deprecated, use --position-embedding-type') for any other type (c156ab1ee4, 2023-07; core_v0.16.1 and HEAD)."""
    kind = "rope" if flags.get("use_rotary_position_embeddings") else flags.get("position_embedding_type", "learned_absolute")
    if flags.get("add_position_embedding", True) is False and kind != "rope":
        raise ConfigError(f"{flags.seen_flags['add_position_embedding']} with --position-embedding-type {kind}: Megatron-LM "
                          "raises '--no-position-embedding is deprecated, use --position-embedding-type' (validate_args, "
                          "since 2023-07; it is only accepted beside rope). Use --position-embedding-type none instead.")


def _fp8_param_warnings(flags: FlagValues) -> list[str]:
    """TransformerConfig raises 'fp8_param must be used together with fp8 mode' (fp8_param = --fp8-param-gather,
    arguments.py core_transformer_config_from_args) since 062c833392 (2025-04); the releases of 2024-09 to then run
    the job with the flag doing nothing, as llmperf prices it. validate_args asserts --fp8-recipe delayed (the
    default) for --fp8-param-gather with --optimizer-cpu-offload since e38ba9e8dc (2025-07; both flags are older)."""
    if not flags.get("fp8_param_gather"):
        return []
    out = []
    if not any(flags.get(d) for d in ("fp8_format", "fp8_e4m3", "fp8_hybrid")):
        out.append("--fp8-param-gather without --fp8-format: Megatron-LM since 2025-04 stops at start-up "
                   "(TransformerConfig: 'fp8_param must be used together with fp8 mode'); older releases ignore the "
                   "flag, as priced. Add --fp8-format or drop --fp8-param-gather")
    recipe = flags.get("fp8_recipe") or "delayed"
    if flags.get("optimizer_cpu_offload") and recipe != "delayed":
        out.append(f"--fp8-param-gather and --optimizer-cpu-offload with --fp8-recipe {recipe}: Megatron-LM since "
                   "2025-07 stops at start-up ('When `--fp8-param-gather` is enabled, the optimizer cpu offload must be "
                   "used in conjunction with `--fp8-recipe delayed`'). Use --fp8-recipe delayed or drop one of them")
    return out


def _checkpoint_activations_warnings(flags: FlagValues) -> list[str]:
    """validate_args prints '--checkpoint-activations is no longer valid, use --recompute-activations, ...' and calls
    exit() since c1e0689d92 (2021-08): the job ends before training. Releases before it (and Megatron-DeepSpeed,
    whose --checkpoint-activations is live) recompute every layer, as llmperf prices it."""
    if not flags.get("checkpoint_activations"):
        return []
    return ["--checkpoint-activations: Megatron-LM since 2021-08 prints '--checkpoint-activations is no longer valid' "
            "and exits before training; older releases recompute every layer, as priced. Use --recompute-granularity "
            "full --recompute-method uniform --recompute-num-layers 1 (or --recompute-activations for selective)"]


def check_validate_args(flags: FlagValues, script_args: Sequence[str], parallel: ParallelLayout,
                        ds_flavour: bool = False) -> list[str]:
    """ConfigError for a command that validate_args refuses on the rules of this module; warnings for those only
    Megatron-LM releases since 2025 enforce. Megatron-DeepSpeed (`ds_flavour`) forked with the rules of 2020-2021
    (its megatron/arguments.py validate_args asserts the first six); the others are Megatron-LM's."""
    if _value(script_args, "--warmup") is not None:
        raise ConfigError("--warmup is no longer accepted (validate_args asserts it is unset: '--warmup argument is no "
                          "longer valid'); use --lr-warmup-fraction (or --lr-warmup-iters).")
    _check_training_length(script_args)
    warnings = _check_lr_and_save(script_args)
    _check_weight_decay(script_args)
    _check_mixed_precision(flags, script_args)
    if ds_flavour:
        return warnings
    _check_kernels(flags, script_args)
    _check_mla_local_core(flags, script_args)
    _check_low_precision(flags, script_args)
    warnings += _check_feature_pairs(flags)
    _check_precision_aware_optimizer(flags)
    warnings += _check_muon(flags)
    warnings += check_distillation(flags, script_args, parallel)
    warnings += unpriced_layer_warnings(script_args, parallel)
    _check_hierarchical_cp(script_args, parallel)
    warnings += _check_distopt_instances(flags, parallel)
    _check_rampup(flags, script_args, parallel.dp)
    warnings += _check_batch_flags(flags, script_args, parallel.dp)
    warnings += _weight_shard_warnings(script_args, parallel)
    _check_router(flags, script_args)
    _check_position_embedding(flags)
    return warnings + _fp8_param_warnings(flags) + _checkpoint_activations_warnings(flags)

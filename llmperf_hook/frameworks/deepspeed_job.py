"""DeepSpeed's side of a job: ZeRO/offload/overlap settings, the batch triad (with Hugging Face Trainer's "auto"
values), and how they merge with Megatron's flags for Megatron-DeepSpeed.

HF "auto" resolution follows transformers' integrations/deepspeed.py `trainer_config_process`/`trainer_config_finalize`:
micro = --per_device_train_batch_size (default 8), accumulation = --gradient_accumulation_steps (default 1),
train_batch_size = world * micro * accumulation, gradient_clipping = --max_grad_norm (default 1.0),
reduce_bucket_size = h*h, stage3_prefetch_bucket_size = 0.9*h*h; an explicit ds value that disagrees with the
Trainer's argument is an error there ("Please correct the following DeepSpeed config values that mismatch").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.accelerate_plugin import INSERTED_GAS
from llmperf_hook.frameworks.deepspeed_config import AUTO, DsSettings, resolve_ds_batch
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.training_config import BatchConfig, OptimizerConfig, ParallelLayout
from llmperf_hook.provenance import Source, SourceKind

# deepspeed/runtime/zero/config.py defaults (elements).
_REDUCE_BUCKET, _ALLGATHER_BUCKET, _PREFETCH_BUCKET, _MAX_LIVE = 500_000_000, 500_000_000, 50_000_000, 1_000_000_000


def _bucket(value: int | str | None, default: int, auto_value: int) -> int:
    return auto_value if value == AUTO else default if value is None else int(value)


def ds_optimizer(ds: DsSettings, base: OptimizerConfig, hidden: int, clip_auto: float, src: dict[str, Source],
                 hf_fill: bool = True, multi_rank_release: bool = True, pinned_release: bool = True,
                 native_pinning: bool = False, zero1_noncontiguous: bool = False) -> OptimizerConfig:
    """Merge ZeRO settings into `base`; ZeRO-0 keeps DeepSpeed's plain data-parallel all-reduce. `hf_fill`: the
    Hugging Face Trainer / Accelerate replace "auto" reduce_bucket_size with h*h and (ZeRO-3) the prefetch bucket
    with 0.9*h*h (transformers trainer_config_finalize); elsewhere DeepSpeed drops "auto" and keeps its default,
    as it does for allgather_bucket_size and stage3_max_live_parameters, which nobody fills. `multi_rank_release`:
    the job's DeepSpeed has use_multi_rank_bucket_allreduce (deepspeed_release.multi_rank_bucket_release).
    `pinned_release`: its offload sections pin host memory unless told not to
    (deepspeed_release.pinned_offload_release). `native_pinning`: it pins through DS_PIN_MEMORY_BACKEND=native
    (deepspeed_release.native_pinned_memory). `zero1_noncontiguous`: the job's DeepSpeed turns contiguous gradients
    off at stage 1 (deepspeed_release.zero1_noncontiguous_release). Without contiguous gradients (the ds_config's, or
    that release rule; offload_optimizer forces them on, stage_1_and_2.py `contiguous_gradients or cpu_offload`)
    reduce_ipg_grads all-reduces each bucket (buffered_reduce_fallback) in every release."""
    overlap = ds.overlap_comm if ds.overlap_comm is not None else ds.zero_stage == 3
    bucket_allreduce = not ds.reduce_scatter or (multi_rank_release and ds.multi_rank_bucket_allreduce)
    contiguous = ds.contiguous_gradients or ds.offload_optimizer != "none"
    zero2_allreduce = bucket_allreduce or not contiguous
    zero1_allreduce = zero2_allreduce or (zero1_noncontiguous and ds.offload_optimizer == "none")
    clip = clip_auto if ds.gradient_clipping == AUTO else float(ds.gradient_clipping)
    src["zero_stage"] = ds.sources.get("zero_stage", Source(SourceKind.DEFAULT, "DeepSpeed: stage 0"))
    # provenance_fill would give the same later; deepspeed_release.as_released records it for tune before replacing it
    src.setdefault("overlap_grad_reduce", ds.sources.get(
        "overlap_comm", Source(SourceKind.DEFAULT, "DeepSpeed: overlap_comm on at ZeRO-3 only")))
    reduce_auto, prefetch_auto = (hidden * hidden, int(0.9 * hidden * hidden)) if hf_fill else (_REDUCE_BUCKET, _PREFETCH_BUCKET)
    return replace(
        base, zero_stage=ds.zero_stage, offload_optimizer=ds.offload_optimizer, offload_param=ds.offload_param,  # type: ignore[arg-type]
        overlap_grad_reduce=overlap, contiguous_gradients=ds.contiguous_gradients,
        zero_grad_allreduce={1: zero1_allreduce, 2: zero2_allreduce}.get(ds.zero_stage, False),
        zero_bucket_allreduce=zero2_allreduce, zero1_bucket_allreduce=zero1_allreduce,
        grad_bucket_size_elems=_bucket(ds.reduce_bucket_size, _REDUCE_BUCKET, reduce_auto),
        allgather_bucket_size_elems=_bucket(ds.allgather_bucket_size, _ALLGATHER_BUCKET, _ALLGATHER_BUCKET),
        stage3_prefetch_bucket_size_elems=_bucket(ds.stage3_prefetch_bucket_size, _PREFETCH_BUCKET, prefetch_auto),
        stage3_max_live_parameters=_bucket(ds.stage3_max_live_parameters, _MAX_LIVE, _MAX_LIVE),
        stage3_max_reuse_distance=_bucket(ds.stage3_max_reuse_distance, _MAX_LIVE, _MAX_LIVE),  # also 1e9 by default
        nvme_param_buffer_elems=ds.nvme_param_buffer_elems, nvme_param_max_in_cpu_elems=ds.nvme_param_max_in_cpu_elems,
        nvme_param_buffer_count=ds.nvme_param_buffer_count, nvme_optimizer_buffer_count=ds.nvme_optimizer_buffer_count,
        offload_optimizer_pin_memory=pinned_release if ds.offload_optimizer_pin_memory is None
        else ds.offload_optimizer_pin_memory,
        offload_param_pin_memory=pinned_release if ds.offload_param_pin_memory is None else ds.offload_param_pin_memory,
        native_pinned_memory=native_pinning,
        name=ds.optimizer_name or base.name,  # type: ignore[arg-type]
        torch_optimizer_impl=ds.torch_optimizer_impl, torch_weight_decay=ds.torch_weight_decay,
        gradient_clipping=clip, **_zeropp_fields(ds, src),
    )


def _zeropp_fields(ds: DsSettings, src: dict[str, Source]) -> dict[str, Any]:
    """ZeRO++ switches, dtypes of the gradient accumulation / reduction and the partial offload, with their sources."""
    out: dict[str, Any] = {
        "zero_hpz_partition_size": ds.zero_hpz_partition_size, "zero_quantized_weights": ds.zero_quantized_weights,
        "zero_quantized_gradients": ds.zero_quantized_gradients, "grad_accum_dtype": ds.grad_accum_dtype,
        "grad_comm_dtype": ds.communication_data_type, "sub_group_size_elems": ds.sub_group_size,
        "offload_optimizer_ratio": ds.offload_optimizer_ratio if ds.offload_optimizer != "none" else 1.0,
    }
    for key, ds_key in (("zero_hpz_partition_size", "zero_hpz_partition_size"), ("grad_comm_dtype", "communication_data_type"),
                        ("zero_quantized_weights", "zero_quantized_weights"), ("grad_accum_dtype", "grad_accum_dtype"),
                        ("zero_quantized_gradients", "zero_quantized_gradients"),
                        ("offload_optimizer_ratio", "offload_optimizer_ratio"),
                        ("stage3_prefetch_bucket_size_elems", "stage3_prefetch_bucket_size"),
                        ("stage3_max_live_parameters", "stage3_max_live_parameters"),
                        ("stage3_max_reuse_distance", "stage3_max_reuse_distance"), ("optimizer_name", "optimizer_name"),
                        ("torch_optimizer_impl", "torch_optimizer_impl"), ("torch_weight_decay", "torch_weight_decay")):
        if ds_key in ds.sources:
            src[key] = ds.sources[ds_key]
    return out


def check_plain_deepspeed(ds: DsSettings, world: int) -> None:
    """A ds_config that reaches deepspeed.initialize as written (no Trainer / Accelerate fill-ins): gradient_clipping
    "auto" stays the string, which the engine compares with 0.0 at the first step (TypeError); then hpZ's groups."""
    if ds.gradient_clipping == AUTO:
        raise ConfigError(f"{ds.path} gradient_clipping is \"auto\": only the Hugging Face Trainer / Accelerate fill it; "
                          "a script calling deepspeed.initialize keeps the string and DeepSpeed's engine fails comparing it "
                          "with 0.0 at the first step. Give a number (1.0 is usual, 0 turns clipping off).")
    check_hpz(ds, world)


def check_hpz(ds: DsSettings, world: int) -> None:
    """ZeRO++ hpZ at stage 3: deepspeed/utils/groups.py _create_zero_param_parallel_group splits the world into
    groups of min(hpz, world) ranks and asserts the world divides evenly."""
    size = min(ds.zero_hpz_partition_size, world)
    if ds.zero_stage == 3 and size > 1 and world % size:
        raise ConfigError(f"{ds.path} zero_optimization.zero_hpz_partition_size {ds.zero_hpz_partition_size} does not divide "
                          f"the world size {world}; DeepSpeed builds hpZ groups of that many ranks and asserts "
                          f"'{world} is not divisible by {size}'. Use a divisor of {world} (usually the GPUs per node).")


def ds_precision(ds: DsSettings, flags: FlagValues, src: dict[str, Source]) -> str:
    """ds_config fp16/bf16 ("auto" -> the Trainer's --fp16/--bf16); neither -> fp32."""
    for name in ("bf16", "fp16"):
        value = getattr(ds, name)
        if value is True or (value == AUTO and flags.get(name)):
            src["precision"] = ds.sources.get(name, flags.source(name)) if value is True else flags.source(name)
            return name
    if ds.torch_autocast in ("bf16", "fp16"):
        src["precision"] = ds.sources["torch_autocast"]
        return ds.torch_autocast
    src["precision"] = Source(SourceKind.DEFAULT, f"{ds.path}: neither fp16 nor bf16 enabled (fp32)")
    return "fp32"


def megatron_ds_precision(argv: str, ds: DsSettings, flags: FlagValues, src: dict[str, Source],
                          warnings: list[str]) -> str:
    """Megatron-DeepSpeed under --deepspeed: get_model returns the bare model (megatron/training.py: `if
    args.deepspeed: return model`, before Float16Module) and deepspeed.initialize builds the engine from the ds_config,
    whose _configure_distributed_model casts the parameters to the section it enables (DeepSpeed 0.19.8
    runtime/engine.py: `check_dtype = torch.half if self.fp16_enabled() else torch.bfloat16`,
    _cast_module_mixed_precision; older releases module.half() / module.bfloat16()) and whose optimizer wrapper is
    that section's. So an enabled fp16 / bf16 section wins over --bf16 / --fp16 (`argv`); argv fp32 reads the file."""
    if argv == "fp32":
        return ds_precision(ds, flags, src)
    section = next((name for name in ("bf16", "fp16") if getattr(ds, name) is True), None)
    if section is None and ds.torch_autocast is None:
        warnings.append(f"--{argv} (argv) but {ds.path} enables neither fp16 nor bf16: DeepSpeed runs its fp32 engine "
                        f"(no cast, no {argv} optimizer wrapper) on the model Megatron built in {argv} (arguments.py "
                        "params_dtype) with Megatron's bare optimizer (megatron/optimizer: `if args.deepspeed: return "
                        f"optimizer`); priced as {argv} mixed precision"
                        + (f", though at ZeRO 0 that optimizer keeps no fp32 master copy and its Adam states in {argv} "
                           "(less memory than priced; ZeRO 1/2 keep fp32 partitions, stage_1_and_2.py)"
                           if ds.zero_stage == 0 else "") + f". Enable the {argv} section")
    if section is None or section == argv:
        return argv
    warnings.append(f"--{argv} (argv) but {ds.path} enables {section}: Megatron-DeepSpeed hands the model to DeepSpeed "
                    f"unwrapped, and its engine casts the parameters to {section} and steps its {section} optimizer "
                    f"(runtime/engine.py _configure_distributed_model); priced {section}. Megatron's own --{argv} "
                    "settings (params dtype at build, loss scaling, fused-kernel choices) still apply. Make them agree.")
    src["precision"] = ds.sources[section]
    return section


_PARTITION_KEYS = ("pipe_partitioned", "grad_partitioned")


def check_moe_pipe_partitioning(ds: DsSettings, num_experts: int, parallel: ParallelLayout) -> None:
    """An MoE model under DeepSpeed's PipelineEngine at PP > 1 and TP > 1 runs only with the ds_config's
    pipeline.pipe_partitioned and grad_partitioned both false. Megatron-DeepSpeed's GPTModelPipe (megatron/model/
    gpt_model.py __init__) asserts 'Pipe and/or Grad partitioning are not supported for MoE model' when the file sets
    either (read with default False): the engine partitions one tensor per stage boundary, and an MoE stage sends two
    that need gradients, its output and the aggregated MoE loss (bcedecd1). A key the file leaves out passes that check
    but is true in DeepSpeed (runtime/config.py get_pipeline_config): pipe/engine.py _exec_forward_pass then asserts
    that every output after the first needs no gradient, which the MoE loss does, and _exec_send_grads sends only the
    first tensor's gradient where the receiver waits for both."""
    if num_experts <= 1 or parallel.pp <= 1 or parallel.tp <= 1:
        return
    where = (f"an MoE model ({num_experts} experts) at pipeline-model-parallel-size {parallel.pp} and "
             f"tensor-model-parallel-size {parallel.tp} under DeepSpeed's PipelineEngine")
    fix = ("Set pipeline.pipe_partitioned and pipeline.grad_partitioned to false in it, or train at TP 1 or with "
           "--no-pipeline-parallel.")
    given = [f"pipeline.{key}" for key in _PARTITION_KEYS if getattr(ds, key)]
    if given:
        raise ConfigError(f"{ds.path} sets {' and '.join(given)} for {where}: Megatron-DeepSpeed's GPTModelPipe asserts "
                          f"'Pipe and/or Grad partitioning are not supported for MoE model' (megatron/model/"
                          f"gpt_model.py). {fix}")
    missing = [f"pipeline.{key}" for key in _PARTITION_KEYS if getattr(ds, key) is None]
    if missing:
        raise ConfigError(f"{ds.path} leaves out {' and '.join(missing)} for {where}: DeepSpeed takes an absent key "
                          "as true (runtime/config.py get_pipeline_config) and partitions only the first tensor a stage "
                          "sends (pipe/engine.py: _exec_forward_pass asserts the rest need no gradient, _exec_send_grads "
                          "sends the first one's alone), while an MoE stage also sends its MoE loss, which needs one. "
                          "Megatron-DeepSpeed's GPTModelPipe check reads an absent key as false and lets it through, so "
                          f"the job fails in its first step. {fix}")


def pipe_sends_partitioned(ds: DsSettings, warnings: list[str]) -> bool:
    """Whether DeepSpeed's PipelineEngine sends activations and gradients between stages in 1/TP slices, rebuilt by a
    TP all-gather on the receiver (pipe/engine.py: is_pipe_partitioned / is_grad_partitioned = model parallel and the
    ds_config's pipeline.pipe_partitioned / grad_partitioned, both true by default). Both false: whole tensors. One
    false is priced as both partitioned, with a warning (graph/build.py prices one send for both directions)."""
    values = [getattr(ds, key) is not False for key in _PARTITION_KEYS]
    if values[0] != values[1]:
        warnings.append(f"{ds.path} pipeline.pipe_partitioned {str(values[0]).lower()} with grad_partitioned "
                        f"{str(values[1]).lower()}: priced as both partitioned (1/TP sends rebuilt by a TP all-gather)")
    return any(values)


_HF_DEFAULTS = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "max_grad_norm": 1.0}


def _hf_arg(flags: FlagValues, dest: str) -> Any:
    return flags.get(dest, _HF_DEFAULTS.get(dest, False))


def hf_mismatches(ds: DsSettings, flags: FlagValues, world: int) -> None:
    """transformers HfTrainerDeepSpeedConfig.fill_match: an explicit ds value must equal the Trainer's argument
    (its default when not given), else the Trainer refuses to start; train_batch_size is held to `train_batch_size
    (calculated)` = args.world_size x per_device_train_batch_size x gradient_accumulation_steps
    (trainer_config_process), which the Trainer checks before DeepSpeed's own _batch_assertion could."""
    pairs = (("train_micro_batch_size_per_gpu", ds.micro_batch_size, "per_device_train_batch_size"),
             ("gradient_accumulation_steps", ds.gradient_accumulation_steps, "gradient_accumulation_steps"),
             ("gradient_clipping", ds.gradient_clipping if "gradient_clipping" in ds.sources else None, "max_grad_norm"),
             ("fp16.enabled", ds.fp16 if _in_file(ds, "fp16") else None, "fp16"),
             ("bf16.enabled", ds.bf16 if _in_file(ds, "bf16") else None, "bf16"))
    bad = [f"ds {key}={ds_value}{_not_in_file(ds, key)} vs hf --{dest} {_hf_arg(flags, dest)}"
           f"{'' if flags.has(dest) else ' (Trainer default)'}"
           for key, ds_value, dest in pairs if ds_value not in (None, AUTO) and ds_value != _hf_arg(flags, dest)]
    bad += _train_batch_mismatch(ds, flags, world)
    if bad:
        raise ConfigError(f"{ds.path} mismatches the Hugging Face Trainer's arguments ({'; '.join(bad)}); the Trainer refuses "
                          "mismatching DeepSpeed values. Set those keys to \"auto\" or make them equal.")


def _train_batch_mismatch(ds: DsSettings, flags: FlagValues, world: int) -> list[str]:
    """fill_match("train_batch_size", world x micro x accumulation, "train_batch_size (calculated)"), in the user's
    flags."""
    micro, gas = _hf_arg(flags, "per_device_train_batch_size"), _hf_arg(flags, "gradient_accumulation_steps")
    if ds.train_batch_size in (None, AUTO) or ds.train_batch_size == world * micro * gas:
        return []
    given = (("per_device_train_batch_size", micro), ("gradient_accumulation_steps", gas))
    named = " x ".join(f"{flags.seen_flags.get(dest, '--' + dest)} {value}{'' if flags.has(dest) else ' (default)'}"
                       for dest, value in given)
    return [f"ds train_batch_size={ds.train_batch_size} vs hf train_batch_size (calculated) {world * micro * gas} = "
            f"world size {world} x {named}"]


def _in_file(ds: DsSettings, key: str) -> bool:
    """A precision section the file holds: one accelerate's set_mixed_precision added comes after the Trainer's
    fill_match (accelerate_plugin.mixed_precision_source) and is held to nothing."""
    source = ds.sources.get(key)
    return source is not None and source.kind is SourceKind.CONFIG_FILE


def _not_in_file(ds: DsSettings, key: str) -> str:
    """` (where)` for a ds value the file itself does not hold (accelerate_plugin.INSERTED_GAS), else nothing."""
    source = ds.sources.get(key)
    return f" ({source.detail})" if source is not None and source.kind is not SourceKind.CONFIG_FILE else ""


_NO_BATCH = ("DeepSpeedConfig asserts 'Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided' "
             "(deepspeed/runtime/config.py _set_batch_related_parameters, edaa722 :942-983, every release)")


def check_batch_keys_given(ds: DsSettings, reader: str, fix: str) -> None:
    """A ds_config with neither train_batch_size nor train_micro_batch_size_per_gpu (gradient_accumulation_steps
    alone fixes nothing) reaches DeepSpeed without them: `reader` says who hands it over filling no absent key."""
    if ds.train_batch_size is None and ds.micro_batch_size is None:
        raise ConfigError(f"{ds.path} gives neither train_batch_size nor train_micro_batch_size_per_gpu: {reader}, and "
                          f"{_NO_BATCH} at deepspeed.initialize. {fix}")


def _trainer_accumulation(ds: DsSettings, flags: FlagValues) -> tuple[int, Source]:
    """The Trainer's micro-batches per optimizer step: its --gradient_accumulation_steps, which an explicit ds value
    equals (hf_mismatches). A file without the key gets 1 from accelerate's DeepSpeedPlugin after the Trainer's checks
    (TrainingArguments.__post_init__ runs trainer_config_process, then builds DeepSpeedPlugin(hf_ds_config=...),
    whose __post_init__ writes 1), but the Trainer still runs its own count between optimizer steps: it sets
    accelerate's sync_gradients every --gradient_accumulation_steps micro-batches (trainer.py _inner_training_loop
    do_sync_step), and DeepSpeedEngineWrapper.backward makes that DeepSpeed's accumulation boundary and steps the
    engine only there (accelerate 23c1d8db, #3630, v1.8.0). Older accelerate is warned of (hf_accumulation_warnings)."""
    gas = _hf_arg(flags, "gradient_accumulation_steps")
    if ds.gradient_accumulation_steps not in (None, AUTO):
        return gas, ds.sources["gradient_accumulation_steps"]
    if ds.gradient_accumulation_steps is None and gas != 1:
        return gas, Source(SourceKind.DERIVED, f"{flags.seen_flags['gradient_accumulation_steps']} {gas}: the Trainer's "
                           "sync_gradients, DeepSpeed's accumulation boundary (accelerate >= 1.8.0); the config's own is "
                           "the plugin's 1")
    return gas, flags.source("gradient_accumulation_steps", f"Trainer default {gas}")


def _accelerator_accumulation(ds: DsSettings, flags: FlagValues) -> tuple[int, Source]:
    """A script driving Accelerator: the ds_config's accumulation where it holds a number (accelerate's plugin writes 1
    into a file without the key, DeepSpeedPlugin.__post_init__): Accelerator._prepare_deepspeed fills only "auto" from
    the Accelerator's gradient_accumulation_steps and, on a mismatch, logs 'Gradient accumulation steps mismatch ...
    Using DeepSpeed's value.' and takes it (7f9c8cbe, v1.8.0), so accumulate() syncs, and DeepSpeed steps, every that
    many micro-batches; before v1.8.0 DeepSpeedEngineWrapper.backward called engine.step() after every micro-batch,
    and the engine's own count decided the same. "auto": the script's --gradient_accumulation_steps."""
    value = ds.gradient_accumulation_steps
    if value == AUTO:
        gas = _hf_arg(flags, "gradient_accumulation_steps")
        return gas, flags.source("gradient_accumulation_steps", f"script default {gas}")
    if value is None:
        return 1, INSERTED_GAS
    return int(value), ds.sources["gradient_accumulation_steps"]


def check_trainer_accumulation(ds: DsSettings, flags: FlagValues, world: int) -> None:
    """A Trainer --deepspeed file with train_batch_size but no gradient_accumulation_steps, given an accumulation > 1:
    trainer_config_process fills an "auto" train_batch_size with world x micro x accumulation (and checks a number
    against it), then accelerate's DeepSpeedPlugin writes gradient_accumulation_steps 1 into the same config, which
    Accelerator._prepare_deepspeed leaves (it fills only "auto", must_match=False): DeepSpeedConfig._batch_assertion
    fails at deepspeed.initialize (runtime/config.py). A number the Trainer itself refuses is left to resolve_ds_batch.
    A file without train_micro_batch_size_per_gpu too starts: _set_batch_related_parameters derives the engine's micro
    batch from train_batch_size and the 1 (train // world // 1), and the Trainer's dataloader runs its own."""
    gas = _hf_arg(flags, "gradient_accumulation_steps")
    if ds.gradient_accumulation_steps is not None or ds.train_batch_size is None or ds.micro_batch_size is None or \
            gas == 1:
        return
    micro = _hf_arg(flags, "per_device_train_batch_size")
    train = world * micro * gas
    if ds.train_batch_size not in (AUTO, train):
        return
    given = "\"auto\", which the Trainer fills with" if ds.train_batch_size == AUTO else "as the Trainer computes it:"
    raise ConfigError(
        f"{ds.path} has train_batch_size {given} world {world} x micro {micro} x {flags.seen_flags['gradient_accumulation_steps']} "
        f"{gas} = {train}, but no gradient_accumulation_steps: accelerate's DeepSpeedPlugin, which TrainingArguments "
        "builds after filling it, writes gradient_accumulation_steps 1 into the config (utils/dataclasses.py "
        "__post_init__), and deepspeed.initialize asserts 'train_batch_size is not equal to micro_batch_per_gpu * "
        f"gradient_acc_step * world_size {train} != {micro} * 1 * {world}' (runtime/config.py _batch_assertion). Add "
        f"\"gradient_accumulation_steps\": \"auto\" (or {gas}) to {ds.path}.")


def hf_accumulation_warnings(ds: DsSettings, flags: FlagValues, trainer: bool) -> list[str]:
    """What a ds_config without gradient_accumulation_steps (or the Accelerator's mismatching one) does to the
    script's --gradient_accumulation_steps, which runs as priced only on some accelerate releases or not at all."""
    gas, value = _hf_arg(flags, "gradient_accumulation_steps"), ds.gradient_accumulation_steps
    flag = flags.seen_flags.get("gradient_accumulation_steps", "--gradient_accumulation_steps")
    if trainer and value is None and gas != 1:
        return [f"{ds.path} has no gradient_accumulation_steps: accelerate's DeepSpeedPlugin writes 1 into it, and the "
                f"Trainer's {flag} {gas} reaches DeepSpeed as its accumulation boundary (accelerate 1.8.0 on: "
                "DeepSpeedEngineWrapper.backward), priced so; accelerate before 1.8.0, or an older Trainer loop that syncs "
                "through accelerator.accumulate() (whose count becomes DeepSpeed's 1), steps DeepSpeed's optimizer after "
                "every micro-batch with this config. Add \"gradient_accumulation_steps\": \"auto\" to run the same on "
                "every release"]
    ds_gas = 1 if value is None else value
    if trainer or ds_gas == AUTO or not flags.has("gradient_accumulation_steps") or int(ds_gas) == gas:
        return []
    inserted = value is None or ds.sources.get("gradient_accumulation_steps") is INSERTED_GAS
    return [f"{flag} {gas} is not what runs: {ds.path} gives gradient_accumulation_steps {ds_gas}"
            f"{' (accelerate writes 1 into a file without the key)' if inserted else ''}, and Accelerator "
            f"uses DeepSpeed's value ('Gradient accumulation steps mismatch'), so priced at {ds_gas} micro-batches per "
            "optimizer step. Set the key to \"auto\" for the script's value to run"]


def hf_batch(ds: DsSettings, flags: FlagValues, dp: int, world: int, src: dict[str, Source],
             trainer: bool = True) -> BatchConfig:
    """Hugging Face Trainer + DeepSpeed: "auto" from the Trainer's arguments, then DeepSpeed's triad; `trainer`
    False: a script driving Accelerate's Accelerator, which fills "auto" alike but checks no mismatch. Neither
    fills an absent batch key (transformers HfTrainerDeepSpeedConfig.fill_match, accelerate deepspeed_config_process;
    accelerate's DeepSpeedPlugin adds gradient_accumulation_steps alone, and the config it builds without a file
    holds the batch keys as "auto"): the Trainer's file without them is refused; a script driving Accelerator may
    assign them itself (ACCELERATOR_FILLS), so assemble warns instead (unfilled_batch_key_warnings)."""
    if trainer:
        check_batch_keys_given(ds, "the Hugging Face Trainer fills only the keys set to \"auto\" (transformers "
                               "HfTrainerDeepSpeedConfig.fill_match; under accelerate launch too: Trainer "
                               "propagate_args_to_deepspeed)",
                               "Add \"train_micro_batch_size_per_gpu\": \"auto\" and \"train_batch_size\": \"auto\" for "
                               "it to fill them from --per_device_train_batch_size and --gradient_accumulation_steps.")
        hf_mismatches(ds, flags, world)
        check_trainer_accumulation(ds, flags, world)
    micro = _hf_arg(flags, "per_device_train_batch_size")
    gas, src["num_microbatches"] = _trainer_accumulation(ds, flags) if trainer else _accelerator_accumulation(ds, flags)
    src["micro_batch_size"] = ds.sources.get("micro_batch_size") if ds.micro_batch_size not in (None, AUTO) else \
        flags.source("per_device_train_batch_size", f"Trainer default {micro}")
    train = ds.train_batch_size
    if train in (None, AUTO):
        train, src["global_batch_size"] = world * micro * gas, Source(SourceKind.DERIVED, f"HF auto: world * micro * accumulation = {world}*{micro}*{gas}")
    elif not trainer and ds.micro_batch_size is None:  # Accelerator fills no absent key: the dataloader's batch runs
        resolve_ds_batch(int(train), None, gas, dp, ds.path)  # DeepSpeed derives its own micro batch, and asserts
        train, src["global_batch_size"] = dp * micro * gas, Source(SourceKind.DERIVED, (
            f"DP x the script's micro x accumulation = {dp}*{micro}*{gas}: {ds.path} gives no train_micro_batch_size_per_gpu,"
            f" so DeepSpeed derives its own ({int(train)} // {dp} // {gas}), but the script's dataloader batches the data"))
    else:
        src["global_batch_size"] = ds.sources["train_batch_size"]
    gbs, mbs, steps = resolve_ds_batch(int(train), micro, gas, dp, ds.path)
    return BatchConfig(micro_batch_size=mbs, global_batch_size=gbs, num_microbatches=steps)


def ds_batch(ds: DsSettings, dp: int, src: dict[str, Source], fallback: BatchConfig | None = None,
             entry_point: bool = True) -> BatchConfig:
    """DeepSpeed's own triad; "auto" counts as unset (resolved when the other two, or Megatron's flags in `fallback`,
    fix it, as the Hugging Face Trainer and Accelerate fill it in; ds_auto_batch_warnings says what a plain
    deepspeed.initialize would do)."""
    def given(value: Any) -> int | None:
        return None if value in (None, AUTO) else int(value)

    if fallback is not None and entry_point:  # a user's own script may fill the keys in: unfilled_batch_key_warnings
        check_batch_keys_given(ds, "Megatron-DeepSpeed hands the file to deepspeed.initialize as json.load reads it "
                               "(megatron/training.py _create_ds_config_dict; bigscience's setup_model_and_optimizer) "
                               "and fills no batch key from its flags",
                               f"Add \"train_batch_size\": {fallback.global_batch_size} and "
                               f"\"train_micro_batch_size_per_gpu\": {fallback.micro_batch_size}, the batch of "
                               "--global-batch-size and --micro-batch-size.")
        autos = _auto_batch_keys(ds)
        if autos:  # deepspeed.initialize gets the strings: DeepSpeedConfig's arithmetic raises
            numbers = {"train_batch_size": fallback.global_batch_size, "train_micro_batch_size_per_gpu":
                       fallback.micro_batch_size, "gradient_accumulation_steps": fallback.num_microbatches}
            raise ConfigError(f"{ds.path} leaves {' and '.join(autos)} \"auto\": Megatron-DeepSpeed hands the file to "
                              "deepspeed.initialize as json.load reads it (megatron/training.py _create_ds_config_dict) "
                              "and DeepSpeedConfig._configure_train_batch_size stops on the string (TypeError); only "
                              "the Hugging Face Trainer and Accelerate fill \"auto\" in. Write "
                              f"{' and '.join(f'{key} {numbers[key]}' for key in autos)} (from --global-batch-size "
                              "and --micro-batch-size).")
    train, micro, gas = given(ds.train_batch_size), given(ds.micro_batch_size), given(ds.gradient_accumulation_steps)
    autos = _auto_batch_keys(ds)
    if train is None and micro is None and autos and fallback is None:
        raise ConfigError(
            f"{ds.path} leaves {' and '.join(autos)} \"auto\" and gives neither train_batch_size nor "
            "train_micro_batch_size_per_gpu as a number, so nothing fixes the batch: only the Hugging Face Trainer "
            "(--deepspeed FILE) or Accelerate fill \"auto\" in from their own arguments. Write train_batch_size or "
            "train_micro_batch_size_per_gpu as numbers.")
    if fallback is not None:  # Megatron-DeepSpeed: an "auto" key read as Megatron's own batch (with the warning)
        neither = train is None and micro is None  # both "auto", or one "auto" and one absent
        train = fallback.global_batch_size if train is None and (neither or ds.train_batch_size == AUTO) else train
        micro = fallback.micro_batch_size if micro is None and (neither or ds.micro_batch_size == AUTO) else micro
    gbs, mbs, steps = resolve_ds_batch(train, micro, gas, dp, ds.path)
    for key, value, ds_key in (("global_batch_size", train, "train_batch_size"), ("micro_batch_size", micro, "micro_batch_size"),
                               ("num_microbatches", gas, "gradient_accumulation_steps")):
        if value is not None and ds_key in ds.sources:
            src[key] = ds.sources[ds_key]
        else:
            src.setdefault(key, Source(SourceKind.DERIVED, "DeepSpeed batch triad: train = micro * accumulation * DP"))
    return BatchConfig(micro_batch_size=mbs, global_batch_size=gbs, num_microbatches=steps)


def _auto_batch_keys(ds: DsSettings) -> list[str]:
    return [k for k, v in (("train_batch_size", ds.train_batch_size), ("train_micro_batch_size_per_gpu",
                           ds.micro_batch_size), ("gradient_accumulation_steps", ds.gradient_accumulation_steps))
            if v == AUTO]


def ds_auto_batch_warnings(ds: DsSettings) -> list[str]:
    """A script that hands the file to deepspeed.initialize as it is stops there: DeepSpeedConfig.
    _configure_train_batch_size (runtime/config.py) does arithmetic on the string ("auto" > 0: TypeError, checked
    with the installed DeepSpeed). A script may fill "auto" in itself before (as the Hugging Face Trainer and
    Accelerate do), which llmperf cannot see, so this is a warning, not a refusal."""
    autos = _auto_batch_keys(ds)
    if not autos:
        return []
    return [f"{ds.path} leaves {' and '.join(autos)} \"auto\": priced as filled in from the other batch keys; a "
            "script that passes the file to deepspeed.initialize unchanged stops with a TypeError "
            "(DeepSpeedConfig._configure_train_batch_size). Write numbers unless the script fills \"auto\" in."]


MEGATRON_SCRIPT_FILLS = ("a user's own script taking Megatron's flags may fill them in before deepspeed.initialize, "
                         "as examples/cpu-testbed/train_gpt.py does")
ACCELERATOR_FILLS = ("Accelerator._prepare_deepspeed fills only keys set to \"auto\" (from the dataloader's batch "
                     "size), so a script driving Accelerator must assign AcceleratorState().deepspeed_plugin."
                     "deepspeed_config['train_micro_batch_size_per_gpu'] itself, as accelerate's own error message "
                     "suggests; or write the keys as \"auto\"")


def unfilled_batch_key_warnings(ds: DsSettings, batch: BatchConfig, filler: str) -> list[str]:
    """A ds_config that gives no batch key to a script that may fill them itself (`filler` says how), which llmperf
    cannot see: DeepSpeed refuses the file as written (_NO_BATCH), so priced as the flags' batch with a warning,
    not refused (check_batch_keys_given refuses where the script certainly hands the file over as read)."""
    if ds.train_batch_size is not None or ds.micro_batch_size is not None:
        return []
    return [f"{ds.path} gives neither train_batch_size nor train_micro_batch_size_per_gpu: priced as the flags' batch "
            f"(global {batch.global_batch_size}, micro {batch.micro_batch_size}), which the script must fill in "
            f"itself ({filler}); passed unchanged, {_NO_BATCH}."]


def merge_megatron_batch(ds: DsSettings, megatron: BatchConfig, dp: int, src: dict[str, Source],
                         entry_point: bool = True) -> BatchConfig:
    """Megatron-DeepSpeed: DeepSpeed's engine and Megatron's microbatch calculator must agree on the batch.
    `entry_point`: the script is Megatron-DeepSpeed's own (megatron_entry_points), which hands the file over as read."""
    ds_src: dict[str, Source] = {}
    resolved = ds_batch(ds, dp, ds_src, fallback=megatron, entry_point=entry_point)
    if (resolved.global_batch_size, resolved.micro_batch_size) != (megatron.global_batch_size, megatron.micro_batch_size):
        raise ConfigError(
            f"{ds.path} gives train_batch_size {resolved.global_batch_size} / micro {resolved.micro_batch_size} but Megatron's "
            f"flags give global batch {megatron.global_batch_size} ({src.get('global_batch_size')}) / micro "
            f"{megatron.micro_batch_size} ({src.get('micro_batch_size')}); DeepSpeed's engine and Megatron's schedule would "
            "disagree. Make the ds_config batch keys match --global-batch-size and --micro-batch-size."
        )
    return megatron

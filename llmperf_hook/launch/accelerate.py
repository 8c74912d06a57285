"""`accelerate launch` / `python -m accelerate.commands.launch` (Hugging Face Accelerate) -> LaunchSize.

Semantics follow accelerate/commands/launch.py `_validate_launch_command`: options are read with dashes or
underscores (`--num-processes` = `--num_processes`); a config file (`--config_file`, else the default
`$HF_HOME/accelerate/default_config.yaml` when it exists) fills every option the command leaves unset, its
`deepspeed_config` section included; `--num_processes` is the TOTAL over `--num_machines` machines (default 1),
each machine running num_processes / num_machines of them; without it and without a config file accelerate
starts one process per GPU of the machine. The processes it starts get the DeepSpeed plugin's settings as
environment variables (accelerate/utils/launch.py `prepare_deepspeed_cmd_env`; FSDP_* for the FSDP plugin,
`prepare_multi_gpu_env`), which is how the Trainer or `Accelerator` in the script learns them; they go into the
job's environment here the same way, for frameworks/accelerate_plugin.py and frameworks/fsdp_sharding.py to read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.argv_words import parse_int, unexpanded_hint
from llmperf_hook.launch.script_files import script_file_text
from llmperf_hook.launch.options import Option, ScannedOptions, scan_options
from llmperf_hook.launch.parsed_job import ScriptFile
from llmperf_hook.launch.sizing import LaunchSize, Sized
from llmperf_hook.provenance import Source, SourceKind

_SWITCHES = ("quiet", "cpu", "multi_gpu", "tpu", "enable_cpu_affinity", "dynamo_use_fullgraph", "dynamo_use_dynamic",
             "dynamo_use_regional_compilation", "use_deepspeed", "use_fsdp", "use_parallelism_config",
             "use_megatron_lm", "same_network", "module", "no_python", "tpu_cluster", "no_tpu_cluster", "tpu_use_sudo",
             "downcast_bf16", "fp8_use_autocast_during_eval", "debug")
_VALUED = ("config_file", "mixed_precision", "num_processes", "num_machines", "num_cpu_threads_per_process",
           "dynamo_backend", "dynamo_mode", "gpu_ids", "machine_rank", "main_process_ip", "main_process_port", "tee",
           "log_dir", "role", "rdzv_backend", "rdzv_conf", "max_restarts", "monitor_interval", "vm", "env",
           "main_training_function", "deepspeed_config_file", "zero_stage", "offload_optimizer_device",
           "offload_param_device", "offload_optimizer_nvme_path", "offload_param_nvme_path",
           "gradient_accumulation_steps", "gradient_clipping", "zero3_init_flag", "zero3_save_16bit_model",
           "deepspeed_hostfile", "deepspeed_exclusion_filter", "deepspeed_inclusion_filter",
           "deepspeed_multinode_launcher", "deepspeed_moe_layer_cls_names", "mpirun_hostfile", "fsdp_version",
           "fsdp_sharding_strategy", "fsdp_reshard_after_forward", "fsdp_offload_params", "fsdp_activation_checkpointing")
_VALUED_PREFIXES = ("fsdp_", "megatron_lm_", "fp8_", "parallelism_config_", "aws_")
"""Families of valued options (accelerate's FSDP, Megatron-LM, FP8 and parallelism-config plugins)."""

# DeepSpeed plugin settings -> the variable accelerate exports for them (utils/launch.py prepare_deepspeed_cmd_env).
PLUGIN_ENV = {
    "zero_stage": "ACCELERATE_DEEPSPEED_ZERO_STAGE",
    "gradient_accumulation_steps": "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
    "gradient_clipping": "ACCELERATE_GRADIENT_CLIPPING",
    "offload_optimizer_device": "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",
    "offload_param_device": "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE",
    "deepspeed_config_file": "ACCELERATE_DEEPSPEED_CONFIG_FILE",
}


FSDP_KEYS = ("fsdp_version", "fsdp_sharding_strategy", "fsdp_reshard_after_forward", "fsdp_offload_params",
             "fsdp_activation_checkpointing")
"""FSDP plugin settings exported as FSDP_<NAME> (utils/launch.py prepare_multi_gpu_env) that change the step."""


def _table() -> dict[str, Option]:
    table = {"--" + d.replace("_", "-"): Option(d) for d in _VALUED}
    table.update({"--" + d.replace("_", "-"): Option(d, takes_value=False) for d in _SWITCHES})
    table.update({"-m": Option("module", takes_value=False), "-q": Option("quiet", takes_value=False),
                  "-t": Option("tee")})
    return table


ACCELERATE_OPTIONS = _table()


def _scan(words: Sequence[str], start: int) -> ScannedOptions:
    """accelerate's options; the FSDP / Megatron-LM / FP8 families take a value each."""
    opts = scan_options(words, start, ACCELERATE_OPTIONS, "accelerate launch")
    opts.unknown = [w for w in opts.unknown if not w.lstrip("-").replace("-", "_").startswith(_VALUED_PREFIXES)]
    return opts


def default_config_path(env: Mapping[str, str]) -> Path:
    """accelerate's default config file, whether it exists or not: `$HF_HOME/accelerate/default_config.yaml`, HF_HOME
    defaulting to `$XDG_CACHE_HOME/huggingface` and XDG_CACHE_HOME to `~/.cache` (accelerate
    commands/config/config_args.py, module level `hf_cache_home`: `os.environ.get`, so a variable set empty counts as
    set, and `~` is expanded in either)."""
    hf_home = env.get("HF_HOME", os.path.join(env.get("XDG_CACHE_HOME", "~/.cache"), "huggingface"))
    return Path(_expand_home(hf_home, env)) / "accelerate" / "default_config.yaml"


def _expand_home(path: str, env: Mapping[str, str]) -> str:
    """os.path.expanduser with the job's HOME (`~user` forms: this machine's password database, as expanduser)."""
    if (path == "~" or path.startswith("~/")) and env.get("HOME"):
        return env["HOME"] + path[1:]
    return os.path.expanduser(path)


def _config_file(opts: ScannedOptions, env: Mapping[str, str],
                 files: Mapping[str, ScriptFile]) -> tuple[dict[str, Any], str] | None:
    """(settings, where) of --config_file (the text the launch script writes there, `files`, else the file), else of
    accelerate's default config file when it exists."""
    written = None
    if "config_file" in opts.values:
        path = Path(opts.values["config_file"])
        written = script_file_text(str(path), files)
        if written is None and not path.is_file():
            raise UsageError(f"accelerate launch --config_file {path}: no such file; give the YAML or JSON file "
                             "`accelerate config` wrote.")
    else:
        path = default_config_path(env)
        if not path.is_file() or "cpu" in opts.values:
            return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8") if written is None else written)  # JSON is YAML too
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise UsageError(f"cannot read the accelerate config file {path}: {err}") from None
    if not isinstance(data, dict):
        raise UsageError(f"the accelerate config file {path} is not a mapping of settings.")
    return _process_config(data, str(path)), str(path)


def _process_config(data: dict[str, Any], where: str) -> dict[str, Any]:
    """What accelerate's BaseConfig.process_config (commands/config/config_args.py) makes of a loaded config file:
    a `distributed_type` is required (ValueError), and a legacy `fp16: true` without `mixed_precision` becomes
    mixed_precision fp16 (`fp16` itself dropped): a config-file mixed precision, as launch.py's mp_from_config_flag
    treats it."""
    if "distributed_type" not in data:
        raise UsageError(f"the accelerate config file {where} has no distributed_type; accelerate refuses it ('A "
                         "`distributed_type` must be specified in the config file.'). Add distributed_type (NO, "
                         "MULTI_GPU, DEEPSPEED, FSDP ...) or write the file again with `accelerate config`.")
    out = dict(data)
    if "mixed_precision" not in out:
        out["mixed_precision"] = "fp16" if out.get("fp16") else None
    out.pop("fp16", None)
    return out


def _settings(opts: ScannedOptions, config: tuple[dict[str, Any], str] | None) -> dict[str, tuple[Any, Source]]:
    """dest -> (value, source): the command's options, then the config file's top level and deepspeed_config."""
    out = {d: (v, Source(SourceKind.LAUNCHER, opts.flags[d])) for d, v in opts.values.items()}
    if config is None:
        return out
    data, where = config
    fsdp = {k if k.startswith("fsdp") else "fsdp_" + k: v for k, v in (data.get("fsdp_config") or {}).items()}
    for key, value in {**data, **(data.get("deepspeed_config") or {}), **fsdp}.items():
        if value is not None and not isinstance(value, dict) and key not in out:
            out[key] = (value, Source(SourceKind.CONFIG_FILE, f"{where}: {key}"))
    return out


def _count(settings: Mapping[str, tuple[Any, Source]], key: str) -> tuple[int, Source] | None:
    if key not in settings:
        return None
    value, source = settings[key]
    count = parse_int(str(value), f"accelerate {key}", str(source))
    if count < 1:
        raise UsageError(f"accelerate {key} {count} ({source}) must be at least 1.")
    return count, source


_MODE_SWITCHES = ("multi_gpu", "use_deepspeed", "use_fsdp", "use_megatron_lm", "cpu", "tpu")


def _uses(settings: Mapping[str, tuple[Any, Source]], switch: str, distributed_type: str) -> bool:
    """The command's mode switch `switch`, else (no mode switch on the command) the config file's distributed_type."""
    on_command = [k for k in _MODE_SWITCHES if k in settings and settings[k][1].kind == SourceKind.LAUNCHER]
    if switch in on_command:
        return True
    return not on_command and str(settings.get("distributed_type", ("", None))[0]).upper() == distributed_type


def _export(settings: Mapping[str, tuple[Any, Source]], used: dict[str, str]) -> None:
    """The environment accelerate gives its processes (what the script's Trainer / Accelerator reads)."""
    mixed = str(settings.get("mixed_precision", ("no", None))[0]).lower()
    used["ACCELERATE_MIXED_PRECISION"] = mixed
    if _uses(settings, "use_deepspeed", "DEEPSPEED"):
        used["ACCELERATE_USE_DEEPSPEED"] = "true"
        for key, var in PLUGIN_ENV.items():
            if key in settings and str(settings[key][0]).lower() != "none":
                used[var] = str(settings[key][0])
    elif _uses(settings, "use_fsdp", "FSDP"):
        used["ACCELERATE_USE_FSDP"] = "true"
        for key in FSDP_KEYS:
            if key in settings:
                used[key.upper()] = str(settings[key][0]).lower() if isinstance(settings[key][0], bool) else str(settings[key][0])


_IGNORED_WITH_DS_FILE = ("gradient_accumulation_steps", "gradient_clipping", "zero_stage", "offload_optimizer_device",
                         "offload_param_device", "offload_param_nvme_path", "offload_optimizer_nvme_path",
                         "zero3_save_16bit_model", "mixed_precision")
"""DeepSpeedPlugin._deepspeed_config_checks' env_variable_names_to_ignore, as it names them."""


def _check_config_file_fields(settings: Mapping[str, tuple[Any, Source]], config: tuple[dict[str, Any], str] | None) -> None:
    """launch_command passes the config file's deepspeed_config keys (plus mixed_precision when the file, not the
    command, sets it: `mp_from_config_flag`) as ACCELERATE_CONFIG_DS_FIELDS; with a deepspeed_config_file the
    DeepSpeedPlugin then raises ValueError for any of them that the file would ignore."""
    if config is None or not _uses(settings, "use_deepspeed", "DEEPSPEED"):
        return
    ds_file = settings.get("deepspeed_config_file", (None, None))[0]
    if ds_file is None or str(ds_file).lower() == "none":
        return
    data, where = config
    fields = list(data.get("deepspeed_config") or {})
    mixed = settings.get("mixed_precision")
    if mixed is not None and mixed[1].kind == SourceKind.CONFIG_FILE:
        fields.append("mixed_precision")
    clash = [f for f in fields if f in _IGNORED_WITH_DS_FILE]
    if clash:
        raise UsageError(
            f"the accelerate config file {where} sets {', '.join(clash)} beside deepspeed_config_file {ds_file}; "
            "Accelerate's DeepSpeedPlugin refuses that ('When using `deepspeed_config_file`, the following accelerate "
            "config variables will be ignored: ...'; mixed_precision counts when the config file, not the command, "
            "gives it, a legacy `fp16: true` key too). Put those settings in the DeepSpeed config file and remove them "
            "from the accelerate config, or give --mixed_precision on the accelerate launch command instead.")


_TYPED = {"num_cpu_threads_per_process": int, "machine_rank": int, "main_process_port": int, "max_restarts": int,
          "monitor_interval": float, "zero_stage": int, "gradient_accumulation_steps": int, "gradient_clipping": float}
"""The command's options commands/launch.py declares with `type=int` / `type=float` (num_processes and num_machines
are checked as counts, _count); argparse converts the word and exits 2 on one it cannot."""


def _check_types(opts: ScannedOptions) -> None:
    """accelerate's argparse refusal of a typed option's value (`--gradient_accumulation_steps 2.5`): 'argument
    --gradient_accumulation_steps/--gradient-accumulation-steps: invalid int value: '2.5'' (its _StoreAction adds the
    dashed spelling), before anything starts."""
    for dest, kind in _TYPED.items():
        value = opts.values.get(dest)
        try:
            kind(value) if value is not None else None
        except ValueError:
            names = f"--{dest}/--{dest.replace('_', '-')}"
            raise UsageError(f"accelerate launch {opts.flags[dest]} {value}: accelerate refuses it ('accelerate "
                             f"<command> [<args>] launch: error: argument {names}: invalid {kind.__name__} value: "
                             f"{value!r}', exit status 2){unexpanded_hint(value)}. Give "
                             f"{'an integer' if kind is int else 'a number'}.") from None


def _check_modes(opts: ScannedOptions) -> None:
    """_validate_launch_command's sanity checks on the command's own switches."""
    modes = [opts.flags[d] for d in ("multi_gpu", "cpu", "tpu", "use_deepspeed", "use_fsdp") if d in opts.values]
    if len(modes) > 1:
        raise UsageError(f"accelerate launch {' and '.join(modes)}: accelerate allows only one of --cpu, --multi_gpu, "
                         "--tpu, --use_deepspeed, --use_fsdp (it raises ValueError). Keep one.")
    processes = opts.values.get("num_processes", "2")
    if "multi_gpu" in opts.values and processes.isdigit() and int(processes) < 2:
        raise UsageError("accelerate launch --multi_gpu needs at least 2 processes (--num_processes); accelerate raises "
                         "ValueError otherwise.")


def _unused_plugin_options(opts: ScannedOptions, settings: Mapping[str, tuple[Any, Source]]) -> list[str]:
    """The command's DeepSpeed-plugin options (--gradient_accumulation_steps, --zero_stage ...: 'useful only when
    `use_deepspeed` flag is passed', commands/launch.py) on a launch without DeepSpeed: accelerate exports them only
    for its DeepSpeed plugin (utils/launch.py prepare_deepspeed_cmd_env), so they reach nothing."""
    if _uses(settings, "use_deepspeed", "DEEPSPEED"):
        return []
    return [f"accelerate launch {opts.flags[key]} {opts.values[key]} has no effect without DeepSpeed (accelerate "
            "passes it only to its DeepSpeed plugin); the script's own setting is priced"
            for key in PLUGIN_ENV if key in opts.values]


def parse_accelerate(words: Sequence[str], start: int, env: Mapping[str, str], used: dict[str, str],
                     files: Mapping[str, ScriptFile] | None = None) -> LaunchSize:
    """words[start:] = accelerate's options, the script and its arguments (after `accelerate launch`); `files`: what
    the launch script writes before it (its --config_file may be one)."""
    opts = _scan(words, start)
    _check_types(opts)
    _check_modes(opts)
    config = _config_file(opts, env, files or {})
    settings = _settings(opts, config)
    _check_config_file_fields(settings, config)
    _export(settings, used)
    warnings = [f"unknown accelerate launch option {w} ignored" for w in opts.unknown] + _unused_plugin_options(opts,
                                                                                                            settings)
    machines = _count(settings, "num_machines") or (1, Source(SourceKind.DEFAULT, "accelerate: 1 machine"))
    processes = _count(settings, "num_processes")
    nnodes = Sized(*machines)
    if processes is None:
        nproc = Sized(None, Source(SourceKind.DEFAULT, "accelerate: one process per GPU"),
                      "accelerate launch without --num_processes (or a config file) starts one process per GPU of the machine")
        world = None
    elif processes[0] % machines[0]:
        raise UsageError(f"accelerate num_processes {processes[0]} ({processes[1]}) is the total over num_machines "
                         f"{machines[0]} ({machines[1]}) and does not divide evenly; give a multiple of the machines.")
    else:
        nproc = Sized(processes[0] // machines[0], Source(SourceKind.DERIVED, f"num_processes / num_machines "
                                                                              f"({processes[1]})"))
        world = Sized(*processes)
    if opts.rest >= len(words):
        raise UsageError("the accelerate launch command names no training script after its options.")
    script = ("-m " if "module" in opts.values else "") + words[opts.rest]
    return LaunchSize("accelerate", nnodes, nproc, world, script, tuple(words[opts.rest + 1:]), tuple(warnings))

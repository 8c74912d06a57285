"""FSDP's own activation checkpointing as a tuned knob: accelerate's FSDP plugin (`accelerate launch --use_fsdp`, or
`distributed_type: FSDP` in its config file).

The plugin takes it from `--fsdp_activation_checkpointing true|false` (accelerate/commands/launch.py, type=str,
default "false") or from its config file's `fsdp_config` section (`fsdp_activation_checkpointing`, or
`activation_checkpointing`: _validate_launch_command prefixes `fsdp_` to a key without it), exports it as
FSDP_ACTIVATION_CHECKPOINTING (utils/launch.py prepare_multi_gpu_env), and FullyShardedDataParallelPlugin wraps each
decoder layer in checkpoint_wrapper: priced as full recompute (frameworks/fsdp_sharding.py). tune searches it on
(the command as it is) and off. Off: the command line's value becomes false, and a config file that sets the key gets
a copy with it false (`acc.llmperf-tuned.yaml` beside it, created exclusively: the user's file is never written) that
`--config_file` points at: since accelerate 1.5 (c7b36255, #3409) a value given on the command line wins over the
file (args.nondefault), before that the file's fsdp_config won, so the copy holds on every release. The Trainer's
`--gradient_checkpointing` is never added (the Trainer refuses it beside FSDP's own: tune/trainer_checkpointing.py).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.provenance import SourceKind
from llmperf_hook.tune import argv_edit as ed
from llmperf_hook.tune.accelerate_apply import accelerate_options_span
from llmperf_hook.tune.ds_config_rewrite import fresh_path

PLUGIN_SOURCE = "accelerate FSDP plugin"
"""How frameworks/fsdp_sharding.py names the plugin in the recompute source."""
KEYS = ("fsdp_activation_checkpointing", "activation_checkpointing")
_OPTION = ("--fsdp_activation_checkpointing", "--fsdp-activation-checkpointing")
CONFIG_FILE_OPTIONS = ("--config_file", "--config-file")


def plugin_checkpointing(cfg: TrainingConfig) -> bool:
    """The job's full recompute is accelerate's FSDP plugin's (what tune switches in the launcher, not the script)."""
    source = cfg.sources.get("recompute")
    return (cfg.recompute.granularity == "full" and source is not None and source.kind == SourceKind.LAUNCHER
            and source.detail.startswith(PLUGIN_SOURCE))


def plugin_switch_kept(argv: Sequence[str]) -> str | None:
    """Why tune keeps the plugin's checkpointing as the command has it (None: --apply can switch it): the plugin's
    `accelerate launch` must be the command's own or its `sh -c` / `sbatch --wrap` string's; a batch script's launch
    line is rewritten from its training script on (apply._plan_tuned_command), and the environment is not edited."""
    from llmperf_hook.tune.apply import command_string_index
    from llmperf_hook.tune.command_string import training_words

    k = command_string_index(argv)
    text = argv[k].removeprefix("--wrap=") if k is not None else ""
    words = argv if k is None else training_words(text) or shlex.split(text)
    if accelerate_options_span(words) is not None:
        return None
    return ("accelerate's FSDP plugin checkpoints, and --apply cannot edit its launcher here (a batch script's launch "
            "line or the FSDP_ACTIVATION_CHECKPOINTING environment): accelerate's FSDP activation checkpointing is not "
            "searched (kept as your command has it)")


def _config_path(options: Sequence[str], env: Mapping[str, str]) -> Path | None:
    """The config file accelerate reads: --config_file, else its default config when it exists (launch/accelerate.py
    _config_file)."""
    given = ed.flag_value(list(options), CONFIG_FILE_OPTIONS)
    if given:
        return Path(given)
    from llmperf_hook.launch.accelerate import default_config_path

    default = default_config_path(env)
    return default if default.is_file() else None


def _config_copy(path: Path, cwd: Path, notes: list[str]) -> tuple[str, dict[str, str]] | None:
    """(the path --config_file gets, files to create) for a copy of the config with the plugin's checkpointing off;
    None when the file does not set it."""
    original = path if path.is_absolute() else cwd / path
    data: Any = yaml.safe_load(original.read_text(encoding="utf-8"))  # launch/accelerate.py read it already
    fsdp = data.get("fsdp_config") if isinstance(data, dict) else None
    present = [k for k in KEYS if isinstance(fsdp, dict) and k in fsdp]
    if not present:
        return None
    content = yaml.safe_dump({**data, "fsdp_config": {**fsdp, **{k: False for k in present}}}, sort_keys=False)
    # accelerate reads a name ending in .json with json.load, any other as YAML (config_args.load_config_from_file)
    yaml_name = original if original.suffix in (".yaml", ".yml") else original.with_suffix(".yaml")
    target = fresh_path(yaml_name, content)
    shown = str(target) if path.is_absolute() else str(path.parent / target.name)
    if target.exists():
        notes.append(f"accelerate config {shown} (the copy of {path} with {present[0]} false an earlier run wrote, "
                     "reused)")
        return shown, {}
    notes.append(f"new accelerate config {shown} (copy of {path} with {present[0]} false; the original is untouched)")
    return shown, {str(target): content}


def plugin_checkpointing_off(argv: Sequence[str], cwd: Path, notes: list[str],
                             env: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """`argv` with the FSDP plugin's activation checkpointing off (module docstring), and the files to create."""
    span = accelerate_options_span(argv)
    if span is None:
        raise ConfigError("tune --apply: the layout turns accelerate's FSDP activation checkpointing off, but the "
                          "command has no `accelerate launch` whose options llmperf can edit (the plugin took it from "
                          "the environment). Set FSDP_ACTIVATION_CHECKPOINTING=false yourself, or drop --apply.")
    start, rest = span
    options, files = list(argv[start:rest]), {}
    if ed.flag_value(options, _OPTION) is not None:
        options = ed.set_value(options, _OPTION, "false")
        notes.append("accelerate launch --fsdp_activation_checkpointing false")
    path = _config_path(options, os.environ if env is None else env)
    copy = _config_copy(path, cwd, notes) if path is not None else None
    if copy is not None:
        shown, files = copy
        options = ed.set_value(options, CONFIG_FILE_OPTIONS, shown) if ed.find_flag(options, CONFIG_FILE_OPTIONS) else \
            [CONFIG_FILE_OPTIONS[0], shown, *options]
    return [*argv[:start], *options, *argv[rest:]], files

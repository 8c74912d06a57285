"""`tune --apply` for a job started by `accelerate launch` with its DeepSpeed plugin (frameworks/accelerate_plugin.py).

Accelerate's own options come before the script and share spellings with the Trainer's
(`--gradient_accumulation_steps`), so the two parts of argv are edited apart: the Trainer's flags in the script's
part (as for `--deepspeed FILE`, ds_config_rewrite.rewrite_hf_argv), and in accelerate's part either a tuned copy
of `--deepspeed_config_file` (never the user's file) or, without a file, the plugin's `--zero_stage` and
`--gradient_accumulation_steps`, which the command line sets over a config file's (accelerate/commands/launch.py:
the command wins).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

from llmperf_hook.frameworks.deepspeed_config import AUTO
from llmperf_hook.launch.launch_line import accelerate_options_start
from llmperf_hook.launch.options import scan_options
from llmperf_hook.tune import argv_edit as ed
from llmperf_hook.tune import ds_config_rewrite as dsr
from llmperf_hook.tune.candidate import Candidate

_CONFIG_FILE = ("--deepspeed_config_file", "--deepspeed-config-file")
_ZERO = ("--zero_stage", "--zero-stage")
_GAS = ("--gradient_accumulation_steps", "--gradient-accumulation-steps")


def accelerate_options_span(argv: Sequence[str]) -> tuple[int, int] | None:
    """(first option, script index) of an `accelerate launch` in argv, or None."""
    for i in range(len(argv)):
        start = accelerate_options_start(argv, i)
        if start is not None:
            from llmperf_hook.launch.accelerate import ACCELERATE_OPTIONS  # accelerate's reader: its commands only

            return start, scan_options(argv, start, ACCELERATE_OPTIONS, "accelerate launch").rest
    return None


def rewrite_accelerate_job(argv: Sequence[str], span: tuple[int, int], base: Candidate, new: Candidate,
                           batch: tuple[int, int], cwd: Path, notes: list[str]) -> tuple[list[str], dict[str, str]]:
    """(new argv, files to write) so that the Trainer and the DeepSpeed plugin run `new`; `batch` = (micro-batches
    per step, global batch) of the tuned layout."""
    num_microbatches, global_batch = batch
    if new == base:  # the command's own layout: its ds_config runs as it is (as apply._retarget_ds_config)
        return list(argv), {}
    start, rest = span
    head, options, script = list(argv[:start]), list(argv[start:rest]), list(argv[rest:])
    new_script = dsr.rewrite_hf_argv(script, base, new, num_microbatches)
    if new_script != script:
        notes.append("Hugging Face Trainer flags replaced in argv")
    if ed.flag_value(options, _GAS) is not None and new.micro_batch_size != base.micro_batch_size:
        options = ed.set_value(options, _GAS, str(num_microbatches))
    files: dict[str, str] = {}
    path = accelerate_config_file(argv)
    if path is not None:
        original = Path(path) if Path(path).is_absolute() else cwd / path
        raw = dsr.read_ds_config(original)
        tuned = tuned_plugin_config(raw, new, num_microbatches, global_batch, set_zero=new.zero_stage != base.zero_stage)
        if tuned != raw:  # a tuned copy an earlier --apply wrote with this content is reused, as for --deepspeed_config
            content = json.dumps(tuned, indent=2) + "\n"
            target = dsr.fresh_path(original, content)
            shown = str(target) if Path(path).is_absolute() else str(Path(path).parent / target.name)
            options = _set_or_add(options, _CONFIG_FILE, shown)
            if target.exists():
                notes.append(f"DeepSpeed config {shown} (the tuned copy of {path} an earlier run wrote, reused)")
            else:
                files[str(target)] = content
                notes.append(f"new DeepSpeed config {shown} (copy of {path}; the original is untouched)")
    else:
        options = _plugin_options(options, base, new, num_microbatches, notes)
    return [*head, *options, *new_script], files


def accelerate_config_file(argv: Sequence[str]) -> str | None:
    """The ds_config file the DeepSpeed plugin of the command's `accelerate launch` reads (its --deepspeed_config_file,
    or the deepspeed_config_file of accelerate's config file), or None."""
    span = accelerate_options_span(argv)
    if span is None:
        return None
    return ed.flag_value(list(argv[span[0]:span[1]]), _CONFIG_FILE) or _config_file_setting(argv, span[0])


def tuned_plugin_config(raw: dict[str, Any], new: Candidate, num_microbatches: int, global_batch: int,
                        set_zero: bool) -> dict[str, Any]:
    """The tuned copy of a ds_config file the DeepSpeed plugin reads, with a batch triad that runs the held global batch.

    DeepSpeedPlugin.__post_init__ (accelerate/utils/dataclasses.py) sets gradient_accumulation_steps to 1 where the
    file has none, and Accelerator._prepare_deepspeed fills only "auto" values (train_micro_batch_size_per_gpu from the
    dataloader, train_batch_size = micro x accumulation x processes; deepspeed_config_process(must_match=False)):
    a copy with a tuned micro-batch, no accumulation and no train_batch_size ran micro x 1 x DP, and the Trainer's
    tuned --gradient_accumulation_steps then mismatched the plugin's 1 (HfTrainerDeepSpeedConfig.fill_match). So a
    copy whose micro-batch is a number states the tuned accumulation and train_batch_size too; "auto" values stay,
    filled from the Trainer's rewritten flags."""
    tuned = dsr.tuned_ds_config(raw, new, num_microbatches, set_zero=set_zero, global_batch_size=global_batch)
    if tuned.get("train_micro_batch_size_per_gpu") == AUTO:
        return tuned
    if tuned.get("gradient_accumulation_steps", 1) != AUTO:  # absent = the plugin's 1
        tuned["gradient_accumulation_steps"] = num_microbatches
    if tuned.get("train_batch_size") is None:
        tuned["train_batch_size"] = global_batch
    return tuned


def _config_file_setting(argv: Sequence[str], start: int) -> str | None:
    """The deepspeed_config_file accelerate's config file (--config_file, or its default_config.yaml) names, when the
    command does not give one: the plugin reads that ds_config and fills only its "auto" values from --zero_stage /
    --gradient_accumulation_steps (DeepSpeedPlugin.__post_init__ with hf_ds_config), so a tuned stage goes into a
    tuned copy of it, passed as --deepspeed_config_file (the command line wins over the config file in
    accelerate/commands/launch.py). A `--zero_stage 3` added to argv left a file's `"stage": 2` running."""
    from llmperf_hook.frameworks.accelerate_plugin import CONFIG_FILE
    from llmperf_hook.launch.accelerate import parse_accelerate

    from llmperf_hook.errors import UsageError

    exported: dict[str, str] = {}
    try:
        parse_accelerate(argv, start, os.environ, exported)  # the user's command: parsed once by explain's path already
    except UsageError:  # a planned --config_file copy not written yet (tune/accelerate_fsdp_apply.py): no ds_config
        return None
    value = exported.get(CONFIG_FILE)
    return value if value and value.lower() != "none" else None


def _plugin_options(options: list[str], base: Candidate, new: Candidate, num_microbatches: int,
                    notes: list[str]) -> list[str]:
    """accelerate's own --zero_stage / --gradient_accumulation_steps for the DeepSpeed plugin without a ds_config
    file; the command line sets them over accelerate's config file (accelerate/commands/launch.py). The accumulation
    is set whenever the micro-batch changes: a config file's `deepspeed_config: gradient_accumulation_steps: 8` kept
    under a tuned `--gradient_accumulation_steps 4` of the Trainer made it refuse the mismatch."""
    if new.zero_stage != base.zero_stage:
        options = _set_or_add(options, _ZERO, str(new.zero_stage))
        notes.append("accelerate's --zero_stage set in argv")
    if new.micro_batch_size != base.micro_batch_size and ed.flag_value(options, _GAS) is None:
        options = _set_or_add(options, _GAS, str(num_microbatches))
        notes.append("accelerate's --gradient_accumulation_steps set in argv")
    return options


def _set_or_add(options: list[str], spellings: tuple[str, ...], value: str) -> list[str]:
    return ed.set_value(options, spellings, value) if ed.find_flag(options, spellings) else [spellings[0], value, *options]

"""Write a tuned copy of a DeepSpeed config next to the user's (never overwriting it) and point argv at it.

DeepSpeed's batch triad (deepspeed/runtime/config.py `_configure_train_batch_size`): train_batch_size =
train_micro_batch_size_per_gpu * gradient_accumulation_steps * dp; any two determine the third, and
Hugging Face's integration fills `"auto"` values from its own argv (--per_device_train_batch_size,
--gradient_accumulation_steps, --gradient_checkpointing) and rejects explicit values that differ from it, so for
Trainer scripts those flags are rewritten too.
The config flag spellings are those DeepSpeed and Hugging Face accept: --deepspeed_config, --deepspeed-config,
and the Trainer's --deepspeed FILE (for Megatron-DeepSpeed `--deepspeed` is a bare switch).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parsed_job import ScriptFile
from llmperf_hook.tune import argv_edit as ed
from llmperf_hook.tune.candidate import Candidate

DS_CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed-config", "--deepscale_config", "--deepscale-config")
"""The flags naming a ds_config; --deepscale_config is DeepSpeed's deprecated one (deepspeed.add_config_arguments),
which deepspeed.initialize still reads into args.deepspeed_config: a tuned copy must replace it too."""
HF_DEEPSPEED_FLAG = "--deepspeed"
HF_MBS = ("--per_device_train_batch_size", "--per-device-train-batch-size")
HF_GAS = ("--gradient_accumulation_steps", "--gradient-accumulation-steps")
HF_CKPT = ("--gradient_checkpointing", "--gradient-checkpointing")
DS_CHAT_ZERO = ("--zero_stage", "--zero-stage")
TUNED_SUFFIX = ".llmperf-tuned"
PARTITION_KEYS = ("pipe_partitioned", "grad_partitioned")


@dataclass(frozen=True)
class DsConfigRef:
    """Where argv names the ds_config."""

    index: int
    """Index of the word holding the path (the flag word itself for `--flag=path`)."""
    flag: str
    inline: bool
    path: str
    """As written in argv (relative paths are relative to the working directory of the launch)."""


def find_ds_config(argv: Sequence[str]) -> DsConfigRef | None:
    ref = None
    for hit in ed.find_flag(argv, (*DS_CONFIG_FLAGS, HF_DEEPSPEED_FLAG)):
        if hit.inline:
            ref = DsConfigRef(hit.index, hit.name, True, argv[hit.index].split("=", 1)[1])
        elif hit.index + 1 < len(argv) and not argv[hit.index + 1].startswith("-"):
            nxt = argv[hit.index + 1]
            if hit.name != HF_DEEPSPEED_FLAG or nxt.endswith(".json") or Path(nxt).is_file() or inline_form(nxt, True):
                ref = DsConfigRef(hit.index + 1, hit.name, False, nxt)
    return ref


def inline_form(word: str, hf_trainer: bool = False) -> str | None:
    """"base64" / "json" when argv gives the config itself in place of a path (DeepSpeedConfig base64-decodes a word
    that is not a file; the Trainer's --deepspeed also takes a JSON string), else None."""
    from llmperf_hook.frameworks.deepspeed_config import inline_ds_config_form

    return inline_ds_config_form(word, hf_trainer)


def inline_tuned_word(ref: DsConfigRef, tuned: dict[str, Any]) -> str | None:
    """The tuned config as the argv word that replaces an inline one (same form: base64 stays base64), or None when
    `ref` names a file. Written back in place rather than to a new file: a config passed inline keeps the command
    self-contained (DeepSpeed's multi-node runner starts it on hosts that may not share this directory), and there
    is no "next to the original" for a file that does not exist."""
    from llmperf_hook.frameworks.deepspeed_config import encode_inline_ds_config

    form = inline_form(ref.path, ref.flag == HF_DEEPSPEED_FLAG)
    return None if form is None else encode_inline_ds_config(tuned, form)


def read_ds_config(path: Path, written: ScriptFile | None = None) -> dict[str, Any]:
    """The config as explain reads it (DeepSpeed's hjson subset: comments, trailing commas; duplicate keys refused);
    `written`: the launch script writes it before launching, so its here-document is read instead of the disk."""
    from llmperf_hook.frameworks.deepspeed_config import read_ds_config as read_as_explain

    return read_as_explain(str(path), written=written)


def read_as_given(ref: DsConfigRef) -> dict[str, Any]:
    """The config `ref` names, read as explain reads it for that flag (the Trainer's --deepspeed also takes JSON)."""
    from llmperf_hook.frameworks.deepspeed_config import read_ds_config as read_as_explain

    return read_as_explain(ref.path, hf_trainer=ref.flag == HF_DEEPSPEED_FLAG)


_BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def tuned_ds_config(raw: dict[str, Any], new: Candidate, num_microbatches: int, set_zero: bool,
                    global_batch_size: int | None = None, auto_filled: bool = True) -> dict[str, Any]:
    """A copy of `raw` that states the micro-batch of `new` (train_micro_batch_size_per_gpu, what a reader of the copy
    looks for), its accumulation where the config gives one, and its ZeRO stage (zero_optimization.stage, also where
    the config left DeepSpeed's default 0).

    `"auto"` batch values stay where the framework fills them in (`auto_filled`: the Hugging Face Trainer and
    accelerate) or explain prices them from its flags (Megatron-DeepSpeed, deepspeed_job.ds_batch's fallback; its
    training.py _create_ds_config_dict hands the file to DeepSpeed unchanged, so the job stops there as the user's file
    does, which explain warns of), and are dropped for a plain deepspeed.initialize, which reads the string itself
    (explain priced "auto" as unset, while a kept micro-batch "auto" was derived as train / DP: 8 where tune had
    chosen 1). With neither train_batch_size nor an accumulation, train_batch_size
    (`global_batch_size`, which tune holds) is stated too: a micro-batch alone makes DeepSpeed's batch micro x DP x 1
    (deepspeed/runtime/config.py _set_batch_related_parameters), and a config with no batch key (Megatron-DeepSpeed
    runs its flags' batch) would fail DeepSpeedConfig's 'Either train_batch_size or train_micro_batch_size_per_gpu
    needs to be provided'."""
    out = json.loads(json.dumps(raw))
    if not auto_filled:
        out = {k: v for k, v in out.items() if not (k in _BATCH_KEYS and v == "auto")}
    train, gas = out.get("train_batch_size"), out.get("gradient_accumulation_steps")
    if out.get("train_micro_batch_size_per_gpu") != "auto":
        out["train_micro_batch_size_per_gpu"] = new.micro_batch_size
    if isinstance(gas, int):
        out["gradient_accumulation_steps"] = num_microbatches
    elif train is None and gas is None and global_batch_size is not None:
        out["train_batch_size"] = global_batch_size
    if set_zero or "zero_optimization" not in out:  # the copy states its stage, the default 0 included
        zero = out.setdefault("zero_optimization", {})
        if not isinstance(zero, dict):
            raise UsageError("ds_config zero_optimization must be an object; fix the file.")
        zero["stage"] = new.zero_stage
    return out


def trainer_fills_accumulation(tuned: dict[str, Any], num_microbatches: int) -> bool:
    """Add "gradient_accumulation_steps": "auto" to a Hugging Face copy that states train_batch_size but no
    accumulation, for a candidate accumulating (> 1): the Trainer fills train_batch_size from its flags, then
    accelerate's DeepSpeedPlugin writes gradient_accumulation_steps 1 into the config, and deepspeed.initialize's
    _batch_assertion fails (frameworks/deepspeed_job.check_trainer_accumulation, explain's refusal, whose fix this is);
    "auto" is filled from the rewritten --gradient_accumulation_steps. An Accelerator script's plugin fills an absent key
    and "auto" with the same value. True when it changed the copy."""
    if num_microbatches <= 1 or "gradient_accumulation_steps" in tuned or tuned.get("train_batch_size") is None:
        return False
    tuned["gradient_accumulation_steps"] = "auto"
    return True


def whole_pipe_sends(tuned: dict[str, Any]) -> bool:
    """Set pipeline.pipe_partitioned and grad_partitioned false in the copy, what an MoE candidate at TP > 1 and
    PP > 1 under DeepSpeed's PipelineEngine needs (candidate.moe_whole_pipe_sends): Megatron-DeepSpeed's GPTModelPipe
    asserts 'Pipe and/or Grad partitioning are not supported for MoE model', and a key left out is true in DeepSpeed
    (runtime/config.py get_pipeline_config). True when it changed the copy."""
    pipe = tuned.setdefault("pipeline", {})
    if not isinstance(pipe, dict):
        raise UsageError("ds_config pipeline must be an object; fix the file.")
    changed = any(pipe.get(key) is not False for key in PARTITION_KEYS)
    pipe.update({key: False for key in PARTITION_KEYS})
    return changed


def release_pipeline_interval(tuned: dict[str, Any]) -> bool:
    """Megatron-DeepSpeed: a ds_config pipeline.activation_checkpoint_interval > 0 overrides GPTModelPipe's interval
    (deepspeed/runtime/pipe/engine.py), so a candidate recomputing differently sets it to 0 and lets the rewritten
    Megatron flags decide. True when it changed the copy."""
    pipe = tuned.get("pipeline")
    interval = pipe.get("activation_checkpoint_interval") if isinstance(pipe, dict) else None
    if isinstance(interval, int) and not isinstance(interval, bool) and interval > 0:
        pipe["activation_checkpoint_interval"] = 0  # type: ignore[index]
        return True
    return False


def fresh_path(original: Path, content: str | None = None) -> Path:
    """`ds.json` -> `ds.llmperf-tuned.json`, then `ds.llmperf-tuned-2.json`, ... : never an existing file, unless
    one of those tuned copies already holds exactly `content` (a repeated `tune --apply`, e.g. a dry run then the
    real one, reuses it instead of piling up copies). Re-tuning a tuned copy continues its numbering
    (`ds.llmperf-tuned-3.json` -> `ds.llmperf-tuned-4.json`, not `ds.llmperf-tuned-3.llmperf-tuned.json`)."""
    import re

    stem, suffix = original.stem, original.suffix or ".json"
    stem = re.sub(re.escape(TUNED_SUFFIX) + r"(-\d+)?$", "", stem)
    candidate = original.with_name(f"{stem}{TUNED_SUFFIX}{suffix}")
    n = 2
    while candidate.exists():
        if content is not None and candidate.is_file() and _text_or_none(candidate) == content:
            return candidate
        candidate = original.with_name(f"{stem}{TUNED_SUFFIX}-{n}{suffix}")
        n += 1
    return candidate


def _text_or_none(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def point_argv_at(argv: Sequence[str], ref: DsConfigRef, new_path: str) -> list[str]:
    out = list(argv)
    out[ref.index] = f"{ref.flag}={new_path}" if ref.inline else new_path
    return out


def rewrite_hf_argv(argv: Sequence[str], base: Candidate, new: Candidate, num_microbatches: int) -> list[str]:
    """Hugging Face Trainer flags. The Trainer refuses a ds_config value that differs from its own argument
    (transformers `HfTrainerDeepSpeedConfig.fill_match`), so both always carry the same numbers."""
    out = list(argv)
    if new.micro_batch_size != base.micro_batch_size:
        out = ed.set_value(out, HF_MBS, str(new.micro_batch_size))
        out = ed.set_value(out, HF_GAS, str(num_microbatches))
    if new.recompute != base.recompute:
        out = ed.set_value(out, HF_CKPT, "True" if new.recompute != "none" else "False")
    return out


def rewrite_ds_chat_argv(argv: Sequence[str], base: Candidate, new: Candidate, num_microbatches: int) -> list[str]:
    """DeepSpeed-Chat builds its ds_config from argv (frameworks/deepspeed_chat.py): micro-batch, accumulation,
    ZeRO stage and gradient checkpointing are all flags, so the command is the only thing to rewrite."""
    out = list(argv)
    if new.micro_batch_size != base.micro_batch_size:
        out = ed.set_value(out, HF_MBS, str(new.micro_batch_size))
        out = ed.set_value(out, HF_GAS, str(num_microbatches))
    if new.zero_stage != base.zero_stage:
        out = ed.set_value(out, DS_CHAT_ZERO, str(new.zero_stage))
    if new.recompute != base.recompute:
        out = ed.set_switch(out, HF_CKPT, new.recompute != "none")
    return out


def zero_stages_deepspeed_accepts(argv: Sequence[str], stages: Sequence[int],
                                  written: Mapping[str, ScriptFile] | None = None,
                                  env: Mapping[str, str] | None = None) -> tuple[int, ...] | None:
    """The ZeRO stages the command's ds_config still passes DeepSpeed's checks with (llmperf's parse_ds_config on a
    copy with zero_optimization.stage replaced): a partial optimizer offload needs stage 3, NVMe offload at stage 3
    needs nvme_path, fp32 gradient accumulation under bf16 needs ZeRO. The checks are those of the job's DeepSpeed
    release (deepspeed_release.schema_release of `env`, the job's environment; None: today's): bf16 with fp32
    accumulation runs without ZeRO before 0.18.5 and only at stage 1 before 0.10.1 (deepspeed_engine_rules), so a
    tuned copy never asks the job's release for a stage it refuses. None when argv names no readable ds_config.
    `written`: files a launch script writes before `argv`, its launch line (ParsedJob.script_files)."""
    return stages_accepted(ds_settings_at_stages(argv, stages, written, env), stages)


def stages_accepted(settings: Mapping[int, Any] | None, stages: Sequence[int]) -> tuple[int, ...] | None:
    """The `stages` whose parsed ds_config (ds_settings_at_stages) DeepSpeed accepts; None without a ds_config."""
    return None if settings is None else tuple(stage for stage in stages if settings.get(stage) is not None)


def ds_settings_at_stages(argv: Sequence[str], stages: Sequence[int], written: Mapping[str, ScriptFile] | None = None,
                          env: Mapping[str, str] | None = None) -> dict[int, Any] | None:
    """Stage -> the command's ds_config parsed with zero_optimization.stage replaced (DsSettings; None where
    parse_ds_config refuses it), as a tuned copy at that stage is read by explain; None when argv names no readable
    ds_config. The checks assemble makes after parsing take these settings (tune/assemble_rules.py)."""
    from llmperf_hook.errors import ConfigError, LlmperfError
    from llmperf_hook.frameworks.deepspeed_config import parse_ds_config
    from llmperf_hook.frameworks.deepspeed_release import TODAYS_RELEASE, schema_release

    ref = find_ds_config(argv)
    script_file = (written or {}).get(os.path.normpath(ref.path)) if ref else None
    if ref is None or not (script_file or Path(ref.path).is_file() or
                           inline_form(ref.path, ref.flag == HF_DEEPSPEED_FLAG)):
        return None
    try:
        raw = read_ds_config(Path(ref.path), script_file) if script_file else read_as_given(ref)
    except LlmperfError:
        return None
    zero = raw.get("zero_optimization") if isinstance(raw.get("zero_optimization"), dict) else {}
    release = TODAYS_RELEASE if env is None else schema_release(env)
    settings: dict[int, Any] = {}
    for stage in stages:
        try:
            settings[stage] = parse_ds_config({**raw, "zero_optimization": {**zero, "stage": stage}}, ref.path,
                                              release=release)
        except ConfigError:
            settings[stage] = None
    return settings

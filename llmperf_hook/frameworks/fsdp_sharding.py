"""PyTorch FSDP as a Hugging Face job asks for it, priced as the ZeRO stage that shards the same state.

Two routes: the Trainer's `--fsdp "full_shard auto_wrap"` (transformers TrainingArguments.fsdp, words of
FSDPOption: full_shard, shard_grad_op, hybrid_shard, hybrid_shard_zero2, no_shard, offload, auto_wrap), and
`accelerate launch --use_fsdp` (its plugin's FSDP_RESHARD_AFTER_FORWARD / FSDP_SHARDING_STRATEGY,
FSDP_OFFLOAD_PARAMS, FSDP_ACTIVATION_CHECKPOINTING; launch/accelerate.py). FULL_SHARD (reshard after forward:
parameters, gradients and optimizer states sharded, parameters all-gathered before each forward and backward)
is ZeRO-3; SHARD_GRAD_OP (parameters kept after forward) is ZeRO-2; NO_SHARD is plain data parallelism (Zhao et
al. 2023, "PyTorch FSDP", section 3). The hybrid strategies shard within a node and replicate across nodes;
they are priced as sharding over the whole data-parallel group, with a warning. CPU offload moves parameters,
gradients and the optimizer step to the host.

FSDP's own activation checkpointing wraps every decoder layer in checkpoint_wrapper (accelerate's
FullyShardedDataParallelPlugin.activation_checkpointing): priced as full recompute of each layer, as the Trainer's
--gradient_checkpointing is. accelerate's plugin takes it from FSDP_ACTIVATION_CHECKPOINTING; the Trainer from its
`--fsdp_config` (a JSON file, or a JSON object given in place of the path: TrainingArguments.__post_init__ loads both,
and strips each key's `fsdp_` prefix, so `fsdp_activation_checkpointing` is the same key), which it turns into
that variable for the plugin (str_to_bool(str(value).lower()): y, yes, t, true, on or 1 turn it on, n, no, f, false,
off or 0 off, any other word stops the job, "invalid truth value"). The Trainer refuses it beside
--gradient_checkpointing ('The activation_checkpointing in FSDP config and the gradient_checkpointing in training arg can't be set to True
simultaneously', trainer.py create_accelerator_and_postprocess).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from llmperf_hook.errors import ConfigError
from llmperf_hook.provenance import Source, SourceKind

_STAGES = {"full_shard": 3, "true": 3, "1": 3, "shard_grad_op": 2, "false": 2, "2": 2, "no_shard": 0, "3": 0,
           "hybrid_shard": 3, "4": 3, "hybrid_shard_zero2": 2, "5": 2}
_HYBRID = ("hybrid_shard", "hybrid_shard_zero2", "4", "5")
_HF_OPTIONS = ("full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2", "no_shard", "offload", "auto_wrap")
"""transformers trainer_utils.FSDPOption."""


@dataclass(frozen=True)
class FsdpSharding:
    zero_stage: int
    """The ZeRO stage that shards what this FSDP strategy shards."""
    offload: bool
    """CPU offload of parameters, gradients and the optimizer step."""
    activation_checkpointing: bool
    """FSDP's own activation checkpointing (checkpoint_wrapper on each decoder layer): full recompute per layer."""
    source: Source
    checkpointing_source: Source | None = None
    """Where activation_checkpointing came from (the Trainer's --fsdp_config, or the plugin: `source`)."""


FSDP_CONFIG_FLAGS = ("--fsdp_config", "--fsdp-config")
"""The Trainer's flag (HfArgumentParser also takes the dashed spelling)."""
_CHECKPOINTING_SWITCH = ("--gradient_checkpointing", "--gradient-checkpointing")
_FALSE_WORDS = ("no", "false", "f", "n", "0")
"""transformers hf_argparser.string_to_bool's false spellings (lowercased)."""
_TRUTH = {**dict.fromkeys(("y", "yes", "t", "true", "on", "1"), True),
          **dict.fromkeys(("n", "no", "f", "false", "off", "0"), False)}
"""accelerate utils/environment.str_to_bool's words, which the Trainer reads the config's value with (lowercased)."""


def fsdp_checkpointing_on(raw: Mapping[str, Any], where: str) -> bool:
    """Whether an --fsdp_config (`raw`, read by read_fsdp_config; `where`: how the command gives it) turns on FSDP's
    activation checkpointing: str_to_bool(str(value).lower()), so `1` and "yes" do too; ConfigError for a word
    str_to_bool refuses (the Trainer stops: 'invalid truth value')."""
    value = str(raw.get("activation_checkpointing", False)).lower()
    if value not in _TRUTH:
        raise ConfigError(f"{where} sets activation_checkpointing to {value!r}: the Trainer reads it as a truth value "
                          f"(accelerate str_to_bool: {', '.join(_TRUTH)}) and stops at start-up ('invalid truth "
                          "value'). Write true or false.")
    return _TRUTH[value]


def read_fsdp_config(value: str) -> dict[str, Any] | None:
    """The Trainer's --fsdp_config value as TrainingArguments loads it: a JSON object given in its place, else the
    JSON file it names, keys with `fsdp_` stripped; None when it cannot be read as one."""
    try:
        text = value if value.lstrip().startswith("{") else Path(value).read_text(encoding="utf-8")
        raw = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    return {(k[5:] if isinstance(k, str) and k.startswith("fsdp_") else k): v for k, v in raw.items()}


def _last_value(script_args: Sequence[str], names: Sequence[str]) -> tuple[str, str] | None:
    """(spelling, value) of the last of `names` in argv (a bare switch: ""), as argparse keeps the last."""
    found = None
    for i, word in enumerate(script_args):
        name, eq, value = word.partition("=")
        if name in names:
            following = script_args[i + 1] if i + 1 < len(script_args) else ""
            found = (name, value if eq else ("" if following.startswith("-") else following))
    return found


def _trainer_checkpointing(script_args: Sequence[str]) -> tuple[bool, Source | None]:
    """(FSDP's activation checkpointing is on, its source) from the Trainer's --fsdp_config; ConfigError where the
    Trainer stops: a file it cannot load, or checkpointing beside --gradient_checkpointing."""
    given = _last_value(script_args, FSDP_CONFIG_FLAGS)
    if given is None:
        return False, None
    flag, value = given
    raw = read_fsdp_config(value)
    if raw is None:
        raise ConfigError(f"{flag} {value!r} is neither a JSON file llmperf can read nor a JSON object; "
                          "TrainingArguments loads it at start-up (json.load) and the Trainer stops. Give the path of "
                          "the FSDP config JSON file (run from the folder the job starts in), or a JSON object.")
    on = fsdp_checkpointing_on(raw, f"{flag} {value}")
    switch = _last_value(script_args, _CHECKPOINTING_SWITCH)
    if on and switch is not None and switch[1].lower() not in _FALSE_WORDS:
        raise ConfigError(f"{flag} {value} turns on FSDP's activation_checkpointing and the command also gives "
                          f"{switch[0]}: the Trainer refuses both ('The activation_checkpointing in FSDP config and "
                          "the gradient_checkpointing in training arg can't be set to True simultaneously', "
                          f"trainer.py). Drop {switch[0]}: FSDP's checkpointing recomputes each layer already.")
    return on, Source(SourceKind.ARGV, f"{flag} activation_checkpointing") if on else None


def fsdp_sharding(hf_fsdp: Any, env: Mapping[str, str], warnings: list[str],
                  script_args: Sequence[str] = ()) -> FsdpSharding | None:
    """The FSDP setting of a Hugging Face job (the Trainer's --fsdp value with its --fsdp_config among
    `script_args`, or accelerate's FSDP plugin), or None."""
    if hf_fsdp not in (None, ""):
        words = str(hf_fsdp).lower().split()
        unknown = [w for w in words if w not in _HF_OPTIONS]
        if unknown:  # FSDPOption(w) raises ValueError in TrainingArguments.__post_init__
            raise ConfigError(f"--fsdp {hf_fsdp!r}: {', '.join(unknown)} is not an FSDP option of transformers "
                              f"({', '.join(_HF_OPTIONS)}); the Trainer stops at start-up.")
        strategy = next((w for w in words if w in _STAGES), "full_shard")  # offload / auto_wrap alone: full_shard
        checkpointing, where = _trainer_checkpointing(script_args)
        return _sharding(strategy, "offload" in words, checkpointing, Source(SourceKind.ARGV, "--fsdp"), warnings,
                         where)
    if env.get("ACCELERATE_USE_FSDP", "").lower() != "true":
        return None
    var = "FSDP_RESHARD_AFTER_FORWARD" if "FSDP_RESHARD_AFTER_FORWARD" in env else "FSDP_SHARDING_STRATEGY"
    strategy = env.get(var, "full_shard").lower()
    if strategy not in _STAGES:
        raise ConfigError(f"accelerate {var.lower()} {env[var]!r} is not an FSDP sharding strategy (FULL_SHARD, "
                          "SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2, or true / false).")
    return _sharding(strategy, env.get("FSDP_OFFLOAD_PARAMS", "false").lower() == "true",
                     env.get("FSDP_ACTIVATION_CHECKPOINTING", "false").lower() == "true",
                     Source(SourceKind.LAUNCHER, f"accelerate FSDP plugin ({var.lower()} {strategy})"), warnings)


def _sharding(strategy: str, offload: bool, checkpointing: bool, source: Source, warnings: list[str],
              checkpointing_source: Source | None = None) -> FsdpSharding:
    if strategy in _HYBRID:
        warnings.append(f"FSDP {strategy}: sharding within a node and replication across nodes is priced as "
                        "sharding over the whole data-parallel group")
    return FsdpSharding(_STAGES[strategy], offload, checkpointing, source, checkpointing_source or source)

"""DeepSpeed activation checkpointing (deepspeed.checkpointing): what the ds_config section and Megatron-DeepSpeed's
flags change, and the one warning each for what has no effect or is not priced.

Precedence (DeepSpeed 0.19.8 runtime/activation_checkpointing/checkpointing.py configure; Megatron-DeepSpeed 4efb479
megatron/initialize.py): nothing reads the ds_config's `activation_checkpointing` section unless a script calls
`deepspeed.checkpointing.configure(mpu, deepspeed_config=...)`; the engine never does. Megatron-DeepSpeed calls it only
under `--deepspeed --deepspeed-activation-checkpointing` (initialize.py:266
setup_deepspeed_random_and_activation_checkpointing), passing --partition-activations, --contigious-checkpointing,
--checkpoint-in-cpu, --synchronize-each-layer, --profile-backward (store_true: False when absent, never None) and the
number of checkpoints, and configure() lets every argument that is not None overwrite what it read from the file
(checkpointing.py:1207-1226). So for Megatron-DeepSpeed the section never has an effect, and its flags have one only
under --deepspeed-activation-checkpointing with some layer checkpointed: full recompute (--checkpoint-activations,
--recompute-granularity full, the pipeline engine's interval) through transformer.py _checkpointed_forward, or
selective recompute's CoreAttention, both through tensor_parallel.checkpoint -> deepspeed.checkpointing.checkpoint.
The section's keys are read raw (get_scalar_param), so a key counts as set when Python finds it true: the string
"false" is true there.

What each flag acts on, per recompute granularity (Megatron-DeepSpeed 4efb479): full recompute checkpoints each
chunk's layer input (transformer.py _checkpointed_forward -> tensor_parallel.checkpoint, random.py:326 `if
deepspeed.checkpointing.is_configured(): return deepspeed.checkpointing.checkpoint(function, *args)`), so
--partition-activations stores it 1/TP per rank (checkpointing.py partition_activations) and --checkpoint-in-cpu in
host memory; selective recompute checkpoints CoreAttention through the same function
(ParallelAttention._checkpointed_attention_forward), so they act on its Q, K, V inputs (priced as Megatron's own
there: one warning); with no recompute nothing is checkpointed and they do nothing. RecomputeConfig records them at
any granularity (a tuned command keeps the flags); its readers apply them to full recompute only.
"""

from __future__ import annotations

from typing import Any

from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.provenance import Source

SECTION_DEFAULTS: dict[str, Any] = {
    "partition_activations": False, "contiguous_memory_optimization": False, "cpu_checkpointing": False,
    "number_checkpoints": None, "synchronize_checkpoint_boundary": False, "profile": False}
"""runtime/activation_checkpointing/config.py ACT_CHKPT_DEFAULT: the section's keys and DeepSpeed's defaults."""

SECTION_UNPRICED: dict[str, str] = {
    "partition_activations": "checkpoints split over the model-parallel group not modelled",
    "cpu_checkpointing": "checkpoints kept in host memory not modelled",
    "contiguous_memory_optimization": "checkpoints copied into contiguous buffers not modelled",
    "synchronize_checkpoint_boundary": "a device synchronize before and after every checkpointed layer not timed",
    "profile": "timers around every checkpointed layer's forward and recompute (device synchronizes) not timed",
}
"""What each key changes once a script configures deepspeed.checkpointing from the file (checkpointing.py: 354,
436, 588-678); number_checkpoints only sizes the contiguous buffers."""

FLAG_KEYS: dict[str, str] = {
    "partition_activations": "--partition-activations", "contigious_checkpointing": "--contigious-checkpointing",
    "checkpoint_in_cpu": "--checkpoint-in-cpu", "synchronize_each_layer": "--synchronize-each-layer",
    "profile_backward": "--profile-backward"}
"""Megatron-DeepSpeed's flags passed to deepspeed.checkpointing.configure (arguments.py:1524-1535)."""

FLAG_UNPRICED: dict[str, str] = {
    "contigious_checkpointing": "checkpoints copied into one preallocated contiguous buffer not modelled",
    "synchronize_each_layer": "a device synchronize at each checkpointed layer's start and end not timed",
    "profile_backward": "timers around every checkpointed layer's forward and recompute (device synchronizes) not "
                        "timed",
}
"""The flags that change the step without llmperf pricing them; --partition-activations and --checkpoint-in-cpu are
priced for full recompute (RecomputeConfig.partition_activations / checkpoint_in_cpu)."""


def ds_checkpointing_flags(flags: FlagValues, src: dict[str, Source]) -> dict[str, bool]:
    """RecomputeConfig's partition_activations / checkpoint_in_cpu, whatever the recompute granularity: configure()
    gets these store_true flags (False when absent, overriding the ds_config's section) under --deepspeed
    --deepspeed-activation-checkpointing only (initialize.py:266); otherwise the job never configures
    deepspeed.checkpointing and they stay off."""
    if not (flags.get("deepspeed") and flags.get("deepspeed_activation_checkpointing")):
        return {}
    out = {"partition_activations": bool(flags.get("partition_activations")),
           "checkpoint_in_cpu": bool(flags.get("checkpoint_in_cpu"))}
    for key, on in out.items():
        if on:
            src[key] = flags.source(key)
    return out


def section_keys_set(raw: dict[str, Any]) -> tuple[str, ...]:
    """The section's keys DeepSpeed would read as set away from its default: truthy (raw get_scalar_param; "false"
    is a non-empty string, so true), number_checkpoints when not null."""
    section = raw.get("activation_checkpointing")
    if not isinstance(section, dict):
        return ()
    return tuple(key for key, default in SECTION_DEFAULTS.items()
                 if key in section and (section[key] is not None if default is None else bool(section[key])))


def section_warnings(raw: dict[str, Any], origin: str) -> list[str]:
    """For a script that configures deepspeed.checkpointing from the ds_config itself (a plain DeepSpeed script)."""
    if not isinstance(raw.get("activation_checkpointing"), dict):
        return []
    return [f"{origin} activation_checkpointing configures deepspeed.checkpointing only for a script that calls "
            "deepspeed.checkpointing.configure with the config; recomputation is counted only when the script turns "
            "it on (--checkpoint-activations, --gradient_checkpointing)"] + [
        f"{origin} activation_checkpointing.{key} = {raw['activation_checkpointing'][key]!r}: {SECTION_UNPRICED[key]}"
        for key in section_keys_set(raw) if key in SECTION_UNPRICED]


def megatron_deepspeed_warnings(flags: FlagValues, granularity: str, deepspeed: bool, section_path: str,
                                section_keys: tuple[str, ...]) -> list[str]:
    """A Megatron job (`deepspeed`: Megatron-DeepSpeed with --deepspeed): the ds_config section's keys (none has an
    effect) and the checkpointing flags that have none (no --deepspeed-activation-checkpointing, or no checkpointed
    layer) or that are not priced."""
    out: list[str] = []
    configured = deepspeed and bool(flags.get("deepspeed_activation_checkpointing"))
    if section_keys:
        out.append(f"{section_path} activation_checkpointing.{', '.join(section_keys)}: no effect. Megatron-DeepSpeed "
                   "configures deepspeed.checkpointing from its own flags (" + ", ".join(FLAG_KEYS.values()) + "), "
                   "which override every key of the section, and only under --deepspeed-activation-checkpointing "
                   "(initialize.py setup_deepspeed_random_and_activation_checkpointing); set them with those flags")
    given = [flag for dest, flag in FLAG_KEYS.items() if flags.get(dest)]
    if given and not configured:
        return out + [f"{', '.join(given)}: no effect without --deepspeed and --deepspeed-activation-checkpointing "
                      "(Megatron-DeepSpeed passes them to deepspeed.checkpointing.configure only under both)"]
    if given and granularity == "none":
        return out + [f"{', '.join(given)}: no effect, no layer is checkpointed (give --checkpoint-activations or "
                      "--recompute-granularity)"]
    out += [f"{FLAG_KEYS[dest]}: {why}" for dest, why in FLAG_UNPRICED.items() if flags.get(dest)]
    if granularity == "selective":
        out += [f"{FLAG_KEYS[dest]}: acts on selective recompute's attention checkpoint (its Q, K, V inputs), which "
                "is priced as Megatron's own (kept whole on the GPU); the flag is priced only for full recompute's "
                "layer checkpoints"
                for dest in ("partition_activations", "checkpoint_in_cpu") if flags.get(dest)]
    return out

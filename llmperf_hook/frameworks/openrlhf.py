"""OpenRLHF's DeepSpeed trainers (`deepspeed --module openrlhf.cli.train_sft ...`, OpenRLHF/OpenRLHF
examples/scripts/train_*_llama.sh): no ds_config file. DeepspeedStrategy.get_ds_train_config builds it with
openrlhf/utils/deepspeed/deepspeed_utils.get_train_ds_config from the script's arguments:

    train_micro_batch_size_per_gpu = --micro_train_batch_size (default 8)
    train_batch_size = --train_batch_size (default 128; the global batch: DeepSpeed derives the accumulation)
    zero_optimization = {stage: --zero_stage (default 2), offload_optimizer: cpu with --adam_offload,
                         zero_hpz_partition_size: --zpg (default 1)}
    bf16 / fp16 enabled from --param_dtype (default bf16; older releases: the --bf16 switch)
    gradient_clipping --max_norm (default 1.0); sequence length --max_len (default 2048)

The trained model is the causal LM of --pretrain. train_rm / train_dpo / train_kto / train_prm train one model but
on other batches (chosen + rejected pairs; DPO adds a frozen reference model's forward): warned. PPO / GRPO /
REINFORCE trainers (train_ppo*, launched by ray or deepspeed) generate with the actor between steps: refused.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.provenance import Source, SourceKind

ORIGIN = "OpenRLHF get_train_ds_config"
_DEFAULTS = {"micro_train_batch_size": 8, "train_batch_size": 128, "zero_stage": 2, "max_len": 2048, "zpg": 1}
_PAIRED = {"train_rm": "a reward model on chosen and rejected answers (2 x --micro_train_batch_size sequences per "
                       "micro-batch, a value head instead of the LM head)",
           "train_dpo": "DPO: chosen and rejected answers (2 x --micro_train_batch_size sequences) and a frozen "
                        "reference model's forward on both",
           "train_kto": "KTO: a frozen reference model's forward beside the policy's",
           "train_prm": "a process reward model (token-level value head)"}


def openrlhf_trainer(script: str) -> str:
    """`train_sft` ... for `-m openrlhf.cli.train_sft` or a path ending openrlhf/cli/train_sft.py, else ""."""
    module = script[3:] if script.startswith("-m ") else script.replace(os.sep, ".").removesuffix(".py")
    _, found, name = module.rpartition("openrlhf.cli.")
    return name if found and name.startswith("train_") else ""


def _arg(flags: FlagValues, dest: str) -> Any:
    if not flags.has(dest):
        flags.values[dest] = _DEFAULTS[dest]
        flags.sources[dest] = Source(SourceKind.DEFAULT, f"OpenRLHF --{dest} default {_DEFAULTS[dest]}")
    return flags.get(dest)


def _precision(flags: FlagValues) -> str:
    dtype = flags.get("param_dtype")
    if isinstance(dtype, str):
        if dtype not in ("bf16", "fp16"):
            raise ConfigError(f"OpenRLHF --param_dtype {dtype!r}: its argparse choices are bf16 and fp16.")
        return dtype
    return "bf16"  # --bf16 in older releases; --param_dtype defaults to bf16 since


def openrlhf_ds_config(flags: FlagValues) -> dict[str, Any]:
    """The ds_config DeepspeedStrategy hands to deepspeed.initialize; fills the script defaults into `flags`."""
    precision = _precision(flags)
    zero = {"stage": _arg(flags, "zero_stage"), "zero_hpz_partition_size": _arg(flags, "zpg"),
            "offload_optimizer": {"device": "cpu" if flags.get("adam_offload") else "none", "pin_memory": True}}
    _arg(flags, "max_len")
    return {"train_micro_batch_size_per_gpu": _arg(flags, "micro_train_batch_size"),
            "train_batch_size": _arg(flags, "train_batch_size"), "zero_optimization": zero,
            "bf16": {"enabled": precision == "bf16"}, "fp16": {"enabled": precision == "fp16"},
            "gradient_clipping": float(flags.get("max_norm", 1.0))}


def check_openrlhf(script: str) -> None:
    """Exit 2 for OpenRLHF's RL trainers (rollouts generated between training steps)."""
    name = openrlhf_trainer(script)
    if name.startswith(("train_ppo", "train_grpo", "train_reinforce")):
        raise ConfigError(
            f"{script} is OpenRLHF's {name} (reinforcement learning: the actor generates rollouts, reference, reward "
            "and critic models score them, then actor and critic train), which llmperf does not model: it prices one "
            "model's training step. Predict the actor's openrlhf.cli.train_sft or the critic's train_rm command.")


def openrlhf_warnings(script: str, script_args: Sequence[str]) -> list[str]:
    """One 'not modelled' line per part of an OpenRLHF trainer llmperf prices as plain causal-LM training."""
    name, out = openrlhf_trainer(script), []
    if name in _PAIRED:
        out.append(f"OpenRLHF {name} trains {_PAIRED[name]}: priced as a causal LM at --micro_train_batch_size")
    if "--lora_rank" in script_args and script_args[script_args.index("--lora_rank") + 1:][:1] not in (["0"], []):
        out.append("OpenRLHF --lora_rank: LoRA adapters not priced, the base weights priced as trained")
    if "--packing_samples" in script_args:
        out.append("OpenRLHF --packing_samples: packed sequences priced as --max_len-long samples")
    if any(w in script_args for w in ("--ring_attn_size", "--ds_tensor_parallel_size")):
        out.append("OpenRLHF --ring_attn_size / --ds_tensor_parallel_size: ring attention and AutoTP not modelled")
    return out


def rewrite_openrlhf_argv(argv: Sequence[str], micro_batch_size: int, zero_stage: int, recompute: bool) -> list[str]:
    """An OpenRLHF command with another micro batch / ZeRO stage / full recompute, for tune --apply (its ds_config is
    built from these flags): --micro_train_batch_size, --zero_stage, --gradient_checkpointing; --train_batch_size is
    the global batch, held (DeepSpeed derives the accumulation steps from it). A flag whose value (given, or the
    script's default) is already the one asked for is left as written, so the command changes only where it must."""
    from llmperf_hook.tune import argv_edit as ed

    out = list(argv)
    for flag, value in (("micro_train_batch_size", micro_batch_size), ("zero_stage", zero_stage)):
        if _given_int(out, flag) != value:
            out = ed.set_value(out, (f"--{flag}",), str(value))
    return ed.set_switch(out, ("--gradient_checkpointing",), recompute)


def _given_int(argv: Sequence[str], dest: str) -> int | None:
    """The value argparse reads for `--dest` (its last occurrence), else the script's default; None if not an int."""
    from llmperf_hook.tune import argv_edit as ed

    word = ed.flag_value(argv, (f"--{dest}",))
    try:
        return int(word) if word is not None else int(_DEFAULTS[dest])
    except ValueError:
        return None

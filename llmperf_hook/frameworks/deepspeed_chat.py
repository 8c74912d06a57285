"""DeepSpeed-Chat training scripts (DeepSpeedExamples applications/DeepSpeed-Chat, step1-3 main.py): no ds_config
file. The `--deepspeed` switch (deepspeed.add_config_arguments) comes with `--zero_stage`, and main.py builds the
config itself with dschat/utils/ds_utils.get_train_ds_config(offload, dtype, stage):

    train_micro_batch_size_per_gpu = --per_device_train_batch_size (default 16)
    train_batch_size = per_device_train_batch_size * world_size * --gradient_accumulation_steps (default 1)
    zero_optimization = {stage: --zero_stage (default 0), overlap_comm: true,
                         offload_param/offload_optimizer: {device: "cpu" with --offload, else "none"}}
    fp16 or bf16 enabled from --dtype (default fp16); gradient_clipping 1.0
    sequence length --max_seq_len (default 512)
"""

from __future__ import annotations

from typing import Any, Sequence

from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.provenance import Source, SourceKind

ORIGIN = "DeepSpeed-Chat get_train_ds_config"
_DEFAULTS = {"per_device_train_batch_size": 16, "gradient_accumulation_steps": 1, "zero_stage": 0,
             "dtype": "fp16", "max_seq_len": 512}


def is_deepspeed_chat(flags: FlagValues) -> bool:
    """The bare `--deepspeed` switch with `--zero_stage` and no config file: DeepSpeed-Chat's convention."""
    no_file = not (flags.get("deepspeed_config") or flags.get("deepscale_config"))
    return flags.get("deepspeed") is True and flags.has("zero_stage") and no_file


def _arg(flags: FlagValues, dest: str) -> Any:
    if not flags.has(dest):
        flags.values[dest] = _DEFAULTS[dest]
        flags.sources[dest] = Source(SourceKind.DEFAULT, f"DeepSpeed-Chat main.py --{dest} default {_DEFAULTS[dest]}")
    return flags.get(dest)


def deepspeed_chat_config(flags: FlagValues, world_size: int) -> dict[str, Any]:
    """The config main.py hands to deepspeed.initialize; fills the script defaults into `flags` (with sources)."""
    device = "cpu" if flags.get("offload") else "none"
    micro, gas = _arg(flags, "per_device_train_batch_size"), _arg(flags, "gradient_accumulation_steps")
    dtype = str(_arg(flags, "dtype"))
    _arg(flags, "max_seq_len")
    return {
        "train_batch_size": micro * world_size * gas,
        "train_micro_batch_size_per_gpu": micro,
        "zero_optimization": {"stage": _arg(flags, "zero_stage"), "overlap_comm": True,
                              "offload_param": {"device": device}, "offload_optimizer": {"device": device},
                              "stage3_max_live_parameters": 3e7, "stage3_prefetch_bucket_size": 3e7},
        ("bf16" if dtype == "bf16" else "fp16"): {"enabled": True},
        "gradient_clipping": 1.0,
    }


def _arg_value(args: Sequence[str], flag: str) -> str | None:
    """The value of `flag` in `args` (`--flag V` or `--flag=V`) as main.py's argparse keeps it: the last occurrence
    wins (each one stores over the one before); None = not given."""
    value = None
    for i, word in enumerate(args):
        if word == flag and i + 1 < len(args):
            value = args[i + 1]
        elif word.startswith(flag + "="):
            value = word.split("=", 1)[1]
    return value


def deepspeed_chat_warnings(args: Sequence[str]) -> list[str]:
    """What DeepSpeed-Chat's main.py trains beyond the plain causal LM llmperf prices, one warning each:
    --lora_dim N > 0 (dschat/utils/module/lora.py convert_linear_layer_to_lora adds rank-N adapters to the
    --lora_module_name linears; without --only_optimize_lora every weight still trains) and step 2's reward model
    (--num_padding_at_beginning, main.py's only option step 1 lacks: dschat/utils/data/data_utils.py
    DataCollatorReward concatenates chosen and rejected answers, 2 x --per_device_train_batch_size sequences, and
    RewardModel puts a 1-output value head where the LM head was)."""
    out: list[str] = []
    lora = _arg_value(args, "--lora_dim")
    if lora and lora.isdigit() and int(lora) > 0:
        trains = ("only the adapters train (--only_optimize_lora), priced as full fine-tuning"
                  if "--only_optimize_lora" in args else "every weight trains, priced as full fine-tuning")
        out.append(f"DeepSpeed-Chat --lora_dim {lora}: the LoRA adapters' matmuls are not priced; {trains}")
    if _arg_value(args, "--num_padding_at_beginning") is not None and _arg_value(args, "--actor_model_name_or_path") is None:
        out.append("DeepSpeed-Chat reward model (--num_padding_at_beginning): each step holds chosen and rejected "
                   "answers, 2 x --per_device_train_batch_size sequences, and a value head instead of the LM head; "
                   "priced as a causal LM at --per_device_train_batch_size")
    return out

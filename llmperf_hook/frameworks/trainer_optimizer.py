"""The optimizer a Hugging Face Trainer job steps, from --optim and --weight_decay (transformers TrainingArguments;
Trainer.get_optimizer_cls_and_kwargs, create_optimizer).

The Trainer builds it itself without DeepSpeed (torch DDP or FSDP over fp32 weights: --bf16 / --fp16 are autocast)
and hands it to deepspeed.initialize when the ds_config has no optimizer section (with one, DeepSpeed builds the
section's and --optim is ignored: transformers integrations/deepspeed.py deepspeed_optim_sched). What each name
runs, priced by graph/step_ops.adam_bytes_per_param through OptimizerConfig.torch_optimizer_impl:
- adamw_torch: torch.optim.AdamW, foreach on CUDA; adamw_hf (transformers' own AdamW, removed in v5): the same
  passes tensor by tensor (mul_, add_, mul_, addcmul_, sqrt, add_, addcdiv_), priced as foreach;
- adamw_torch_fused: torch.optim.AdamW(fused=True);
- adamw_apex_fused: apex's FusedAdam, the framework fused Adam (""), 28 B;
- sgd: torch.optim.SGD with lr alone (no momentum);
- adamw_bnb_8bit / adamw_8bit / paged_adamw_8bit: bitsandbytes' AdamW8bit.
Any other name (adafactor, lion, galore, schedule-free, ...) keeps the stated assumption: priced as the fused Adam
(28 B per parameter) with AdamW's states, and trainer_flags warns. The default --optim is adamw_torch_fused: today's
TrainingArguments on torch >= 2.8 (huggingface/transformers#37358, merged 2025-07; adamw_torch before it and on
older torch, adamw_hf before huggingface/transformers#25109, 2023-07); llmperf does not know the job's torch, so it
assumes a current stack. The Trainer puts the decay parameters (all but biases and norms) in a group with
weight_decay = --weight_decay (default 0.0: no decay pass) and the rest at 0.
"""

from __future__ import annotations

from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.torch_weight_decay import decay_kind
from llmperf_hook.provenance import Source, SourceKind

TRAINER_OPTIM_IMPLS = {"adamw_torch": "foreach", "adamw_hf": "foreach", "adamw_torch_fused": "fused",
                       "adamw_apex_fused": "", "sgd": "sgd", "adamw_bnb_8bit": "adam_8bit", "adamw_8bit": "adam_8bit",
                       "paged_adamw_8bit": "adam_8bit"}
"""--optim value -> OptimizerConfig.torch_optimizer_impl (module docstring)."""
DEFAULT_TRAINER_OPTIM = "adamw_torch_fused"
"""TrainingArguments.optim's default on torch >= 2.8 (module docstring)."""


def is_trainer_job(flags: FlagValues, framework: str, accelerator: bool) -> bool:
    """The Hugging Face Trainer runs the job: a Trainer script (not one driving Accelerator itself) started with
    DeepSpeed through --deepspeed, or given the Trainer's --model_name_or_path or --optim."""
    return not accelerator and (framework == "hf-deepspeed" or flags.has("model_name_or_path") or flags.has("optim"))


def trainer_optimizer_fields(flags: FlagValues, src: dict[str, Source]) -> dict[str, str]:
    """{torch_optimizer_impl, torch_weight_decay} of the optimizer the Trainer builds, with their sources; {} for an
    --optim llmperf does not price (the fused-Adam assumption, warned by trainer_flags)."""
    optim = str(flags.get("optim", DEFAULT_TRAINER_OPTIM))
    if optim not in TRAINER_OPTIM_IMPLS:
        return {}
    impl_src = flags.source("optim") if flags.has("optim") else Source(
        SourceKind.DEFAULT, f"Trainer --optim {DEFAULT_TRAINER_OPTIM} (TrainingArguments on torch >= 2.8)")
    decay_src = flags.source("weight_decay") if flags.has("weight_decay") else Source(
        SourceKind.DEFAULT, "Trainer --weight_decay 0.0")
    src.update(torch_optimizer_impl=impl_src, torch_weight_decay=decay_src)
    decay = flags.get("weight_decay", 0.0)
    return {"torch_optimizer_impl": TRAINER_OPTIM_IMPLS[optim], "torch_weight_decay": decay_kind(decay, True)}

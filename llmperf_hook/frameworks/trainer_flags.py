"""Hugging Face Trainer flags (transformers TrainingArguments) that change a step without changing the model, layout
or batch: the DDP bucket size is priced, the others are named in a "not modelled" warning (tests/frameworks/
real_scripts/FLAGS.md). Only for a script without a ds_config (plain torch DDP or FSDP): under DeepSpeed the engine
replaces DDP and a ds_config optimizer replaces --optim.
"""

from __future__ import annotations

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.trainer_optimizer import TRAINER_OPTIM_IMPLS
from llmperf_hook.provenance import Source, SourceKind

TRAINER_INT = ("ddp-bucket-cap-mb",)
TRAINER_TRUE = ("torch-compile", "ddp-find-unused-parameters", "auto-find-batch-size")
TRAINER_STR = ("optim", "config-overrides")
"""--config_overrides: run_clm.py's ModelArguments (the shape of a model built from scratch, frameworks/script_shape.py)."""
TRAINER_FLOAT = ("weight-decay",)
"""--weight_decay: the Trainer's AdamW decay (frameworks/trainer_optimizer.py; Megatron's --weight-decay is read the
same way and not used)."""

ADAM_OPTIMS = frozenset({"adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw_apex_fused", "adamw_torch_xla",
                         "adamw_torch_npu_fused", "adamw_anyprecision"})
"""TrainingArguments.optim values (transformers OptimizerNames) that run a full-precision Adam(W): priced as Adam."""


def ddp_bucket_elems(flags: FlagValues, src: dict[str, Source]) -> int | None:
    """--ddp_bucket_cap_mb N: torch DDP's bucket_cap_mb (Trainer passes it to DistributedDataParallel), in fp32
    gradient elements (N MiB / 4 B, as assemble.DDP_BUCKET_ELEMS for the default 25); None = not given."""
    cap_mb = flags.get("ddp_bucket_cap_mb")
    if cap_mb is None:
        return None
    src["grad_bucket_size_elems"] = flags.source("ddp_bucket_cap_mb")
    return int(cap_mb) * 2**20 // 4


def optim_warnings(flags: FlagValues) -> list[str]:
    """--optim other than a full-precision AdamW: its states are priced as AdamW's, its step as trainer_optimizer
    reads it (or as the fused Adam). Also under DeepSpeed when the ds_config has no optimizer section (the Trainer's
    optimizer is the one DeepSpeed steps)."""
    optim = flags.get("optim")
    if optim is None or optim in ADAM_OPTIMS:
        return []
    impl = TRAINER_OPTIM_IMPLS.get(optim)
    step = ("its step as a fused AdamW's (28 B per parameter)" if impl is None
            else "its step from its kernel's arguments (15 B per fp32 parameter, not measured)"
            if impl == "adam_8bit"
            else "its step from its own kernels' bytes")
    return [f"{flags.seen_flags['optim']} {optim}: its optimizer states priced as AdamW's, {step}"]


def trainer_warnings(flags: FlagValues) -> list[str]:
    """--torch_compile (Inductor fuses the model's kernels; priced as eager PyTorch); --ddp_find_unused_parameters
    True (DDP walks the autograd graph after every forward, torch/nn/parallel/distributed.py prepare_for_backward);
    an --optim other than a full-precision AdamW (8-bit, paged, Adafactor, SGD, ...: other states and step);
    --auto_find_batch_size (Trainer.train wraps its loop in trainer_utils.find_executable_batch_size, accelerate's:
    after an out-of-memory error it retries with a smaller per-device batch, so the job may run another one)."""
    out: list[str] = []
    if flags.get("torch_compile"):
        out.append(f"{flags.seen_flags['torch_compile']}: torch.compile's fused kernels priced as eager PyTorch ops")
    if flags.get("ddp_find_unused_parameters"):
        out.append(f"{flags.seen_flags['ddp_find_unused_parameters']} True: DDP's search of the autograd graph for "
                   "unused parameters after every forward is not timed")
    out += optim_warnings(flags)
    if flags.get("auto_find_batch_size"):
        out.append(f"{flags.seen_flags['auto_find_batch_size']}: priced at the starting per-device batch; after an "
                   "out-of-memory error the Trainer retries with a smaller one (accelerate find_executable_batch_size)")
    return out


def check_trainer_args(flags: FlagValues, deepspeed: bool) -> None:
    """What the Hugging Face Trainer refuses at start-up: both half precisions (TrainingArguments._validate_args, 'At
    most one of fp16 and bf16 can be True, but not both'), and --fsdp under DeepSpeed (`deepspeed`: its --deepspeed
    or accelerate's DeepSpeed plugin; Trainer.__init__: 'Using --fsdp xxx together with --deepspeed is not possible,
    deactivate one of those flags.'), transformers trainer.py / training_args.py."""
    if flags.get("fp16") and flags.get("bf16"):
        raise ConfigError(f"{flags.seen_flags['fp16']} with {flags.seen_flags['bf16']}: the Hugging Face Trainer's "
                          "TrainingArguments raises 'At most one of fp16 and bf16 can be True, but not both' "
                          "(training_args.py). Keep one.")
    if deepspeed and flags.get("fsdp"):
        raise ConfigError(f"{flags.seen_flags['fsdp']} {flags.get('fsdp')} under DeepSpeed: the Hugging Face Trainer "
                          "raises 'Using --fsdp xxx together with --deepspeed is not possible, deactivate one of those "
                          "flags.' (trainer.py Trainer.__init__). Drop --fsdp or the DeepSpeed config.")

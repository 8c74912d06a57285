"""Megatron's own entry points: the scripts of Megatron-LM and Megatron-DeepSpeed that parse their command line with
Megatron's `parse_args` (through `pretrain(...)` or `initialize_megatron(...)`) and build the framework's model.

One answer for every rule that depends on it: the unknown-flag refusal (argparse stops such a script at start-up on an
option neither Megatron nor the script's `extra_args_provider` defines) and Megatron-DeepSpeed's unfused-attention
default (its model code is the framework's ParallelAttention). A user's own script that only takes Megatron-style
flags is none of these: it may add options of its own and builds its own layers.

The entry points, read in the public sources (NVIDIA/Megatron-LM d98e8a6, deepspeedai/Megatron-DeepSpeed 4efb479 and
microsoft/Megatron-DeepSpeed, bigscience-workshop/Megatron-DeepSpeed 8387ae1), every one calling `pretrain(` or
`initialize_megatron(` under `if __name__ == "__main__"`:
- top-level `pretrain_*.py` (gpt, gpt_core, bert, t5, ict, retro, prefix_lm, vit, vision_*, hybrid, vlm, mamba) and
  examples/bert/pretrain_bert.py, examples/t5/pretrain_t5.py, examples/mimo/pretrain_mimo.py;
- `finetune*.py`: finetune_llama.py (Megatron-DeepSpeed), finetune_t0_non_causal_decoder.py (bigscience),
  examples/detxoify_lm/finetune_gpt.py and examples/post_training/modelopt/finetune.py (each with extra options);
- train_rl.py (Megatron-LM);
- tasks/main.py, tasks/vision/main.py, tasks/msdp/main.py (`initialize_megatron(extra_args_provider=get_tasks_args)`);
- `python -m megatron...` modules;
- alibaba/Pai-Megatron-Patch's examples/*/pretrain_*.py (a098ca5): Megatron-LM's `pretrain(...,
  extra_args_provider=get_patch_args)`, its options those of megatron_patch/arguments.py. They are known by
  `--patch-tokenizer-type`, which only that provider defines and every Pai-Megatron-Patch launch script passes.
The tools/ scripts that call initialize_megatron (text generation servers, checkpoint converters, preprocessing)
do not train and are not entry points of a training job.
"""

from __future__ import annotations

import os
import re
from typing import Sequence

_SCRIPT_NAME = re.compile(r"(pretrain_\w+|finetune\w*|train_rl)\.py")
_TASKS_SCRIPTS = ("tasks/main.py", "tasks/vision/main.py", "tasks/msdp/main.py")

_EXTRA_OPTIONS: dict[str, frozenset[str]] = {
    "finetune_gpt.py": frozenset({"data-path2", "eval-ppl", "stored_params"}),
    "finetune.py": frozenset({"offline-distillation-data"}),
    "tasks/main.py": frozenset({"task", "keep-last", "faiss-match", "faiss-topk-retrievals", "qa-data-dev",
                                "qa-data-test", "train-hard-neg", "train-with-neg", "val-av-rank-hard-neg",
                                "val-av-rank-other-neg"}),
    "tasks/vision/main.py": frozenset({"task", "keep-last", "pretrained-checkpoint-type", "seg-stride"}),
    "tasks/msdp/main.py": frozenset({"task", "answer-file", "api-prompt", "guess-file", "megatron-api-url",
                                     "num-prompt-examples", "prompt-type"}),
}
"""Options an entry point's extra_args_provider adds that megatron_known_flags (megatron/**.py and the top-level
scripts) lacks: every `'--name'` literal of examples/detxoify_lm/finetune_gpt.py add_validation_args (Megatron-DeepSpeed
4efb479), examples/post_training/modelopt/finetune.py add_finetune_args (Megatron-LM d98e8a6) and tasks/*main.py
get_tasks_args (union over the three Megatron-DeepSpeed forks), less the names the table already holds."""


PAI_PATCH_OPTIONS = frozenset("""
adaptive-seq-len allow-missing-vision-projection-checkpoint attention-head-type
convert-checkpoint-from-megatron-to-transformers cvcuda-image-processing data-dir dataloader-save dataset dataset-config
disable-bias-attn-fc disable-bias-linear-fc disable-parallel-output enable-shared-expert eval-dev eval-fp32
extra-vocab-size freeze-clip-vision-tower freeze-llm generation-length image-aspect-ratio image-folder image-size
image-tag-type input-len keep-last language-model-type max-num-tiles max-padding-length mm-projector-type
mm-use-im-patch-token mm-use-im-start-end mm-vision-select-layer moe moe-input-feature-slicing moe-topk n-head-kv
num-fewshot num-frames num-shared-experts online-evaluation-config optimizer-offload-auto-threshold
optimizer-offload-chunk-size optimizer-offload-policy patch-size patch-tokenizer-type position-encoding-2d prompt-path
qk-nope-head-dim qk-rope-head-dim repetition-penalty repetition_penalty rotary-scale-factor router-type
shared-moe-ffn-hidden-size sliding-window source-seq-len spatial-merge-size target-seq-len task-list
temporal-patch-size text-generate-gt-file text-generate-input-file text-generate-output-file time
tokenizer-prompt-format top-k top-p train-mode transformer-timers transformer-type tune-mm-mlp-adapter use-alibi-mask
use-llama2-rotary-position-embeddings use-mistral-rotary-position-embeddings use-normhead use-te use-thumbnail
use-tiling verbosity version vision-model-type vision-tower z-loss-weight
""".split())
"""Every `'--name'` literal of Pai-Megatron-Patch a098ca5 megatron_patch/arguments.py (get_patch_args) that
megatron_known_flags lacks."""
PAI_PATCH_MARK = "--patch-tokenizer-type"


def pai_patch_job(script: str, script_args: Sequence[str]) -> bool:
    """A Pai-Megatron-Patch entry point: a Megatron entry-point name given `--patch-tokenizer-type`."""
    return bool(_entry_key(script)) and any(w == PAI_PATCH_MARK or w.startswith(PAI_PATCH_MARK + "=")
                                             for w in script_args)


def _entry_key(script: str) -> str:
    """The entry point a script path names: a tasks main.py keeps its folder (`tasks/vision/main.py`), any other its
    file name; "" when it is none of Megatron's."""
    path = script.replace("\\", "/")
    for tasks in _TASKS_SCRIPTS:
        if path == tasks or path.endswith("/" + tasks):
            return tasks
    name = os.path.basename(path)
    return name if _SCRIPT_NAME.fullmatch(name) else ""


def megatron_entry_point(script: str) -> bool:
    """A Megatron(-LM / -DeepSpeed) entry point of the repositories themselves (see the module docstring), whose
    arguments are Megatron's parser's and whose model code is the framework's; not a user's script taking its flags."""
    return script.startswith("-m megatron") or bool(_entry_key(script))


def tasks_entry_point(script: str) -> str:
    """`tasks/main.py` (or tasks/vision/main.py, tasks/msdp/main.py) when the script is one of those, else ""."""
    key = _entry_key(script)
    return key if key in _TASKS_SCRIPTS else ""


def entry_point_options(script: str, script_args: Sequence[str] = ()) -> frozenset[str]:
    """Option names (without `--`) the entry point defines beyond Megatron's own parser."""
    own = _EXTRA_OPTIONS.get(_entry_key(script), frozenset())
    return own | PAI_PATCH_OPTIONS if pai_patch_job(script, script_args) else own

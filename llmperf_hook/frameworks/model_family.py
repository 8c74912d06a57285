"""Which network a Megatron-style training script builds, read from the script's name as its users run it.

llmperf models decoder-only transformer stacks (attention + dense MLP or MoE): Megatron-LM's and
Megatron-DeepSpeed's `pretrain_gpt.py` and what shares its layers. Other entry points of those repositories train
other networks that the same flags only partly describe; pricing them as a GPT would be a wrong number printed
with confidence, so they stop with exit 2 and say why. BERT is priced as its encoder stack, with a warning.

Each script also fills `--tokenizer-type` when the command does not (its `pretrain(..., args_defaults=...)`),
which decides how the vocabulary is sized.
"""

from __future__ import annotations

import os
import re
from typing import Sequence

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.megatron_entry_points import tasks_entry_point
from llmperf_hook.provenance import Source, SourceKind

SCRIPT_TOKENIZER = {
    "pretrain_gpt.py": "GPT2BPETokenizer", "pretrain_gpt_core.py": "GPT2BPETokenizer",
    "pretrain_bert.py": "BertWordPieceLowerCase", "pretrain_t5.py": "BertWordPieceLowerCase",
}
"""`pretrain(..., args_defaults={'tokenizer_type': ...})` of each entry point (NVIDIA/Megatron-LM pretrain_gpt.py
:527 and examples/bert/pretrain_bert.py:185 at d98e8a6, core_r0.5.0 pretrain_gpt.py:211 / pretrain_bert.py:196;
deepspeedai/Megatron-DeepSpeed pretrain_gpt.py:364, pretrain_bert.py:165, pretrain_t5.py:163 at 4efb479). Megatron
applies them only to arguments the command leaves unset (arguments.py parse_args: args_defaults)."""

_UNMODELLED = (
    (re.compile(r"pretrain_t5\.py"), "a T5 encoder-decoder (an encoder stack, a decoder stack with cross-attention "
     "over the encoder output, --encoder-num-layers/--decoder-num-layers)"),
    (re.compile(r"pretrain_(mamba|hybrid)\.py"), "a Mamba / hybrid Mamba-attention model (selective state-space "
     "layers laid out by --hybrid-override-pattern / --hybrid-layer-pattern)"),
    (re.compile(r"pretrain_(vlm|vit|vision_\w+|ict|retro|mimo)\.py"), "a vision, retrieval (ICT, RETRO) or "
     "multimodal model, whose encoders and data flow are not Megatron's GPT layers"),
    (re.compile(r"train_rl\.py"), "a model by GRPO reinforcement learning (Megatron-LM train_rl.py: rollouts generated "
     "by an inference engine between training steps, with their log-probabilities and a GRPO loss)"),
)
_NOT_TRAINING = (
    (re.compile(r"(?:.*/)?tasks/eval_harness/evaluate\w*\.py"), "lm-evaluation-harness runner (Megatron-DeepSpeed "
     "tasks/eval_harness; the bigscience fork's evaluate_bsevalharness*.py): it loads --load's checkpoint and takes the "
     "model's arguments from it, so `--num-layers -1` and the like are placeholders, and runs evaluation tasks forward "
     "only"),
    (re.compile(r"(?:.*/)?(?:run_\w*text_generation\w*|text_generation_cli|generate_samples_gpt)\.py"),
     "text-generation tool (tools/run_text_generation_server.py, text_generation_cli.py, generate_samples_gpt.py): "
     "it loads a checkpoint and generates tokens, forward only"),
    (re.compile(r"(?:.*/)?(?:tools/(?:preprocess_data\w*|merge_\w+|checkpoint/\w+)|analyze_data)\.py"),
     "data or checkpoint tool (tools/preprocess_data.py, tools/checkpoint/, Megatron-DeepSpeed data_efficiency's "
     "analyze_data.py): it builds datasets or converts checkpoints"),
)
"""Megatron(-DeepSpeed) entry points that take the model's flags but run no training step."""
_HYDRA_OVERRIDE = re.compile(r"^(?:\+{1,2}|~)?[A-Za-z_]\w*(?:\.\w+)+=|^(?:\+{1,2}|~)[A-Za-z_]\w*=")
"""A Hydra command-line override (`training.model.micro_batch_size=2`, `+training.model.optim.x=bf16`,
`++peft.model.gc_interval=0`): a dotted key or a +/++/~ prefix (hydra.cc, Override grammar). NeMo's training scripts
and NeMo-Framework-Launcher's launcher_scripts/main.py take their whole configuration so."""
_NEOX_WORDS = ("--megatron_config", "--megatron-config")
_MULTIMODAL_FLAG = "--language-model-type"
"""Required by Megatron-LM's examples/multimodal/train.py (multimodal_args.py: `required=True`; LLaVA / NVLM: a vision
encoder, a projector and a language model) and by Pai-Megatron-Patch's vision-language models; no GPT script has it."""


def check_model_family(script: str, script_args: Sequence[str]) -> list[str]:
    """Exit 2 for entry points llmperf does not model (naming the script and what it trains); the warnings of
    those priced with a caveat."""
    name = os.path.basename(script)
    if name == "deepy.py" or any(w in _NEOX_WORDS for w in script_args) or _neox_yaml(name, script_args):
        raise ConfigError(
            f"{script} is EleutherAI GPT-NeoX (deepy.py / train.py with YAML configs), which llmperf does not "
            "support: NeoX reads its model shape, parallel layout, batch and precision from its YAML files (and "
            "passes them to train.py as an encoded --megatron_config), not from Megatron-LM or DeepSpeed command-line "
            "arguments. Predict the same model as a Megatron-LM pretrain_gpt.py or DeepSpeed command, or with "
            "--model gpt-neox-20b on a plain DeepSpeed script.")
    hydra = [w for w in script_args if _HYDRA_OVERRIDE.match(w)]
    if hydra:
        raise ConfigError(
            f"{script} is configured by Hydra ({', '.join(hydra[:3])}{' ...' if len(hydra) > 3 else ''}): NeMo's "
            "training scripts and NeMo-Framework-Launcher's launcher_scripts/main.py read the model, layout, batch and "
            "precision from YAML files these overrides edit, and the launcher then writes and submits the job's own "
            "command, none of which llmperf reads. Give llmperf the command that trains (the launcher writes it under "
            "results/<run name>/), or predict the same model as a Megatron-LM pretrain_gpt.py command.")
    for pattern, what in _UNMODELLED:
        if pattern.fullmatch(name):
            raise ConfigError(
                f"{script} trains {what}, which llmperf does not model: it prices decoder-only transformer layers "
                "(attention + MLP or MoE) as pretrain_gpt.py builds them, and would misprice this network. Predict "
                "a pretrain_gpt.py job instead.")
    if any(w == _MULTIMODAL_FLAG or w.startswith(_MULTIMODAL_FLAG + "=") for w in script_args):
        raise ConfigError(
            f"{script} with {_MULTIMODAL_FLAG} trains a vision-language model (Megatron-LM examples/multimodal/train.py: "
            "a vision encoder and projector in front of the language model, whose sequence holds the image tokens), "
            "which llmperf does not model: it prices decoder-only transformer layers as pretrain_gpt.py builds them. "
            "Predict the language model alone as a pretrain_gpt.py job instead.")
    for pattern, what in _NOT_TRAINING:
        if pattern.fullmatch(script.replace("\\", "/")):
            raise ConfigError(f"{script} is Megatron's {what}, which llmperf does not price: it predicts training "
                              "steps. Predict the model's training command (its pretrain_gpt.py job) instead.")
    if tasks_entry_point(script):
        raise ConfigError(
            f"{script} is Megatron's downstream-task runner ({tasks_entry_point(script)} --task ...: GLUE / RACE "
            "classification heads, zero-shot LAMBADA / WikiText evaluation, retriever fine-tuning, MSDP prompting), "
            "which llmperf does not model: it prices decoder-only pretraining steps as pretrain_gpt.py runs them. "
            "Predict a pretrain_gpt.py (or pretrain_bert.py) job with the same model flags instead.")
    if _is_dschat_rlhf(script_args):
        raise ConfigError(
            f"{script} is DeepSpeed-Chat step 3 (RLHF: --actor_model_name_or_path and --critic_model_name_or_path), "
            "which llmperf does not model: each PPO step generates answers with the actor (the hybrid engine's "
            "inference mode), scores them with frozen reference and reward models and trains actor and critic, each "
            "with its own ZeRO stage; llmperf prices one model's training step. Predict the actor's step-1 "
            "(supervised fine-tuning) or the critic's step-2 (reward model) script instead.")
    if name == "pretrain_bert.py":
        return [f"{name}: BERT priced as its encoder stack of transformer layers; bidirectional attention costs "
                "as a causal one, and the pooler, binary head and LM-head transform are not modelled"]
    return []


def _is_dschat_rlhf(script_args: Sequence[str]) -> bool:
    """DeepSpeed-Chat step3_rlhf_finetuning/main.py: the only main.py taking an actor and a critic model."""
    given = {w.split("=", 1)[0] for w in script_args if w.startswith("--")}
    return {"--actor_model_name_or_path", "--critic_model_name_or_path"} <= given


def _neox_yaml(name: str, script_args: Sequence[str]) -> bool:
    """GPT-NeoX's `train.py configs/125M.yml configs/local_setup.yml`: YAML files as positional arguments. A YAML
    path after an option is that option's value (`train.py --config cfg.yaml --deepspeed ds.json`, a user's
    DeepSpeed script), not NeoX's configs."""
    previous = [""] + list(script_args[:-1])
    return name == "train.py" and any(w.endswith((".yml", ".yaml")) and not w.startswith("-") and not p.startswith("-")
                                      for w, p in zip(script_args, previous))


def fill_script_tokenizer(flags: FlagValues, script: str) -> None:
    """--tokenizer-type from the entry point's args_defaults when the command leaves it unset."""
    name = os.path.basename(script)
    if flags.has("tokenizer_type") or name not in SCRIPT_TOKENIZER:
        return
    flags.values["tokenizer_type"] = SCRIPT_TOKENIZER[name]
    flags.sources["tokenizer_type"] = Source(SourceKind.DEFAULT, f"{name} args_defaults")

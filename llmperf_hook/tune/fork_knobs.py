"""Knobs whose flags the parser of the command's Megatron fork lacks: kept at the command's value, never written.

`tune --apply` states what it changes in Megatron-LM's flags (tune/megatron_argv.py). A fork's argument parser may
lack some of them, and Megatron parses with `ArgumentParser(allow_abbrev=False).parse_args()`, so such a flag stops
the job at start-up ('unrecognized arguments'). The knobs are audited here, per fork that explain tells apart:

- epfLLM/Megatron-LLM (806a833; finetune.py given --model_name, frameworks/megatron_entry_points.megatron_llm_job):
  every option of its megatron/arguments.py and finetune.py is in MEGATRON_LLM_OPTIONS (underscore spellings). It has
  --tensor_model_parallel_size, --pipeline_model_parallel_size, --num_layers_per_virtual_pipeline_stage,
  --sequence_parallel, --micro_batch_size, --global_batch_size, --recompute_granularity / _method / _num_layers and
  --use_distributed_optimizer; it has no --context_parallel_size (the fork predates context parallelism, Megatron-LM
  core_r0.5), no --expert_model_parallel_size / --expert_tensor_parallel_size and no --zero_stage.
- bigscience-workshop/Megatron-DeepSpeed (8387ae1, BLOOM's fork; known by an option only it defines,
  frameworks/megatron_entry_points.BIGSCIENCE_MARKS):
  no --sequence-parallel, no --recompute-granularity / _method / _num_layers (its full recompute is
  --checkpoint-activations), no --use-distributed-optimizer and no --no-pipeline-parallel: its pretrain_gpt.py builds
  GPTModelPipe whenever --deepspeed is given, so DeepSpeed's PipelineEngine runs and refuses ZeRO-2/3 at every PP.
- Megatron-DeepSpeed (deepspeedai 4efb479: no --context-parallel-size, no --expert-model-parallel-size, no
  interleaved schedule in its PipelineEngine): candidates.knob_values keeps CP, VPP and EP there already.
- Megatron-LM itself: megatron_known_flags holds every release's options (explain cannot tell releases apart), and
  tune writes --num-virtual-stages-per-pipeline-rank (core_r0.11+) only where the command already uses it or the
  uneven-stage flags that need it (megatron_argv._rewrite_vpp).
- A user's own script that takes Megatron-style flags with its own argparse parser (examples/cpu-testbed/train_gpt.py):
  its options as its add_argument calls define them (tune/script_options.py, read without importing it). Its ZeRO
  stage is the ds_config's (DeepSpeed reads zero_optimization.stage; frameworks/assemble.py), so a script without
  --zero-stage still has ZeRO searched where the command names a ds_config, and --apply writes the stage there only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Sequence

from llmperf_hook.frameworks.megatron_entry_points import (BIGSCIENCE_OPTIONS, MEGATRON_LLM_OPTIONS, bigscience_job,
                                                            megatron_llm_job)
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.tune.candidate import candidate_of
from llmperf_hook.tune.ds_config_rewrite import find_ds_config
from llmperf_hook.tune.script_options import script_options, unreadable_reason
from llmperf_hook.tune.search_space import SearchSpace

KNOB_OPTIONS: dict[str, tuple[str, ...]] = {
    "tensor_parallel": ("tensor-model-parallel-size",),
    "pipeline_parallel": ("pipeline-model-parallel-size",),
    "virtual_pipeline": ("num-layers-per-virtual-pipeline-stage",),
    "context_parallel": ("context-parallel-size",),
    "sequence_parallel": ("sequence-parallel",),
    "micro_batch_size": ("micro-batch-size", "global-batch-size"),
    "recompute": ("recompute-granularity", "recompute-method", "recompute-num-layers"),
    "distributed_optimizer": ("use-distributed-optimizer",),
    "expert_parallel": ("expert-model-parallel-size",),
    "expert_tensor_parallel": ("expert-tensor-parallel-size",),
    "zero_stage": ("zero-stage",),
}
"""SearchSpace knob -> the Megatron options (dashed, without `--`) tune/megatron_argv.py writes when it changes it
(Megatron-DeepSpeed's ZeRO-2/3 at PP 1 add --no-pipeline-parallel: _zero_stages)."""


@dataclass(frozen=True)
class ForkParser:
    """The argument parser of a Megatron fork that lacks some of Megatron-LM's options."""

    name: str
    """The fork, as messages name it."""
    options: frozenset[str]
    """Its option names, without `--`, in its own spelling."""
    underscores: bool
    """It spells options with underscores (--micro_batch_size)."""
    how: str = ""
    """How its options were found, where messages should say so (a user's own script: read from its source)."""
    zero_in_ds_config: bool = False
    """The job's ZeRO stage is set by its ds_config alone (a user's own script: no Megatron code reads --zero-stage)."""
    refusal: str = "argparse would stop the job on it: 'unrecognized arguments'"
    """What the parser does with an option it lacks (a script's parse_known_args passes it over)."""

    def spelling(self, option: str) -> str:
        return "--" + (option.replace("-", "_") if self.underscores else option)

    def has(self, option: str) -> bool:
        return self.spelling(option)[2:] in self.options


@dataclass(frozen=True)
class ForkPins:
    space: SearchSpace
    """The space with every knob the fork cannot be told kept at the command's value."""
    rules: dict[str, str]
    """knob -> why it is kept (the report's knobs "rules", keyed as searched_values names them)."""
    warnings: tuple[str, ...]
    """One line per knob whose values the space asked for and the fork cannot run."""


def fork_parser(script: str, script_args: Sequence[str]) -> ForkParser | None:
    """The fork whose parser runs `script`, where it lacks options tune writes; None for Megatron-LM's own."""
    if megatron_llm_job(script, script_args):
        return ForkParser("epfLLM/Megatron-LLM", MEGATRON_LLM_OPTIONS, underscores=True)
    if bigscience_job(script, script_args):
        return ForkParser("bigscience-workshop/Megatron-DeepSpeed", BIGSCIENCE_OPTIONS, underscores=False)
    return _own_parser(script, script_args)


def _own_parser(script: str, script_args: Sequence[str]) -> ForkParser | None:
    """The parser of a user's own script, as its add_argument calls define it (tune/script_options.py), spelled as it
    spells Megatron's knob options (underscores only where it defines none of them with dashes)."""
    own = script_options(script)
    if own is None:
        return None
    names = frozenset(o.lstrip("-") for o in own.options if o.startswith("--"))
    knob_names = {o for options in KNOB_OPTIONS.values() for o in options}
    underscores = not names & knob_names and bool(names & {o.replace("-", "_") for o in knob_names})
    unread = f", {own.unread} add_argument call(s) with computed names not read" if own.unread else ""
    ignored = "its parse_known_args would pass it over, so the job would not run the tuned value"
    return ForkParser(f"your script {os.path.basename(script)}", names, underscores,
                      how=f"its own argparse, read from its add_argument calls without running it{unread}; ",
                      zero_in_ds_config=find_ds_config(list(script_args)) is not None,
                      **({"refusal": ignored} if own.ignores_unknown else {}))


_PIPELINE_ENGINE_STAGES = (0, 1)
"""ZeRO stages DeepSpeed's PipelineEngine takes (it asserts stage < 2)."""
_EXPERT_KNOBS = ("expert_parallel", "expert_tensor_parallel")
_RULE_KEYS = {"tensor_parallel": "tp", "pipeline_parallel": "pp", "virtual_pipeline": "vpp", "context_parallel": "cp",
              "expert_parallel": "ep", "expert_tensor_parallel": "etp"}
"""SearchSpace knob -> its name in the report's knobs (render.split_knobs / candidates.searched_values)."""


def pin_fork_knobs(space: SearchSpace, cfg: TrainingConfig, script: str, script_args: Sequence[str],
                   asked: frozenset[str] = frozenset()) -> ForkPins:
    """`space` with the knobs whose flags the command's fork lacks kept at the command's own value; `asked`: the knobs
    the user's --search file lists (a warning each where the fork keeps them)."""
    if cfg.framework not in ("megatron", "megatron-deepspeed"):
        return ForkPins(space, {}, ())
    parser = fork_parser(script, script_args)
    if parser is None:
        return ForkPins(space, {}, _unread_script_warning(script))
    own = _own_values(cfg)
    pins: dict[str, tuple | None] = {}
    rules: dict[str, str] = {}
    for knob, options in KNOB_OPTIONS.items():
        if knob in _EXPERT_KNOBS and not cfg.model.num_experts:  # a dense model: no EP to keep (nor to report)
            continue
        missing = [parser.spelling(o) for o in options if not parser.has(o)]
        zero_elsewhere = knob == "zero_stage" and (cfg.framework != "megatron-deepspeed" or parser.zero_in_ds_config)
        if missing and not zero_elsewhere:  # ZeRO: DeepSpeed's only, set by the ds_config where the script has one
            pins[knob] = own[knob]
            rules[knob] = (f"kept at the command's value: {parser.name}'s parser has no {' / '.join(missing)} "
                           f"({parser.how}{parser.refusal})")
    if cfg.framework == "megatron-deepspeed" and not parser.has("no-pipeline-parallel") and "zero_stage" not in pins:
        pins["zero_stage"] = tuple(z for z in space.zero_stage if z in _PIPELINE_ENGINE_STAGES) or own["zero_stage"]
        rules["zero_stage"] = (f"ZeRO 2/3 not tried: {parser.name} has no --no-pipeline-parallel, so DeepSpeed's "
                               "PipelineEngine runs at every PP and asserts stage < 2")
    warnings = tuple(f"{knob} {list(getattr(space, knob))} of the search space is not searched as listed: {rule}"
                     for knob, rule in rules.items() if knob in asked and set(getattr(space, knob) or ()) -
                     set(pins[knob] or ()))
    return ForkPins(replace(space, **pins), {_RULE_KEYS.get(k, k): r for k, r in rules.items()}, warnings)


def _unread_script_warning(script: str) -> tuple[str, ...]:
    """A Python script tune could not read: it searches and writes Megatron-LM's flags as for Megatron's own parser,
    which a parser of the script's own may refuse (tune/script_options.py)."""
    reason = unreadable_reason(script)
    return () if reason is None else (
        f"{script} could not be read ({reason}), so its own argparse options, if it has any, were not checked: tune "
        "searches and writes Megatron-LM's flags as for Megatron's parser",)


def _own_values(cfg: TrainingConfig) -> dict[str, tuple | None]:
    """Each knob's search-space value that holds the command's own setting alone."""
    base = candidate_of(cfg)
    return {"tensor_parallel": (base.tp,), "pipeline_parallel": (base.pp,), "virtual_pipeline": (base.vpp,),
            "context_parallel": (base.cp,), "sequence_parallel": (base.sequence_parallel,),
            "micro_batch_size": (base.micro_batch_size,), "recompute": (base.recompute,),
            "distributed_optimizer": (base.distributed_optimizer,), "expert_parallel": (base.ep,),
            "expert_tensor_parallel": None, "zero_stage": (base.zero_stage,)}

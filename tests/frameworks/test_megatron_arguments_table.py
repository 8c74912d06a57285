"""llmperf's Megatron flag tables against every option of megatron-core 0.16.1's argument parser.

megatron/training/arguments.py is not in the megatron-core wheel, so the parser is read from a committed extraction
(megatron_arguments_core_v0.16.1.json: NVIDIA/Megatron-LM tag core_v0.16.1, commit 55ac708, built by
benchmarks/extract_megatron_arguments.py, which imports that tag's arguments.py beside the installed megatron.core
0.16.1 and dumps parse_args' parser). For every option: its name is one llmperf knows (megatron_known_flags), and
where llmperf reads the option (script_flags.SCRIPT_FLAGS) its nargs, type and choices are Megatron's, and the value
llmperf resolves when the option is absent is Megatron's default.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.explain_data import explain_json
from llmperf_hook.frameworks.flags import ONE_OR_MORE
from llmperf_hook.frameworks.megatron_known_flags import MEGATRON_OPTION_NAMES
from llmperf_hook.frameworks.megatron_mla_mtp import MLA_DEFAULTS
from llmperf_hook.frameworks.megatron_rules import CHOICES
from llmperf_hook.frameworks.megatron_unknown_args import _MULTI_VALUED
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.frameworks.script_flags import SCRIPT_FLAGS

EXTRACTION = Path(__file__).with_name("megatron_arguments_core_v0.16.1.json")
DATA = json.loads(EXTRACTION.read_text())
ACTIONS: dict[str, dict[str, Any]] = {name: action for action in DATA["actions"] for name in action["option_strings"]}
READ = sorted(name for name in SCRIPT_FLAGS if name in ACTIONS)
"""The options llmperf reads that core_v0.16.1 defines."""
SWITCHES = {"_StoreTrueAction": "true", "_StoreFalseAction": "false"}
CHECKED_ELSEWHERE = {
    "--normalization": "megatron_shape: Megatron-DeepSpeed's lower-case spellings too",
    "--optimizer": "megatron.py: the union over releases, with its own message",
    "--recompute-granularity": "megatron.py recompute: 'must be full or selective'",
    "--recompute-method": "megatron.py recompute: 'must be uniform or block'",
    "--rope-type": "megatron_mla_mtp.py _rope_type_rules, beside its MLA rules",
}
"""Options with argparse choices that llmperf refuses in their own place rather than through megatron_rules.CHOICES."""
NOT_CHECKED = {"--tokenizer-type": "each fork adds tokenizers (Megatron-DeepSpeed, Pai, bigcode, NeMo); vocab.py exits 2 "
                                   "for a type whose vocabulary it cannot size, and a given --vocab-size is used"}
GPT = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "256",
       "--num-attention-heads", "4", "--seq-length", "128", "--max-position-embeddings", "128", "--micro-batch-size",
       "1", "--vocab-size", "1000"]


def test_the_extraction_says_where_it_comes_from() -> None:
    assert DATA["commit"] == "55ac7082517c3878ae653c07c09c534b8aed49f6" and DATA["megatron_core"] == "0.16.1"
    script = Path(__file__).parents[2] / DATA["script"]
    assert script.is_file() and EXTRACTION.name in script.read_text()
    assert len(ACTIONS) > 600  # every option, not a subset


def test_every_option_name_is_known() -> None:
    unknown = sorted(name for name in ACTIONS if name[2:] not in MEGATRON_OPTION_NAMES)
    assert unknown == [], f"core_v0.16.1 options megatron_known_flags lacks: {unknown}"


@pytest.mark.parametrize("name", READ)
def test_type_and_nargs_are_megatrons(name: str) -> None:
    flag, action = SCRIPT_FLAGS[name], ACTIONS[name]
    if action["action"] in SWITCHES:
        assert flag.kind == SWITCHES[action["action"]], (name, flag, action)
        return
    kind = {"int": "int", "float": "float"}.get(action["type"], "str")
    assert flag.kind == kind or (name == "--rampup-batch-size" and flag.kind == "str"), (name, flag.kind, action["type"])
    nargs = action["nargs"]
    if nargs in ("+", "*"):  # read whole (ONE_OR_MORE), or its first value with the rest known to be its own
        assert flag.nargs == ONE_OR_MORE or name in _MULTI_VALUED, (name, flag.nargs, nargs)
    else:
        assert flag.nargs == (1 if nargs in (None, "?") else nargs), (name, flag.nargs, nargs)


@pytest.mark.parametrize("name", [n for n in READ if ACTIONS[n]["choices"] and ACTIONS[n]["action"] not in SWITCHES])
def test_choices_are_megatrons(name: str) -> None:
    """llmperf's allowed values hold core_v0.16.1's (a union over releases may hold more), and a value outside them
    exits 2 as argparse's 'invalid choice' does."""
    if name in NOT_CHECKED:
        pytest.skip(NOT_CHECKED[name])
    if name not in CHECKED_ELSEWHERE:
        dest = SCRIPT_FLAGS[name].dest
        assert set(map(str, ACTIONS[name]["choices"])) <= set(CHOICES.get(dest, ())), (name, ACTIONS[name]["choices"])
    with pytest.raises(ConfigError) as refused:
        resolve_job([*GPT, name, "7" if ACTIONS[name]["type"] == "int" else "no-such-choice"], {})
    assert refused.value.exit_code == 2 and name in str(refused.value)


STEP_FIELDS = ("fp8_recipe", "transformer_impl", "masked_softmax_fusion", "bias_dropout_fusion", "hidden_dropout",
               "attention_dropout", "apply_rope_fusion", "gradient_accumulation_fusion", "bias_activation_fusion")
"""TrainingConfig fields (not in explain's output) that hold a Megatron flag's value."""


def _resolved(extra: list[str]) -> dict[str, Any]:
    job, cfg = resolve_job([*GPT, *extra], {})
    return {**explain_json(cfg, job), **{name: getattr(cfg, name) for name in STEP_FIELDS}}


# option -> (the flags that put the option in play, the explain key that shows its value, Megatron default -> that value)
DEFAULTS: dict[str, tuple[list[str], str, Any]] = {
    "--tensor-model-parallel-size": ([], "tp", lambda d: d),
    "--pipeline-model-parallel-size": ([], "pp", lambda d: d),
    "--context-parallel-size": ([], "cp", lambda d: d),
    "--expert-model-parallel-size": ([], "ep", lambda d: d),
    "--expert-tensor-parallel-size": ([], "etp", lambda d: 1 if d is None else d),  # None: TP's (1 here)
    "--sequence-parallel": ([], "sequence_parallel", lambda d: d),
    "--use-distributed-optimizer": ([], "distributed_optimizer", lambda d: d),
    "--overlap-grad-reduce": ([], "overlap_grad_reduce", lambda d: d),
    "--overlap-param-gather": ([], "overlap_param_gather", lambda d: d),
    "--swiglu": ([], "swiglu", lambda d: d),
    "--untie-embeddings-and-output-weights": ([], "untie_embeddings", lambda d: d),
    "--normalization": ([], "normalization", lambda d: d),
    "--position-embedding-type": ([], "position_embedding", lambda d: d),
    "--attention-backend": ([], "attention_backend", lambda d: d),
    "--recompute-granularity": ([], "recompute", lambda d: d or "none"),
    "--num-experts": ([], "num_experts", lambda d: d or 0),
    "--bf16": ([], "precision", lambda d: "bf16" if d else "fp32"),
    "--global-batch-size": ([], "global_batch_size", lambda d: 8 if d is None else d),  # None: MBS * DP = 1 * 8
    "--make-vocab-size-divisible-by": ([], "padded_vocab_size", lambda d: -(-1000 // d) * d),
    "--fp8-recipe": ([], "fp8_recipe", lambda d: d),
    "--transformer-impl": ([], "transformer_impl", lambda d: d),
    "--no-masked-softmax-fusion": ([], "masked_softmax_fusion", lambda d: d),
    "--no-bias-dropout-fusion": ([], "bias_dropout_fusion", lambda d: d),
    "--no-bias-gelu-fusion": ([], "bias_activation_fusion", lambda d: d),
    "--hidden-dropout": ([], "hidden_dropout", lambda d: d),
    "--attention-dropout": ([], "attention_dropout", lambda d: d),
    "--no-rope-fusion": ([], "apply_rope_fusion", lambda d: d),
    "--no-gradient-accumulation-fusion": ([], "gradient_accumulation_fusion", lambda d: d),
    "--moe-router-topk": (["--num-experts", "8"], "moe_router_topk", lambda d: d),
    "--moe-token-dispatcher-type": (["--num-experts", "8"], "moe_token_dispatcher", lambda d: d),
    "--moe-grouped-gemm": (["--num-experts", "8"], "moe_grouped_gemm", lambda d: d),
    **{f"--{dest.replace('_', '-')}": (["--multi-latent-attention"], dest, lambda d: d) for dest in MLA_DEFAULTS},
    "--q-lora-rank": (["--multi-latent-attention"], "q_lora_rank", lambda d: d),
}


@pytest.mark.parametrize("name", DEFAULTS)
def test_an_absent_option_resolves_to_megatrons_default(name: str) -> None:
    extra, key, shown = DEFAULTS[name]
    assert _resolved(extra)[key] == shown(ACTIONS[name]["default"]), (name, ACTIONS[name]["default"])


def test_mla_defaults_table_is_megatrons() -> None:
    assert {dest: ACTIONS[f"--{dest.replace('_', '-')}"]["default"] for dest in MLA_DEFAULTS} == MLA_DEFAULTS


@pytest.mark.parametrize("name, value", [
    ("--cuda-graph-impl", "full_iteration"),  # TransformerConfig Literal, core_v0.18.0 and later (not in 0.16.1)
    ("--moe-router-load-balancing-type", "quantile_balancing"),  # core_v0.19.0 and HEAD
])
def test_a_choice_of_a_newer_release_is_accepted(name: str, value: str) -> None:
    """CHOICES is the union over Megatron-LM's releases: a value a newer release's parser takes is not refused."""
    extra = ["--num-experts", "8"] if name.startswith("--moe") else []
    job, cfg = resolve_job([*GPT, *extra, name, value], {})
    assert cfg.model.num_layers == 2

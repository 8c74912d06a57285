"""megatron_entry_points: one answer to "is this Megatron's own entry point" for the unknown-flag refusal, the
Megatron-DeepSpeed unfused-attention default and the model family (the scripts as the public repositories name them)."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import parse_flags
from llmperf_hook.frameworks.megatron import megatron_attention
from llmperf_hook.frameworks.megatron_entry_points import entry_point_options, megatron_entry_point
from llmperf_hook.frameworks.megatron_unknown_args import check_megatron_options
from llmperf_hook.frameworks.model_family import check_model_family
from llmperf_hook.frameworks.script_flags import SCRIPT_FLAGS

from tests.frameworks.helpers import BASE, script

ENTRY_POINTS = ["pretrain_gpt.py", "/repo/pretrain_llama.py", "finetune_llama.py", "/mds/finetune_llama.py",
                "finetune_t0_non_causal_decoder.py", "examples/detxoify_lm/finetune_gpt.py",
                "examples/post_training/modelopt/finetune.py", "train_rl.py", "tasks/main.py", "/mds/tasks/main.py",
                "tasks/vision/main.py", "/mds/tasks/msdp/main.py", "-m megatron.training.pretrain"]
USER_SCRIPTS = ["my_train.py", "train.py", "main.py", "/home/me/main.py", "mytasks/main.py", "tools/generate_samples_gpt.py",
                "tools/run_text_generation_server.py", "pretrain.py", "-m mypackage.train"]


@pytest.mark.parametrize("path", ENTRY_POINTS)
def test_entry_points_refuse_unknown_options(path: str) -> None:
    assert megatron_entry_point(path)
    with pytest.raises(ConfigError, match="--tensor-model-paralel-size"):
        check_megatron_options(path, ["--tensor-model-paralel-size", "2"])
    with pytest.raises(ConfigError, match="gives a value to a Megatron switch"):
        check_megatron_options(path, ["--bf16", "True"])


@pytest.mark.parametrize("path", USER_SCRIPTS)
def test_user_scripts_only_warn(path: str) -> None:
    assert not megatron_entry_point(path)
    assert any("--tensor-model-paralel-size" in w for w in check_megatron_options(path, ["--tensor-model-paralel-size", "2"]))


@pytest.mark.parametrize(("path", "args"), [
    ("examples/detxoify_lm/finetune_gpt.py", ["--data-path2", "d", "--eval-ppl", "--stored_params", "{}"]),
    ("examples/post_training/modelopt/finetune.py", ["--offline-distillation-data", "x"]),
    ("tasks/main.py", ["--task", "RACE", "--keep-last", "--train-data", "a", "--epochs", "3"]),
    ("tasks/vision/main.py", ["--task", "segment", "--seg-stride", "2"]),
    ("tasks/msdp/main.py", ["--task", "MSDP-PROMPT", "--prompt-type", "knowledge", "--api-prompt"]),
])
def test_entry_point_extra_options_are_known(path: str, args: list[str]) -> None:
    # each script's extra_args_provider defines these: argparse accepts them, so llmperf must not refuse them
    assert check_megatron_options(path, args) == []


def test_extra_options_belong_to_their_script() -> None:
    assert "task" not in entry_point_options("pretrain_gpt.py")
    with pytest.raises(ConfigError, match="--task"):
        check_megatron_options("pretrain_gpt.py", ["--task", "RACE"])


def test_finetune_llama_unknown_option_exits_2_end_to_end() -> None:
    # Megatron-DeepSpeed's finetune_llama.py calls pretrain() with no extra_args_provider: an unknown flag stops it
    with pytest.raises(ConfigError, match="finetune_llama.py would stop at start-up"):
        script(["torchrun", "--nproc-per-node", "8", "finetune_llama.py", *BASE, "--my-flag", "1"])


@pytest.mark.parametrize("path", ["finetune_llama.py", "pretrain_gpt.py", "tasks/main.py"])
def test_megatron_deepspeed_entry_points_default_to_unfused_attention(path: str) -> None:
    flags = parse_flags(BASE, SCRIPT_FLAGS)
    assert megatron_attention(flags, {}, ds_flavour=True, script=path) == "unfused"
    assert megatron_attention(flags, {}, ds_flavour=True, script="my_train.py") == "auto"


@pytest.mark.parametrize("path", ["tasks/main.py", "/mds/tasks/vision/main.py", "tasks/msdp/main.py", "train_rl.py"])
def test_task_runner_and_rl_are_not_modelled(path: str) -> None:
    with pytest.raises(ConfigError, match="does not model"):
        check_model_family(path, ["--task", "RACE"])


def test_the_refusal_says_how_a_users_own_script_of_that_name_escapes_it() -> None:
    with pytest.raises(ConfigError, match="a script of yours that defines these options itself needs another name"):
        check_megatron_options("finetune_mymodel.py", ["--my-lora-rank", "8"])
    assert check_megatron_options("train_mymodel.py", ["--my-lora-rank", "8"])  # a warning only

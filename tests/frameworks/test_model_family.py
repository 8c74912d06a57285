"""model_family: which Megatron-style entry points exit 2, and that a user's train.py is not mistaken for GPT-NeoX."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.model_family import check_model_family


@pytest.mark.parametrize("args", [["configs/125M.yml", "configs/local_setup.yml"],
                                  ["-d", "configs", "125M.yml", "local_setup.yml"],
                                  ["--deepspeed_config", "e30=", "--megatron_config", "e30="]])
def test_neox_train_py_is_refused(args: list[str]) -> None:
    with pytest.raises(ConfigError, match="GPT-NeoX"):
        check_model_family("train.py", args)


def test_neox_launcher_is_refused() -> None:
    with pytest.raises(ConfigError, match="GPT-NeoX"):
        check_model_family("deepy.py", ["train.py", "configs/125M.yml"])


@pytest.mark.parametrize("args", [["--config", "configs/llama.yaml", "--deepspeed", "ds.json"],
                                  ["--config=configs/llama.yml"], []])
def test_a_yaml_option_value_of_a_user_train_py_is_not_neox(args: list[str]) -> None:
    assert check_model_family("train.py", args) == []


@pytest.mark.parametrize("script", ["pretrain_t5.py", "pretrain_mamba.py", "pretrain_hybrid.py", "pretrain_vlm.py",
                                    "pretrain_vision_dino.py", "pretrain_ict.py", "pretrain_retro.py"])
def test_unmodelled_entry_points_are_refused(script: str) -> None:
    with pytest.raises(ConfigError, match="does not model"):
        check_model_family(f"/repo/{script}", [])


@pytest.mark.parametrize("script", ["pretrain_gpt.py", "pretrain_gpt_core.py", "finetune_llama.py", "train_gpt.py"])
def test_gpt_entry_points_pass(script: str) -> None:
    assert check_model_family(script, ["--num-layers", "2", "--yaml-cfg", "x.yaml"]) == []


@pytest.mark.parametrize("args", [["--language-model-type", "mistral_7b", "--vision-model-type", "clip"],
                                  ["--language-model-type=qwen2.0_72B"]])
def test_megatron_multimodal_train_py_is_refused(args: list[str]) -> None:
    # Megatron-LM examples/multimodal/train.py: multimodal_args.py makes --language-model-type required.
    with pytest.raises(ConfigError, match="vision-language model"):
        check_model_family("examples/multimodal/train.py", ["--num-layers", "32", *args])


@pytest.mark.parametrize(("script", "args"), [
    # NeMo-Framework-Launcher examples/training/gpt/h100/20b_bf16_1node.sh and examples/peft/llama/a100/7b_1node.sh
    ("/opt/NeMo-Framework-Launcher/launcher_scripts/main.py",
     ["training=gpt3/20b", "stages=[training]", "training.trainer.num_nodes=1", "training.model.micro_batch_size=2"]),
    ("/opt/NeMo-Framework-Launcher/launcher_scripts/main.py", ["peft=llama/sft", "++peft.model.gc_interval=0"]),
    # NeMo examples/nlp/language_modeling/megatron_gpt_pretraining.py with its YAML and overrides
    ("megatron_gpt_pretraining.py", ["--config-path=conf", "trainer.devices=8", "model.tensor_model_parallel_size=2"]),
])
def test_hydra_configured_jobs_are_refused_naming_the_overrides(script: str, args: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"configured by Hydra \(.*=.*\).*command that trains") as refused:
        check_model_family(script, args)
    assert refused.value.exit_code == 2


def test_key_value_option_values_are_not_hydra() -> None:
    assert check_model_family("train.py", ["--deepspeed_config=ds.json", "--lr=1e-4", "--data-path", "a.bin"]) == []

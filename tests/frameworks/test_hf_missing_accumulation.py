"""A ds_config without gradient_accumulation_steps under the Hugging Face Trainer's `--deepspeed FILE` or a script
driving accelerate's Accelerator, given --gradient_accumulation_steps 4 (R42's note on H144).

What the sources do (transformers training_args.py / integrations/deepspeed.py, accelerate 16cb6eb8):
TrainingArguments.__post_init__ runs HfTrainerDeepSpeedConfig.trainer_config_process, whose fill_match fills "auto"
values (train_batch_size = world x micro x accumulation) and checks numbers, and skips an absent key; it then builds
DeepSpeedPlugin(hf_ds_config=...), whose __post_init__ writes gradient_accumulation_steps 1 into the same config.
Accelerator._prepare_deepspeed fills only "auto" (deepspeed_config_process(must_match=False)), and on a mismatch
with its own accumulation logs 'Gradient accumulation steps mismatch ... Using DeepSpeed's value.' (7f9c8cbe, v1.8.0).
The Trainer's loop sets sync_gradients every --gradient_accumulation_steps micro-batches itself, which
DeepSpeedEngineWrapper.backward makes DeepSpeed's accumulation boundary (23c1d8db, v1.8.0); a script's
accelerator.accumulate() uses the Accelerator's count, now DeepSpeed's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import script
from tests.launch.cli_run import llmperf

TRAINER = ["--model_name_or_path", "x", "--per_device_train_batch_size", "4"]
NO_GAS: dict[str, Any] = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2},
                          "bf16": {"enabled": "auto"}}


def _file(tmp_path: Path, config: dict[str, Any]) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    return str(path)


def _trainer(tmp_path: Path, config: dict[str, Any], gas: str = "4") -> list[str]:
    return ["torchrun", "--nproc_per_node", "8", "run_clm.py", *TRAINER, "--deepspeed", _file(tmp_path, config),
            "--gradient_accumulation_steps", gas]


@pytest.mark.parametrize("train", ["auto", 128])
def test_the_trainer_file_with_a_train_batch_and_no_accumulation_is_refused(
        train: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The Trainer makes train_batch_size 8 x 4 x 4 = 128 (or checks a 128 against it), the plugin then writes an
    accumulation of 1, and DeepSpeed's _batch_assertion fails: 128 != 4 * 1 * 8. explain priced 4 micro-batches."""
    argv = _trainer(tmp_path, {**NO_GAS, "train_batch_size": train})
    with pytest.raises(ConfigError, match=r"ds\.json has train_batch_size .* = 128, but no gradient_accumulation_steps:"
                                          r" .*writes gradient_accumulation_steps 1 .*128 != 4 \* 1 \* 8.* Add "
                                          r"\"gradient_accumulation_steps\": \"auto\" \(or 4\)"):
        script(argv, model="llama2-7b")
    out = llmperf(capsys, "explain", "--model", "llama2-7b", "--", *argv)
    assert out.code == 2 and "Traceback" not in out.err and "ds.json" in out.err


def test_a_train_batch_the_trainer_itself_refuses_keeps_that_refusal(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"train_batch_size=64 vs hf train_batch_size \(calculated\) 128"):
        script(_trainer(tmp_path, {**NO_GAS, "train_batch_size": 64}), model="llama2-7b")


def test_without_a_train_batch_the_trainer_runs_its_own_accumulation(tmp_path: Path) -> None:
    """DeepSpeed's config holds 1, but the Trainer's sync_gradients decides when DeepSpeed reduces and steps (accelerate
    1.8.0 on): 4 micro-batches per optimizer step, as priced; the older accelerate that stepped after every
    micro-batch is named in a warning."""
    cfg = script(_trainer(tmp_path, NO_GAS), model="llama2-7b")
    assert (cfg.batch.num_microbatches, cfg.batch.global_batch_size) == (4, 128)
    assert "the Trainer's sync_gradients" in str(cfg.sources["num_microbatches"])
    assert any("has no gradient_accumulation_steps" in w and "before 1.8.0" in w for w in cfg.warnings), cfg.warnings


@pytest.mark.parametrize("config", [{**NO_GAS, "train_batch_size": "auto", "gradient_accumulation_steps": "auto"},
                                    {**NO_GAS, "train_batch_size": "auto", "gradient_accumulation_steps": 4}])
def test_a_trainer_file_with_the_key_runs_as_before(config: dict[str, Any], tmp_path: Path) -> None:
    cfg = script(_trainer(tmp_path, config), model="llama2-7b")
    assert (cfg.batch.num_microbatches, cfg.batch.global_batch_size) == (4, 128)
    assert not any("gradient_accumulation_steps" in w for w in cfg.warnings), cfg.warnings


def test_no_accumulation_asked_no_refusal(tmp_path: Path) -> None:
    cfg = script(_trainer(tmp_path, {**NO_GAS, "train_batch_size": "auto"}, gas="1"), model="llama2-7b")
    assert (cfg.batch.num_microbatches, cfg.batch.global_batch_size) == (1, 32)


def _accelerator(tmp_path: Path, config: dict[str, Any], *flags: str) -> list[str]:
    return ["accelerate", "launch", "--use_deepspeed", "--deepspeed_config_file", _file(tmp_path, config),
            "--num_processes", "8", "run_clm_no_trainer.py", "--model_name_or_path", "x",
            "--per_device_train_batch_size", "4", *flags]


@pytest.mark.parametrize("value, expected", [(None, 1), (2, 2), ("auto", 4)])
def test_a_script_driving_accelerator_runs_deepspeeds_accumulation(value: Any, expected: int, tmp_path: Path) -> None:
    """Its Accelerator(gradient_accumulation_steps=4) takes DeepSpeed's value: the plugin's 1 for a file without the
    key, the file's own number; only "auto" is filled from the script's 4. explain priced 4 each time."""
    config = NO_GAS if value is None else {**NO_GAS, "gradient_accumulation_steps": value}
    cfg = script(_accelerator(tmp_path, config, "--gradient_accumulation_steps", "4"), model="llama2-7b")
    assert (cfg.batch.num_microbatches, cfg.batch.global_batch_size) == (expected, 32 * expected)
    mismatch = [w for w in cfg.warnings if "--gradient_accumulation_steps 4 is not what runs" in w]
    assert len(mismatch) == (expected != 4), cfg.warnings
    if value is None:
        assert "accelerate's DeepSpeedPlugin writes 1" in str(cfg.sources["num_microbatches"])


NO_KEYS: dict[str, Any] = {"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}}
"""Neither train_micro_batch_size_per_gpu nor gradient_accumulation_steps: DeepSpeed derives the micro batch."""


@pytest.mark.parametrize("train", ["auto", 128])
def test_a_trainer_file_without_a_micro_batch_either_starts(train: Any, tmp_path: Path) -> None:
    """train_batch_size 128 and the plugin's accumulation 1: DeepSpeed's _set_batch_related_parameters derives the
    engine's micro batch 128 // 8 // 1 = 16 and its _batch_assertion holds, so deepspeed.initialize starts; the
    Trainer's dataloader runs 4 samples a micro-batch, 4 of them per optimizer step (accelerate >= 1.8.0)."""
    cfg = script(_trainer(tmp_path, {**NO_KEYS, "train_batch_size": train}), model="llama2-7b")
    assert (cfg.batch.micro_batch_size, cfg.batch.num_microbatches, cfg.batch.global_batch_size) == (4, 4, 128)


def test_an_accelerator_file_without_a_micro_batch_runs_the_dataloaders(tmp_path: Path) -> None:
    """DeepSpeed derives its micro batch 128 // 8 // 1 = 16 from the file's train_batch_size and starts, but the
    script's dataloader feeds 4 samples a micro-batch and the optimizer steps after each: 4 x 1 x 8 = 32."""
    cfg = script(_accelerator(tmp_path, {**NO_KEYS, "train_batch_size": 128}, "--gradient_accumulation_steps", "4"),
                 model="llama2-7b")
    assert (cfg.batch.micro_batch_size, cfg.batch.num_microbatches, cfg.batch.global_batch_size) == (4, 1, 32)
    assert "the script's dataloader" in str(cfg.sources["global_batch_size"])


@pytest.mark.parametrize("train, refusal", [(4, "resolves to 0"), (100, "100 != train_micro_batch_size_per_gpu 12")])
def test_an_accelerator_file_without_a_micro_batch_deepspeed_refuses(train: int, refusal: str, tmp_path: Path) -> None:
    """DeepSpeed's own derivation: 4 // 8 = 0 fails 'Micro batch size per gpu: 0 has to be greater than 0', and
    100 // 8 = 12 fails _batch_assertion (100 != 12 * 1 * 8)."""
    with pytest.raises(ConfigError, match=refusal):
        script(_accelerator(tmp_path, {**NO_KEYS, "train_batch_size": train}), model="llama2-7b")

"""A ds_config with neither train_batch_size nor train_micro_batch_size_per_gpu: DeepSpeedConfig asserts 'Either
train_batch_size or train_micro_batch_size_per_gpu needs to be provided' (runtime/config.py
_set_batch_related_parameters) wherever the file reaches it as written: Megatron-DeepSpeed json.loads it and hands
it over, the Hugging Face Trainer and Accelerate fill only the keys set to "auto". Where they are "auto", or
Accelerate builds the config itself (no file), the batch is theirs and the job runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import script
from tests.launch.cli_run import llmperf

MEGATRON = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "256",
            "--num-attention-heads", "4", "--seq-length", "128", "--max-position-embeddings", "128", "--vocab-size",
            "1000", "--micro-batch-size", "2", "--global-batch-size", "64", "--deepspeed", "--no-pipeline-parallel",
            "--deepspeed_config"]
HF = ["deepspeed", "--num_gpus", "8", "train.py", "--model_name_or_path", "x", "--per_device_train_batch_size", "2",
      "--bf16", "--deepspeed"]
NO_BATCH: dict[str, Any] = {"zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}


def _write(tmp_path: Path, config: dict[str, Any]) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_deepspeed_itself_refuses_a_config_without_batch_keys(deepspeed_config) -> None:
    for config in (NO_BATCH, {**NO_BATCH, "gradient_accumulation_steps": 4}):
        with pytest.raises(AssertionError, match="Either train_batch_size or train_micro_batch_size_per_gpu"):
            deepspeed_config.DeepSpeedConfig(dict(config))


@pytest.mark.parametrize("extra", [{}, {"gradient_accumulation_steps": 4}])
def test_megatron_deepspeed_passes_the_file_as_written(tmp_path: Path, extra: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"neither train_batch_size nor train_micro_batch_size_per_gpu.*"
                                          r"_create_ds_config_dict.*\"train_batch_size\": 64"):
        script([*MEGATRON, _write(tmp_path, {**NO_BATCH, **extra})])
    cfg = script([*MEGATRON, _write(tmp_path, {**NO_BATCH, "train_batch_size": 64, "train_micro_batch_size_per_gpu": 2})])
    assert (cfg.batch.global_batch_size, cfg.batch.micro_batch_size) == (64, 2)


def test_the_hf_trainer_fills_auto_not_absent_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"fills only the keys set to \"auto\".*Either train_batch_size"):
        script([*HF, _write(tmp_path, NO_BATCH)], model="llama2-7b")
    auto = {**NO_BATCH, "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto"}
    assert script([*HF, _write(tmp_path, auto)], model="llama2-7b").batch.global_batch_size == 2 * 8
    micro_only = {**NO_BATCH, "train_micro_batch_size_per_gpu": "auto"}
    assert script([*HF, _write(tmp_path, micro_only)], model="llama2-7b").batch.micro_batch_size == 2


def test_accelerate_fills_the_config_it_builds_not_a_file(tmp_path: Path) -> None:
    argv = ["accelerate", "launch", "--use_deepspeed", "--num_processes", "8", "train.py", "--model_name_or_path", "x",
            "--per_device_train_batch_size", "2"]
    assert script(argv, model="llama2-7b").batch.micro_batch_size == 2  # the plugin's own config: batch keys "auto"
    with pytest.raises(ConfigError, match="neither train_batch_size"):
        script([*argv[:3], "--deepspeed_config_file", _write(tmp_path, NO_BATCH), *argv[3:]], model="llama2-7b")


def test_explain_exits_2_naming_the_file_and_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, NO_BATCH)
    out = llmperf(capsys, "explain", "--", *MEGATRON, path)
    assert out.code == 2 and path in out.err and "Traceback" not in out.err
    assert "\"train_micro_batch_size_per_gpu\": 2" in out.err


def test_a_users_own_script_taking_megatron_flags_may_fill_the_keys_itself(tmp_path: Path) -> None:
    """Only Megatron-DeepSpeed's own entry points hand the file over as read; a user's script taking the same flags
    may fill the batch keys before deepspeed.initialize (examples/cpu-testbed/train_gpt.py does), which llmperf
    cannot see: priced as the flags' batch with a warning, not refused."""
    from llmperf_hook.frameworks.resolve import resolve_job

    testbed = Path(__file__).resolve().parents[2] / "examples" / "cpu-testbed"
    own = [*MEGATRON[:3], str(testbed / "train_gpt.py"), *MEGATRON[4:], str(testbed / "ds_zero1.json")]
    job, cfg = resolve_job(own, {})
    assert (cfg.batch.global_batch_size, cfg.batch.micro_batch_size) == (64, 2)
    assert any("must fill in itself" in w for w in cfg.warnings), cfg.warnings


def test_a_script_driving_accelerator_may_assign_the_keys_itself(tmp_path: Path) -> None:
    """accelerate Accelerator._prepare_deepspeed fills only "auto" keys (get_value of an absent key is None, so
    is_auto is False and no batch is derived), but a script driving Accelerator may assign
    deepspeed_plugin.deepspeed_config['train_micro_batch_size_per_gpu'] before prepare(), as accelerate's own error
    message suggests: priced as its flags' batch with a warning. Its --gradient_accumulation_steps 4 does not run: the
    plugin writes 1 into a file without the key and Accelerator takes DeepSpeed's value (test_hf_missing_accumulation).
    The Trainer under accelerate launch is still refused."""
    config = _write(tmp_path, NO_BATCH)
    head = ["accelerate", "launch", "--use_deepspeed", "--deepspeed_config_file", config, "--num_processes", "8"]
    cfg = script([*head, "run_clm_no_trainer.py", "--model_name_or_path", "x", "--per_device_train_batch_size", "2",
                  "--gradient_accumulation_steps", "4"], model="llama2-7b")
    assert (cfg.batch.micro_batch_size, cfg.batch.num_microbatches, cfg.batch.global_batch_size) == (2, 1, 16)
    assert any("must fill in itself" in w and "deepspeed_plugin" in w and config in w for w in cfg.warnings), cfg.warnings
    with pytest.raises(ConfigError, match="Trainer fills only the keys set to \"auto\""):
        script([*head, "run_clm.py", "--model_name_or_path", "x", "--per_device_train_batch_size", "2"],
               model="llama2-7b")

"""A Hugging Face Trainer job on a transformers release before 4.30.0 (LLMPERF_TRANSFORMERS_VERSION): that Trainer
set DeepSpeed up itself (deepspeed_init, HfTrainerDeepSpeedConfig) and read none of accelerate launch's plugin
settings, so the rules llmperf applies from accelerate's DeepSpeedPlugin (an accumulation of 1 written into a file
without the key, a zero_optimization section required) and accelerate's DeepSpeed / FSDP plugins did not hold. Such a
job is refused naming the release (exit 2); a plain DDP Trainer job, a script driving Accelerator, and a release of
4.30.0 or later are priced as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import script
from tests.launch.cli_run import llmperf

RUN_CLM = ["run_clm.py", "--model_name_or_path", "x", "--per_device_train_batch_size", "4"]
NO_TRAINER = ["run_clm_no_trainer.py", "--model_name_or_path", "x", "--per_device_train_batch_size", "4"]


def _ds(tmp_path: Path) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                                "zero_optimization": {"stage": 2}}))
    return str(path)


def _deepspeed(tmp_path: Path) -> list[str]:
    return ["deepspeed", "--num_gpus", "8", *RUN_CLM, "--deepspeed", _ds(tmp_path)]


@pytest.mark.parametrize("version", ["4.29.2", "4.17.0", "v4.28"])
def test_a_deepspeed_trainer_before_4_30_is_refused(version: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"transformers 4\.\d+\.\d+ predates its Accelerate-based Trainer "
                                          r"\(4\.30\.0\)"):
        script(_deepspeed(tmp_path), model="llama2-7b", env={"LLMPERF_TRANSFORMERS_VERSION": version})
    done = llmperf(capsys, "explain", "--model", "llama2-7b", "--",
                   f"LLMPERF_TRANSFORMERS_VERSION={version}", *_deepspeed(tmp_path))
    assert done.code == 2 and "Traceback" not in done.err and "--deepspeed" in done.err


@pytest.mark.parametrize("plugin", ["--use_deepspeed", "--use_fsdp"])
def test_accelerates_plugin_with_a_trainer_before_4_30_is_refused(plugin: str) -> None:
    argv = ["accelerate", "launch", "--num_processes", "8", plugin, *RUN_CLM]
    with pytest.raises(ConfigError, match=r"accelerate launch's plugin \(ACCELERATE_USE_(DEEPSPEED|FSDP)=true\)"):
        script(argv, model="llama2-7b", env={"LLMPERF_TRANSFORMERS_VERSION": "4.29.2"})


@pytest.mark.parametrize("version", ["4.30.0", "4.57.1", None])
def test_a_later_or_unknown_release_is_priced(version: str | None, tmp_path: Path) -> None:
    env = {} if version is None else {"LLMPERF_TRANSFORMERS_VERSION": version}
    assert script(_deepspeed(tmp_path), model="llama2-7b", env=env).batch.micro_batch_size == 4


def test_what_runs_alike_before_4_30_is_priced() -> None:
    """Plain DDP under the Trainer, and a script driving Accelerator (no Trainer), are not refused."""
    env = {"LLMPERF_TRANSFORMERS_VERSION": "4.20.0"}
    ddp = script(["torchrun", "--nproc-per-node", "8", *RUN_CLM], model="llama2-7b", env=env)
    assert ddp.batch.micro_batch_size == 4
    argv = ["accelerate", "launch", "--num_processes", "8", "--use_deepspeed", *NO_TRAINER]
    assert script(argv, model="llama2-7b", env=env).batch.micro_batch_size == 4


def test_a_version_that_is_no_version(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"LLMPERF_TRANSFORMERS_VERSION='latest' \(environment\) is not a "
                                          r"transformers version"):
        script(_deepspeed(tmp_path), model="llama2-7b", env={"LLMPERF_TRANSFORMERS_VERSION": "latest"})

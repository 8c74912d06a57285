"""`accelerate launch --deepspeed_config_file FILE` where FILE has no gradient_accumulation_steps: accelerate's
DeepSpeedPlugin.__post_init__ writes 1 into it before anything fills it (accelerate 16cb6eb8 utils/dataclasses.py:
`if "gradient_accumulation_steps" not in self.hf_ds_config.config: ... = 1`; its fill_match only fills "auto"), and
the Trainer (propagate_args_to_deepspeed -> HfTrainerDeepSpeedConfig.trainer_config_process) then finds 1 against
its own --gradient_accumulation_steps and raises 'Please correct the following DeepSpeed config values that mismatch
TrainingArguments values: - ds gradient_accumulation_steps=1 vs hf gradient_accumulation_steps=4'."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import script
from tests.launch.cli_run import llmperf

RUN_CLM = ["run_clm.py", "--model_name_or_path", "x", "--per_device_train_batch_size", "4"]


def _launch(tmp_path: Path, config: dict[str, Any], *accelerate: str) -> list[str]:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}, **config}))
    return ["accelerate", "launch", "--use_deepspeed", "--deepspeed_config_file", str(path), "--num_processes", "8",
            *accelerate]


def test_the_trainer_refuses_the_inserted_accumulation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*_launch(tmp_path, {}), *RUN_CLM, "--gradient_accumulation_steps", "4"]
    with pytest.raises(ConfigError, match=r"ds gradient_accumulation_steps=1 \(not in the file: accelerate's "
                                          r"DeepSpeedPlugin writes 1 .*\) vs hf --gradient_accumulation_steps 4"):
        script(argv, model="llama2-7b")
    out = llmperf(capsys, "explain", "--model", "llama2-7b", "--", *argv)
    assert out.code == 2 and "Traceback" not in out.err and "\"auto\"" in out.err


def test_the_inserted_one_is_what_runs_otherwise(tmp_path: Path) -> None:
    """accelerate's --gradient_accumulation_steps 4 does not reach a file without the key either (fill_match fills
    only "auto"): the job runs 1, which the Trainer's default agrees with."""
    cfg = script([*_launch(tmp_path, {}, "--gradient_accumulation_steps", "4"), *RUN_CLM], model="llama2-7b")
    assert (cfg.batch.num_microbatches, cfg.batch.global_batch_size) == (1, 32)
    assert "accelerate's DeepSpeedPlugin writes 1" in str(cfg.sources["num_microbatches"])


@pytest.mark.parametrize("value, expected", [("auto", 4), (4, 4)])
def test_a_file_with_the_key_is_filled_or_matched(tmp_path: Path, value: Any, expected: int) -> None:
    argv = [*_launch(tmp_path, {"gradient_accumulation_steps": value}), *RUN_CLM, "--gradient_accumulation_steps", "4"]
    assert script(argv, model="llama2-7b").batch.num_microbatches == expected

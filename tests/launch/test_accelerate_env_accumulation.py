"""ACCELERATE_GRADIENT_ACCUMULATION_STEPS in the launching environment: Accelerator.__init__ (accelerate 16cb6eb8
accelerator.py) builds its GradientAccumulationPlugin from `int(parse_choice_from_env(
"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", gradient_accumulation_steps))`, so for a script driving Accelerator itself
(the no_trainer examples, which pass their --gradient_accumulation_steps to the constructor) the variable wins, under
any launcher, DeepSpeed or not; the Trainer passes its own plugin and never reads it. `accelerate launch` copies its
environment and sets the variable only from its own --gradient_accumulation_steps under DeepSpeed
(utils/launch.py prepare_deepspeed_cmd_env), where that value wins over the inherited one."""

from __future__ import annotations

import pytest

from tests.frameworks.helpers import script
from tests.launch.cli_run import llmperf

ACCELERATE = ["accelerate", "launch", "--num_processes", "8"]
NO_TRAINER = ["run_clm_no_trainer.py", "--model_name_or_path", "x", "--per_device_train_batch_size", "4",
              "--gradient_accumulation_steps", "2"]
TRAINER = ["run_clm.py", "--model_name_or_path", "x", "--per_device_train_batch_size", "4",
           "--gradient_accumulation_steps", "2"]
ENV = {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4"}


@pytest.mark.parametrize("launch", [[*ACCELERATE, "--multi_gpu"], ACCELERATE, ["torchrun", "--nproc-per-node", "8"]])
def test_the_environment_wins_over_an_accelerator_scripts_argument(launch: list[str]) -> None:
    cfg = script([*launch, *NO_TRAINER], model="llama2-7b", env=ENV)
    assert cfg.batch.num_microbatches == 4
    assert cfg.batch.global_batch_size == 4 * 4 * 8
    assert "ACCELERATE_GRADIENT_ACCUMULATION_STEPS" in str(cfg.sources["num_microbatches"])
    assert script([*launch, *NO_TRAINER], model="llama2-7b").batch.num_microbatches == 2


def test_the_trainer_does_not_read_it() -> None:
    assert script([*ACCELERATE, *TRAINER], model="llama2-7b", env=ENV).batch.num_microbatches == 2


def test_the_launchers_deepspeed_value_wins_over_the_inherited_one() -> None:
    argv = [*ACCELERATE, "--use_deepspeed", "--gradient_accumulation_steps", "8", *NO_TRAINER]
    assert script(argv, model="llama2-7b", env=ENV).batch.num_microbatches == 8
    inherited = [*ACCELERATE, "--use_deepspeed", *NO_TRAINER]  # the plugin fills its "auto" from the variable
    assert script(inherited, model="llama2-7b", env=ENV).batch.num_microbatches == 4


def test_a_value_int_cannot_read_is_refused(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "auto")
    done = llmperf(capsys, "explain", "--model", "llama2-7b", "--", *ACCELERATE, *NO_TRAINER)
    assert done.code == 2 and "invalid literal for int()" in done.err and "Traceback" not in done.err


@pytest.mark.parametrize("value", ["0", "-2"])
def test_a_count_below_one_is_refused_naming_the_variable(value: str, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """R60: 0 or -2 exited 2 with 'global_batch_size 0 (derived micro * accumulation * DP)', not naming the variable."""
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", value)
    done = llmperf(capsys, "explain", "--model", "llama2-7b", "--", *ACCELERATE, *NO_TRAINER)
    assert done.code == 2 and f"ACCELERATE_GRADIENT_ACCUMULATION_STEPS={value}" in done.err, done.err

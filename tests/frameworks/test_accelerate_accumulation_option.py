"""`accelerate launch --gradient_accumulation_steps N` (accelerate 16cb6eb8 commands/launch.py: a DeepSpeed argument,
`type=int`) against the script's own accumulation and a ds_config's. accelerate exports it as
ACCELERATE_GRADIENT_ACCUMULATION_STEPS only under DeepSpeed (utils/launch.py prepare_deepspeed_cmd_env); there the
plugin's config takes it (its "auto" filled from it: DeepSpeedPlugin.__post_init__), a script driving Accelerator
takes it over its own argument (Accelerator.__init__: `int(parse_choice_from_env(...,
gradient_accumulation_steps))`), and the Trainer, which passes its own GradientAccumulationPlugin, refuses a ds value
that mismatches its --gradient_accumulation_steps. Without DeepSpeed it reaches nothing. A value argparse cannot
convert is refused as accelerate refuses it (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError, UsageError
from tests.frameworks.helpers import script
from tests.launch.cli_run import llmperf

ACCELERATE = ["accelerate", "launch", "--num_processes", "8"]
NO_TRAINER = ["run_clm_no_trainer.py", "--model_name_or_path", "x", "--per_device_train_batch_size", "4"]
TRAINER = ["run_clm.py", "--model_name_or_path", "x", "--per_device_train_batch_size", "4"]


def _accumulation(argv: list[str]) -> int:
    return script(argv, model="llama2-7b").batch.num_microbatches


@pytest.mark.parametrize("mode, script_gas, expected", [("--use_deepspeed", "2", 8), ("--use_deepspeed", None, 8),
                                                        ("--multi_gpu", "2", 2), ("--multi_gpu", None, 1)])
def test_the_launchers_accumulation_over_an_accelerator_scripts(mode: str, script_gas: str | None,
                                                                expected: int) -> None:
    own = [] if script_gas is None else ["--gradient_accumulation_steps", script_gas]
    assert _accumulation([*ACCELERATE, mode, "--gradient_accumulation_steps", "8", *NO_TRAINER, *own]) == expected


def test_the_trainer_refuses_the_launchers_mismatching_accumulation() -> None:
    with pytest.raises(ConfigError, match=r"ds gradient_accumulation_steps=8 vs hf --gradient_accumulation_steps 2"):
        _accumulation([*ACCELERATE, "--use_deepspeed", "--gradient_accumulation_steps", "8", *TRAINER,
                       "--gradient_accumulation_steps", "2"])
    assert _accumulation([*ACCELERATE, "--use_deepspeed", "--gradient_accumulation_steps", "8", *TRAINER,
                          "--gradient_accumulation_steps", "8"]) == 8


@pytest.mark.parametrize("value, kind", [("2.5", "int"), ("x", "int"), ("auto", "int")])
def test_a_value_accelerates_argparse_refuses(value: str, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    """It was an internal error (int() in the plugin's reading, exit 1)."""
    argv = [*ACCELERATE, "--use_deepspeed", f"--gradient_accumulation_steps={value}", *TRAINER]
    with pytest.raises(UsageError, match=rf"argument --gradient_accumulation_steps/--gradient-accumulation-steps: "
                                         rf"invalid {kind} value: '{value}'"):
        script(argv, model="llama2-7b")
    done = llmperf(capsys, "explain", "--model", "llama2-7b", "--", *argv)
    assert done.code == 2 and "Traceback" not in done.err and "internal error" not in done.err
    with pytest.raises(UsageError, match=r"argument --gradient_clipping/--gradient-clipping: invalid float value"):
        script([*ACCELERATE, "--use_deepspeed", "--gradient_clipping", "one", *TRAINER], model="llama2-7b")


def _config(tmp_path: Path, gas: str) -> list[str]:
    path = tmp_path / "accelerate.yaml"
    path.write_text(f"distributed_type: DEEPSPEED\nnum_processes: 8\ndeepspeed_config:\n  zero_stage: 2\n"
                    f"  gradient_accumulation_steps: {gas}\n")
    return ["accelerate", "launch", "--config_file", str(path)]


def test_an_auto_accumulation_in_the_accelerate_config(tmp_path: Path) -> None:
    """The plugin keeps "auto" (it was int('auto'): an internal error): the Trainer fills it from its own argument;
    Accelerator itself stops at int('auto') (accelerator.py), refused so."""
    assert _accumulation([*_config(tmp_path, "auto"), *TRAINER, "--gradient_accumulation_steps", "2"]) == 2
    with pytest.raises(ConfigError, match=r"ValueError: invalid literal for int\(\) with base 10: 'auto'"):
        _accumulation([*_config(tmp_path, "auto"), *NO_TRAINER, "--gradient_accumulation_steps", "2"])


def test_the_command_over_the_accelerate_config(tmp_path: Path) -> None:
    """launch.py fills only what the command leaves unset from the config file."""
    assert _accumulation([*_config(tmp_path, "4"), *NO_TRAINER, "--gradient_accumulation_steps", "2"]) == 4
    assert _accumulation([*_config(tmp_path, "4"), "--gradient_accumulation_steps", "8", *NO_TRAINER]) == 8


def test_the_launchers_accumulation_without_deepspeed_is_said_to_reach_nothing() -> None:
    cfg = script([*ACCELERATE, "--multi_gpu", "--gradient_accumulation_steps", "8", *NO_TRAINER,
                  "--gradient_accumulation_steps", "2"], model="llama2-7b")
    assert cfg.batch.num_microbatches == 2
    assert any("--gradient_accumulation_steps 8 has no effect without DeepSpeed" in w for w in cfg.warnings), \
        cfg.warnings
    cfg = script([*ACCELERATE, "--use_deepspeed", "--gradient_accumulation_steps", "8", *NO_TRAINER],
                 model="llama2-7b")
    assert not any("has no effect without DeepSpeed" in w for w in cfg.warnings), cfg.warnings

"""Acceptance round 16 (H199): a Megatron-LM / DeepSpeed user's launch commands through `llmperf explain`, each
checked against what the framework itself runs (its source cited per test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.cli import run_cli

TRAINER = ["deepspeed", "--num_gpus", "8", "run_clm.py", "--model_name_or_path", "meta-llama/Llama-2-7b-hf",
           "--do_train", "--output_dir", "out", "--per_device_train_batch_size", "4", "--deepspeed", "ds.json"]
"""transformers' run_clm.py under the Hugging Face Trainer with a ds_config (its shape from --model llama2-7b)."""

NO_PRECISION = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                "zero_optimization": {"stage": 2}}
"""A ds_config with neither an fp16 nor a bf16 section, as DeepSpeedExamples' and many users' ZeRO configs are."""


def _explain(folder: Path, config: dict, command: list[str], capsys, monkeypatch) -> dict:
    monkeypatch.chdir(folder)
    (folder / "ds.json").write_text(json.dumps(config))
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama2-7b", "--", *command], capsys)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize(("flags", "precision", "source"), [
    (["--bf16"], "bf16", "--bf16"), (["--fp16"], "fp16", "--fp16"), ([], "fp32", "neither fp16 nor bf16")])
def test_trainer_precision_flag_without_a_ds_section(flags: list[str], precision: str, source: str, tmp_path: Path,
                                                     capsys, monkeypatch) -> None:
    """The Trainer's --bf16 trains in bf16 when its ds_config has no bf16 section: TrainingArguments.__post_init__
    exports ACCELERATE_MIXED_PRECISION=bf16, and AcceleratorState (accelerate state.py) calls
    DeepSpeedPlugin.set_mixed_precision, which adds {"bf16": {"enabled": True}} to a config without that section
    (accelerate utils/dataclasses.py; the Trainer's own fill_match skips a missing section). llmperf priced it fp32."""
    got = _explain(tmp_path, NO_PRECISION, [*TRAINER, *flags], capsys, monkeypatch)
    assert got["precision"] == precision
    assert source in got["sources"]["precision"]


def test_accelerate_bf16_beside_a_disabled_fp16_section(tmp_path: Path, capsys, monkeypatch) -> None:
    """set_mixed_precision adds the bf16 section whenever that section is missing, whatever the fp16 section says:
    {"fp16": {"enabled": false}} with --bf16 runs bf16 (it was read as fp32, the fp16 section stopping the fill)."""
    got = _explain(tmp_path, {**NO_PRECISION, "fp16": {"enabled": False}}, [*TRAINER, "--bf16"], capsys, monkeypatch)
    assert got["precision"] == "bf16"

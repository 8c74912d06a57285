"""tune offers (and --apply writes) only ZeRO stages the job's own DeepSpeed release accepts for its ds_config
(deepspeed_release.schema_release: LLMPERF_DEEPSPEED_VERSION, else the installed release). The stage check ran
today's rules: bf16 training with data_types.grad_accum_dtype fp32 is refused without ZeRO from 0.18.5 (09885efef)
but ran BF16_Optimizer before, and before 0.10.1 (8afcda2ac) ZeRO accumulated only in the model's dtype, but for
bf16 + fp32 at stage 1 from 0.8.1 (8d87c89e4), so a 0.9.0 job was offered ZeRO-2/3 copies its engine refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.frameworks import deepspeed_release
from llmperf_hook.launch.sizing import DEEPSPEED_VERSION_ENV
from llmperf_hook.tune import ds_config_rewrite as dsr
from tests.tune.helpers import run_cli

FP32_ACCUMULATION = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
                     "data_types": {"grad_accum_dtype": "fp32"}, "zero_optimization": {"stage": 1}}


@pytest.mark.parametrize("release, accepted", [("0.19.8", (1, 2, 3)), ("0.18.4", (0, 1, 2, 3)), ("0.9.0", (0, 1)),
                                               ("0.8.0", (0,))])
def test_the_stages_are_those_of_the_jobs_release(release: str, accepted: tuple[int, ...], tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(FP32_ACCUMULATION))
    argv = ["train.py", "--deepspeed_config", str(path)]
    assert dsr.zero_stages_deepspeed_accepts(argv, (0, 1, 2, 3), env={DEEPSPEED_VERSION_ENV: release}) == accepted


def test_no_environment_keeps_todays_rules(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(FP32_ACCUMULATION))
    assert dsr.zero_stages_deepspeed_accepts(["train.py", "--deepspeed_config", str(path)], (0, 1, 2, 3)) == (1, 2, 3)


@pytest.mark.parametrize("installed, accepted", [((0, 9, 0), (0, 1)), (None, (1, 2, 3))])
def test_an_unstated_release_is_the_installed_one(installed: tuple[int, int, int] | None, accepted: tuple[int, ...],
                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No LLMPERF_DEEPSPEED_VERSION in the job's environment: the DeepSpeed installed beside llmperf (its package
    metadata, deepspeed not imported), and with none installed today's rules."""
    monkeypatch.setattr(deepspeed_release, "installed_release", lambda: installed)
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(FP32_ACCUMULATION))
    assert dsr.zero_stages_deepspeed_accepts(["train.py", "--deepspeed_config", str(path)], (0, 1, 2, 3), env={}) == accepted


TINY_LLAMA = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8,
              "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 32000, "max_position_embeddings": 2048}
"""Small enough that every stage fits on 8 H100s: the stages ranked are the stages searched."""


@pytest.mark.parametrize("release, stages", [("0.9.0", {0, 1}), ("0.19.8", {1, 2, 3})])
def test_tune_searches_only_the_releases_stages(release: str, stages: set[int], tmp_path: Path, capsys,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The release the launch line states reaches tune's stage check (ParsedJob.env), so the ranked rows, and the
    copy --apply would write, hold only stages that release accepts (HEAD ranked ZeRO-1/2/3 for 0.9.0)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps(FP32_ACCUMULATION))
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text(json.dumps(TINY_LLAMA))
    (tmp_path / "s.yaml").write_text("micro_batch_size: [2]\nzero_stage: [0, 1, 2, 3]\n")
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", "--top", "8", "--search", "s.yaml",
                              "--", f"{DEEPSPEED_VERSION_ENV}={release}", "deepspeed", "--num_gpus", "8", "run_clm.py",
                              "--model_name_or_path", "tiny", "--block_size", "1024", "--per_device_train_batch_size",
                              "2", "--gradient_accumulation_steps", "4", "--bf16", "--deepspeed", "ds.json"], capsys)
    assert code == 0, err
    assert {row["zero_stage"] for row in json.loads(out)["top"]} == stages

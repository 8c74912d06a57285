"""data_types.grad_accum_dtype bf16 with a bf16 model and no ZeRO, as each DeepSpeed release's engine takes it
(deepspeed_engine_rules.check_no_zero_bf16_accumulation). engine.py _do_optimizer_sanity_check from the key's first
release (21c280296, v0.7.6) to v0.17.5 raises 'Bfloat16 wrapper must use a gradient accumulation type of fp32, enable
ZeRO to use Bfloat16 gradient accumulation'; from v0.12.5 (ce6070800) not under the PipelineEngine; v0.17.6
(889f0ead2) accepts it everywhere (DDP_BFLOAT16)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks import deepspeed_release
from tests.frameworks.helpers import script

REFUSAL = "Bfloat16 wrapper must use a gradient accumulation type of fp32"
MDS = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "1024",
       "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024", "--micro-batch-size",
       "1", "--global-batch-size", "8", "--vocab-size", "32000", "--bf16", "--deepspeed"]


def _ds(tmp_path: Path, stage: int, accum: str, **extra: Any) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                "zero_optimization": {"stage": stage}, "data_types": {"grad_accum_dtype": accum},
                                **extra}))
    return str(path)


def _plain(tmp_path: Path, release: str | None, stage: int = 0, accum: str = "bf16", **extra: Any):
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", _ds(tmp_path, stage, accum, **extra)]
    env = {"LLMPERF_DEEPSPEED_VERSION": release} if release else {}
    return script(argv, model="llama2-7b", env=env)


def _megatron_deepspeed(tmp_path: Path, release: str, *extra: str):
    argv = [*MDS, "--deepspeed_config", _ds(tmp_path, 0, "bf16", train_batch_size=8), *extra]
    return script(argv, env={"LLMPERF_DEEPSPEED_VERSION": release})


@pytest.mark.parametrize("release", ["0.7.6", "0.12.4", "0.14.4", "0.17.5"])
def test_refused_without_zero_from_0_7_6_to_0_17_5(tmp_path: Path, release: str) -> None:
    with pytest.raises(ConfigError) as err:
        _plain(tmp_path, release)
    message = str(err.value)
    assert err.value.exit_code == 2
    assert REFUSAL in message and f"DeepSpeed {release} (LLMPERF_DEEPSPEED_VERSION)" in message
    assert "data_types.grad_accum_dtype 'bf16'" in message and "enable ZeRO" in message and "0.17.6" in message


def test_accepted_where_the_release_takes_it(tmp_path: Path) -> None:
    """0.17.6 and later, ZeRO at any stage, and 0.7.5, which ignores the key."""
    assert _plain(tmp_path, "0.17.6").optimizer.grad_accum_dtype == "bf16"
    assert _plain(tmp_path, "0.14.4", stage=1).optimizer.zero_stage == 1
    assert _plain(tmp_path, "0.7.5").optimizer.grad_accum_dtype is None


def test_the_pipeline_engine_takes_it_from_0_12_5(tmp_path: Path) -> None:
    """A plain script with pipeline stages runs PipelineEngine; so does Megatron-DeepSpeed without
    --no-pipeline-parallel (GPTModelPipe at any PP)."""
    assert _plain(tmp_path, "0.12.5", pipeline={"stages": 2}).deepspeed_pipeline_engine
    with pytest.raises(ConfigError, match=REFUSAL):
        _plain(tmp_path, "0.12.4", pipeline={"stages": 2})
    assert _megatron_deepspeed(tmp_path, "0.15.0").deepspeed_pipeline_engine
    with pytest.raises(ConfigError, match=fr"engine \(outside its PipelineEngine\) raises '{REFUSAL}"):
        _megatron_deepspeed(tmp_path, "0.15.0", "--no-pipeline-parallel")


def test_unset_release_is_the_installed_one_else_todays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without LLMPERF_DEEPSPEED_VERSION the release is the DeepSpeed installed beside llmperf; none installed:
    today's, which accepts it."""
    monkeypatch.setattr(deepspeed_release, "installed_release", lambda: (0, 15, 0))
    with pytest.raises(ConfigError, match=r"DeepSpeed 0.15.0 \(the DeepSpeed installed beside llmperf\)"):
        _plain(tmp_path, None)
    monkeypatch.setattr(deepspeed_release, "installed_release", lambda: None)
    assert _plain(tmp_path, None).optimizer.grad_accum_dtype == "bf16"

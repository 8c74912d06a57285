"""DeepSpeed batch triad (runtime/config.py), ZeRO parsing, Hugging Face "auto" values, Megatron-DeepSpeed merging."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError, UsageError
from llmperf_hook.frameworks.deepspeed_config import parse_ds_config, read_ds_config, resolve_ds_batch
from tests.frameworks.helpers import BASE, script


@pytest.mark.parametrize(("given", "expected"), [
    ((64, 2, 4), (64, 2, 4)),          # all three: only checked
    ((64, 2, None), (64, 2, 4)),       # accumulation = train // micro // dp
    ((64, None, 4), (64, 2, 4)),       # micro = train // dp // accumulation
    ((None, 2, 4), (64, 2, 4)),        # train = micro * accumulation * dp
    ((64, None, None), (64, 8, 1)),    # accumulation 1, micro = train // dp
    ((None, 2, None), (16, 2, 1)),     # train = micro * dp, accumulation 1
])
def test_triad_fill_in(given: tuple, expected: tuple) -> None:
    assert resolve_ds_batch(*given, dp=8, origin="ds.json") == expected


@pytest.mark.parametrize(("given", "fragment"), [
    ((None, None, 4), "either train_batch_size or train_micro_batch_size_per_gpu"),
    ((60, 2, 4), "60 != "),
    ((4, 2, None), "> 0"),
    ((100, 3, None), "!="),
])
def test_triad_rejections(given: tuple, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_ds_batch(*given, dp=8, origin="ds.json")
    assert fragment in str(info.value)


def test_zero_section_defaults_and_offload() -> None:
    ds = parse_ds_config({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
                                                "offload_param": {"device": "cpu"}}}, "ds.json")
    assert ds.zero_stage == 2 and ds.offload_optimizer == "cpu" and ds.offload_param == "none"
    assert any("offload_param needs ZeRO stage 3" in w for w in ds.warnings)
    assert parse_ds_config({}, "ds.json").zero_stage == 0
    with pytest.raises(ConfigError, match="both fp16 and bf16"):
        parse_ds_config({"fp16": {"enabled": True}, "bf16": {"enabled": True}}, "ds.json")
    with pytest.raises(ConfigError, match="integer"):
        parse_ds_config({"train_batch_size": "many"}, "ds.json")


def test_read_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        read_ds_config(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UsageError, match="cannot read"):
        read_ds_config(str(tmp_path / "bad.json"))


def _write(tmp_path: Path, raw: dict) -> None:
    (tmp_path / "ds.json").write_text(json.dumps(raw))


def test_plain_deepspeed_with_preset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
                      "zero_optimization": {"stage": 3}, "bf16": {"enabled": True}})
    cfg = script(["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds.json"], model="llama3-8b")
    assert cfg.batch.global_batch_size == 32 and cfg.optimizer.zero_stage == 3 and cfg.optimizer.overlap_grad_reduce
    assert cfg.model.num_query_groups == 8 and cfg.precision == "bf16" and cfg.framework == "deepspeed"
    with pytest.raises(ConfigError, match="--model PRESET"):
        script(["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed-config", "ds.json"])


def test_hf_trainer_auto_and_mismatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                      "gradient_accumulation_steps": "auto", "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}})
    cfg = script(["deepspeed", "--num_gpus", "4", "train.py", "--deepspeed", "ds.json", "--model_name_or_path", "x"],
                 model="llama2-7b")
    assert (cfg.batch.micro_batch_size, cfg.batch.num_microbatches, cfg.batch.global_batch_size) == (8, 1, 32)
    assert cfg.optimizer.grad_bucket_size_elems == 4096 * 4096 and cfg.precision == "fp32"
    _write(tmp_path, {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}})
    with pytest.raises(ConfigError, match="mismatch"):
        script(["deepspeed", "--num_gpus", "4", "train.py", "--deepspeed", "ds.json", "--per_device_train_batch_size", "4"],
               model="llama2-7b")
    _write(tmp_path, {"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": True}, "gradient_clipping": 1.0,
                      "zero_optimization": {"stage": 1}})
    with pytest.raises(ConfigError, match=r"per_device_train_batch_size 8 \(Trainer default\)"):
        script(["deepspeed", "--num_gpus", "4", "train.py", "--deepspeed", "ds.json", "--bf16"], model="llama2-7b")
    with pytest.raises(ConfigError, match="bf16.enabled=True vs hf --bf16 False"):
        script(["deepspeed", "--num_gpus", "4", "train.py", "--deepspeed", "ds.json", "--per_device_train_batch_size", "4"],
               model="llama2-7b")
    cfg = script(["deepspeed", "--num_gpus", "4", "train.py", "--deepspeed", "ds.json", "--per_device_train_batch_size", "4",
                  "--bf16"], model="llama2-7b")
    assert (cfg.batch.global_batch_size, cfg.precision) == (16, "bf16")


def test_megatron_deepspeed_batch_and_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}})
    argv = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *BASE, "--micro-batch-size", "2", "--deepspeed",
            "--deepspeed_config", "ds.json"]
    cfg = script(argv + ["--global-batch-size", "64"])
    assert cfg.framework == "megatron-deepspeed" and cfg.optimizer.zero_stage == 1 and cfg.deepspeed_pipeline_engine
    with pytest.raises(ConfigError, match="disagree"):
        script(argv + ["--global-batch-size", "128"])
    _write(tmp_path, {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}})
    with pytest.raises(ConfigError, match="incompatible with pipeline"):
        script(argv + ["--global-batch-size", "64"])
    assert script(argv + ["--global-batch-size", "64", "--no-pipeline-parallel"]).optimizer.zero_stage == 2


def test_megatron_deepspeed_moe_spellings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 0}})
    argv = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *BASE, "--micro-batch-size", "2", "--global-batch-size", "16",
            "--deepspeed", "--deepspeed_config", "ds.json", "--no-pipeline-parallel"]
    cfg = script(argv + ["--num-experts", "8", "--moe-expert-parallel-size", "4"])
    assert (cfg.model.num_experts, cfg.model.moe_router_topk, cfg.model.moe_layer_freq, cfg.parallel.ep) == (8, 1, 2, 4)
    assert script(argv + ["--num-experts", "1"]).model.num_experts == 0  # Megatron-DeepSpeed: one expert = dense


def test_deepspeed_pipeline_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 1},
                      "pipeline": {"stages": 2, "activation_checkpoint_interval": 1},
                      "activation_checkpointing": {"partition_activations": True}})
    cfg = script(["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds.json"], model="gpt3-175b")
    assert (cfg.parallel.pp, cfg.parallel.dp, cfg.batch.num_microbatches) == (2, 4, 4)
    assert cfg.recompute.granularity == "full" and cfg.deepspeed_pipeline_engine and cfg.pipeline_schedule == "1f1b"
    assert any("partition_activations" in w for w in cfg.warnings)


def test_megatron_deepspeed_ulysses_divides_data_parallel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}})
    cfg = script(["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *BASE, "--global-batch-size", "8", "--deepspeed",
                  "--deepspeed_config", "ds.json", "--no-pipeline-parallel", "--ds-sequence-parallel-size", "4"])
    assert (cfg.parallel.cp, cfg.parallel.dp, cfg.batch.num_microbatches) == (4, 2, 4)

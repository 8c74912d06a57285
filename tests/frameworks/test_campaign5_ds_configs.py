"""Round-5 campaign: ds_configs as 2025-26 users write them, checked against what DeepSpeed 0.19's config models
accept (deepspeed/runtime/config.py, zero/config.py, zero/offload_config.py, precision_config.py,
monitor/config.py: pydantic with extra keys forbidden) and Megatron-DeepSpeed's own start-up checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import script

DS = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config"]
HF = ["deepspeed", "--num_gpus", "8", "train.py", "--per_device_train_batch_size", "2", "--bf16", "--deepspeed"]
BASE: dict[str, Any] = {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True}}
MEGATRON = ["--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
            "--max-position-embeddings", "2048", "--vocab-size", "50257", "--micro-batch-size", "2",
            "--global-batch-size", "64", "--bf16", "--deepspeed", "--no-pipeline-parallel"]


def _ds(tmp_path: Path, **extra: Any) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**BASE, **extra}))
    return str(path)


def _zero(tmp_path: Path, **zero: Any) -> str:
    return _ds(tmp_path, zero_optimization=zero)


def test_zero_plus_plus_and_scientific_sizes_are_accepted(tmp_path: Path) -> None:
    path = _zero(tmp_path, stage=3, zero_hpz_partition_size=8, zero_quantized_weights=True, zero_quantized_gradients=True,
                 reduce_bucket_size=5e8, allgather_bucket_size=5.5e8, stage3_prefetch_bucket_size="auto",
                 stage3_max_live_parameters=1e9, stage3_param_persistence_threshold=1e5, sub_group_size=1e9,
                 offload_optimizer={"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": True, "buffer_count": 4},
                 offload_param={"device": "nvme", "nvme_path": "/local_nvme", "buffer_size": 1e8, "max_in_cpu": 1e9})
    cfg = script([*DS, path], model="llama3-8b")
    assert (cfg.optimizer.zero_stage, cfg.optimizer.offload_optimizer, cfg.optimizer.offload_param) == (3, "nvme", "nvme")
    assert (cfg.optimizer.zero_hpz_partition_size, cfg.optimizer.zero_quantized_weights,
            cfg.optimizer.zero_quantized_gradients) == (8, True, True)


@pytest.mark.parametrize("zero, fragment", [
    ({"stage": 3, "stage3_prefetch_bucket": 5e7}, "did you mean 'stage3_prefetch_bucket_size'"),
    ({"stage": 2, "cpu_offload_params": True}, "cpu_offload_param"),
    ({"stage": 2, "reduce_bucket_size": 0}, "requires > 0"),
    ({"stage": 2, "allgather_bucket_size": -1}, "requires >= 0"),
    ({"stage": 3, "zero_hpz_partition_size": -1}, "requires >= 0"),
    ({"stage": 3, "stage3_prefetch_bucket_size": "5e7"}, "valid integer"),
    ({"stage": 2, "reduce_bucket_size": 1.5}, "valid integer"),
    ({"stage": 3, "offload_optimizer": {"device": "gpu"}}, "OffloadDeviceEnum"),
    ({"stage": 3, "offload_optimizer": {"device": "NVMe", "nvme_path": "/x"}}, "lower case"),
    ({"stage": 3, "offload_param": {"device": "cpu", "pin_memroy": True}}, "did you mean 'pin_memory'"),
    ({"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 1.5}}, "0.0 to 1.0"),
    ({"stage": 3, "offload_optimizer": "cpu"}, "must be an object"),
])
def test_zero_section_refusals_match_deepspeeds_pydantic_model(tmp_path: Path, zero: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        script([*DS, _zero(tmp_path, **zero)], model="llama3-8b")


@pytest.mark.parametrize("extra, fragment", [
    ({"bf16": {"enabled": True, "bogus": 1}}, "DeepSpeedBF16Config"),
    ({"bf16": True}, "must be an object|anything but an object"),
    ({"tensorboard": {"enabled": True, "output_dir": "/tmp"}}, "DeepSpeedMonitorConfig"),
    ({"communication_data_type": "int8"}, "Invalid communication_data_type"),
    ({"gradient_clipping": "1.0"}, "JSON number"),
    ({"gradient_clipping": "auto"}, "only the Hugging Face Trainer / Accelerate fill it"),
    ({"data_types": {"grad_accum_dtype": "int4"}}, "DtypeEnum"),
    ({"data_types": {"grad_accum_dtype": "fp32"}}, "unsupported mix"),
    ({"data_types": {"grad_accum_dtype": "auto"}}, "DtypeEnum"),  # no Trainer / Accelerate fills this key
    ({"zero_optimization": {"stage": 3, "compute_grad_norm": False}}, "only with ZeRO Stage 1 or 2"),
    ({"zero_optimization": {"stage": 0, "compute_grad_norm": False}}, "only with ZeRO Stage 1 or 2"),
    ({"zero_optimization": {"stage": 2, "compute_grad_norm": False}, "gradient_clipping": 1.0}, "gradient_clipping=0"),
    ({"zero_optimization": {"stage": 2, "compute_grad_norm": False, "offload_optimizer": {"device": "cpu"}}},
     "does not support optimizer offload"),
    ({"zero_optimization": {"stage": 1, "compute_grad_norm": "false"}, "data_types": {"grad_accum_dtype": "fp32"}},
     "BF16 parameters and FP32 gradient accumulation"),
    ({"sequence_parallel_size": 0}, "positive integer"),
    ({"sequence_parallel_size": 3}, "not divisible"),
])
def test_top_level_refusals(tmp_path: Path, extra: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        script([*DS, _ds(tmp_path, **extra)], model="llama2-7b" if "sequence_parallel_size" not in extra else "llama3-8b")


def test_compute_grad_norm_off_is_accepted_where_deepspeed_accepts_it(tmp_path: Path) -> None:
    for zero in ({"stage": 2, "compute_grad_norm": False}, {"stage": 1, "compute_grad_norm": False},
                 {"stage": 3, "compute_grad_norm": True}):
        assert script([*DS, _ds(tmp_path, zero_optimization=zero)], model="llama2-7b").optimizer.zero_stage == zero["stage"]


def test_ulysses_heads_rule_uses_the_model(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="40 attention heads"):  # llama2-13b: 40 heads, SP 16
        script(["deepspeed", "--num_gpus", "16", *DS[3:], _ds(tmp_path, sequence_parallel_size=16)], model="llama2-13b")


def test_accepted_spellings_and_sections(tmp_path: Path) -> None:
    path = _ds(tmp_path, zero_optimization={"stage": True}, communication_data_type="FP32", steps_per_print=10,
               wall_clock_breakdown=True, bf16={"enabled": True, "immediate_grad_update": True},
               flops_profiler={"enabled": True, "profile_step": 1}, csv_monitor={"enabled": True, "output_path": "/t"},
               wandb={"enabled": True, "project": "p"}, data_types={"grad_accum_dtype": "fp32"})
    cfg = script([*DS, path], model="llama2-7b")
    assert cfg.optimizer.zero_stage == 1 and cfg.precision == "bf16"  # pydantic reads stage true as 1
    assert (cfg.optimizer.grad_accum_dtype, cfg.optimizer.grad_comm_dtype) == ("fp32", "fp32")
    assert script([*DS, _ds(tmp_path, zero_optimization=False)], model="llama2-7b").optimizer.zero_stage == 0


def test_removed_sections_warn_before_0_19_8_and_are_refused_from_it(tmp_path: Path) -> None:
    path = _ds(tmp_path, zero_optimization={"stage": 3, "mics_shard_size": 8}, sparse_attention={"mode": "fixed"})
    cfg = script([*DS, path], model="llama2-7b", env={"LLMPERF_DEEPSPEED_VERSION": "0.19.6"})
    removed = [w for w in cfg.warnings if "0.19.8" in w]
    assert len(removed) == 2 and not any("mics_shard_size = 8" in w for w in cfg.warnings)
    assert all("this job: DeepSpeed 0.19.6 (LLMPERF_DEEPSPEED_VERSION)" in w for w in removed)
    guessed = [w for w in script([*DS, path], model="llama2-7b").warnings if "0.19.8" in w]  # the installed release
    assert len(guessed) == 2 and all("set LLMPERF_DEEPSPEED_VERSION to have it checked" in w for w in guessed)
    with pytest.raises(ConfigError, match=r"sparse_attention, zero_optimization.mics_shard_size: the feature was "
                                          r"removed .* refuses the section from 0.19.8 on .*DeepSpeed 0.19.8 \("):
        script([*DS, path], model="llama2-7b", env={"LLMPERF_DEEPSPEED_VERSION": "0.19.8"})


def test_ulysses_sequence_parallel_divides_the_batch_world(tmp_path: Path) -> None:
    cfg = script([*DS, _ds(tmp_path, sequence_parallel_size=2, train_batch_size=16)], model="llama3-8b")
    # DeepSpeedConfig: world 8 / SP 2 = 4 data-parallel ranks, so 16 = 2 x 2 accumulation x 4.
    assert (cfg.parallel.cp, cfg.parallel.dp, cfg.batch.num_microbatches) == (2, 4, 2)
    hf = script([*HF, _ds(tmp_path, sequence_parallel_size=2, train_micro_batch_size_per_gpu="auto",
                          zero_optimization={"stage": 2})], model="llama3-8b")
    assert (hf.parallel.cp, hf.parallel.dp, hf.batch.global_batch_size) == (2, 4, 8)


def test_hf_trainer_ignores_the_pipeline_section(tmp_path: Path) -> None:
    path = _ds(tmp_path, train_micro_batch_size_per_gpu="auto", pipeline={"stages": 2, "activation_checkpoint_interval": 1},
               zero_optimization={"stage": 1})
    cfg = script([*HF, path], model="llama2-7b")
    assert (cfg.parallel.pp, cfg.parallel.dp, cfg.recompute.granularity) == (1, 8, "none")
    assert any("PipelineModule" in w for w in cfg.warnings)


def test_megatron_deepspeed_num_experts_list_and_ulysses_with_sequence_parallel(tmp_path: Path) -> None:
    path = _ds(tmp_path, train_batch_size=64, zero_optimization={"stage": 1})
    run = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *MEGATRON, "--deepspeed_config", path]
    with pytest.raises(ConfigError, match="12 MoE layers"):
        script([*run, "--num-experts", "8", "8", "8", "8"])
    cfg = script([*run, "--num-experts", *["8"] * 11, "4"])
    assert cfg.model.num_experts == 8 and any("per-layer expert counts differ" in w for w in cfg.warnings)
    with pytest.raises(ConfigError, match="not compatible with Megatron-LM's sequence parallel"):
        script([*run, "--ds-sequence-parallel-size", "2", "--sequence-parallel", "--tensor-model-parallel-size", "2"])
    assert script([*run, "--ds-sequence-parallel-size", "2", "--sequence-parallel"]).parallel.cp == 2


def test_hpz_groups_must_divide_the_world(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="8 is not divisible by 3"):
        script([*DS, _zero(tmp_path, stage=3, zero_hpz_partition_size=3)], model="llama3-8b")
    assert script([*DS, _zero(tmp_path, stage=2, zero_hpz_partition_size=3)], model="llama3-8b").optimizer.zero_stage == 2
    assert script([*DS, _zero(tmp_path, stage=3, zero_hpz_partition_size=16)], model="llama3-8b").optimizer.zero_stage == 3


def test_deepspeed_moe_refuses_zero3_in_explain_and_in_tune(tmp_path: Path) -> None:
    import numpy as np

    from llmperf_hook.tune.candidates import rule_masks

    run = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *MEGATRON, "--num-experts", "8", "--moe-expert-parallel-size", "4"]
    with pytest.raises(ConfigError, match="MoE not supported with Stage 3"):
        script([*run, "--deepspeed_config", _ds(tmp_path, train_batch_size=64, zero_optimization={"stage": 3})])
    cfg = script([*run, "--deepspeed_config", _ds(tmp_path, train_batch_size=64, zero_optimization={"stage": 1})])
    one = {k: np.array([v]) for k, v in dict(tp=1, pp=1, vpp=1, cp=1, sp=0, mbs=2, zero=3, ep=4, etp=1).items()}
    assert rule_masks(cfg, one)["DeepSpeed-MoE with ZeRO-3"][0]
    assert not rule_masks(cfg, {**one, "zero": np.array([2])})["DeepSpeed-MoE with ZeRO-3"][0]
    apart = {"stage": 2, "contiguous_gradients": False}
    with pytest.raises(ConfigError, match="Contiguous Gradients in ZeRO Stage 2 must be set to True for MoE"):
        script([*run, "--deepspeed_config", _ds(tmp_path, train_batch_size=64, zero_optimization=apart)])
    offloaded = {**apart, "offload_optimizer": {"device": "cpu"}}
    assert script([*run, "--deepspeed_config", _ds(tmp_path, train_batch_size=64, zero_optimization=offloaded)])
    one_apart = script([*run, "--deepspeed_config", _ds(tmp_path, train_batch_size=64,
                                                         zero_optimization={**apart, "stage": 1})])
    masks = rule_masks(one_apart, {**one, "zero": np.array([2])})
    assert masks["DeepSpeed-MoE ZeRO-2 without contiguous_gradients"][0]
    assert not rule_masks(one_apart, {**one, "zero": np.array([1])})["DeepSpeed-MoE ZeRO-2 without contiguous_gradients"][0]


def test_offload_rules_once_the_stage_is_known(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Partial offloading only supported for ZeRO Stage 3"):
        script([*DS, _zero(tmp_path, stage=2, offload_optimizer={"device": "cpu", "ratio": 0.5})], model="llama2-7b")
    partial = script([*DS, _zero(tmp_path, stage=3, offload_optimizer={"device": "cpu", "ratio": 0.5})], model="llama2-7b")
    assert partial.optimizer.offload_optimizer_ratio == 0.5
    with pytest.raises(ConfigError, match="without nvme_path"):
        script([*DS, _zero(tmp_path, stage=3, offload_param={"device": "nvme"})], model="llama2-7b")
    stage2 = script([*DS, _zero(tmp_path, stage=2, offload_optimizer={"device": "nvme"})], model="llama2-7b")
    assert stage2.optimizer.offload_optimizer == "cpu"  # stage_1_and_2.py offloads to CPU memory


def test_offload_values_pydantic_reads_laxly(tmp_path: Path) -> None:
    """DeepSpeedConfigModel drops an "auto" offload section (no offload), and OffloadOptimizerConfig.ratio is a lax
    float: "0.5" is 0.5, so the partial-offload rules see it."""
    cfg = script([*DS, _zero(tmp_path, stage=3, offload_param="auto", offload_optimizer="auto")], model="llama2-7b")
    assert (cfg.optimizer.offload_optimizer, cfg.optimizer.offload_param) == ("none", "none")
    partial = script([*DS, _zero(tmp_path, stage=3, offload_optimizer={"device": "cpu", "ratio": "0.5"})], model="llama2-7b")
    assert partial.optimizer.offload_optimizer_ratio == 0.5
    with pytest.raises(ConfigError, match="Partial offloading only supported for ZeRO Stage 3"):
        script([*DS, _zero(tmp_path, stage=2, offload_optimizer={"device": "cpu", "ratio": "0.5"})], model="llama2-7b")
    with pytest.raises(ConfigError, match="ratio is 'half'.*0.0 to 1.0"):
        script([*DS, _zero(tmp_path, stage=3, offload_optimizer={"device": "cpu", "ratio": "half"})], model="llama2-7b")


def test_tune_searches_only_the_stages_the_ds_config_allows(tmp_path: Path) -> None:
    from llmperf_hook.tune.ds_config_rewrite import zero_stages_deepspeed_accepts

    def stages(**extra: Any) -> tuple[int, ...] | None:
        return zero_stages_deepspeed_accepts([*DS, _ds(tmp_path, **extra)], (0, 1, 2, 3))

    assert stages(zero_optimization={"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}) == (3,)
    assert stages(zero_optimization={"stage": 1}, data_types={"grad_accum_dtype": "fp32"}) == (1, 2, 3)
    assert stages(zero_optimization={"stage": 2, "offload_optimizer": {"device": "nvme"}}) == (0, 1, 2)
    assert zero_stages_deepspeed_accepts(["torchrun", "pretrain_gpt.py"], (0, 1)) is None


def test_auto_in_the_zero_section(tmp_path: Path) -> None:
    """DeepSpeedConfigModel drops "auto" values (plain DeepSpeed: defaults, stage 0); the HF Trainer's
    DeepSpeedPlugin(hf_ds_config=...) fills stage 2 (ACCELERATE_DEEPSPEED_ZERO_STAGE) and needs the section."""
    zero = {"stage": "auto", "overlap_comm": "auto", "contiguous_gradients": "auto",
            "offload_optimizer": {"device": "auto"}}
    plain = script([*DS, _ds(tmp_path, zero_optimization=zero)], model="llama2-7b")
    assert (plain.optimizer.zero_stage, plain.optimizer.offload_optimizer) == (0, "none")
    assert any("ZeRO is off" in w for w in plain.warnings)
    hf_path = _ds(tmp_path, zero_optimization=zero, train_micro_batch_size_per_gpu="auto")
    assert script([*HF, hf_path], model="llama2-7b").optimizer.zero_stage == 2
    accelerate = script(["accelerate", "launch", "--use_deepspeed", "--deepspeed_config_file", hf_path, "--num_processes",
                         "8", "train.py", "--per_device_train_batch_size", "2", "--bf16"], model="llama2-7b")
    assert accelerate.optimizer.zero_stage == 2
    with pytest.raises(ConfigError, match="Please specify the ZeRO optimization config"):
        script([*HF, _ds(tmp_path, train_micro_batch_size_per_gpu="auto")], model="llama2-7b")


def test_step_instrumentation_warns(tmp_path: Path) -> None:
    timed = script([*DS, _ds(tmp_path, wall_clock_breakdown=True, steps_per_print=1)], model="llama2-7b")
    assert any("wall_clock_breakdown accepted, not modelled" in w for w in timed.warnings)
    profiled = script([*DS, _ds(tmp_path, flops_profiler={"enabled": True, "profile_step": 5})], model="llama2-7b")
    assert sum("flops_profiler" in w or "wall_clock" in w for w in profiled.warnings) == 1
    assert not any("wall_clock" in w for w in script([*DS, _ds(tmp_path, wall_clock_breakdown=False)], model="llama2-7b").warnings)


def test_pipeline_engine_takes_the_ds_config_checkpoint_interval(tmp_path: Path) -> None:
    """pipe/engine.py: pipeline.activation_checkpoint_interval > 0 replaces GPTModelPipe's interval, so the
    Megatron-DeepSpeed pipeline engine recomputes even without --checkpoint-activations; --no-pipeline-parallel
    runs no PipelineEngine."""
    path = _ds(tmp_path, train_batch_size=64, zero_optimization={"stage": 1}, pipeline={"activation_checkpoint_interval": 2})
    run = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *[w for w in MEGATRON if w != "--no-pipeline-parallel"],
           "--deepspeed_config", path]
    cfg = script([*run, "--pipeline-model-parallel-size", "2"])
    assert (cfg.recompute.granularity, cfg.recompute.num_layers) == ("full", 2)
    assert script([*run, "--no-pipeline-parallel"]).recompute.granularity == "none"


def test_auto_bucket_sizes_only_the_trainer_fills(tmp_path: Path) -> None:
    zero = {"stage": 3, "reduce_bucket_size": "auto", "allgather_bucket_size": "auto",
            "stage3_prefetch_bucket_size": "auto", "stage3_max_live_parameters": "auto"}
    plain = script([*DS, _ds(tmp_path, zero_optimization=zero)], model="llama2-7b").optimizer
    assert (plain.grad_bucket_size_elems, plain.stage3_prefetch_bucket_size_elems) == (500_000_000, 50_000_000)
    hf = script([*HF, _ds(tmp_path, zero_optimization=zero, train_micro_batch_size_per_gpu="auto")], model="llama2-7b").optimizer
    assert (hf.grad_bucket_size_elems, hf.stage3_prefetch_bucket_size_elems) == (4096 * 4096, int(0.9 * 4096 * 4096))
    assert plain.allgather_bucket_size_elems == hf.allgather_bucket_size_elems == 500_000_000


def test_megatron_deepspeed_checkpointing_flags_warn_and_unset_config_variable(tmp_path: Path) -> None:
    from llmperf_hook.errors import UsageError

    path = _ds(tmp_path, train_batch_size=64, zero_optimization={"stage": 1})
    run = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *MEGATRON, "--deepspeed_config", path, "--checkpoint-activations",
           "--partition-activations", "--checkpoint-in-cpu"]
    # deepspeed.checkpointing not configured: the flags change nothing, which the one warning says
    assert [w for w in script(run).warnings if "--partition-activations" in w] == [
        "--partition-activations, --checkpoint-in-cpu: no effect without --deepspeed and --deepspeed-activation-checkpointing "
        "(Megatron-DeepSpeed passes them to deepspeed.checkpointing.configure only under both)"]
    warned = script([*run, "--deepspeed-activation-checkpointing"]).warnings
    assert not any("--partition-activations" in w or "--checkpoint-in-cpu" in w for w in warned)  # now priced
    cfg = script([*run, "--deepspeed-activation-checkpointing"])
    assert cfg.recompute.partition_activations and cfg.recompute.checkpoint_in_cpu
    with pytest.raises(UsageError, match="unexpanded shell variable"):
        script(["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *MEGATRON, "--deepspeed_config", "$DS_CONFIG"])


def test_checkpointing_flags_are_not_priced_without_deepspeed(tmp_path: Path) -> None:
    """initialize.py configures deepspeed.checkpointing only `if args.deepspeed and args.deepspeed_activation_checkpointing`:
    without --deepspeed the flags warn 'no effect' and must not be priced either."""
    argv = [a for a in MEGATRON if a != "--deepspeed"]
    run = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *argv, "--checkpoint-activations",
           "--deepspeed-activation-checkpointing", "--partition-activations", "--checkpoint-in-cpu"]
    cfg = script(run)
    assert not (cfg.recompute.partition_activations or cfg.recompute.checkpoint_in_cpu)
    assert any(w.startswith("--partition-activations, --checkpoint-in-cpu: no effect without --deepspeed") for w in cfg.warnings)

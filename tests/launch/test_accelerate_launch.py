"""`accelerate launch` (accelerate/commands/launch.py): sizing from its options or config file, and the DeepSpeed
plugin settings it exports to the script (read by frameworks/accelerate_plugin.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError, UsageError
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.launch.parse import parse_launch

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
         "num_attention_heads": 16, "num_key_value_heads": 4, "num_hidden_layers": 8, "vocab_size": 32000,
         "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps(LLAMA))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _script(*extra: str) -> list[str]:
    return ["run_clm.py", "--model_name_or_path", "llama", "--per_device_train_batch_size", "2",
            "--block_size", "2048", *extra]


@pytest.mark.parametrize("head", [["accelerate", "launch"], ["accelerate-launch"],
                                  ["python", "-m", "accelerate.commands.launch"]])
def test_num_processes_is_the_total_over_machines(head: list[str]) -> None:
    job = parse_launch([*head, "--num_processes", "16", "--num-machines", "2", "--machine_rank", "0", *_script()], {})
    assert (job.launcher, job.world_size, job.nnodes, job.nproc_per_node) == ("accelerate", 16, 2, 8)
    assert job.script == "run_clm.py" and job.script_args[:2] == ("--model_name_or_path", "llama")


def test_config_file_fills_what_the_command_leaves(workdir: Path) -> None:
    (workdir / "acc.yaml").write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n"
                                      "num_machines: 4\nnum_processes: 32\nmixed_precision: bf16\n"
                                      "deepspeed_config:\n  zero_stage: 3\n  gradient_accumulation_steps: 1\n")
    job = parse_launch(["accelerate", "launch", "--config_file", "acc.yaml", *_script()], {})
    assert (job.world_size, job.nnodes, job.nproc_per_node) == (32, 4, 8)
    assert job.env["ACCELERATE_USE_DEEPSPEED"] == "true" and job.env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3"
    job = parse_launch(["accelerate", "launch", "--config_file", "acc.yaml", "--num_processes", "8", "--num_machines",
                        "1", "--multi_gpu", *_script()], {})
    assert (job.world_size, job.nnodes) == (8, 1) and "ACCELERATE_USE_DEEPSPEED" not in job.env  # the command wins


def test_default_config_file_under_hf_home(workdir: Path) -> None:
    (workdir / "hf" / "accelerate").mkdir(parents=True)
    (workdir / "hf" / "accelerate" / "default_config.yaml").write_text("distributed_type: MULTI_GPU\nnum_processes: 4\n")
    assert parse_launch(["accelerate", "launch", *_script()], {"HF_HOME": str(workdir / "hf")}).world_size == 4


def test_default_config_file_under_xdg_cache_home(workdir: Path) -> None:
    """accelerate config_args.py: HF_HOME defaults to $XDG_CACHE_HOME/huggingface, and HF_HOME wins over it."""
    (workdir / "xdg" / "huggingface" / "accelerate").mkdir(parents=True)
    default = workdir / "xdg" / "huggingface" / "accelerate" / "default_config.yaml"
    default.write_text("distributed_type: MULTI_GPU\nnum_processes: 4\n")
    env = {"XDG_CACHE_HOME": str(workdir / "xdg"), "HOME": str(workdir / "home")}
    assert parse_launch(["accelerate", "launch", *_script()], env).world_size == 4
    with pytest.raises(UsageError, match="--nproc-per-node"):
        parse_launch(["accelerate", "launch", *_script()], {**env, "HF_HOME": str(workdir / "none")})


def test_without_a_process_count_it_is_every_gpu_of_the_machine(workdir: Path) -> None:
    with pytest.raises(UsageError, match="--nproc-per-node"):
        parse_launch(["accelerate", "launch", *_script()], {"HF_HOME": str(workdir / "none")})
    job = parse_launch(["accelerate", "launch", *_script()], {"HF_HOME": str(workdir / "none")}, cluster_gpus_per_node=8)
    assert job.world_size == 8


@pytest.mark.parametrize("argv, message", [
    (["accelerate", "launch", "--num_processes", "6", "--num_machines", "4"], "does not divide"),
    (["accelerate", "launch", "--num_processes", "8"], "names no training script"),
    (["accelerate", "launch", "--config_file", "missing.yaml"], "no such file"),
    (["accelerate", "launch", "--use_deepspeed", "--use_fsdp", "--num_processes", "8"], "only one of"),
    (["accelerate", "launch", "--multi_gpu", "--num_processes", "1"], "at least 2 processes"),
])
def test_bad_launches_exit_2(workdir: Path, argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_launch(argv + (["x.py"] if "names no" not in message else []), {})


def test_deepspeed_plugin_without_a_file_is_zero_2_by_default(workdir: Path) -> None:
    base = ["accelerate", "launch", "--num_processes", "8", "--use_deepspeed", "--mixed_precision", "bf16"]
    _, cfg = resolve_job([*base, *_script("--bf16")], {})
    assert (cfg.framework, cfg.optimizer.zero_stage, cfg.precision) == ("hf-deepspeed", 2, "bf16")
    assert cfg.batch.global_batch_size == 16  # HF auto: 8 ranks x micro 2 x accumulation 1
    _, cfg = resolve_job([*base, "--zero_stage", "3", "--offload_optimizer_device", "cpu", *_script("--bf16")], {})
    assert (cfg.optimizer.zero_stage, cfg.optimizer.offload_optimizer) == (3, "cpu")
    with pytest.raises(ConfigError, match="bf16.enabled=True vs hf --bf16 False"):  # Trainer's fill_match refuses
        resolve_job([*base, *_script()], {})
    plain = ["accelerate", "launch", "--num_processes", "8", "--use_deepspeed"]  # the Trainer's --bf16 decides
    assert resolve_job([*plain, *_script("--bf16")], {})[1].precision == "bf16"
    assert resolve_job([*plain, *_script()], {})[1].precision == "fp32"


def test_deepspeed_config_file_wins_over_the_plugin_but_its_auto_values_are_filled(workdir: Path) -> None:
    (workdir / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto",
                                                 "zero_optimization": {"stage": "auto"}, "bf16": {"enabled": "auto"}}))
    argv = ["accelerate", "launch", "--num_processes", "8", "--use_deepspeed", "--deepspeed_config_file", "ds.json",
            "--zero_stage", "3", *_script("--bf16")]
    _, cfg = resolve_job(argv, {})
    assert (cfg.optimizer.zero_stage, cfg.precision) == (3, "bf16")
    (workdir / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 1}}))
    assert resolve_job(argv, {})[1].optimizer.zero_stage == 1


def test_deepspeed_config_file_without_precision_takes_the_accelerator_mixed_precision(workdir: Path) -> None:
    """AcceleratorState calls DeepSpeedPlugin.set_mixed_precision with or without a config file: a file with no
    fp16/bf16 section gets the launcher's --mixed_precision, else the Trainer's --bf16 / --fp16 decides."""
    (workdir / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}))
    base = ["accelerate", "launch", "--num_processes", "8", "--use_deepspeed", "--deepspeed_config_file", "ds.json"]
    assert resolve_job([*base, "--mixed_precision", "bf16", *_script("--bf16")], {})[1].precision == "bf16"
    assert resolve_job([*base, *_script("--bf16")], {})[1].precision == "bf16"
    assert resolve_job([*base, *_script()], {})[1].precision == "fp32"
    with pytest.raises(ConfigError, match="bf16.enabled=True vs hf --bf16 False"):  # Trainer's fill_match refuses
        resolve_job([*base, "--mixed_precision", "bf16", *_script()], {})


def test_tune_apply_rewrites_the_plugin_and_the_trainer_apart(workdir: Path) -> None:
    from llmperf_hook.tune.apply import plan_tuned_command
    from llmperf_hook.tune.candidate import apply_candidate, candidate_of

    argv = ["accelerate", "launch", "--num_processes", "8", "--use_deepspeed", "--zero_stage", "2",
            "--gradient_accumulation_steps", "2", *_script("--bf16", "--gradient_accumulation_steps", "2")]
    _, cfg = resolve_job(argv, {})
    new = dataclasses.replace(candidate_of(cfg), zero_stage=3, micro_batch_size=1)
    plan = plan_tuned_command(argv, cfg, new, apply_candidate(cfg, new), workdir)
    out = list(plan.argv)
    script = out.index("run_clm.py")
    assert out[:script] == ["accelerate", "launch", "--num_processes", "8", "--use_deepspeed", "--zero_stage", "3",
                            "--gradient_accumulation_steps", "4"]
    assert out[script + 1:] == ["--model_name_or_path", "llama", "--per_device_train_batch_size", "1", "--block_size",
                                "2048", "--bf16", "--gradient_accumulation_steps", "4"]
    _, tuned = resolve_job(out, {})
    assert (tuned.optimizer.zero_stage, tuned.batch.micro_batch_size, tuned.batch.global_batch_size) == (3, 1, 32)
    # with a ds_config file: a tuned copy beside it, the user's file untouched
    (workdir / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}))
    argv = ["accelerate", "launch", "--num_processes", "8", "--use_deepspeed", "--deepspeed_config_file", "ds.json", *_script("--bf16")]
    _, cfg = resolve_job(argv, {})
    plan = plan_tuned_command(argv, cfg, new, apply_candidate(cfg, new), workdir)
    assert "ds.llmperf-tuned.json" in plan.argv and json.loads(next(iter(plan.new_files.values())))["zero_optimization"]["stage"] == 3
    assert json.loads((workdir / "ds.json").read_text())["zero_optimization"]["stage"] == 2


@pytest.mark.parametrize("options, stage, offload, recompute", [
    (["--use_fsdp"], 3, "none", "none"),
    (["--use_fsdp", "--fsdp_sharding_strategy", "SHARD_GRAD_OP"], 2, "none", "none"),
    (["--use-fsdp", "--fsdp-version", "2", "--fsdp-reshard-after-forward", "false"], 2, "none", "none"),
    (["--use_fsdp", "--fsdp_offload_params", "true", "--fsdp_activation_checkpointing", "true"], 3, "cpu", "full"),
    (["--use_fsdp", "--fsdp_sharding_strategy", "NO_SHARD"], 0, "none", "none"),
])
def test_accelerate_fsdp_is_priced_as_the_zero_stage_it_shards(workdir: Path, options: list[str], stage: int,
                                                                offload: str, recompute: str) -> None:
    _, cfg = resolve_job(["accelerate", "launch", "--num_processes", "8", *options, *_script("--bf16")], {})
    assert (cfg.optimizer.zero_stage, cfg.optimizer.offload_optimizer, cfg.recompute.granularity) == (stage, offload, recompute)


def test_trainer_fsdp_flag(workdir: Path) -> None:
    run = ["torchrun", "--nproc-per-node", "8", *_script("--bf16")]
    assert resolve_job([*run, "--fsdp", "full_shard auto_wrap"], {})[1].optimizer.zero_stage == 3
    assert resolve_job([*run, "--fsdp", "shard_grad_op offload"], {})[1].optimizer.offload_optimizer == "cpu"
    hybrid = resolve_job([*run, "--fsdp", "hybrid_shard"], {})[1]
    assert hybrid.optimizer.zero_stage == 3 and any("hybrid_shard" in w for w in hybrid.warnings)
    assert resolve_job(run, {})[1].optimizer.zero_stage == 0
    with pytest.raises(ConfigError, match="not an FSDP option"):
        resolve_job([*run, "--fsdp", "fullshard"], {})

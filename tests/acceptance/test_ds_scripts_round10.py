"""Issues 2, 3 through the real CLI with DeepSpeed launch lines: DeepSpeedExamples' autotuning scripts
(`deepspeed --autotuning run ... run_clm.py --deepspeed ds_config_fp16_tune.json`, whose ds_config has no
zero_optimization section because the autotuner's experiments write one), DeepSpeed-Chat's BLOOM SFT (a BLOOM
config.json names its width `n_embed`), and what DeepSpeed's own DeepSpeedConfig reads from each new case's
ds_config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.cli import run_cli

# DeepSpeedExamples@45b4b7156c training/autotuning/hf/dsconfigs/ds_config_fp16_tune.json, verbatim.
TUNE_CONFIG = {
    "train_micro_batch_size_per_gpu": "auto",
    "fp16": {"enabled": True},
    "autotuning": {"enabled": True, "overwrite": False, "fast": True,
                   "arg_mappings": {"train_micro_batch_size_per_gpu": "--per_device_train_batch_size",
                                    "gradient_accumulation_steps ": "--gradient_accumulation_steps"}},
}
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
        "n_layer": 12, "n_positions": 1024, "vocab_size": 50257}
RUN_CLM = ["run_clm.py", "--deepspeed", "ds_config_fp16_tune.json", "--model_name_or_path", "gpt2", "--do_train",
           "--fp16", "--per_device_train_batch_size", "1", "--output_dir", "out", "--block_size", "1024"]


def _explain(tmp_path: Path, capsys, launcher: list[str]) -> tuple[int, str, str]:
    (tmp_path / "ds_config_fp16_tune.json").write_text(json.dumps(TUNE_CONFIG))
    (tmp_path / "gpt2").mkdir(exist_ok=True)
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps(GPT2))
    return run_cli(["explain", "--format", "json", "--model", str(tmp_path / "gpt2" / "config.json"), "--",
                    *launcher, *RUN_CLM], capsys)


@pytest.mark.parametrize("mode,after", [("run", "then trains with the fastest"), ("tune", "exits without training")])
def test_autotuning_prices_the_template_at_the_autotuners_default_stage(mode: str, after: str, tmp_path: Path,
                                                                       capsys, monkeypatch) -> None:
    """The autotuner's experiments set zero_optimization {stage: the user's, else 0} (autotuner.py tune()), so the
    Trainer's 'Please specify the ZeRO optimization config' never fires; it exited 2 with that message."""
    monkeypatch.chdir(tmp_path)
    code, out, err = _explain(tmp_path, capsys, ["deepspeed", "--autotuning", mode, "--num_nodes=1", "--num_gpus=16"])
    assert code == 0, err
    data = json.loads(out)
    assert (data["world_size"], data["zero_stage"], data["micro_batch_size"], data["precision"]) == (16, 0, 1, "fp16")
    assert any(f"--autotuning {mode}" in w and after in w for w in data["warnings"]), data["warnings"]


def test_without_autotuning_the_trainer_still_refuses_a_config_without_zero(tmp_path: Path, capsys,
                                                                             monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = _explain(tmp_path, capsys, ["deepspeed", "--num_gpus=16"])
    assert code == 2 and "Please specify the ZeRO optimization config" in err and "Traceback" not in err


def test_an_autotuning_mode_deepspeed_does_not_offer_exits_2(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = _explain(tmp_path, capsys, ["deepspeed", "--autotuning", "fast", "--num_gpus=16"])
    assert code == 2 and "'fast' is not one of DeepSpeed's choices 'tune', 'run'" in err, err


def test_a_bloom_config_json_is_read_with_its_n_embed_width(tmp_path: Path, capsys, monkeypatch) -> None:
    """bigscience/bloom-1b1's config.json: n_embed 1536, n_layer 24 (DeepSpeed-Chat's run_chinese.sh); it exited 2
    'lacks num_hidden_layers/hidden_size/num_attention_heads'."""
    monkeypatch.chdir(tmp_path)
    bloom = {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "n_embed": 1536, "n_head": 16,
             "n_layer": 24, "vocab_size": 250880}
    (tmp_path / "bloom.json").write_text(json.dumps(bloom))
    code, out, err = run_cli(["explain", "--format", "json", "--model", "bloom.json", "--nproc-per-node", "8", "--",
                              "deepspeed", "main.py", "--model_name_or_path", "bigscience/bloom-1b1",
                              "--per_device_train_batch_size", "8", "--max_seq_len", "512", "--zero_stage", "2",
                              "--deepspeed"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert (data["hidden_size"], data["num_layers"], data["num_attention_heads"]) == (1536, 24, 16)
    assert (data["global_batch_size"], data["zero_stage"]) == (64, 2)


class _Mpu:
    """What DeepSpeedConfig asks a model-parallel unit for: the data-parallel size."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


def _round10_cases() -> list[dict]:
    from tests.frameworks.real_scripts.replay import load_cases

    return [c for c in load_cases() if c.get("round") == 10 and c["expect"].get("ds_config_checked")]


@pytest.mark.parametrize("case", _round10_cases(), ids=lambda c: c["name"])
def test_deepspeed_reads_each_new_cases_ds_config_as_llmperf_does(case: dict, tmp_path: Path, monkeypatch) -> None:
    """DeepSpeed 0.19's DeepSpeedConfig on the case's own ds_config (its "auto" values filled as the Trainer would,
    from the expectations) at llmperf's data-parallel size: batch triad, ZeRO stage, offload devices, precision."""
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    deepspeed_config = pytest.importorskip("deepspeed.runtime.config")
    monkeypatch.setattr(deepspeed_config.dist, "get_rank", lambda *a, **k: 0)  # no process group on a test host
    from tests.frameworks.real_scripts.replay import replay

    expect = case["expect"]
    result = replay(case, "explain", tmp_path)
    assert result.exit_code == 0, result.output
    raw = json.loads(case["files"][expect["ds_config_checked"]])
    for key, value in (("train_micro_batch_size_per_gpu", expect["micro_batch_size"]),
                       ("gradient_accumulation_steps", expect["num_microbatches"]),
                       ("train_batch_size", expect["global_batch_size"])):
        if raw.get(key) == "auto":
            raw[key] = value
    raw.pop("autotuning", None)
    ds = deepspeed_config.DeepSpeedConfig(raw, mpu=_Mpu(result.data["dp"]))
    device = ds.zero_config.offload_optimizer.device if ds.zero_config.offload_optimizer else "none"
    offload = str(getattr(device, "value", device))
    precision = "bf16" if ds.bfloat16_config.enabled else "fp16" if ds.float16_config.enabled else "fp32"
    assert (ds.train_batch_size, ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps) == (
        result.data["global_batch_size"], result.data["micro_batch_size"], result.data["num_microbatches"])
    assert (ds.zero_optimization_stage, offload, precision) == (
        result.data["zero_stage"], result.data["offload_optimizer"], result.data["precision"])


@pytest.mark.parametrize("extra,warned", [
    (["--lora_dim", "128", "--lora_module_name", "layers."], "--lora_dim 128: the LoRA adapters' matmuls are not priced"),
    (["--num_padding_at_beginning", "1"], "reward model (--num_padding_at_beginning)"),
    ([], None),
])
def test_deepspeed_chat_lora_and_reward_model_are_warned(extra: list[str], warned: str | None, tmp_path: Path,
                                                         capsys, monkeypatch) -> None:
    """DeepSpeed-Chat run_llama2_7b_lora.sh / step 2 run_350m.sh were priced as plain fine-tuning without a word."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama2-7b", "--nproc-per-node", "8", "--",
                              "deepspeed", "main.py", "--model_name_or_path", "meta-llama/Llama-2-7b-hf",
                              "--per_device_train_batch_size", "4", "--zero_stage", "3", "--deepspeed", *extra], capsys)
    assert code == 0, err
    chat = [w for w in json.loads(out)["warnings"] if w.startswith("DeepSpeed-Chat")]
    assert chat == ([] if warned is None else [w for w in chat if warned in w]) and len(chat) == (warned is not None)


def test_deepspeed_chat_step3_rlhf_exits_2_naming_it(tmp_path: Path, capsys, monkeypatch) -> None:
    """step3 run_1.3b.sh given llmperf --model was priced as one plain torch model's step (no ZeRO, no generation)."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["predict", "--model", "llama2-7b", "--nproc-per-node", "8", "--", "deepspeed", "main.py",
                              "--actor_model_name_or_path", "a", "--critic_model_name_or_path", "c",
                              "--actor_zero_stage", "2", "--critic_zero_stage", "2", "--deepspeed"], capsys)
    assert code == 2 and "DeepSpeed-Chat step 3 (RLHF" in err and "Traceback" not in err, err


@pytest.mark.parametrize("bf16,stage,refused", [
    ({"bf16_optimizer_states": True}, 2, "requires bf16_master_weights_and_grads to be enabled"),
    ({"bf16_master_weights_and_grads": True}, 0, "Bf16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, or 3"),
    ({"bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}, 3, None),
])
def test_16_bit_master_weights_follow_deepspeeds_asserts(bf16: dict, stage: int, refused: str | None, tmp_path: Path,
                                                         capsys, monkeypatch) -> None:
    """DeepSpeedExamples' bf16_master_weight/configs/bf16_full.json keys were accepted silently; each refusal is the
    assert DeepSpeedConfig itself raises on the same config."""
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    monkeypatch.chdir(tmp_path)
    raw = {"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": True, **bf16}, "zero_optimization": {"stage": stage}}
    (tmp_path / "ds.json").write_text(json.dumps(raw))
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama2-7b", "--", "deepspeed", "--num_gpus",
                              "2", "train.py", "--deepspeed_config", "ds.json"], capsys)
    deepspeed_config = pytest.importorskip("deepspeed.runtime.config")
    monkeypatch.setattr(deepspeed_config.dist, "get_rank", lambda *a, **k: 0)
    if refused:
        assert code == 2 and refused in err and "Traceback" not in err, err
        with pytest.raises(AssertionError, match=refused.split(" is ")[0]):
            deepspeed_config.DeepSpeedConfig(raw, mpu=_Mpu(2))
        return
    assert code == 0, err
    assert any("16-bit master weights" in w for w in json.loads(out)["warnings"])
    deepspeed_config.DeepSpeedConfig(raw, mpu=_Mpu(2))


ACC_YAML = """compute_environment: LOCAL_MACHINE
deepspeed_config:
 deepspeed_config_file: ds.json
{extra}distributed_type: DEEPSPEED
{mixed}num_machines: 1
num_processes: 2
"""


@pytest.mark.parametrize("extra,mixed,command_mp,refused", [
    ("", "mixed_precision: fp16\n", [], "sets mixed_precision beside deepspeed_config_file"),
    (" zero_stage: 3\n", "", [], "sets zero_stage beside deepspeed_config_file"),
    ("", "", ["--mixed_precision", "fp16"], None),
    (" zero3_init_flag: true\n", "", [], None),
])
def test_accelerate_config_fields_beside_a_deepspeed_config_file(extra: str, mixed: str, command_mp: list[str],
                                                                 refused: str | None, tmp_path: Path, capsys,
                                                                 monkeypatch) -> None:
    """DeepSpeedPlugin._deepspeed_config_checks: a config-file field the ds_config overrides is refused (the usage
    guide's own ZeRO-2 example config has mixed_precision: fp16); the command's --mixed_precision is not."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "acc.yaml").write_text(ACC_YAML.format(extra=extra, mixed=mixed))
    (tmp_path / "ds.json").write_text(json.dumps({"fp16": {"enabled": True}, "zero_optimization": {"stage": 2},
                                                  "train_micro_batch_size_per_gpu": "auto",
                                                  "train_batch_size": "auto"}))
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama2-7b", "--", "accelerate", "launch",
                              "--config_file", "acc.yaml", *command_mp, "run_clm_no_trainer.py",
                              "--per_device_train_batch_size", "4", "--block_size", "1024"], capsys)
    if refused:
        assert code == 2 and refused in err and "Traceback" not in err, err
        return
    assert code == 0, err
    data = json.loads(out)
    assert (data["world_size"], data["micro_batch_size"], data["global_batch_size"], data["precision"]) == (2, 4, 8, "fp16")


@pytest.mark.parametrize("script,args,trainer", [
    ("examples/by_feature/deepspeed_with_config_support.py", [], False),
    ("run_clm_no_trainer.py", [], False),
    ("my_train.py", ["--with_tracking"], False),
    ("run_clm.py", [], True),
])
def test_only_the_trainer_checks_ds_values_against_its_arguments(script: str, args: list[str], trainer: bool,
                                                                 tmp_path: Path, capsys, monkeypatch) -> None:
    """Accelerator (no Trainer) fills "auto" with must_match=False: an explicit fp16 with no --fp16 is fine; the
    Trainer's fill_match refuses it. The usage guide's deepspeed_with_config_support.py was refused as a Trainer."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "acc.yaml").write_text(ACC_YAML.format(extra="", mixed=""))
    (tmp_path / "ds.json").write_text(json.dumps({"fp16": {"enabled": True}, "zero_optimization": {"stage": 2},
                                                  "train_micro_batch_size_per_gpu": "auto"}))
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama2-7b", "--", "accelerate", "launch",
                              "--config_file", "acc.yaml", script, "--per_device_train_batch_size", "4",
                              "--block_size", "1024", *args], capsys)
    if trainer:
        assert code == 2 and "mismatches the Hugging Face Trainer's arguments" in err, err
    else:
        assert code == 0 and json.loads(out)["precision"] == "fp16", err


@pytest.mark.parametrize("launch,extra,expect", [
    (["--module", "openrlhf.cli.train_sft"], ["--train_batch_size", "256", "--micro_train_batch_size", "2"],
     {"micro_batch_size": 2, "global_batch_size": 256, "num_microbatches": 16, "zero_stage": 2, "precision": "bf16",
      "offload_optimizer": "none", "seq_length": 2048}),
    (["openrlhf/cli/train_sft.py"], ["--zero_stage", "3", "--adam_offload", "--param_dtype", "fp16", "--max_len", "4096"],
     {"micro_batch_size": 8, "global_batch_size": 128, "num_microbatches": 2, "zero_stage": 3, "precision": "fp16",
      "offload_optimizer": "cpu", "seq_length": 4096}),
])
def test_openrlhf_trainers_read_the_ds_config_their_strategy_builds(launch: list[str], extra: list[str], expect: dict,
                                                                  tmp_path: Path, capsys, monkeypatch) -> None:
    """OpenRLHF's train_sft_llama.sh was priced as plain torch DDP (micro 1, ZeRO 0, the preset's sequence); the
    ds_config DeepspeedStrategy builds is read by DeepSpeedConfig at the same DP with the same triad."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama3-8b", "--nproc-per-node", "8", "--",
                              "deepspeed", *launch, "--pretrain", "meta-llama/Meta-Llama-3-8B",
                              "--gradient_checkpointing", *extra], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert {k: data[k] for k in expect} == expect and data["recompute"] == "full"
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    deepspeed_config = pytest.importorskip("deepspeed.runtime.config")
    monkeypatch.setattr(deepspeed_config.dist, "get_rank", lambda *a, **k: 0)
    from llmperf_hook.frameworks.flags import parse_flags
    from llmperf_hook.frameworks.openrlhf import openrlhf_ds_config
    from llmperf_hook.frameworks.script_flags import SCRIPT_FLAGS

    ds = deepspeed_config.DeepSpeedConfig(openrlhf_ds_config(parse_flags(extra, SCRIPT_FLAGS)), mpu=_Mpu(data["dp"]))
    assert (ds.train_batch_size, ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps,
            ds.zero_optimization_stage) == (data["global_batch_size"], data["micro_batch_size"],
                                            data["num_microbatches"], data["zero_stage"])


@pytest.mark.parametrize("trainer", ["train_ppo", "train_ppo_ray", "train_grpo"])
def test_openrlhf_rl_trainers_exit_2(trainer: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["predict", "--model", "llama3-8b", "--nproc-per-node", "8", "--", "deepspeed", "--module",
                              f"openrlhf.cli.{trainer}", "--pretrain", "x", "--zero_stage", "2"], capsys)
    assert code == 2 and f"is OpenRLHF's {trainer} (reinforcement learning" in err and "Traceback" not in err, err


@pytest.mark.parametrize("micro,stage,recompute", [(8, 1, True), (4, 3, False), (2, 2, True)])
def test_an_openrlhf_command_rewritten_for_a_layout_explains_to_it(micro: int, stage: int, recompute: bool,
                                                                  tmp_path: Path, capsys, monkeypatch) -> None:
    """rewrite_openrlhf_argv (for tune --apply, whose rewrite knows DeepSpeed-Chat's flags but not OpenRLHF's)."""
    from llmperf_hook.frameworks.openrlhf import rewrite_openrlhf_argv

    monkeypatch.chdir(tmp_path)
    argv = ["deepspeed", "--module", "openrlhf.cli.train_sft", "--train_batch_size", "256", "--micro_train_batch_size",
            "2", "--pretrain", "x", "--zero_stage", "2", "--gradient_checkpointing", "--max_len", "2048"]
    new = rewrite_openrlhf_argv(argv, micro, stage, recompute)
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama3-8b", "--nproc-per-node", "8", "--",
                              *new], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert (data["micro_batch_size"], data["zero_stage"], data["recompute"], data["global_batch_size"]) == (
        micro, stage, "full" if recompute else "none", 256)


def test_a_base64_ds_config_is_read_as_deepspeed_decodes_it(tmp_path: Path, capsys, monkeypatch) -> None:
    """DeepSpeedConfig takes a base64-encoded JSON string in place of a path; llmperf said 'does not exist'."""
    import base64

    monkeypatch.chdir(tmp_path)
    raw = {"train_batch_size": 32, "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}
    word = base64.urlsafe_b64encode(json.dumps(raw).encode()).decode()
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama2-7b", "--", "deepspeed", "--num_gpus",
                              "4", "train.py", "--deepspeed_config", word], capsys)
    assert code == 0, err
    data = json.loads(out)
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    deepspeed_config = pytest.importorskip("deepspeed.runtime.config")
    monkeypatch.setattr(deepspeed_config.dist, "get_rank", lambda *a, **k: 0)
    ds = deepspeed_config.DeepSpeedConfig(word, mpu=_Mpu(data["dp"]))
    assert (ds.train_micro_batch_size_per_gpu, ds.train_batch_size, ds.zero_optimization_stage) == (
        data["micro_batch_size"], data["global_batch_size"], data["zero_stage"]) == (8, 32, 2)


def test_a_json_string_is_a_trainer_config_but_not_a_deepspeed_one(tmp_path: Path, capsys, monkeypatch) -> None:
    """accelerate's HfDeepSpeedConfig (the Trainer's --deepspeed) json.loads a string; DeepSpeedConfig only
    base64-decodes it, so --deepspeed_config '{...}' exits 2 saying so."""
    monkeypatch.chdir(tmp_path)
    text = '{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 1}}'
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama2-7b", "--", "deepspeed", "--num_gpus",
                              "4", "run_clm.py", "--model_name_or_path", "x", "--deepspeed", text, "--block_size",
                              "1024"], capsys)
    assert code == 0 and json.loads(out)["zero_stage"] == 1, err
    code, out, err = run_cli(["explain", "--model", "llama2-7b", "--", "deepspeed", "--num_gpus", "4", "train.py",
                              "--deepspeed_config", '{"train_batch_size": 32}'], capsys)
    assert code == 2 and "not a JSON string" in err and "Traceback" not in err, err

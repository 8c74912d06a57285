"""Acceptance round 17 (H204): DeepSpeed, Hugging Face Trainer / accelerate and Megatron-DeepSpeed users' launch
commands through `llmperf explain`, each checked against what the framework itself runs (its source cited per test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.graph.build import build_graph
from llmperf_hook.hardware.load import load_cluster
from tests.acceptance.cli import run_cli

NO_PRECISION = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                "zero_optimization": {"stage": 2}}
"""A ds_config with neither an fp16 nor a bf16 section, as transformers' and DeepSpeedExamples' ZeRO configs often are."""

ACCELERATE_TRAINER = ["accelerate", "launch", "--num_processes", "8", "--mixed_precision", "MIXED", "run_clm.py",
                      "--model_name_or_path", "meta-llama/Llama-2-7b-hf", "--do_train", "--output_dir", "out",
                      "--per_device_train_batch_size", "4", "--deepspeed", "ds.json"]
"""transformers' run_clm.py under `accelerate launch --mixed_precision MIXED`, the Trainer given --deepspeed ds.json."""


def _explain(folder: Path, config: dict, command: list[str], capsys, monkeypatch, model: str = "llama2-7b") -> tuple:
    monkeypatch.chdir(folder)
    (folder / "ds.json").write_text(json.dumps(config))
    code, out, err = run_cli(["explain", "--format", "json", *(["--model", model] if model else []), "--", *command],
                             capsys)
    return code, (json.loads(out) if code == 0 else None), err


def _accelerate_trainer(mixed: str, *flags: str) -> list[str]:
    return [mixed if word == "MIXED" else word for word in ACCELERATE_TRAINER] + list(flags)


@pytest.mark.parametrize(("mixed", "flags", "config", "precision"), [
    ("bf16", [], NO_PRECISION, "bf16"), ("fp16", [], NO_PRECISION, "fp16"), ("fp8", [], NO_PRECISION, "bf16"),
    ("no", [], NO_PRECISION, "fp32"), ("bf16", ["--fp16"], NO_PRECISION, "fp16"),
    ("bf16", [], {**NO_PRECISION, "bf16": {"enabled": "auto"}}, "fp32")])
def test_trainer_under_accelerate_mixed_precision(mixed: str, flags: list[str], config: dict, precision: str,
                                                  tmp_path: Path, capsys, monkeypatch) -> None:
    """TrainingArguments.__post_init__ keeps the launcher's ACCELERATE_MIXED_PRECISION unless --fp16 / --bf16 is given
    (transformers training_args.py: `mixed_precision_dtype = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")`,
    replaced only by self.fp16 / self.bf16), and AcceleratorState hands it to DeepSpeedPlugin.set_mixed_precision
    (accelerate 16cb6eb8 state.py; utils/dataclasses.py), which adds {"bf16": {"enabled": true}} (bf16 or fp8; fp16
    alike) to a config lacking that section, after the Trainer's fill_match has checked the file. A section already
    there ("auto") was filled by the Trainer from --bf16 (False) first: fp32. llmperf priced every case fp32."""
    code, got, err = _explain(tmp_path, config, _accelerate_trainer(mixed, *flags), capsys, monkeypatch)
    assert code == 0, err
    assert got["precision"] == precision
    if precision != "fp32" and not flags:
        assert "ACCELERATE_MIXED_PRECISION" in got["sources"]["precision"]
    assert any("FP8 GEMMs" in w for w in got["warnings"]) == (mixed == "fp8")  # accelerate's FP8 backends: not priced


def test_accelerate_mixed_precision_against_the_other_dtype_exits_2(tmp_path: Path, capsys, monkeypatch) -> None:
    """set_mixed_precision raises ValueError "`--mixed_precision` arg cannot be set to `bf16` when `fp16` is set in
    the DeepSpeed config file." (accelerate utils/dataclasses.py); llmperf refused it as 'enables both fp16 and bf16',
    a file the user never wrote."""
    command = ["accelerate", "launch", "--num_processes", "8", "--use_deepspeed", "--deepspeed_config_file", "ds.json",
               "--mixed_precision", "bf16", "nlp_example.py"]
    code, _, err = _explain(tmp_path, {**NO_PRECISION, "fp16": {"enabled": True}}, command, capsys, monkeypatch)
    assert code == 2 and "cannot be set to `bf16` when `fp16` is set" in err, err


def test_trainer_under_accelerate_mixed_precision_against_the_file_names_accelerates_error(
        tmp_path: Path, capsys, monkeypatch) -> None:
    """The same refusal under the Trainer's --deepspeed FILE: set_mixed_precision runs when Trainer.__init__ builds the
    Accelerator, before trainer_config_finalize raises the fill_match mismatches at train() (transformers
    integrations/deepspeed.py). llmperf named the Trainer's mismatch (R87)."""
    code, _, err = _explain(tmp_path, {**NO_PRECISION, "fp16": {"enabled": True}}, _accelerate_trainer("bf16"), capsys,
                            monkeypatch)
    assert code == 2 and "cannot be set to `bf16` when `fp16` is set" in err, err


MDS = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--tensor-model-parallel-size", "2",
       "--pipeline-model-parallel-size", "2", "--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads",
       "16", "--seq-length", "2048", "--max-position-embeddings", "2048", "--micro-batch-size", "4",
       "--global-batch-size", "256", "--tokenizer-type", "GPT2BPETokenizer", "--deepspeed", "--deepspeed_config",
       "ds.json", "--zero-stage", "1"]
"""Megatron-DeepSpeed's examples_deepspeed GPT-3 1.3B-style run (TP 2, PipelineEngine PP 2, ZeRO-1)."""


@pytest.mark.parametrize(("argv", "section", "precision"), [
    ("--fp16", "bf16", "bf16"), ("--bf16", "fp16", "fp16"), ("--bf16", "bf16", "bf16"), ("", "bf16", "bf16")])
def test_megatron_deepspeed_precision_is_the_ds_configs(argv: str, section: str, precision: str, tmp_path: Path,
                                                        capsys, monkeypatch) -> None:
    """Under --deepspeed Megatron-DeepSpeed's get_model returns the model before any Float16Module (megatron/
    training.py: `if args.deepspeed: return model`) and deepspeed.initialize's engine casts its parameters to the
    section the ds_config enables and builds that section's optimizer (deepspeed 0.19.8 runtime/engine.py
    _configure_distributed_model). llmperf priced --fp16 with a bf16 ds_config as fp16; now bf16, with a warning."""
    config = {"train_batch_size": 256, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 1},
              section: {"enabled": True}}
    code, got, err = _explain(tmp_path, config, MDS + ([argv] if argv else []), capsys, monkeypatch, model="")
    assert code == 0, err
    assert got["precision"] == precision
    assert any(f"{argv} (argv) but ds.json enables {section}" in w for w in got["warnings"]) == (
        bool(argv) and argv[2:] != section)


MEGATRON = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--tensor-model-parallel-size", "2",
            "--pipeline-model-parallel-size", "2", "--num-layers", "24", "--hidden-size", "2048",
            "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--micro-batch-size", "4", "--global-batch-size", "256", "--bf16", "--vocab-size", "50257",
            "--tokenizer-type", "NullTokenizer", "--mock-data"]


@pytest.mark.parametrize(("flags", "says"), [
    (["--overlap-p2p-communication"], "unrecognized arguments"), (["--no-overlap-p2p-communication"], None),
    (["--openai-gelu"], "Megatron-Core's MLP never reads it"), (["--onnx-safe", "False"], "--onnx-safe: accepted"),
    (["--openai-gelu", "--use-legacy-models", "--ckpt-format", "torch"], "legacy ParallelMLP runs its own GELU")])
def test_megatron_flags_core_does_not_run_are_warned(flags: list[str], says: str | None, capsys) -> None:
    """core_v0.16.1's arguments.py defines only --no-overlap-p2p-communication (the overlap is the default since
    4eeff55d1f, 2023-10; the old --overlap-p2p-communication is 'unrecognized'), and keeps --openai-gelu / --onnx-safe
    (type=bool: 'False' is True) for the legacy models only (legacy/model/transformer.py ParallelMLP): both were
    accepted in silence. Megatron-LM of 2023-05..10 and Megatron-DeepSpeed take the old spelling, so it warns."""
    code, out, err = run_cli(["explain", "--format", "json", "--", *MEGATRON, *flags], capsys)
    assert code == 0, err
    warned = [w for w in json.loads(out)["warnings"] if says and says in w]
    assert bool(warned) == bool(says), json.loads(out)["warnings"]


@pytest.mark.parametrize(("act", "variant"), [
    ("gelu", "none"), ("gelu_new", "tanh"), ("gelu_pytorch_tanh", "tanh"), ("gelu_fast", "tanh"),
    ("gelu_python_tanh", "tanh"), ("relu", None)])
def test_hf_config_activation_picks_the_gelu(act: str, variant: str | None, tmp_path: Path, capsys,
                                             monkeypatch) -> None:
    """transformers' ACT2FN (activations.py): "gelu" is GELUActivation, nn.functional.gelu's exact erf form;
    "gelu_new" / "gelu_fast" the tanh formula, "gelu_pytorch_tanh" F.gelu(approximate="tanh"). llmperf priced every
    Hugging Face model's GELU as the tanh one (GPT-NeoX's "gelu" too); a non-GELU activation is warned of."""
    (tmp_path / "neox").mkdir()
    (tmp_path / "neox" / "config.json").write_text(json.dumps({
        "model_type": "gpt_neox", "hidden_act": act, "hidden_size": 2048, "num_attention_heads": 16,
        "num_hidden_layers": 24, "intermediate_size": 8192, "max_position_embeddings": 2048, "vocab_size": 50304}))
    command = ["deepspeed", "--num_gpus", "8", "run_clm.py", "--model_name_or_path", "neox", "--do_train",
               "--output_dir", "out", "--per_device_train_batch_size", "4", "--deepspeed", "ds.json", "--bf16",
               "--block_size", "2048"]
    code, got, err = _explain(tmp_path, NO_PRECISION, command, capsys, monkeypatch, model="")
    assert code == 0, err
    assert got.get("gelu_approximate", "tanh") == (variant or "tanh")
    assert any(f"activation {act!r} is not modelled" in w for w in got["warnings"]) == (variant is None)
    if variant:
        assert f"activation {act!r}" in got["sources"]["gelu_approximate"]


AUTO_PRECISION = {**NO_PRECISION, "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}}
"""transformers' tests/deepspeed/ds_config_zero2.json precision sections: both "auto"."""


@pytest.mark.parametrize(("script", "mixed", "flags", "precision"), [
    ("run_clm_no_trainer.py", "bf16", [], "bf16"), ("run_clm_no_trainer.py", "no", [], "fp32"),
    ("run_clm.py", "no", ["--bf16"], "bf16"), ("run_clm.py", "bf16", ["--bf16"], "bf16"),
    ("run_clm.py", "bf16", [], None)])
def test_accelerate_config_file_auto_precision(script: str, mixed: str, flags: list[str], precision: str | None,
                                               tmp_path: Path, capsys, monkeypatch) -> None:
    """`accelerate launch --use_deepspeed --deepspeed_config_file` with "enabled": "auto" sections: the plugin is
    the first to fill them, DeepSpeedPlugin.set_mixed_precision's fill_match(must_match=False) writing
    `mixed == section` (accelerate utils/dataclasses.py), run by AcceleratorState for an Accelerator script and by
    TrainingArguments.__post_init__ for the Trainer with its own mixed precision (--fp16 / --bf16 over the launcher's,
    transformers training_args.py '5. Mixed Precision' / '12. DeepSpeed'); the Trainer's trainer_config_process then
    holds the filled value to its --bf16, so bf16 filled True without --bf16 stops it. llmperf priced the Accelerator
    script fp32 and the Trainer without --bf16 fp32."""
    command = ["accelerate", "launch", "--num_processes", "8", "--use_deepspeed", "--deepspeed_config_file", "ds.json",
               "--mixed_precision", mixed, script, "--per_device_train_batch_size", "4", "--block_size", "1024", *flags]
    code, got, err = _explain(tmp_path, AUTO_PRECISION, command, capsys, monkeypatch)
    if precision is None:
        assert code == 2 and "bf16.enabled=True vs hf --bf16 False" in err, err
    else:
        assert code == 0, err
        assert got["precision"] == precision


@pytest.mark.parametrize("launch", [["deepspeed", "--num_gpus", "8"], ["torchrun", "--nproc-per-node", "8"]])
def test_trainer_fp16_with_bf16_exits_2(launch: list[str], tmp_path: Path, capsys, monkeypatch) -> None:
    """TrainingArguments._validate_args (transformers training_args.py): 'At most one of fp16 and bf16 can be True, but
    not both'. llmperf priced `run_clm.py --fp16 --bf16` as bf16 (ds "auto" sections, or plain DDP)."""
    command = [*launch, "run_clm.py", "--model_name_or_path", "meta-llama/Llama-2-7b-hf", "--do_train", "--output_dir",
               "out", "--per_device_train_batch_size", "4", "--block_size", "1024", "--fp16", "--bf16",
               *(["--deepspeed", "ds.json"] if launch[0] == "deepspeed" else [])]
    code, _, err = _explain(tmp_path, AUTO_PRECISION, command, capsys, monkeypatch)
    assert code == 2 and "At most one of fp16 and bf16" in err, err


MOE = ["--num-experts", "8", "--moe-expert-parallel-size", "2"]
OFF = {"pipe_partitioned": False, "grad_partitioned": False}


@pytest.mark.parametrize(("pipeline", "experts", "says"), [
    ({"pipe_partitioned": True}, MOE, "not supported for MoE model"),
    ({"grad_partitioned": True, "pipe_partitioned": False}, MOE, "not supported for MoE model"),
    ({}, MOE, "leaves out pipeline.pipe_partitioned and pipeline.grad_partitioned"),
    ({"pipe_partitioned": False}, MOE, "leaves out pipeline.grad_partitioned"),
    (OFF, MOE, None), ({"pipe_partitioned": True}, [], None)])
def test_megatron_deepspeed_moe_refuses_pipe_partitioning(pipeline: dict, experts: list[str], says: str | None,
                                                          tmp_path: Path, capsys, monkeypatch) -> None:
    """GPTModelPipe.__init__ (Megatron-DeepSpeed megatron/model/gpt_model.py) asserts 'Pipe and/or Grad partitioning
    are not supported for MoE model' when an MoE model at PP > 1 and TP > 1 has the ds_config's pipeline
    pipe_partitioned or grad_partitioned true (read with default False). A key left out is true in DeepSpeed
    (runtime/config.py get_pipeline_config), whose PipelineEngine then cannot send the MoE loss (pipe/engine.py
    _exec_forward_pass asserts the outputs after the first need no gradient): only both false runs. llmperf priced
    all of them (R87: the left-out keys too)."""
    config = {"train_batch_size": 256, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 0},
              "fp16": {"enabled": True}, "pipeline": pipeline}
    code, _, err = _explain(tmp_path, config, [*MDS, "--fp16", *experts], capsys, monkeypatch, model="")
    assert (code, bool(says) and says in err) == ((2, True) if says else (0, False)), err


@pytest.mark.parametrize(("pipeline", "partitioned", "warned"), [
    ({}, True, False), (OFF, False, False), ({"pipe_partitioned": True, "grad_partitioned": False}, True, True)])
def test_pipeline_engine_partitioned_sends_follow_the_ds_config(pipeline: dict, partitioned: bool, warned: bool,
                                                                tmp_path: Path, capsys, monkeypatch) -> None:
    """DeepSpeed's PipelineEngine sends stage activations / gradients in 1/TP slices only when the ds_config's
    pipeline.pipe_partitioned / grad_partitioned (default true) say so (pipe/engine.py: is_pipe_partitioned =
    is_model_parallel and pipe_partitioned). llmperf priced the slices and their TP all-gathers whenever TP > 1."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 256, "train_micro_batch_size_per_gpu": 4,
                                                  "fp16": {"enabled": True}, "pipeline": pipeline}))
    _, cfg = resolve_job([*MDS, "--fp16"], {})
    graph = build_graph(cfg, load_cluster("dgx-h100"))
    assert (cfg.deepspeed_pipe_partitioned, graph.p2p_gather is not None) == (partitioned, partitioned)
    assert any("priced as both partitioned" in w for w in cfg.warnings) == warned


@pytest.mark.parametrize(("deepspeed", "refused"), [(["--deepspeed", "ds.json"], True), ([], False)])
def test_trainer_fsdp_under_deepspeed_exits_2(deepspeed: list[str], refused: bool, tmp_path: Path, capsys,
                                              monkeypatch) -> None:
    """Trainer.__init__ (transformers trainer.py): 'Using --fsdp xxx together with --deepspeed is not possible,
    deactivate one of those flags.' llmperf priced `run_clm.py --deepspeed ds.json --fsdp full_shard` as DeepSpeed."""
    command = ["torchrun", "--nproc-per-node", "8", "run_clm.py", "--model_name_or_path", "meta-llama/Llama-2-7b-hf",
               "--do_train", "--output_dir", "out", "--per_device_train_batch_size", "4", "--block_size", "1024",
               "--bf16", "--fsdp", "full_shard", *deepspeed]
    code, _, err = _explain(tmp_path, AUTO_PRECISION, command, capsys, monkeypatch)
    assert (code, "together with --deepspeed is not possible" in err) == ((2, True) if refused else (0, False)), err


@pytest.mark.parametrize(("call", "warned"), [
    ("engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)", True),
    ("engine, *_ = ds.initialize(model=model, config=ds_config)", True),
    ("engine, *_ = deepspeed.initialize(args=args, model=model)", False)])
def test_script_building_its_ds_config_in_code_is_warned(call: str, warned: bool, tmp_path: Path, capsys,
                                                        monkeypatch) -> None:
    """DeepSpeedExamples training/HelloDeepSpeed/train_bert_ds.py builds its ds_config dict in code (bf16/fp16, ZeRO-1,
    CPU offload) and passes deepspeed.initialize(config=ds_config); its launch line names no file, so llmperf prices
    plain DDP in fp32, and said nothing. deepspeed.initialize(args=...) reads --deepspeed_config (none here)."""
    (tmp_path / "train.py").write_text("import deepspeed\nimport deepspeed as ds\nds_config = {'zero_optimization': "
                                       f"{{'stage': 1}}}}\n{call}\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama2-7b", "--", "deepspeed", "--num_gpus",
                              "8", "train.py"], capsys)
    assert code == 0, err
    assert any("line 4 calls deepspeed.initialize(config=...)" in w for w in json.loads(out)["warnings"]) == warned


@pytest.mark.parametrize("stage", [0, 1])
def test_megatron_deepspeed_half_flag_without_a_ds_section_is_warned(stage: int, tmp_path: Path, capsys,
                                                                     monkeypatch) -> None:
    """--bf16 with a ds_config enabling neither section: the engine stays fp32 (no cast, no bf16 optimizer wrapper) on
    the model Megatron-DeepSpeed built in bf16 (arguments.py params_dtype), stepping Megatron's bare optimizer
    (megatron/optimizer/__init__.py: `if args.deepspeed: return optimizer`). Priced as bf16, now with a warning."""
    config = {"train_batch_size": 256, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": stage}}
    argv = [*MDS[:MDS.index("--zero-stage")], "--zero-stage", str(stage), "--bf16"]
    code, got, err = _explain(tmp_path, config, argv, capsys, monkeypatch, model="")
    assert code == 0, err
    assert got["precision"] == "bf16"
    warned = [w for w in got["warnings"] if "enables neither fp16 nor bf16: DeepSpeed runs its fp32 engine" in w]
    assert len(warned) == 1 and ("at ZeRO 0 that optimizer keeps no fp32 master" in warned[0]) == (stage == 0)

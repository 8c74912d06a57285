"""Acceptance round 16 (H199): a Megatron-LM / DeepSpeed user's launch commands through `llmperf explain`, each
checked against what the framework itself runs (its source cited per test)."""

from __future__ import annotations

import json
import shlex
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


@pytest.mark.parametrize("flag", ["--bf16", "--fp16"])
def test_trainer_precision_flag_against_a_disabled_ds_section_exits_2(flag: str, tmp_path: Path, capsys,
                                                                       monkeypatch) -> None:
    """An explicit {"bf16": {"enabled": false}} with the Trainer's --bf16 (fp16 alike): HfTrainerDeepSpeedConfig.
    trainer_config_process fill_match("bf16.enabled", args.bf16 or args.bf16_full_eval) records the mismatch and the
    Trainer raises 'Please correct the following DeepSpeed config values that mismatch TrainingArguments values'
    (transformers integrations/deepspeed.py). llmperf priced it fp32 (R84): a disabled section was not a source."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({**NO_PRECISION, flag.lstrip("-"): {"enabled": False}}))
    code, _, err = run_cli(["explain", "--model", "llama2-7b", "--", *TRAINER, flag], capsys)
    assert code == 2 and f"{flag.lstrip('-')}.enabled=False vs hf {flag} True" in err, err


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


LLAMA3_8B_FP8 = [
    "torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--use-mcore-models", "--num-layers", "32",
    "--hidden-size", "4096", "--ffn-hidden-size", "14336", "--num-attention-heads", "32", "--group-query-attention",
    "--num-query-groups", "8", "--seq-length", "8192", "--max-position-embeddings", "8192", "--position-embedding-type",
    "rope", "--swiglu", "--normalization", "RMSNorm", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
    "--micro-batch-size", "1", "--global-batch-size", "128", "--bf16", "--tokenizer-type", "NullTokenizer",
    "--vocab-size", "128256", "--tensor-model-parallel-size", "2", "--sequence-parallel", "--use-distributed-optimizer",
    "--fp8-format", "e4m3", "--fp8-recipe"]
"""Megatron-LM's examples/llama/train_llama3_8b_h100_fp8.sh at TP 2, with the FP8 recipe to be named."""


@pytest.mark.parametrize(("cluster", "recipe", "refused"), [
    ("dgx-h100", "mxfp8", "10.0 or higher required for MXFP8"), ("dgx-b200", "mxfp8", None),
    ("pcie-l40s-2x200g", "blockwise", "requires compute capability 9.0"), ("dgx-h100", "blockwise", None),
    ("dgx-h100", "tensorwise", None)])
def test_fp8_recipe_needs_its_gpu(cluster: str, recipe: str, refused: str | None, capsys) -> None:
    """Transformer Engine's fp8_autocast asserts check_recipe_support at the first forward: MXFP8 needs compute
    capability 10.x (Blackwell), FP8 block scaling 9.0 or higher (transformer_engine/pytorch quantization.py
    _compute_mxfp8_support, _compute_fp8_block_scaling_support). Megatron's validate_args checks neither, and llmperf
    priced mxfp8 on an H100 as if it ran."""
    code, _, err = run_cli(["predict", "--cluster", cluster, "--", *LLAMA3_8B_FP8, recipe], capsys)
    assert code == (2 if refused else 0), err
    if refused:
        assert refused in err and "Traceback" not in err


LLAMA3_8B_CP = [*LLAMA3_8B_FP8[:LLAMA3_8B_FP8.index("--tensor-model-parallel-size")]]
"""The Llama-3-8B example in bf16 (32 query heads, 8 key/value groups), its layout to be given."""


@pytest.mark.parametrize(("layout", "refused"), [
    (["--tensor-model-parallel-size", "2", "--sequence-parallel", "--context-parallel-size", "8", "--cp-comm-type",
      "a2a"], True),  # 16 query / 4 key-value heads per TP rank over 8
    (["--context-parallel-size", "4", "--cp-comm-type", "a2a"], False),
    (["--tensor-model-parallel-size", "2", "--sequence-parallel", "--context-parallel-size", "8", "--cp-comm-type",
      "a2a+p2p", "--hierarchical-context-parallel-sizes", "8", "1"], True),
    (["--tensor-model-parallel-size", "2", "--sequence-parallel", "--context-parallel-size", "8", "--cp-comm-type",
      "a2a+p2p", "--hierarchical-context-parallel-sizes", "2", "4"], False)])
def test_all_to_all_context_parallel_splits_heads(layout: list[str], refused: bool, capsys) -> None:
    """--cp-comm-type a2a runs Transformer Engine's AttnFuncWithCPAndQKVOA2A, which asserts 'The number of attention
    heads needs to be divisible by CP size!' for the query and the key/value heads of each TP rank (attention/
    dot_product_attention/context_parallel.py); a2a+p2p's all-to-all level is the first hierarchical size. Megatron's
    validate_args checks neither; llmperf priced the job as a p2p ring."""
    command = [*LLAMA3_8B_CP, *layout]
    command[command.index("--nproc-per-node"):command.index("--nproc-per-node") + 2] = ["--nproc-per-node", "8",
                                                                                          "--nnodes", "2"]
    code, _, err = run_cli(["explain", "--", *command], capsys)
    assert code == (2 if refused else 0), err
    assert ("heads needs to be divisible by CP size" in err) == refused


def test_tune_keeps_all_to_all_heads_divisible(tmp_path: Path, capsys, monkeypatch) -> None:
    """tune keeps --cp-comm-type a2a (it does not search it), so a candidate whose TP x CP splits the heads unevenly
    is one explain refuses: pruned by name. Here every searched layout (TP 2, CP 8) is such a one and the command's own
    does not fit, so nothing fits (exit 3); tune proposed TP 2 CP 8 before."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text("context_parallel: [8]\ntensor_parallel: [2]\n")
    command = [*LLAMA3_8B_CP, "--context-parallel-size", "4", "--cp-comm-type", "a2a"]
    command[command.index("--nproc-per-node"):command.index("--nproc-per-node") + 2] = ["--nproc-per-node", "8",
                                                                                          "--nnodes", "2"]
    code, out, err = run_cli(["tune", "--search", "s.yaml", "--cluster", "dgx-h100", "--", *command], capsys)
    assert code == 3, out + err
    assert "all-to-all context parallel" in out + err


@pytest.mark.parametrize(("layout", "refusal"), [
    (["--tensor-model-parallel-size", "2"], "pipeline model parallel is not used"),
    (["--pipeline-model-parallel-size", "2", "--no-gradient-accumulation-fusion"], "gradient accumulation fusion is not"),
    (["--pipeline-model-parallel-size", "2"], None)])
def test_deferred_embedding_wgrad_needs_a_pipeline(layout: list[str], refusal: str | None, capsys) -> None:
    """Megatron's ModelParallelConfig.__post_init__ raises ValueError for --defer-embedding-wgrad-compute without
    pipeline parallelism or gradient accumulation fusion (megatron/core/model_parallel_config.py); llmperf accepted both
    with a 'not modelled' warning."""
    code, _, err = run_cli(["explain", "--", *LLAMA3_8B_CP, "--defer-embedding-wgrad-compute", *layout], capsys)
    assert code == (2 if refusal else 0), err
    assert refusal is None or refusal in err


def test_tune_keeps_a_pipeline_for_deferred_embedding_wgrad(tmp_path: Path, capsys, monkeypatch) -> None:
    """tune keeps --defer-embedding-wgrad-compute, so it must keep PP > 1: searching PP 1 it rewrote this PP 4
    job to PP 1, a command Megatron refuses at start-up (and explain now does). --wgrad-deferral-limit 1: without a
    limit the last stage keeps every micro-batch's logits gradient until the flush (1 GiB each here), out of memory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text("pipeline_parallel: [1]\n")
    command = [*LLAMA3_8B_CP, "--pipeline-model-parallel-size", "4", "--defer-embedding-wgrad-compute",
               "--wgrad-deferral-limit", "1",
               "--tensor-model-parallel-size", "2", "--sequence-parallel", "--use-distributed-optimizer"]
    command[command.index("--nproc-per-node"):command.index("--nproc-per-node") + 2] = ["--nproc-per-node", "8",
                                                                                          "--nnodes", "2"]
    code, out, err = run_cli(["tune", "--apply", "--dry-run", "--search", "s.yaml", "--cluster", "dgx-h100", "--",
                              *command], capsys)
    assert code == 0, err
    rewritten = (out + err).split("would run: ", 1)[1].splitlines()[0].split()
    pp = [int(rewritten[i + 1]) for i, w in enumerate(rewritten) if w == "--pipeline-model-parallel-size"]
    assert pp and pp[-1] > 1, rewritten
    assert run_cli(["explain", "--", *rewritten], capsys)[0] == 0


@pytest.mark.parametrize(("batch_keys", "fix"), [
    ({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"},
     "train_batch_size 256 and train_micro_batch_size_per_gpu 4"),
    ({"train_batch_size": 256, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": "auto"},
     "gradient_accumulation_steps 16")])
def test_megatron_deepspeed_auto_batch_keys_exit_2(batch_keys: dict, fix: str, tmp_path: Path, capsys,
                                                    monkeypatch) -> None:
    """Megatron-DeepSpeed's pretrain_gpt.py passes its --deepspeed_config to deepspeed.initialize as json.load reads
    it (megatron/training.py _create_ds_config_dict), so "auto" batch keys reach DeepSpeedConfig, whose batch
    arithmetic raises TypeError (deepspeed 0.19.8, each of the three keys: checked); llmperf priced them as
    Megatron's batch with a warning. The message writes each "auto" key's number (R84: an "auto"
    gradient_accumulation_steps was told to write train_batch_size and micro, which leaves the TypeError)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({**batch_keys, "zero_optimization": {"stage": 1},
                                                  "bf16": {"enabled": True}}))
    code, _, err = run_cli(["explain", "--", "deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "24",
                            "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
                            "--max-position-embeddings", "2048", "--micro-batch-size", "4", "--global-batch-size",
                            "256", "--tokenizer-type", "GPT2BPETokenizer", "--bf16", "--tensor-model-parallel-size",
                            "2", "--no-pipeline-parallel", "--deepspeed", "--deepspeed_config", "ds.json"], capsys)
    assert code == 2 and "TypeError" in err and fix in err, err


def test_step_batch_size_schedule_prices_its_final_batch(capsys) -> None:
    """Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh gives --step-batch-size-schedule "0:16 ... 12B:1536"
    (and --global-batch-size 1536, which validate_args refuses beside it, exit 2). Without --global-batch-size,
    StepBatchsizeNumMicroBatchesCalculator's global batch is the schedule's last (megatron/core/
    num_microbatches_calculator.py: schedule[-1][1]); llmperf priced Megatron's constant default MBS x DP = 8."""
    command = ["torchrun", "--nproc-per-node", "8", "--nnodes", "128", "pretrain_gpt.py", "--num-layers", "96",
               "--hidden-size", "12288", "--num-attention-heads", "96", "--seq-length", "2048",
               "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--step-batch-size-schedule",
               "0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536", "--fp16", "--vocab-size", "50257",
               "--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "16"]
    code, out, err = run_cli(["explain", "--format", "json", "--", *command], capsys)
    assert code == 0, err
    got = json.loads(out)
    assert (got["global_batch_size"], got["num_microbatches"]) == (1536, 192)
    assert run_cli(["explain", "--", *command, "--global-batch-size", "1536"], capsys)[0] == 2


def test_tune_states_no_global_batch_beside_a_step_schedule(capsys) -> None:
    """tune pinned --global-batch-size into a command that sets --step-batch-size-schedule, which Megatron's
    validate_args refuses ('Cannot specify both --step-batch-size-schedule and --global-batch-size')."""
    command = ["torchrun", "--nproc-per-node", "8", "--nnodes", "4", "pretrain_gpt.py", "--num-layers", "32",
               "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "4096",
               "--max-position-embeddings", "4096", "--micro-batch-size", "1", "--step-batch-size-schedule",
               "0:64 1B:256", "--bf16", "--vocab-size", "32000", "--tensor-model-parallel-size", "8"]
    code, out, err = run_cli(["tune", "--apply", "--dry-run", "--cluster", "dgx-h100", "--", *command], capsys)
    assert code == 0, err
    rewritten = shlex.split((out + err).split("would run: ", 1)[1].splitlines()[0])
    assert "--global-batch-size" not in rewritten
    assert run_cli(["explain", "--", *rewritten], capsys)[0] == 0


SCHEDULED = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "32", "--hidden-size", "4096",
             "--num-attention-heads", "32", "--seq-length", "4096", "--max-position-embeddings", "4096",
             "--micro-batch-size", "1", "--bf16", "--vocab-size", "32000", "--tensor-model-parallel-size", "2"]
"""A Megatron-LM command at DP 4 (8 GPUs, TP 2) to give --step-batch-size-schedule to."""


@pytest.mark.parametrize(("schedule", "says"), [
    ("0:16 0:64", "strictly increasing"), ("0:16 4000:64", "strictly increasing"),  # 4000 tokens // 4096 = sample 0
    ("8192:16 1B:64", "first schedule entry must have threshold 0"), ("0:16 1B:-8", "batch size must be positive"),
    ("0:16 1B", "Invalid schedule entry"), ("0:16 1B:x", "ValueError")])
def test_step_schedule_megatron_refuses_exits_2(schedule: str, says: str, capsys) -> None:
    """StepBatchsizeNumMicroBatchesCalculator (megatron/core/num_microbatches_calculator.py) turns thresholds from
    tokens into samples (// seq_length) and asserts a first threshold 0, strictly increasing thresholds and positive
    batches (_validate_schedule); _parse_schedule raises ValueError on an entry without ':' or a word not a number.
    H199's reading took the largest (threshold, batch) and priced all of these."""
    code, _, err = run_cli(["explain", "--", *SCHEDULED, "--step-batch-size-schedule", schedule], capsys)
    assert code == 2 and says in err and "Traceback" not in err, err


@pytest.mark.parametrize(("schedule", "final"), [("0:16 1B:1K", 1000), ("100:16 1B:64", 64), ("0:16,2.4B:32", 32)])
def test_step_schedule_reads_as_megatron(schedule: str, final: int, capsys) -> None:
    """Megatron's _parse_numeric_value takes suffixes on the batch too (1K = 1000; H199's reading refused it), a
    threshold of 100 tokens is sample 0 at seq length 4096 (accepted), and commas separate entries."""
    code, out, err = run_cli(["explain", "--format", "json", "--", *SCHEDULED, "--step-batch-size-schedule", schedule],
                             capsys)
    assert code == 0, err
    got = json.loads(out)
    assert got["global_batch_size"] == final
    assert any("predicted at its final batch" in w for w in got["warnings"]), got["warnings"]


def test_step_schedule_batch_micro_x_dp_does_not_split_is_warned(capsys) -> None:
    """update(consistency_check=True) asserts 'current global batch size (18) is not divisible by micro_batch_size (1)
    * data_parallel_size (4)' once training reaches that batch (a fresh run: at its first step); the final batch is
    checked as the global batch (exit 2)."""
    code, out, err = run_cli(["explain", "--format", "json", "--", *SCHEDULED, "--step-batch-size-schedule",
                              "0:18 1B:64"], capsys)
    assert code == 0, err
    assert any("batch 18 is not divisible by micro-batch x DP = 1 x 4" in w for w in json.loads(out)["warnings"])
    assert run_cli(["explain", "--", *SCHEDULED, "--step-batch-size-schedule", "0:16 1B:66"], capsys)[0] == 2

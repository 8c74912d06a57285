"""Measured run -> launch command: every configuration value becomes the flag the framework reads."""

from __future__ import annotations

import json
from pathlib import Path

from llmperf_hook.validate.launch_command import build_launch_plan, ds_config_for
from llmperf_hook.validate.runs_csv import build_measured_run

from .validate_helpers import BASE_ROW


def flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_megatron_row(tmp_path: Path) -> None:
    run = build_measured_run({**BASE_ROW, "sequence_parallel": "yes", "recompute": "selective"}, 1)
    argv = build_launch_plan(run, tmp_path).argv
    assert argv[:5] == ("torchrun", "--nnodes", "2", "--nproc-per-node", "8") and argv[5] == "pretrain_gpt.py"
    assert flag(argv, "--tensor-model-parallel-size") == "8" and flag(argv, "--pipeline-model-parallel-size") == "1"
    assert flag(argv, "--micro-batch-size") == "4" and flag(argv, "--global-batch-size") == "64"
    assert flag(argv, "--num-attention-heads") == "64" and flag(argv, "--vocab-size") == "51200"
    assert flag(argv, "--recompute-granularity") == "selective" and "--sequence-parallel" in argv
    assert "--fp16" in argv and flag(argv, "--attention-backend") == "unfused"
    assert "--deepspeed" not in argv and not list(tmp_path.iterdir())


def test_full_recompute_and_interleaving(tmp_path: Path) -> None:
    row = {**BASE_ROW, "num_layers": "96", "tp": "8", "pp": "8", "vpp": "3", "dp": "1", "num_gpus": "64"}
    argv = build_launch_plan(build_measured_run(row, 1), tmp_path).argv
    assert flag(argv, "--num-layers-per-virtual-pipeline-stage") == "4"
    assert flag(argv, "--recompute-granularity") == "full" and flag(argv, "--recompute-method") == "uniform"
    assert flag(argv, "--recompute-num-layers") == "1"


def test_single_node_run_smaller_than_a_node(tmp_path: Path) -> None:
    row = {**BASE_ROW, "tp": "2", "dp": "1", "num_gpus": "2", "inter_node_network": ""}
    argv = build_launch_plan(build_measured_run(row, 1), tmp_path).argv
    assert argv[:5] == ("torchrun", "--nnodes", "1", "--nproc-per-node", "2")


def test_megatron_deepspeed_row_writes_a_consistent_ds_config(tmp_path: Path) -> None:
    row = {**BASE_ROW, "framework": "Megatron-DeepSpeed (microsoft)", "vocab_size": "50257 (vTrain default)",
           "micro_batch_size": "2", "global_batch_size": "64", "pp": "1", "dp": "2"}
    run = build_measured_run(row, 1)
    argv = build_launch_plan(run, tmp_path).argv
    assert "--deepspeed" in argv and flag(argv, "--zero-stage") == "0"
    assert flag(argv, "--tokenizer-type") == "GPT2BPETokenizer" and "--vocab-size" not in argv
    config = json.loads(Path(flag(argv, "--deepspeed_config")).read_text())
    assert config["train_batch_size"] == 64 and config["train_micro_batch_size_per_gpu"] == 2
    assert config["gradient_accumulation_steps"] * 2 * run.dp == 64
    assert config["fp16"]["enabled"] and config["zero_optimization"]["stage"] == 0
    # rows with the same configuration share one file
    build_launch_plan(run, tmp_path)
    assert len(list(tmp_path.iterdir())) == 1


def test_zero3_row_runs_without_the_pipeline_engine(tmp_path: Path) -> None:
    row = {**BASE_ROW, "framework": "DeepSpeed ZeRO-3", "zero_stage_or_dist_opt": "ZeRO-3 (DeepSpeed)",
           "tp": "1", "dp": "16"}
    argv = build_launch_plan(build_measured_run(row, 1), tmp_path).argv
    assert flag(argv, "--zero-stage") == "3" and "--no-pipeline-parallel" in argv
    assert ds_config_for(build_measured_run(row, 1))["zero_optimization"] == {"stage": 3}


def test_megatron_core_recipe_flags(tmp_path: Path) -> None:
    row = {**BASE_ROW, "framework": "Megatron-Core r0.8.0", "precision": "bf16", "recompute": "",
           "sequence_parallel": "likely (tp-comm-overlap requires SP)",
           "zero_stage_or_dist_opt": "distributed optimizer",
           "notes": "flags: --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap; end-to-end"}
    plan = build_launch_plan(build_measured_run(row, 1), tmp_path)
    for expected in ("--bf16", "--use-flash-attn", "--use-distributed-optimizer", "--overlap-grad-reduce",
                     "--overlap-param-gather", "--tp-comm-overlap", "--sequence-parallel"):
        assert expected in plan.argv
    assert "--recompute-granularity" not in plan.argv and plan.notes == ()


def test_tp_comm_overlap_is_dropped_where_megatron_rejects_it(tmp_path: Path) -> None:
    row = {**BASE_ROW, "framework": "Megatron-Core", "tp": "1", "dp": "16", "sequence_parallel": "likely",
           "zero_stage_or_dist_opt": "distributed optimizer", "notes": "flags: --tp-comm-overlap --overlap-grad-reduce"}
    plan = build_launch_plan(build_measured_run(row, 1), tmp_path)
    assert "--tp-comm-overlap" not in plan.argv and "--overlap-grad-reduce" in plan.argv
    assert any("tp-comm-overlap" in note for note in plan.notes)


def test_expert_parallel_and_repeated_flag_values(tmp_path: Path) -> None:
    """The ep column becomes --expert-model-parallel-size; a value repeated in the notes' flags is kept (only
    repeated flags are dropped), so '--kv-channels 128 --num-experts 128' stays whole."""
    row = {**BASE_ROW, "tp": "1", "dp": "16", "ep": "16", "notes": "x; flags: --kv-channels 128 --num-experts 128 "
           "--swiglu --swiglu"}
    argv = build_launch_plan(build_measured_run(row, 1), tmp_path).argv
    assert flag(argv, "--expert-model-parallel-size") == "16"
    assert flag(argv, "--kv-channels") == "128" and flag(argv, "--num-experts") == "128"
    assert argv.count("--swiglu") == 1


def test_uneven_interleaving_passes_the_chunk_count(tmp_path: Path) -> None:
    """126 layers over PP 8 x VP 8 (Llama 3.1 405B recipes) do not give whole layers per chunk: the chunk count is
    passed (--num-virtual-stages-per-pipeline-rank) and the recipe's account-for flags split the layers."""
    row = {**BASE_ROW, "num_layers": "126", "tp": "8", "pp": "8", "vpp": "8", "dp": "1", "num_gpus": "64"}
    argv = build_launch_plan(build_measured_run(row, 1), tmp_path).argv
    assert flag(argv, "--num-virtual-stages-per-pipeline-rank") == "8"
    assert "--num-layers-per-virtual-pipeline-stage" not in argv

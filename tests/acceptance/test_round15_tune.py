"""Issue 7, round 15: `llmperf tune` on jobs that start at a range of node counts (torchrun --nnodes MIN:MAX, Slurm
-N MIN-MAX), DeepSpeed's elasticity section, and the Hugging Face Trainer's FSDP activation checkpointing (H188)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.cli import MEGATRON_16, run_cli


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    """The user's launch folder as the working directory; an empty llmperf store (no calibration moves a figure)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / ".llmperf"))
    return tmp_path


def _with(command: list[str], **flags: str) -> list[str]:
    """`command` with the values of some of its flags replaced (`global_batch_size="768"`)."""
    out = list(command)
    for name, value in flags.items():
        out[out.index("--" + name.replace("_", "-")) + 1] = value
    return out


MEGATRON_ARGS = MEGATRON_16[5:]
"""The 7B-like Megatron job's script and flags (global batch 512), for other launch lines."""
NARROW = "micro_batch_size: [1, 2]\ntensor_parallel: [1, 2, 4]\npipeline_parallel: [1, 2]\nvirtual_pipeline: [1]\n" \
         "context_parallel: [1]\nrecompute: [none]\n"
"""A small space: the tests are about which layouts the node range allows, not about the fastest."""


def test_a_count_between_the_ends_of_the_range_is_checked(home: Path, capsys) -> None:
    """--nnodes 1:4 with a global batch of 512: at 3 nodes (24 GPUs) DP is a multiple of 3, which never divides 512,
    so Megatron stops there (global batch % (micro x DP)) whichever layout; torchrun restarts the job at 3 nodes when
    one of 4 is lost. tune listed layouts checked at 1 and 4 nodes only; now nothing fits (exit 3) and the message
    names the count and the rule."""
    (home / "s.yaml").write_text(NARROW)
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--search", "s.yaml", "--", "torchrun", "--nnodes",
                              "1:4", "--nproc-per-node", "8", *MEGATRON_ARGS], capsys)
    assert code == 3, err
    assert "No layout searched can start at 3 nodes (24 GPUs) of the elastic range" in err, err
    assert "global_batch % (micro_batch*dp) != 0 at an elastic count (3 nodes, 24 GPUs)" in err, err
    # and a global batch every count splits (with 576, tune lists layouts)
    assert "a multiple of 96 (the least common multiple of the range's GPU counts, 8, 16, 24, 32), e.g. 480 or 576 " \
           "(yours: 512)" in err, err
    assert "Or add --decrease-batch-size-if-needed" in err, err


@pytest.mark.parametrize("nnodes", ["4", "4:4"])
def test_a_fixed_node_count_is_not_a_range(home: Path, capsys, nnodes: str) -> None:
    """The same job at a fixed 4 nodes (or torchrun's 4:4): no count but 4 is checked, layouts are listed (exit 0)
    and no elastic line is written."""
    (home / "s.yaml").write_text(NARROW)
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--search", "s.yaml", "--",
                              "torchrun", "--nnodes", nnodes, "--nproc-per-node", "8", *MEGATRON_ARGS], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["top"] and "elastic" not in data, data.keys()
    assert not [rule for rule in data["search"]["invalid_by_rule"] if "elastic" in rule], data["search"]


def test_decrease_batch_size_if_needed_lets_every_count_start(home: Path, capsys) -> None:
    """Megatron-LM's --decrease-batch-size-if-needed: at 3 nodes of --nnodes 1:4 (DP a multiple of 3) the step trains
    on the largest multiple of micro x DP below 512 (num_microbatches_calculator ConstantNumMicroBatchesCalculator)
    instead of stopping. Alone, the flag lets 3 nodes start on core_v0.17 and earlier (their arguments.py has no eval
    batch); core_v0.18.0's eval assertion (#4014: the eval batch, by default the global batch, divides by micro x DP)
    is said in the elastic line with the batch every count splits (H212: it pruned every layout, exit 3, holding a
    core_v0.16.1 user to a later release's rule, which predict only warns of). With an --eval-global-batch-size every
    count splits (96), tune lists layouts and checks no global-batch divisibility at the smaller counts."""
    (home / "s.yaml").write_text(NARROW)
    command = ["torchrun", "--nnodes", "1:4", "--nproc-per-node", "8", *MEGATRON_ARGS, "--decrease-batch-size-if-needed"]
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--search", "s.yaml", "--",
                              *command], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["top"] and not [rule for rule in data["search"]["invalid_by_rule"] if rule.startswith("eval")], data
    assert "core_v0.18.0 and later also assert" in data["elastic"] and "a multiple of 96" in data["elastic"], data
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--search", "s.yaml", "--",
                              *command, "--eval-global-batch-size", "96"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["top"], data
    assert not [rule for rule in data["search"]["invalid_by_rule"] if rule.startswith("global_batch % (micro_batch*dp)")
                and "elastic" in rule], data["search"]["invalid_by_rule"]
    for row in data["top"]:  # the eval batch splits at every count, the training batch at least one micro-batch
        dps = [8 * nodes // (row["tp"] * row["pp"]) for nodes in (1, 2, 3, 4)]
        assert all(96 % (row["micro_batch_size"] * dp) == 0 and 512 >= row["micro_batch_size"] * dp for dp in dps)


def test_every_listed_layout_starts_at_every_count_of_the_range(home: Path, capsys) -> None:
    """--nnodes 1:3 with a global batch of 48: both ends keep TP 1 (DP 8 and 24 divide 48) but 2 nodes do not (DP
    16), and Megatron stops there. The layouts listed keep the model grid and the batch rule at each count, the
    refusal at 2 nodes is counted by name, and the header says the counts in between are checked."""
    (home / "s.yaml").write_text(NARROW.replace("[1, 2, 4]", "[1, 2, 4, 8]"))
    command = ["torchrun", "--nnodes", "1:3", "--nproc-per-node", "8", *_with(MEGATRON_ARGS, global_batch_size="48")]
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--top", "30", "--search", "s.yaml",
                              "--", *command], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert "and at every count in between (2)" in data["elastic"], data["elastic"]
    assert data["search"]["invalid_by_rule"]["global_batch % (micro_batch*dp) != 0 at an elastic count (2 nodes, 16 "
                                              "GPUs)"] > 0, data["search"]
    assert data["top"], data
    for row in data["top"]:
        grid = row["tp"] * row["pp"] * row["cp"]
        for nodes in (1, 2, 3):
            assert 8 * nodes % grid == 0 and 48 % (row["micro_batch_size"] * 8 * nodes // grid) == 0, (row, nodes)


BIG = _with(MEGATRON_ARGS, num_layers="40", hidden_size="5120", num_attention_heads="40", global_batch_size="768",
            tensor_model_parallel_size="1")
"""A 13B-like job (R66's): with the distributed optimizer at TP 1 x PP 2 it fits 4 nodes, not 1 (DP 4: 4x the shard)."""
TP1_ONLY = "micro_batch_size: [1]\ntensor_parallel: [1]\npipeline_parallel: [2]\nvirtual_pipeline: [1]\n" \
           "context_parallel: [1]\nrecompute: [none]\ndistributed_optimizer: [true]\n"


def test_layouts_over_memory_at_the_minimum_are_pruned_and_the_range_that_fits_is_named(home: Path, capsys) -> None:
    """Memory at the elastic minimum is a ranking rule: the only layout searched fits 4 nodes (DP 16) but not 1 (84.8
    GiB per GPU > 75.2 usable); R66 listed it with a warning (and --apply would launch it). Now nothing fits (exit 3),
    the JSON counts it as out of memory at the minimum, and the message names the range that fits: from 2 nodes (its
    allocated bytes, tune's rule since R82: at 2 nodes its peak, 75.7 GiB, is over the 75.2 usable, its allocated bytes
    are not)."""
    (home / "s.yaml").write_text(TP1_ONLY)
    command = ["torchrun", "--nnodes", "1:4", "--nproc-per-node", "8", *BIG, "--use-distributed-optimizer"]
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--search", "s.yaml", "--apply",
                              "--dry-run", "--", *command], capsys)
    assert code == 3, err
    data = json.loads(out)
    assert data["search"]["num_oom_elastic_minimum"] == 1 and data["search"]["num_fitting"] == 0, data["search"]
    assert "1 layout is over the usable memory at the elastic minimum (1 node)" in data["error"], data["error"]
    assert "It fits from 2 nodes: the largest range that fits is 2 to 4 nodes (--nnodes 2:4, or a fixed node " \
           "count of 4)" in data["error"], data
    assert "warning: your command runs out of memory at the elastic minimum (1 node: " in err, err
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--search", "s.yaml", "--",
                              "torchrun", "--nnodes", "2:4", *command[3:]], capsys)
    assert code == 0 and json.loads(out)["top"][0]["tp"] == 1, err  # the range it named fits


def test_srun_node_range_is_checked_at_every_count(home: Path, capsys) -> None:
    """`srun -N 2-4 --ntasks-per-node 8 python pretrain_gpt.py`: Slurm gives the step some count in 2-4 (sbatch(1)
    -N: as many as it can without delaying the start). predict prices 4 and says so; tune now treats the range as
    elastic: with a global batch of 512 nothing starts at 3 nodes. With srun -n 32 the task count fixes the world
    (no range to check)."""
    srun = ["srun", "-N", "2-4", "--ntasks-per-node", "8", "python", *MEGATRON_ARGS]
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--", *srun], capsys)
    assert code == 3 and "No layout searched can start at 3 nodes (24 GPUs)" in err, err
    assert "lets Slurm allocate 2 to 4 nodes: llmperf assumes 4" in err, err
    (home / "s.yaml").write_text(NARROW)
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--search", "s.yaml", "--",
                              *_with(srun, global_batch_size="768")], capsys)
    assert code == 0, err
    assert json.loads(out)["elastic"].startswith("-N 2-4 gives the job 2 to 4 nodes: ranked at the maximum, 4 nodes")
    listed = ["srun", "-N", "1,2,4", "--ntasks-per-node", "8", "python", *MEGATRON_ARGS]  # Slurm gives 1, 2 or 4
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--search", "s.yaml", "--", *listed],
                             capsys)
    assert code == 0, err  # 3 nodes, which no DP of a global batch of 512 starts at, is not one of them
    assert json.loads(out)["elastic"].startswith("-N 1,2,4 gives the job 1, 2 or 4 nodes: ranked at the maximum"), out
    fixed = ["srun", "-N", "2-4", "-n", "32", "python", *MEGATRON_ARGS]
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--search", "s.yaml", "--", *fixed],
                             capsys)
    assert code == 0 and "elastic" not in json.loads(out), err


def test_sbatch_node_range_reaches_the_step_it_sizes(home: Path, capsys) -> None:
    """`#SBATCH --nodes=2-4` with `srun python pretrain_gpt.py` (the step takes the allocation's SLURM_NNODES):
    checked at 2 and 3 nodes as well."""
    (home / "job.sh").write_text("#!/bin/bash\n#SBATCH --nodes=2-4\n#SBATCH --ntasks-per-node=8\n"
                                 "#SBATCH --gpus-per-node=8\nsrun python " + " ".join(MEGATRON_ARGS) + "\n")
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--", "sbatch", "job.sh"], capsys)
    assert code == 3 and "No layout searched can start at 3 nodes (24 GPUs)" in err, err


DS_TRAIN = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed", "--deepspeed_config", "ds.json"]


@pytest.mark.parametrize("enabled", [True, False, "false"])
def test_deepspeed_elasticity_is_refused_when_enabled(home: Path, capsys, enabled: bool | str) -> None:
    """An enabled ds_config `elasticity` section (DeepSpeed to 0.19.6) makes DeepSpeed choose the batch, micro batch
    and accumulation itself (compute_elastic_config), overriding the config's keys, which predict priced as written
    with a warning. Not modelled: refused (exit 2) with how to price the job. A disabled section does nothing."""
    (home / "train.py").write_text("import deepspeed\n")
    (home / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 2},
        "bf16": {"enabled": True}, "elasticity": {"enabled": enabled, "max_train_batch_size": 2000, "micro_batch_sizes":
                                                  [2, 4, 6], "ignore_non_elastic_batch_info": True}}))
    for verb in ("predict", "tune"):
        code, out, err = run_cli([verb, "--cluster", "dgx-h100", "--model", "llama2-7b", "--", *DS_TRAIN], capsys)
        if enabled:
            assert code == 2 and "ds.json enables DeepSpeed elasticity (elasticity.enabled" in err, err
            assert ("is the string 'false': any non-empty string is true to DeepSpeed" in err) == (enabled == "false")
            assert "copy the config without the elasticity section" in err, err
        else:
            assert code == 0, err


TRAINER_FSDP = ["torchrun", "--nproc-per-node", "8", "train.py", "--model_name_or_path", "meta-llama/Llama-2-7b-hf",
                "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4", "--bf16", "--output_dir",
                "out", "--fsdp", "full_shard auto_wrap"]


def _predict(home: Path, capsys, extra: list[str]) -> tuple[int, dict, str]:
    (home / "train.py").write_text("from transformers import Trainer, TrainingArguments\n")
    code, out, err = run_cli(["predict", "--format", "json", "--cluster", "dgx-h100", "--model", "llama2-7b", "--",
                              *TRAINER_FSDP, *extra], capsys)
    return code, (json.loads(out) if code == 0 else {}), err


@pytest.mark.parametrize("form", ["file", "inline"])
def test_trainer_fsdp_config_checkpointing_is_priced(home: Path, capsys, form: str) -> None:
    """The Trainer's --fsdp_config `activation_checkpointing` (or `fsdp_activation_checkpointing`: TrainingArguments
    strips `fsdp_`) wraps each layer in FSDP's checkpoint_wrapper; predict priced the job without recompute (the
    activations of a run that keeps none, the step without the second forward). Now full recompute: the same as
    --gradient_checkpointing, fewer GiB, a slower step than the same config with it off."""
    text = '{"fsdp_activation_checkpointing": true, "transformer_layer_cls_to_wrap": "LlamaDecoderLayer"}'
    (home / "fsdp.json").write_text(text)
    (home / "off.json").write_text('{"activation_checkpointing": false}')
    code, on, err = _predict(home, capsys, ["--fsdp_config", "fsdp.json" if form == "file" else text])
    assert code == 0 and on["config"]["recompute"] == "full", err
    code, off, err = _predict(home, capsys, ["--fsdp_config", "off.json"])
    assert code == 0 and off["config"]["recompute"] == "none", err
    code, switch, err = _predict(home, capsys, ["--gradient_checkpointing"])
    assert code == 0 and switch["config"]["recompute"] == "full", err
    assert on["step_time_s"] == pytest.approx(switch["step_time_s"]), (on["step_time_s"], switch["step_time_s"])
    assert on["memory"]["peak_bytes_per_gpu"] < off["memory"]["peak_bytes_per_gpu"]
    assert on["step_time_s"] > off["step_time_s"]


@pytest.mark.parametrize("extra, said", [
    (["--fsdp_config", "fsdp.json", "--gradient_checkpointing"], "the Trainer refuses both ('The activation_"),
    (["--fsdp_config", "missing.json"], "--fsdp_config 'missing.json' is neither a JSON file llmperf can read"),
    (["--fsdp_config", '{"activation_checkpointing": "maybe"}'], "sets activation_checkpointing to 'maybe': the "
                                                                  "Trainer reads it as a truth value"),
])
def test_trainer_fsdp_config_the_trainer_refuses(home: Path, capsys, extra: list[str], said: str) -> None:
    """FSDP's checkpointing beside --gradient_checkpointing stops the Trainer (trainer.py: "can't be set to True
    simultaneously"), as does an --fsdp_config it cannot load: exit 2, said."""
    (home / "fsdp.json").write_text('{"activation_checkpointing": "true"}')
    code, _, err = _predict(home, capsys, extra)
    assert code == 2 and said in err, err


DS_SCRIPT = ("import argparse\nimport deepspeed\np = argparse.ArgumentParser()\n"
             "p.add_argument('--local_rank', type=int)\np = deepspeed.add_config_arguments(p)\n")


def test_a_ds_config_that_fixes_the_whole_batch_triad_cannot_change_size(home: Path, capsys) -> None:
    """R66's open point: a ds_config writing train_batch_size 768, micro 2 and gradient_accumulation_steps 12 holds
    DeepSpeed's _batch_assertion (train == micro x GAS x DP) at 32 GPUs only, and --apply keeps all three: under
    --nnodes 3:4 the job stops when it starts or restarts at 3 nodes (2 x 12 x 24 = 576). tune listed layouts; now
    exit 3 saying to drop gradient_accumulation_steps. Without that key DeepSpeed derives it at each size: listed."""
    (home / "train.py").write_text(DS_SCRIPT)
    batch = {"train_batch_size": 768, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
             "zero_optimization": {"stage": 2}}
    (home / "fixed.json").write_text(json.dumps({**batch, "gradient_accumulation_steps": 12}))
    (home / "free.json").write_text(json.dumps(batch))
    launch = ["torchrun", "--nnodes", "3:4", "--nproc-per-node", "8", "train.py", "--deepspeed", "--deepspeed_config"]
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama2-7b", "--", *launch, "fixed.json"],
                             capsys)
    assert code == 3 and "Drop gradient_accumulation_steps from the ds_config" in err, err
    assert "ds_config train_batch_size != micro x gradient_accumulation_steps x dp at the elastic minimum (3 " \
           "nodes" in err, err
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--model", "llama2-7b", "--",
                              *launch, "free.json"], capsys)
    assert code == 0 and json.loads(out)["top"], err


def test_a_rampup_step_is_checked_at_every_count(home: Path, capsys) -> None:
    """--rampup-batch-size 32 32 1000 runs steps at global batches 32, 64, ... 768; each must split over micro x DP
    (command_rules.RAMPUP_RULE). At 3 nodes of --nnodes 2:4, DP is a multiple of 3, which divides no step below 96:
    checked at MAX only before, so tune listed layouts that stop there."""
    (home / "s.yaml").write_text(NARROW)
    command = ["torchrun", "--nnodes", "2:4", "--nproc-per-node", "8", *_with(MEGATRON_ARGS, global_batch_size="768"),
               "--rampup-batch-size", "32", "32", "1000"]
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--search", "s.yaml", "--", *command], capsys)
    assert code == 3, err
    assert "a --rampup-batch-size step's global batch % (micro_batch*dp) != 0 at an elastic count (3 nodes" in err, err


def test_a_wide_range_names_a_few_counts(home: Path, capsys) -> None:
    """GPT-3 175B's global batch of 1,536 under --nnodes 64:128 x 8: at 65 nodes (and 58 other counts) no DP divides
    it; the message named every count with its rules (thousands of characters); now the first three and how many
    more."""
    (home / "s.yaml").write_text("micro_batch_size: [1]\ntensor_parallel: [8]\npipeline_parallel: [8, 16]\n"
                                 "virtual_pipeline: [1]\ncontext_parallel: [1]\nrecompute: [selective]\n")
    command = ["torchrun", "--nnodes", "64:128", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "96",
               "--hidden-size", "12288", "--num-attention-heads", "96", "--seq-length", "2048",
               "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--global-batch-size", "1536",
               "--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "16", "--bf16",
               "--vocab-size", "51200"]
    code, out, err = run_cli(["tune", "--cluster", "dgx-a100", "--search", "s.yaml", "--", *command], capsys)
    assert code == 3, err
    assert "No layout searched can start at 65 nodes (520 GPUs) or at 66 nodes (528 GPUs) or at 67 nodes (536 GPUs) " \
           "(and at " in err and len(err.splitlines()[-1]) < 1500, err
    # --decrease-batch-size-if-needed alone: core_v0.17 and earlier run the rounded batch at 65 nodes (no eval check;
    # core_v0.18.0's is a note, H212), but the model grid still stops every layout there
    (home / "s.yaml").write_text("micro_batch_size: [1]\ntensor_parallel: [8]\npipeline_parallel: [1, 8, 16]\n"
                                 "virtual_pipeline: [1]\ncontext_parallel: [1]\nrecompute: [full]\n")
    code, out, err = run_cli(["tune", "--cluster", "dgx-a100", "--search", "s.yaml", "--", *command,
                              "--decrease-batch-size-if-needed"], capsys)
    assert code == 3 and "(65 nodes, 520 GPUs: the model grid" in err and "eval global batch" not in err, err
    # with an eval batch both counts of 63:64 split (lcm(63, 64) = 4032) the batch starts everywhere, but the model
    # grid cannot: 63 and 64 nodes share 8 GPUs as a divisor, so TP x PP x CP <= 8 and the model does not fit; more
    # TP / PP is no advice
    command[command.index("64:128")] = "63:64"
    code, out, err = run_cli(["tune", "--cluster", "dgx-a100", "--search", "s.yaml", "--", *command,
                              "--decrease-batch-size-if-needed", "--eval-global-batch-size", "4032"], capsys)
    assert code == 3, err
    assert "Under --nnodes 63:64 TP x PP x CP must divide 8 GPUs (the greatest common divisor of its GPU counts)" \
           in err and "widen the search" not in err, err


def test_a_global_batch_apply_pins_is_checked_at_every_count(home: Path, capsys) -> None:
    """Megatron without --global-batch-size runs micro x DP, which follows the world; where a layout's micro x DP at
    the maximum differs from the command's, --apply adds --global-batch-size (megatron_argv._pin_global_batch), which
    then holds at every count. Under --nnodes 1:3 x 8 (24 at 3 nodes), TP 1 x PP 2 x VPP 2 pins 24 and at 2 nodes
    runs 24 / 8 = 3 micro-batches, which the interleaved schedule refuses (% PP): tune listed it. TP 2 x PP 2 x VPP 2
    (6 and 12 micro-batches there) stays."""
    (home / "s.yaml").write_text("micro_batch_size: [1]\ntensor_parallel: [1, 2]\npipeline_parallel: [1, 2]\n"
                                 "virtual_pipeline: [1, 2]\ncontext_parallel: [1]\nrecompute: [none]\n"
                                 "distributed_optimizer: [true]\n")
    command = ["torchrun", "--nnodes", "1:3", "--nproc-per-node", "8", *MEGATRON_ARGS[:11], "--micro-batch-size", "1",
               "--bf16", "--vocab-size", "32000"]  # no --global-batch-size: micro x DP
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--top", "30", "--search", "s.yaml",
                              "--", *command], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert any("(--global-batch-size pinned by --apply) at an elastic count (2 nodes" in rule
               for rule in data["search"]["invalid_by_rule"]), data["search"]["invalid_by_rule"]
    for row in data["top"]:  # every count splits a pinned 24 into micro-batches the schedule takes
        for nodes in (1, 2) if 24 // (row["tp"] * row["pp"]) != 24 else ():  # unpinned: micro x DP, as the world
            dp = 8 * nodes // (row["tp"] * row["pp"])
            assert 24 % dp == 0 and (row["vpp"] == 1 or 24 // dp % row["pp"] == 0), (row, nodes)
    assert not [row for row in data["top"] if (row["tp"], row["pp"], row["vpp"]) == (1, 2, 2)], data["top"]

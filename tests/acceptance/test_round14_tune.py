"""Issue 7, round 14: `llmperf tune` used as a demanding user would (H176), on the gaps round 13 left: a `--search`
file that sets nothing, elastic node ranges, HF Trainer's FSDP with gradient checkpointing, accelerate scripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.cli import GPT3_ON_8, MEGATRON_16, run_cli


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    """The user's launch folder as the working directory; an empty llmperf store (no calibration moves a figure)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / ".llmperf"))
    return tmp_path


@pytest.mark.parametrize("text", ["", "# micro_batch_size: [2]\n# tensor_parallel: [4]\n", "name: mine\n"])
def test_search_file_that_sets_no_knob_searches_the_defaults_and_says_so(home: Path, capsys, text: str) -> None:
    """An empty `--search` file, one of comments only, or a bare `name:` narrows nothing: tune searched the shipped
    space while its header named the user's file as the space, without a word (an empty `--search <(cmd)` of a
    command that failed looked like a narrowed search). Now the defaults are searched, the header says so and a
    warning names the file."""
    (home / "s.yaml").write_text(text)
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--top", "1", "--search", "s.yaml",
                              "--", *MEGATRON_16], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["search_space"].endswith("configs/search/megatron.yaml (s.yaml sets no knob)"), data["search_space"]
    assert "warning: --search s.yaml sets no knob" in err and "configs/search/megatron.yaml" in err, err
    assert data["knobs"]["searched"]["tp"] == [1, 2, 4, 8], data["knobs"]  # the commented-out [4] too


TRAINER_FSDP = ["torchrun", "--nproc-per-node", "8", "train.py", "--model_name_or_path", "meta-llama/Llama-2-7b-hf",
                "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4", "--bf16", "--output_dir",
                "out", "--fsdp", "full_shard auto_wrap", "--gradient_checkpointing"]
"""A Llama-2-7B fine-tune with the Hugging Face Trainer under FSDP (no ds_config) with gradient checkpointing."""


def _trainer_tune(home: Path, capsys, args: list[str], command: list[str]) -> tuple[dict, str]:
    (home / "train.py").write_text("from transformers import Trainer, TrainingArguments\n")
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--model", "llama2-7b", *args, "--",
                              *command], capsys)
    assert code == 0, err
    return json.loads(out), err


def test_trainer_fsdp_searches_gradient_checkpointing_and_apply_writes_the_trainer_flag(home: Path, capsys) -> None:
    """Under the Trainer's --fsdp (framework torch) tune kept --gradient_checkpointing as the command had it, so a
    7B job on 8 H100s that fits without it (55 GiB) was never offered the ~25 % faster run. transformers'
    TrainingArguments.gradient_checkpointing is a bool the Trainer applies under FSDP too; --apply writes
    `--gradient_checkpointing False`, which explain reads back as no recompute."""
    data, _ = _trainer_tune(home, capsys, ["--top", "3", "--apply", "--dry-run"], TRAINER_FSDP)
    assert data["knobs"]["searched"]["recompute"] == ["none", "full"], data["knobs"]
    best = data["top"][0]
    assert best["recompute"] == "none" and data["baseline"]["recompute"] == "full", (best, data["baseline"])
    applied = data["applied"]["argv"]
    assert applied[-2:] == ["--gradient_checkpointing", "False"] and applied[:-1] == TRAINER_FSDP, applied
    code, out, err = run_cli(["predict", "--format", "json", "--cluster", "dgx-h100", "--model", "llama2-7b", "--",
                              *applied], capsys)
    assert code == 0 and json.loads(out)["config"]["recompute"] == "none", err
    assert not data["applied"]["new_files"]


def test_trainer_fsdp_config_checkpointing_is_switched_in_a_copy_of_the_config(home: Path, capsys) -> None:
    """FSDP's activation_checkpointing in the Trainer's --fsdp_config beside --gradient_checkpointing stops the
    Trainer ('can't be set to True simultaneously', transformers trainer.py create_accelerator_and_postprocess), so
    tune never adds the switch there; it searches the config's own key instead (H195, tune/fsdp_config_apply.py): off
    is a copy of the config with the key false, which --apply writes beside it (the user's file untouched), and
    predict prices the applied command as tune listed it."""
    text = '{"fsdp_activation_checkpointing": true, "transformer_layer_cls_to_wrap": "LlamaDecoderLayer"}'
    (home / "fsdp.json").write_text(text)
    command = [*TRAINER_FSDP[:-1], "--fsdp_config", "fsdp.json"]
    data, err = _trainer_tune(home, capsys, ["--top", "3", "--apply", "--dry-run"], command)
    assert set(data["knobs"]["searched"]["recompute"]) == {"none", "full"}, data["knobs"]
    assert all(not any(c["key"].startswith("--gradient") and "checkpointing" in c["key"] for c in row["changes"])
               for row in data["top"]), data["top"]
    best, applied = data["top"][0], data["applied"]["argv"]
    assert best["recompute"] == "none" and data["baseline"]["recompute"] == "full", (best, data["baseline"])
    assert applied[applied.index("--fsdp_config") + 1] == "fsdp.llmperf-tuned.json", applied
    assert not any("gradient_checkpointing" in w for w in applied), applied
    assert (home / "fsdp.json").read_text() == text
    assert json.loads((home / "fsdp.llmperf-tuned.json").read_text())["fsdp_activation_checkpointing"] is False
    code, out, err = run_cli(["predict", "--format", "json", "--cluster", "dgx-h100", "--model", "llama2-7b", "--",
                              *applied], capsys)
    assert code == 0 and json.loads(out)["config"]["recompute"] == "none", err
    assert json.loads(out)["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-5)
    inline = [*TRAINER_FSDP[:-1], "--fsdp_config", text]  # a JSON object in argv: rewritten in its place
    data, err = _trainer_tune(home, capsys, ["--top", "1", "--apply", "--dry-run"], inline)
    applied = data["applied"]["argv"]
    assert json.loads(applied[applied.index("--fsdp_config") + 1])["fsdp_activation_checkpointing"] is False, applied
    assert not data["applied"]["new_files"]


def test_own_argparse_script_without_the_switch_is_never_given_it(home: Path, capsys) -> None:
    """A script of the user's own (transformers' run_clm_no_trainer.py style: argparse with
    --per_device_train_batch_size, no --gradient_checkpointing) would stop on the Trainer's switch ('unrecognized
    arguments'), so tune keeps its checkpointing and says why; the micro-batch is still searched."""
    (home / "clm.py").write_text(
        "import argparse\nfrom accelerate import Accelerator\np = argparse.ArgumentParser()\n"
        "p.add_argument('--model_name_or_path')\np.add_argument('--per_device_train_batch_size', type=int)\n"
        "p.add_argument('--gradient_accumulation_steps', type=int)\np.add_argument('--output_dir')\n"
        "args = p.parse_args()\naccelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)\n")
    command = ["accelerate", "launch", "--num_processes", "8", "--use_fsdp", "clm.py", "--model_name_or_path", "meta-llama/Llama-2-7b-hf",
               "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4", "--output_dir", "out"]
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--model", "llama2-7b", "--top", "3",
                              "--", *command], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert "recompute" not in data["knobs"]["searched"] and len(data["knobs"]["searched"]["micro_batch_size"]) > 1
    assert "clm.py parses its own arguments (argparse) and defines no --gradient_checkpointing" in err, err


ACCELERATE_DS = ["accelerate", "launch", "--num_processes", "8", "--use_deepspeed", "--deepspeed_config_file",
                 "ds.json", "finetune.py", "--model_name_or_path", "meta-llama/Llama-2-7b-hf",
                 "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4"]


@pytest.mark.parametrize("code, accelerator", [
    ("from accelerate import Accelerator as Acc\nacc = Acc()\n", True),
    ("from accelerate import *\naccelerator = Accelerator()\n", True),
    ("# Accelerator() is built by the Trainer\nfrom transformers import Trainer\nTrainer(model=None).train()\n", False),
])
def test_accelerator_script_told_by_its_code(home: Path, capsys, code: str, accelerator: bool) -> None:
    """A script named like neither transformers' *_no_trainer.py nor accelerate's examples that drives Accelerator
    itself was taken for the Trainer, whose fill_match refuses a ds_config value unlike its flag: tune exited 2 on a
    job that runs (Accelerator logs 'Gradient accumulation steps mismatch' and takes DeepSpeed's 8). A comment
    naming Accelerator in a Trainer script changes nothing: the Trainer's refusal stands."""
    (home / "finetune.py").write_text(code)
    (home / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8,
                                              "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}))
    code_, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--model", "llama2-7b", "--top", "1",
                               "--", *ACCELERATE_DS], capsys)
    data = json.loads(out)
    if accelerator:
        assert code_ == 0 and data["baseline"]["micro_batch_size"] == 2, err
        assert "Accelerator uses DeepSpeed's value" in err, err
    else:
        assert code_ == 2 and "mismatches the Hugging Face Trainer's arguments" in data["error"], data
    assert json.loads((home / "ds.json").read_text())["gradient_accumulation_steps"] == 8


def test_elastic_nnodes_ranks_at_the_maximum_and_lists_only_layouts_that_start_at_the_minimum(home: Path,
                                                                                                capsys) -> None:
    """torchrun --nnodes 1:4 starts the job once one node joined (run.py parse_min_max_nnodes, the rendezvous'
    min_nodes). tune ranked at 4 nodes without a word beyond predict's warning and listed layouts Megatron refuses
    on one node (TP x PP = 16 or 32 does not divide 8 GPUs: arguments.py's world-size assert). Now the header says
    which size it ranked at, the layouts listed also start at the minimum, and explain accepts the applied command
    at one node. (H188: the global batch is 768, which every count of 1 to 4 nodes can split: with 512, no layout
    starts at 3 nodes, tests/acceptance/test_round15_tune.py.)"""
    command = ["torchrun", "--nnodes", "1:4", *MEGATRON_16[3:]]
    command[command.index("--global-batch-size") + 1] = "768"
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--top", "30", "--apply",
                              "--dry-run", "--", *command], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["elastic"].startswith("--nnodes 1:4 starts at 1 to 4 nodes: ranked at the maximum, 4 nodes (32 GPUs)")
    assert "32 GPUs, global batch 768" in data["job"]
    assert data["search"]["invalid_by_rule"]["world at the elastic minimum (1 node, 8 GPUs) % (tp*pp*cp) != 0"] > 0
    for row in data["top"]:
        group = row["tp"] * row["pp"] * row["cp"]
        assert all(8 * n % group == 0 and 768 % (row["micro_batch_size"] * 8 * n // group) == 0 for n in (1, 2, 3)), row
    applied = data["applied"]["argv"]
    assert applied[:4] == ["torchrun", "--nnodes", "1:4", "--nproc-per-node"], applied
    for nodes in ("1", "4"):
        code, out, err = run_cli(["explain", "--nnodes", nodes, "--", *applied], capsys)
        assert code == 0, err


def test_fixed_node_count_has_no_elastic_note(home: Path, capsys) -> None:
    (home / "s.yaml").write_text("micro_batch_size: [1]\ntensor_parallel: [4]\npipeline_parallel: [2]\n")
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--top", "1", "--search", "s.yaml",
                              "--", *MEGATRON_16], capsys)
    assert code == 0 and "elastic" not in json.loads(out), err  # the result object's keys as before


def test_elastic_job_that_fits_nowhere_names_the_layouts_only_the_minimum_refused(home: Path, capsys) -> None:
    """GPT-3 175B under --nnodes 1:2 fits nowhere: the exit-3 message said to widen TP/PP, while the layouts that
    split it over both nodes (PP 2) had been refused only because one node cannot start them. It now says so, and
    what lets tune try them."""
    command = ["torchrun", "--nnodes", "1:2", *GPT3_ON_8[1:]]
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--", *command], capsys)
    assert code == 3, err
    assert "were refused only because Megatron / DeepSpeed would stop at a smaller node count of the elastic range " \
           "(1 node, 8 GPUs: the model grid or the global batch does not divide there): a fixed --nnodes at the " \
           "maximum" in err, err  # H188's wording: a count between MIN and MAX is named too


def test_accelerator_script_without_a_parser_keeps_its_checkpointing(home: Path, capsys) -> None:
    """A script driving Accelerator that reads no argv (its settings in code) would get '--gradient_checkpointing
    True' appended and priced as recomputing, while its model never sees the flag: kept, with the reason."""
    (home / "finetune.py").write_text("import accelerate\nacc = accelerate.Accelerator()\n")
    (home / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
                                              "gradient_accumulation_steps": "auto", "zero_optimization": {"stage": 3},
                                              "bf16": {"enabled": True}}))
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--model", "llama2-7b", "--top", "3",
                              "--", *ACCELERATE_DS], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert "recompute" not in data["knobs"]["searched"], data["knobs"]
    assert "finetune.py drives Accelerate's Accelerator itself, not the Trainer, and no parser" in err, err


def test_elastic_command_that_cannot_start_at_its_minimum_is_warned_of(home: Path, capsys) -> None:
    """TP 4 x PP 8 = 32 GPUs under --nnodes 1:4: if the rendezvous completes with one node, Megatron stops at start-up
    (world 8 % 32). tune keeps it as the baseline (priced at 4 nodes) and now says so."""
    (home / "s.yaml").write_text("micro_batch_size: [1]\ntensor_parallel: [4]\npipeline_parallel: [1, 2]\n")
    command = ["torchrun", "--nnodes", "1:4", "--nproc-per-node", "8", *MEGATRON_16[5:]]
    command[command.index("--pipeline-model-parallel-size") + 1] = "8"
    command[command.index("--global-batch-size") + 1] = "768"  # 512: no layout starts at 3 nodes (H188)
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--top", "1", "--search", "s.yaml", "--", *command],
                             capsys)
    assert code == 0, err
    assert "warning: your command cannot start at the elastic minimum (world at the elastic minimum (1 node, 8 GPUs) " \
           "% (tp*pp*cp) != 0" in err, err


def test_megatron_recompute_modes_asked_of_a_trainer_job_are_named(home: Path, capsys) -> None:
    """`recompute: [selective, full]` for a Trainer job: --gradient_checkpointing has no selective mode, so only full
    was tried, without a word."""
    (home / "s.yaml").write_text("recompute: [selective, block, full]\n")
    data, err = _trainer_tune(home, capsys, ["--top", "1", "--search", "s.yaml"], TRAINER_FSDP)
    knobs = data["knobs"]
    assert knobs["searched"].get("recompute", ["full"]) == ["full"] and knobs["kept"].get("recompute", "full") == "full"
    assert "recompute block, selective is Megatron's; --gradient_checkpointing is on" in err, err


def test_elastic_moe_layouts_whose_expert_grid_the_minimum_cannot_hold_are_not_listed(home: Path, capsys) -> None:
    """R66: Megatron also spans the world with the expert grid, ETP x EP x PP (parallel_state.initialize_model_parallel
    raises unless world % (etp*ep*pp) == 0), so under --nnodes 1:4 x 8 GPUs EP 8 x PP 2 or EP 16 stops at start-up
    when one node joins although TP x PP x CP divides 8: tune listed them (every row of this top 30 had EP x PP 16
    or 32). The command's own EP 16 is warned of, as its TP x PP x CP would be."""
    (home / "s.yaml").write_text("micro_batch_size: [1]\ntensor_parallel: [1]\npipeline_parallel: [1, 2]\n"
                                 "expert_parallel: [1, 8, 16]\n")
    command = ["torchrun", "--nnodes", "1:4", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "16",
               "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
               "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--global-batch-size", "384", "--bf16",
               "--vocab-size", "32000", "--num-experts", "16", "--expert-model-parallel-size", "16"]
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--top", "30", "--search", "s.yaml",
                              "--", *command], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["search"]["invalid_by_rule"]["world at the elastic minimum (1 node, 8 GPUs) % (etp*ep*pp) != 0"] > 0
    assert data["top"] and all(8 % ((row["etp"] or row["tp"]) * row["ep"] * row["pp"]) == 0 for row in data["top"])
    assert "your command cannot start at the elastic minimum (world at the elastic minimum (1 node, 8 GPUs) % " \
           "(etp*ep*pp) != 0" in err, err


def test_elastic_layouts_over_memory_at_the_minimum_are_not_listed(home: Path, capsys) -> None:
    """R66: fit was checked at the maximum only. A 13B-like Megatron job with the distributed optimizer under
    --nnodes 1:4: TP 1 x PP 2 fits 4 nodes (DP 16) but not one (DP 4: each rank holds 4x the optimizer shard, the
    memory model's peak over the usable 75 GiB). R66 warned of it by its rank; since H188 it is pruned (counted as out
    of memory at the elastic minimum), and TP 4 x PP 2 (DP 4 -> 1, sharded over TP: it fits one node too) is listed.
    The global batch is 768, which every count of 1 to 4 nodes can split."""
    (home / "s.yaml").write_text("micro_batch_size: [1]\ntensor_parallel: [1, 4]\npipeline_parallel: [2]\n"
                                 "virtual_pipeline: [1]\ncontext_parallel: [1]\nrecompute: [none]\n"
                                 "distributed_optimizer: [true]\n")
    command = ["torchrun", "--nnodes", "1:4", *MEGATRON_16[3:], "--use-distributed-optimizer"]
    for flag, value in (("--num-layers", "40"), ("--hidden-size", "5120"), ("--num-attention-heads", "40"),
                        ("--global-batch-size", "768")):
        command[command.index(flag) + 1] = value
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--top", "5", "--search", "s.yaml",
                              "--", *command], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["top"] and {row["tp"] for row in data["top"]} == {4}, data["top"]  # TP 4 with and without SP
    assert data["search"]["num_oom_elastic_minimum"] >= 1, data["search"]
    assert "and fits its memory at 1, where fewer data-parallel ranks" in data["elastic"], data["elastic"]

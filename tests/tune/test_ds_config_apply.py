"""--apply for DeepSpeed: a NEW ds_config next to the user's (never overwritten), argv pointed at it."""

import dataclasses
import json
from pathlib import Path

import pytest

from llmperf_hook.tune import ds_config_rewrite as dsr
from llmperf_hook.tune.apply import plan_tuned_command, write_planned_files
from llmperf_hook.tune.candidate import apply_candidate, candidate_of

from .helpers import gpt_config, run_cli

DS = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4,
      "zero_optimization": {"stage": 1, "overlap_comm": True}, "bf16": {"enabled": True}}


def _ds_cfg(framework: str = "deepspeed"):
    return dataclasses.replace(gpt_config(world=16, tp=1, pp=1, mbs=1, gbs=64, layers=24, hidden=2048, heads=16,
                                          zero=1), framework=framework)


def _write(tmp_path: Path, content: dict) -> Path:
    p = tmp_path / "ds_config.json"
    p.write_text(json.dumps(content))
    return p


def test_new_config_written_next_to_original(tmp_path: Path) -> None:
    original = _write(tmp_path, DS)
    before = original.read_bytes()
    cfg = _ds_cfg()
    new = dataclasses.replace(candidate_of(cfg), micro_batch_size=4, zero_stage=2)
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds_config.json", "--lr", "3"]
    plan = plan_tuned_command(argv, cfg, new, apply_candidate(cfg, new), cwd=tmp_path)
    assert list(plan.argv) == [*argv[:5], "ds_config.llmperf-tuned.json", "--lr", "3"]
    write_planned_files(plan)
    tuned = json.loads((tmp_path / "ds_config.llmperf-tuned.json").read_text())
    assert tuned["train_micro_batch_size_per_gpu"] == 4 and tuned["gradient_accumulation_steps"] == 1  # 64/(4*16)
    assert tuned["train_batch_size"] == 64 and tuned["zero_optimization"] == {"stage": 2, "overlap_comm": True}
    assert original.read_bytes() == before


def test_fresh_name_when_taken_and_never_overwrites(tmp_path: Path) -> None:
    original = _write(tmp_path, DS)
    (tmp_path / "ds_config.llmperf-tuned.json").write_text("{}")
    cfg = _ds_cfg()
    new = dataclasses.replace(candidate_of(cfg), zero_stage=3)
    argv = ["deepspeed", "train.py", f"--deepspeed_config={original}"]
    plan = plan_tuned_command(argv, cfg, new, apply_candidate(cfg, new), cwd=tmp_path)
    assert plan.argv[-1] == f"--deepspeed_config={tmp_path / 'ds_config.llmperf-tuned-2.json'}"
    write_planned_files(plan)
    assert (tmp_path / "ds_config.llmperf-tuned.json").read_text() == "{}"
    with pytest.raises(FileExistsError):
        write_planned_files(plan)


def test_hf_auto_values_rewrite_trainer_flags(tmp_path: Path) -> None:
    _write(tmp_path, {**DS, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                      "train_batch_size": "auto"})
    cfg = dataclasses.replace(_ds_cfg("hf-deepspeed"), recompute=dataclasses.replace(_ds_cfg().recompute, granularity="none", method=None, num_layers=None))
    new = dataclasses.replace(candidate_of(cfg), micro_batch_size=2, recompute="full", recompute_num_layers=1)
    argv = ["deepspeed", "run_clm.py", "--deepspeed", "ds_config.json", "--per_device_train_batch_size", "1",
            "--gradient_accumulation_steps", "4"]
    plan = plan_tuned_command(argv, cfg, new, apply_candidate(cfg, new), cwd=tmp_path)
    assert plan.new_files == {}  # nothing in the file changes: "auto" stays, the Trainer flags carry the values
    out = list(plan.argv)
    assert out[out.index("--per_device_train_batch_size") + 1] == "2"
    assert out[out.index("--gradient_accumulation_steps") + 1] == "2"  # 64 / (2 * 16)
    assert out[out.index("--gradient_checkpointing") + 1] == "True"


def test_megatron_deepspeed_rewrites_argv_and_config(tmp_path: Path) -> None:
    _write(tmp_path, {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0}})
    cfg = dataclasses.replace(_ds_cfg("megatron-deepspeed"), optimizer=dataclasses.replace(_ds_cfg().optimizer, zero_stage=0))
    new = dataclasses.replace(candidate_of(cfg), micro_batch_size=2, zero_stage=1)
    argv = ["deepspeed", "pretrain_gpt.py", "--micro-batch-size", "1", "--global-batch-size", "64", "--deepspeed",
            "--deepspeed_config", "ds_config.json", "--zero-stage", "0"]
    plan = plan_tuned_command(argv, cfg, new, apply_candidate(cfg, new), cwd=tmp_path)
    out = list(plan.argv)
    assert out[out.index("--micro-batch-size") + 1] == "2" and out[out.index("--zero-stage") + 1] == "1"
    assert out[out.index("--deepspeed_config") + 1] == "ds_config.llmperf-tuned.json"
    tuned = json.loads(next(iter(plan.new_files.values())))
    assert tuned["train_micro_batch_size_per_gpu"] == 2 and tuned["zero_optimization"]["stage"] == 1


def test_find_ds_config_spellings(tmp_path: Path) -> None:
    assert dsr.find_ds_config(["x.py", "--deepspeed-config", "a.json"]).path == "a.json"
    assert dsr.find_ds_config(["x.py", "--deepspeed_config=b.json"]).path == "b.json"
    assert dsr.find_ds_config(["x.py", "--deepspeed", "c.json"]).path == "c.json"
    assert dsr.find_ds_config(["x.py", "--deepspeed", "--deepspeed_config", "d.json"]).path == "d.json"
    assert dsr.find_ds_config(["x.py", "--deepspeed", "--lr", "1"]) is None


def test_listed_zero_stages_the_config_refuses_all_keep_the_commands_stage(tmp_path: Path, capsys, monkeypatch) -> None:
    """`--search` with zero_stage [1] on a ZeRO-3 partial-offload config: DeepSpeed refuses stage 1 there, so the stage
    stays the command's 3, said in a warning (the whole list used to be searched when none passed, and a ZeRO-1 copy
    DeepSpeed refuses was offered)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}))
    (tmp_path / "s.yaml").write_text("micro_batch_size: [2]\nzero_stage: [1]\n")
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama2-7b", "--format", "json", "--search",
                              "s.yaml", "--", "deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config",
                              "ds.json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert {row["zero_stage"] for row in data["top"]} == {3} and data["knobs"]["kept"]["zero_stage"] == 3
    assert "zero_stage [1]" in err and "kept at the command's stage 3" in err


@pytest.mark.parametrize("raw,auto_filled,stated", [
    # train_batch_size + accumulation: the micro-batch and the (default) stage stated, the accumulation tuned
    ({"train_batch_size": 64, "gradient_accumulation_steps": 8}, False,
     {"train_batch_size": 64, "gradient_accumulation_steps": 2, "train_micro_batch_size_per_gpu": 4,
      "zero_optimization": {"stage": 0}}),
    # no batch key (Megatron-DeepSpeed runs its flags' batch): train_batch_size stated with the micro-batch
    ({"zero_optimization": {"stage": 1}}, True,
     {"zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": 4, "train_batch_size": 64}),
    # plain DeepSpeed reads "auto" as a string: dropped, the numbers state the batch
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 1}}, False,
     {"train_batch_size": 64, "zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": 4}),
    # the Trainer fills "auto": kept
    ({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": "auto"}},
     True, {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": "auto"}}),
])
def test_the_tuned_copy_states_the_batch_deepspeed_runs(raw: dict, auto_filled: bool, stated: dict) -> None:
    """Micro-batch 4 at 8 GPUs, global batch 64 (2 micro-batches): what each way of giving DeepSpeed's batch becomes."""
    new = dataclasses.replace(candidate_of(gpt_config(world=8, tp=1, pp=1, mbs=1, gbs=64, zero=0)), micro_batch_size=4)
    assert dsr.tuned_ds_config(raw, new, 2, set_zero=False, global_batch_size=64, auto_filled=auto_filled) == stated


@pytest.mark.parametrize("launch", [
    ["accelerate", "launch", "--use_deepspeed", "--num_processes", "16", "--deepspeed_config_file", "ds_config.json",
     "run_clm.py"],
    ["deepspeed", "--num_gpus", "16", "run_clm.py", "--deepspeed", "ds_config.json"],
])
def test_the_commands_own_layout_writes_no_copy(launch: list[str], tmp_path: Path) -> None:
    """A config that leaves the micro-batch and stage unsaid, which a tuned copy states: the command's own layout
    runs its config as written (accelerate's --deepspeed_config_file got a copy and a retargeted argv)."""
    _write(tmp_path, {"zero_optimization": {"stage": "auto"}, "bf16": {"enabled": True}})
    cfg = _ds_cfg("hf-deepspeed")
    argv = [*launch, "--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "4"]
    own = candidate_of(cfg)
    plan = plan_tuned_command(argv, cfg, own, apply_candidate(cfg, own), cwd=tmp_path)
    assert (list(plan.argv), plan.new_files) == (argv, {})

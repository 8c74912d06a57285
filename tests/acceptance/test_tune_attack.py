"""Issue 7's `llmperf tune` attacked as a skeptical Megatron-LM / DeepSpeed user would: --apply of a command that
is already the best, the JSON rows' layout and the nothing-fits JSON's pruning counts, and tuned ds_configs that
DeepSpeed's own batch rule (deepspeed/runtime/config.py _configure_train_batch_size) accepts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from .cli import GPT3_ON_8, run_cli

ZERO3 = {"train_batch_size": 256, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
         "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}
ONE_SIZE = "micro_batch_size: [2]\nzero_stage: [3]\nrecompute: [none]\n"


def test_apply_when_the_command_is_already_the_best_says_so_and_writes_nothing(tmp_path: Path, capsys,
                                                                                monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps(ZERO3))
    (tmp_path / "s.yaml").write_text(ONE_SIZE)
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed", "--deepspeed_config", "ds.json"]
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama2-7b", "--search", "s.yaml", "--apply",
                              "--dry-run", "--", *argv], capsys)
    assert code == 0, err
    assert "already the fastest configuration found: nothing to change" in out
    assert out.splitlines()[-1] == "llmperf tune: would run: " + " ".join(argv)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds.json", "s.yaml"]


def test_json_rows_carry_the_tables_layout(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps(ZERO3))
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed", "--deepspeed_config", "ds.json"]
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama2-7b", "--format", "json", "--top", "2",
                              "--", *argv], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["baseline"]["layout"] == "tp1 pp1 mbs2 rc:none zero3"
    for row in data["top"]:
        assert row["layout"].startswith(f"tp{row['tp']} pp{row['pp']} ") and f"mbs{row['micro_batch_size']}" in row["layout"]


def test_nothing_fits_json_counts_the_pruned_candidates(capsys) -> None:
    code, out, _ = run_cli(["tune", "--cluster", "dgx-a100", "--format", "json", "--", *GPT3_ON_8], capsys)
    assert code == 3
    data = json.loads(out)
    search = data["search"]
    assert search["num_fitting"] == 0 and search["num_considered"] == (
        search["num_invalid"] + search["num_oom_estimated"] + search["num_oom_predicted"] + search["num_slower_by_estimate"])
    assert sum(search["invalid_by_rule"].values()) == search["num_invalid"]
    assert str(search["num_considered"]) in data["error"].replace(",", "")


class _Mpu:
    """What DeepSpeedConfig asks a model-parallel unit for: the data-parallel size."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


@pytest.mark.parametrize("keys", [
    {"train_batch_size": 128},
    {"train_batch_size": 128, "gradient_accumulation_steps": 2},
    {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2},
    {"train_batch_size": 128, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4},
])
def test_tuned_ds_config_passes_deepspeeds_batch_rule(tmp_path: Path, capsys, monkeypatch, keys) -> None:
    """Every way of giving DeepSpeed's batch triad; the tuned copy is read by DeepSpeed's own DeepSpeedConfig at the
    data-parallel size explain reads for the applied command, and agrees with the tuned row."""
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    deepspeed_config = pytest.importorskip("deepspeed.runtime.config")
    monkeypatch.setattr(deepspeed_config.dist, "get_rank", lambda *a, **k: 0)  # no process group on a test host
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({**keys, "fp16": {"enabled": True}, "zero_optimization": {"stage": 0}}))
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed", "--deepspeed_config", "ds.json"]
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama2-7b", "--format", "json", "--apply",
                              "--dry-run", "--", *argv], capsys)
    assert code == 0, err
    data = json.loads(out)
    best, tuned = data["top"][0], data["applied"]["new_files"]
    assert len(tuned) == 1 and json.loads((tmp_path / "ds.json").read_text())["zero_optimization"]["stage"] == 0
    code, out, err = run_cli(["explain", "--model", "llama2-7b", "--format", "json", "--", *data["applied"]["argv"]],
                             capsys)
    assert code == 0, err
    resolved = json.loads(out)
    ds = deepspeed_config.DeepSpeedConfig(tuned[0], mpu=_Mpu(resolved["dp"]))
    assert (ds.train_micro_batch_size_per_gpu, ds.zero_optimization_stage) == (best["micro_batch_size"], best["zero_stage"])
    assert ds.train_batch_size == resolved["global_batch_size"] == 128  # every triad above gives 128 on 8 GPUs
    assert ds.train_batch_size == ds.train_micro_batch_size_per_gpu * ds.gradient_accumulation_steps * resolved["dp"]


def test_tuned_rows_state_the_global_batch_a_command_left_to_megatrons_default(tmp_path: Path, capsys) -> None:
    """Without --global-batch-size Megatron runs micro-batch x DP; tune holds the command's (1 x 4 = 4 here), so a
    tuned layout with another micro-batch x DP (1 x 2 at TP 4 or PP 4) must say --global-batch-size 4. It was left
    out: the applied command ran another global batch, or explain refused it (interleaving with fewer micro-batches
    than PP)."""

    argv = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048",
            "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--micro-batch-size", "1", "--bf16", "--vocab-size", "50257", "--tensor-model-parallel-size", "2"]
    for search in ("tensor_parallel: [4]\npipeline_parallel: [1]\ncontext_parallel: [1]\nmicro_batch_size: [1]\n",
                   "tensor_parallel: [1]\npipeline_parallel: [4]\ncontext_parallel: [1]\nmicro_batch_size: [1]\n"):
        (tmp_path / "s.yaml").write_text(search)
        code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", "--top", "20", "--search",
                                  str(tmp_path / "s.yaml"), "--", *argv], capsys)
        assert code == 0, err
        tuned = [row for row in json.loads(out)["top"] if (row["tp"], row["pp"]) != (2, 1)]
        assert tuned and all({"where": "argv", "key": "--global-batch-size", "old": None, "new": "4"} in row["changes"]
                             for row in tuned)
    from llmperf_hook import api
    from llmperf_hook.tune.apply import plan_tuned_command
    from llmperf_hook.tune.candidate import apply_candidate, candidate_of

    _, cfg, _, _ = api.resolve_command(argv, {}, cluster="dgx-h100")
    new = dataclasses.replace(candidate_of(cfg), tp=1, pp=4)
    plan = plan_tuned_command(argv, cfg, new, apply_candidate(cfg, new))
    _, resolved, _, _ = api.resolve_command(list(plan.argv), {}, cluster="dgx-h100")
    assert (resolved.batch.global_batch_size, candidate_of(resolved)) == (4, new)


def test_json_bad_input_prints_one_error_object_and_exits_2(tmp_path: Path, capsys) -> None:
    """`--format json` keeps stdout one JSON object when the command itself is refused before tuning (its own
    layout invalid, a bad --search file), as it already did for nothing-fits and --apply refusals; stdout was empty."""
    argv = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "30", "--hidden-size", "2048",
            "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--micro-batch-size", "1", "--bf16", "--vocab-size", "50257", "--pipeline-model-parallel-size", "4"]
    (tmp_path / "bad.yaml").write_text("micro_batch_size: [0]\n")
    for extra, argv_used in ((), argv), (("--search", str(tmp_path / "bad.yaml")), argv[:-2]):
        code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", *extra, "--", *argv_used], capsys)
        data = json.loads(out)
        assert code == 2 and data["exit_code"] == 2 and data["error"] in err


def test_nothing_fits_for_a_deepspeed_script_points_at_what_tune_does_not_search(tmp_path: Path, capsys,
                                                                                 monkeypatch) -> None:
    """A plain DeepSpeed script's TP/PP and recompute are in its own code, so 'widen the search with more TP/PP'
    was advice tune cannot follow; the message names offload and activation checkpointing instead, and says what
    'largest' means."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8,
                                                  "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}))
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed", "--deepspeed_config", "ds.json"]
    code, _, err = run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama2-70b", "--", *argv], capsys)
    assert code == 3 and "offload_optimizer" in err and "activation checkpointing" in err and "TP/PP" not in err
    assert "largest = most layers" in err


def test_layers_per_virtual_stage_count_the_accounted_embedding_and_loss() -> None:
    """--account-for-embedding/loss-in-pipeline-split add a layer each before Megatron divides by PP and by
    --num-layers-per-virtual-pipeline-stage (30 + 2 = 32 here); --apply wrote 30 // (PP x VPP), which explain and
    Megatron refuse ('7 must divide 16') or read as another VPP (8 -> 16): 40 of 80 sampled layouts."""
    from llmperf_hook import api
    from llmperf_hook.tune.apply import plan_tuned_command
    from llmperf_hook.tune.candidate import apply_candidate, candidate_of

    argv = ["torchrun", "--nproc-per-node", "8", "--nnodes", "2", "pretrain_gpt.py", "--num-layers", "30",
            "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
            "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16",
            "--vocab-size", "50257", "--pipeline-model-parallel-size", "2", "--account-for-embedding-in-pipeline-split",
            "--account-for-loss-in-pipeline-split"]
    _, cfg, _, _ = api.resolve_command(argv, {}, cluster="dgx-h100")
    for vpp in (2, 8):
        new = dataclasses.replace(candidate_of(cfg), vpp=vpp)
        plan = plan_tuned_command(argv, cfg, new, apply_candidate(cfg, new))
        assert plan.argv[-2:] == ("--num-layers-per-virtual-pipeline-stage", str(32 // (2 * vpp)))
        _, resolved, _, _ = api.resolve_command(list(plan.argv), {}, cluster="dgx-h100")
        assert candidate_of(resolved) == new


def test_hierarchical_context_parallel_sizes_fix_cp(capsys) -> None:
    """--hierarchical-context-parallel-sizes 2 2 (needed by --cp-comm-type a2a+p2p) must multiply to CP (arguments.py
    asserts it), and --apply keeps the flag: CP 1 / 2 rows were proposed, which Megatron refuses at start-up."""
    argv = ["torchrun", "--nproc-per-node", "8", "--nnodes", "2", "pretrain_gpt.py", "--num-layers", "24",
            "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "8192", "--max-position-embeddings",
            "8192", "--micro-batch-size", "1", "--global-batch-size", "32", "--bf16", "--vocab-size", "50257",
            "--tensor-model-parallel-size", "2", "--sequence-parallel", "--context-parallel-size", "4",
            "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2", "2"]
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", "--top", "10", "--", *argv], capsys)
    assert code == 0, err
    assert {row["cp"] for row in json.loads(out)["top"]} == {4}
    assert "--hierarchical-context-parallel-sizes fixes context parallel at 4" in err


def test_hierarchical_context_parallel_sizes_inside_sh_c_fix_cp(capsys) -> None:
    """The same command inside `sh -c "..."` (as srun runs one): the flag is found among the training script's parsed
    arguments; it was looked for among the outer words only, where the whole command is one word, and CP 1 / 2 rows
    were proposed."""
    argv = ["torchrun", "--nproc-per-node", "8", "--nnodes", "2", "pretrain_gpt.py", "--num-layers", "24",
            "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "8192", "--max-position-embeddings",
            "8192", "--micro-batch-size", "1", "--global-batch-size", "32", "--bf16", "--vocab-size", "50257",
            "--tensor-model-parallel-size", "2", "--sequence-parallel", "--context-parallel-size", "4",
            "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2", "2"]
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", "--top", "10", "--", "sh", "-c",
                              " ".join(argv)], capsys)
    assert code == 0, err
    assert {row["cp"] for row in json.loads(out)["top"]} == {4}
    assert "--hierarchical-context-parallel-sizes fixes context parallel at 4" in err

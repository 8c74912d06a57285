"""tune says which knobs it searched (with the values tried) and which it kept as the command has them: plain
DeepSpeed searches micro-batch and ZeRO stage only (TP / PP / CP live in the model code), Megatron-LM every layout
knob (it has no ZeRO stage, so none is named), Megatron-DeepSpeed keeps its DeepSpeed-Ulysses size, virtual stages and
the distributed optimizer. A framework rule that narrows a knob is stated as a rule (`knobs.rules`, a line under the
table's knobs line), not left to a pruned count."""

from __future__ import annotations

import json
from pathlib import Path

from .helpers import run_cli
from .test_search_narrowing import MEGATRON


def _knobs(args: list[str], capsys) -> tuple[dict, str]:
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", *args], capsys)
    assert code == 0, err
    return json.loads(out)["knobs"], err


def test_megatron_searches_every_layout_knob_and_names_no_zero_stage(capsys) -> None:
    knobs, _ = _knobs(["--", *MEGATRON], capsys)
    searched, kept = knobs["searched"], knobs["kept"]
    assert {"micro_batch_size", "tp", "pp", "vpp", "cp", "sequence_parallel", "recompute",
            "distributed_optimizer"} <= set(searched), searched
    assert "zero_stage" not in searched and "zero_stage" not in kept  # Megatron-LM has no ZeRO stage to keep
    assert set(searched["recompute"]) == {"none", "selective", "full", "block"}
    assert 16 in searched["pp"] and searched["tp"] == [1, 2, 4, 8]


def test_plain_deepspeed_searches_micro_batch_and_zero_only(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                                                  "zero_optimization": {"stage": 1}, "bf16": {"enabled": True}}))
    knobs, _ = _knobs(["--model", "llama2-7b", "--", "deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config",
                       "ds.json"], capsys)
    assert set(knobs["searched"]) == {"micro_batch_size", "zero_stage"}
    assert knobs["searched"]["zero_stage"] == [0, 1, 2, 3]
    assert {"tp": 1, "pp": 1, "cp": 1, "recompute": "none"}.items() <= knobs["kept"].items()
    # Megatron flags: DeepSpeed's sharding is its ZeRO stage, its sequence split Ulysses (kept as "cp")
    assert "distributed_optimizer" not in knobs["kept"] and "sequence_parallel" not in knobs["kept"]


def test_the_table_names_searched_and_kept_knobs(capsys) -> None:
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--", *MEGATRON], capsys)
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("searched:"))
    assert "TP 1, 2, 4, 8" in line and "distributed optimizer off, on" in line
    assert "ZeRO" not in out  # Megatron-LM shards optimizer state with --use-distributed-optimizer, not ZeRO


def _pipeline_script(tmp_path: Path, zero: int = 1) -> list[str]:
    """A DeepSpeed script with a 2-stage PipelineModule (ds_config pipeline.stages): DeepSpeed runs PipelineEngine."""
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                                                  "zero_optimization": {"stage": zero}, "bf16": {"enabled": True},
                                                  "pipeline": {"stages": 2}}))
    return ["--model", "llama2-7b", "--", "deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds.json"]


def test_a_deepspeed_pipeline_script_never_searches_zero_2_or_3_and_says_why(tmp_path: Path, capsys, monkeypatch) -> None:
    """deepspeed/runtime/pipe/engine.py PipelineEngine.__init__ asserts zero_optimization_stage() < gradients ('ZeRO-2
    and ZeRO-3 are incompatible with pipeline parallelism'): tune listed ZeRO 2/3 as searched and then pruned every
    one of them as invalid. They are not values to try there; the rule is said once."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", *_pipeline_script(tmp_path)], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["knobs"]["searched"]["zero_stage"] == [0, 1]
    assert "PipelineEngine" in data["knobs"]["rules"]["zero_stage"]
    assert not any("ZeRO-2/3" in rule for rule in data["search"]["invalid_by_rule"]), data["search"]["invalid_by_rule"]
    assert {row["zero_stage"] for row in data["top"]} <= {0, 1}
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", *_pipeline_script(tmp_path)], capsys)
    rule = next(ln for ln in out.splitlines() if ln.strip().startswith("ZeRO:"))
    assert "ZeRO 2/3 not tried" in rule and "PipelineEngine" in rule


MEGATRON_DEEPSPEED_ULYSSES = [
    "deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048",
    "--num-attention-heads", "16", "--seq-length", "8192", "--max-position-embeddings", "8192", "--vocab-size", "32000",
    "--micro-batch-size", "1", "--global-batch-size", "64", "--tensor-model-parallel-size", "1",
    "--pipeline-model-parallel-size", "1", "--ds-sequence-parallel-size", "2", "--bf16", "--deepspeed",
    "--deepspeed_config", "ds.json", "--zero-stage", "1", "--no-pipeline-parallel",
]


def test_megatron_deepspeed_keeps_its_ulysses_size_and_names_it(tmp_path: Path, capsys, monkeypatch) -> None:
    """--ds-sequence-parallel-size is DeepSpeed-Ulysses, which predict prices as context parallelism (its warning):
    tune keeps it (it cannot rank Ulysses sizes), says why, calls it Ulysses SP rather than CP (Megatron-DeepSpeed has
    no --context-parallel-size), and the applied command keeps the flag, which explain accepts."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                                                  "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}))
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", "--apply", "--dry-run", "--",
                              *MEGATRON_DEEPSPEED_ULYSSES], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["knobs"]["kept"]["cp"] == 2 and "Ulysses" in data["knobs"]["rules"]["cp"]
    assert {row["cp"] for row in data["top"]} == {2}
    applied = data["applied"]["argv"]
    assert applied[applied.index("--ds-sequence-parallel-size") + 1] == "2"
    code, explained, err = run_cli(["explain", "--format", "json", "--", *applied], capsys)
    assert code == 0, err
    assert json.loads(explained)["cp"] == 2
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--", *MEGATRON_DEEPSPEED_ULYSSES], capsys)
    line = next(ln for ln in out.splitlines() if ln.startswith("searched:"))
    assert "Ulysses SP 2" in line and " CP " not in line


def test_a_search_file_widening_ulysses_is_told_why_it_is_kept(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                                                  "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}))
    (tmp_path / "s.yaml").write_text("context_parallel: [1, 2, 4]\n")
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--search", "s.yaml", "--format", "json", "--",
                              *MEGATRON_DEEPSPEED_ULYSSES], capsys)
    assert code == 0, err
    note = next(ln for ln in err.splitlines() if "context_parallel is not searched" in ln)
    assert "DeepSpeed-Ulysses" in note and "--ds-sequence-parallel-size" in note

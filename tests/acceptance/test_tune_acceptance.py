"""Issue 7 (`llmperf tune`) as its acceptance criteria read, through the real CLI: --top K, the JSON report,
the gain over the user's own command, pruned counts, --search narrowing / widening and bad files, --apply on
Megatron-LM, Megatron-DeepSpeed, DeepSpeed and Hugging Face Trainer commands (explain accepts each applied
command, the user's files are untouched, a taken tuned name gets a fresh one), a real launch through --apply
with the child's exit code, and the infeasible exit 3 naming the largest configuration that would fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .cli import GPT3_ON_8, MEGATRON_16, error_lines, run_child, run_cli

TOP_ROW_KEYS = {"tp", "pp", "vpp", "cp", "sequence_parallel", "micro_batch_size", "recompute", "distributed_optimizer",
                "zero_stage", "step_time_s", "tokens_per_s", "mfu", "peak_bytes_per_gpu", "capacity_bytes",
                "headroom_bytes", "fits", "changes"}


def _tune_json(args: list[str], capsys) -> dict:
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", *args], capsys)
    assert code == 0, err
    return json.loads(out)


def _explain(argv: list[str], capsys, extra: tuple[str, ...] = ()) -> dict:
    code, out, err = run_cli(["explain", "--format", "json", *extra, "--", *argv], capsys)
    assert code == 0, err
    return json.loads(out)


def test_json_report_top_k_gain_and_pruned_counts(capsys) -> None:
    data = _tune_json(["--top", "3", "--", *MEGATRON_16], capsys)
    assert {"job", "cluster", "search_space", "search", "baseline", "top", "speedup_over_baseline"} <= set(data)
    top, base, search = data["top"], data["baseline"], data["search"]
    assert len(top) == 3 and all(TOP_ROW_KEYS <= set(row) for row in top)
    assert [r["step_time_s"] for r in top] == sorted(r["step_time_s"] for r in top)
    assert all(r["fits"] and r["peak_bytes_per_gpu"] <= 0.95 * r["capacity_bytes"] for r in top)
    for row in top:
        assert row["headroom_bytes"] == pytest.approx(row["capacity_bytes"] - row["peak_bytes_per_gpu"])
    # the user's own tp4 pp2 mbs1 is the baseline; the gain is stated against it
    assert (base["tp"], base["pp"], base["micro_batch_size"]) == (4, 2, 1)
    assert data["speedup_over_baseline"] == pytest.approx(base["step_time_s"] / top[0]["step_time_s"], rel=1e-6)
    assert data["speedup_over_baseline"] > 1.0
    # every considered candidate is accounted for, and each invalid one under a named rule
    assert search["num_considered"] == (search["num_invalid"] + search["num_oom_estimated"]
                                        + search["num_oom_predicted"] + search["num_slower_by_estimate"]
                                        + search["num_fitting"])
    assert sum(search["invalid_by_rule"].values()) == search["num_invalid"] > 0
    assert all(rule and not rule.endswith(" N") for rule in search["invalid_by_rule"])


def test_table_names_flag_changes_and_gain(capsys) -> None:
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--top", "2", "--", *MEGATRON_16], capsys)
    assert code == 0, err
    rows = [ln for ln in out.splitlines() if ln.lstrip()[:2] in ("1 ", "2 ")]
    assert len(rows) == 2 and all("->" in row or "add --" in row or "(same as yours)" in row for row in rows)
    assert "(your command)" in out and "predicted gain over your command" in out
    assert "invalid" in out and "out of memory" in out


def test_search_narrows_and_widens(tmp_path: Path, capsys) -> None:
    narrow = tmp_path / "narrow.yaml"
    narrow.write_text("micro_batch_size: [2]\ntensor_parallel: [4]\npipeline_parallel: [2, 4]\n"
                      "virtual_pipeline: [1]\ncontext_parallel: [1]\nrecompute: [selective]\n"
                      "distributed_optimizer: [false]\n")
    data = _tune_json(["--top", "10", "--search", str(narrow), "--", *MEGATRON_16], capsys)
    rows = [r for r in data["top"] if r["changes"]]  # the user's own command may rank as '(same as yours)'
    assert rows and all((r["micro_batch_size"], r["tp"], r["vpp"], r["cp"], r["recompute"])
                        == (2, 4, 1, 1, "selective") and r["pp"] in (2, 4) for r in rows)
    assert data["search_space"] == str(narrow)
    wide = tmp_path / "wide.yaml"
    wide.write_text("max_micro_batch_size: 64\ncontext_parallel: [1, 2, 4, 8]\nmax_virtual_pipeline: 16\n")
    widened = _tune_json(["--top", "1", "--search", str(wide), "--", *MEGATRON_16], capsys)
    default = _tune_json(["--top", "1", "--", *MEGATRON_16], capsys)
    assert widened["search"]["num_considered"] > 2 * default["search"]["num_considered"]
    assert widened["top"][0]["step_time_s"] <= default["top"][0]["step_time_s"] + 1e-9


@pytest.mark.parametrize(("text", "message"), [
    (None, "no such file"),
    ("micro_batchsize: [1, 2]\n", "unknown key(s) micro_batchsize"),
    ("micro_batch_size: [0, -2]\n", "must be >= 1"),
    ("- 1\n- 2\n", "expected a mapping"),
    ("memory_margin: 1.5\n", "memory_margin 1.5"),
    ("recompute: [sometimes]\n", "recompute mode(s) ['sometimes'] unknown"),
    ("zero_stage: [4]\n", "zero_stage values must be 0-3"),
    ("micro_batch_size: []\n", "empty list"),
    ("distributed_optimizer: [maybe]\n", "'maybe' is not true or false"),
    ("micro_batch_size: [1, 2\n", "not valid YAML (line 2, column 1"),
])
def test_bad_search_file_exits_2_with_one_error_line(tmp_path: Path, capsys, text: str | None, message: str) -> None:
    path = tmp_path / "space.yaml"
    if text is not None:
        path.write_text(text)
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--search", str(path), "--", *MEGATRON_16], capsys)
    assert code == 2 and out == "" and "Traceback" not in err
    lines = error_lines(err)
    assert len(lines) == 1 and message in lines[0], err


def test_megatron_apply_dry_run_is_what_explain_and_predict_read(capsys) -> None:
    data = _tune_json(["--apply", "--dry-run", "--", *MEGATRON_16], capsys)
    best, argv = data["top"][0], data["applied"]["argv"]
    assert data["applied"]["new_files"] == [] and argv[:6] == MEGATRON_16[:6]
    resolved = _explain(argv, capsys)
    for key in ("tp", "pp", "vpp", "cp", "micro_batch_size", "sequence_parallel", "distributed_optimizer"):
        assert resolved[key] == best[key], key
    assert (resolved["world_size"], resolved["global_batch_size"]) == (16, 512)
    code, out, err = run_cli(["predict", "--cluster", "dgx-h100", "--format", "json", "--", *argv], capsys)
    assert code == 0, err
    assert json.loads(out)["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-5)


def _write(path: Path, obj: dict) -> bytes:
    path.write_text(json.dumps(obj))
    return path.read_bytes()


def test_deepspeed_apply_writes_a_new_config_next_to_the_original(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    original = _write(tmp_path / "ds.json", {"train_batch_size": 128, "train_micro_batch_size_per_gpu": 1,
                                              "gradient_accumulation_steps": 16, "bf16": {"enabled": True},
                                              "zero_optimization": {"stage": 1}})
    taken = _write(tmp_path / "ds.llmperf-tuned.json", {"mine": True})  # the user's file with the tuned name
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds.json", "--max_seq_length", "2048"]
    data = _tune_json(["--model", "llama2-13b", "--apply", "--dry-run", "--", *argv], capsys)
    new_files = data["applied"]["new_files"]
    assert new_files == [str(tmp_path / "ds.llmperf-tuned-2.json")]
    assert (tmp_path / "ds.json").read_bytes() == original
    assert (tmp_path / "ds.llmperf-tuned.json").read_bytes() == taken
    applied = data["applied"]["argv"]
    assert applied[applied.index("--deepspeed_config") + 1] == "ds.llmperf-tuned-2.json"
    written = json.loads(Path(new_files[0]).read_text())
    best = data["top"][0]
    assert written["train_micro_batch_size_per_gpu"] == best["micro_batch_size"]
    assert written["zero_optimization"]["stage"] == best["zero_stage"]
    assert written["train_batch_size"] == 128
    resolved = _explain(applied, capsys, ("--model", "llama2-13b"))
    assert (resolved["micro_batch_size"], resolved["zero_stage"]) == (best["micro_batch_size"], best["zero_stage"])


def test_megatron_deepspeed_and_hf_trainer_apply_are_accepted_by_explain(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    mds = _write(tmp_path / "mds.json", {"train_batch_size": 512, "train_micro_batch_size_per_gpu": 1,
                                         "bf16": {"enabled": True}, "zero_optimization": {"stage": 0}})
    argv = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--deepspeed", "--deepspeed_config", "mds.json",
            "--zero-stage", "0", "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
            "--num-layers", "40", "--hidden-size", "5120", "--num-attention-heads", "40", "--seq-length", "2048",
            "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--global-batch-size", "512", "--bf16",
            "--vocab-size", "50257"]
    data = _tune_json(["--apply", "--dry-run", "--", *argv], capsys)
    best, resolved = data["top"][0], _explain(data["applied"]["argv"], capsys)
    for key in ("tp", "pp", "micro_batch_size", "sequence_parallel", "zero_stage"):
        assert resolved[key] == best[key], key
    assert (tmp_path / "mds.json").read_bytes() == mds
    hf = _write(tmp_path / "hf.json", {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                                       "gradient_accumulation_steps": "auto", "zero_optimization": {"stage": 2}})
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed", "hf.json", "--per_device_train_batch_size", "1",
            "--gradient_accumulation_steps", "8", "--bf16", "--max_seq_length", "4096"]
    data = _tune_json(["--model", "llama2-7b", "--apply", "--dry-run", "--", *argv], capsys)
    best, resolved = data["top"][0], _explain(data["applied"]["argv"], capsys, ("--model", "llama2-7b"))
    assert (resolved["micro_batch_size"], resolved["zero_stage"]) == (best["micro_batch_size"], best["zero_stage"])
    assert resolved["global_batch_size"] == 64 and (tmp_path / "hf.json").read_bytes() == hf


def test_nothing_fits_exits_3_naming_the_largest_that_would_fit(capsys) -> None:
    code, out, err = run_cli(["tune", "--cluster", "dgx-a100", "--format", "json", "--apply", "--", *GPT3_ON_8], capsys)
    assert code == 3
    data = json.loads(out)
    assert data["exit_code"] == 3 and data["fits"] is False
    layers = data["nearest"]["layers_that_fit"]
    assert 0 < layers < 96
    lines = error_lines(err)
    assert len(lines) == 1 and f"the largest model that would fit has {layers} layers" in lines[0]
    assert data["nearest"]["layout"] in lines[0] and "would run" not in err and "running" not in err


def test_apply_launches_the_rewritten_command_and_returns_its_exit_code(tmp_path: Path) -> None:
    (tmp_path / "pretrain_gpt.py").write_text("import sys\nprint('CHILD', ' '.join(sys.argv[1:]))\nsys.exit(7)\n")
    argv = ["python", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16",
            "--seq-length", "2048", "--max-position-embeddings", "2048", "--micro-batch-size", "1",
            "--global-batch-size", "64", "--bf16", "--vocab-size", "50257"]
    proc = run_child(["tune", "--cluster", "dgx-h100", "--apply", "--", *argv], tmp_path)
    assert proc.returncode == 7, proc.stderr
    running = next(ln for ln in proc.stdout.splitlines() if ln.startswith("llmperf tune: running: "))
    child = next(ln for ln in proc.stdout.splitlines() if ln.startswith("CHILD "))
    assert running.split("pretrain_gpt.py ", 1)[1] == child[len("CHILD "):]
    assert child[len("CHILD "):].split() != argv[2:]  # the tuned layout, not the command as given

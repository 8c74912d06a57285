"""`llmperf tune` end to end with the real parser, predictor and explain: --apply output is accepted by
`explain` and resolves to the chosen layout; the user's files are untouched; nothing fits -> exit 3."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import run_cli

SMALL_MEGATRON = [
    "torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py",
    "--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
    "--max-position-embeddings", "2048", "--tokenizer-type", "GPT2BPETokenizer",
    "--micro-batch-size", "1", "--global-batch-size", "256", "--tensor-model-parallel-size", "2",
    "--pipeline-model-parallel-size=2", "--recompute-granularity", "full", "--recompute-method", "uniform",
    "--recompute-num-layers", "1", "--bf16",
]
DS_CONFIG = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8,
             "zero_optimization": {"stage": 0}, "bf16": {"enabled": True}}


def _explain(argv: list[str], capsys, extra: list[str] = ()) -> dict:
    code, out, err = run_cli(["explain", "--format", "json", *extra, "--", *argv], capsys)
    assert code == 0, err
    return json.loads(out)


def _applied_argv(out: str) -> list[str]:
    line = next(ln for ln in out.splitlines() if ln.startswith("llmperf tune: would run: "))
    return shlex.split(line[len("llmperf tune: would run: "):])


def test_megatron_apply_dry_run_is_accepted_by_explain(capsys) -> None:
    code, out, err = run_cli(["tune", "--cluster", "dgx-a100", "--format", "json", "--apply", "--dry-run", "--",
                           *SMALL_MEGATRON], capsys)
    assert code == 0, err
    data = json.loads(out)
    best = data["top"][0]
    assert data["search"]["num_considered"] == (data["search"]["num_invalid"] + data["search"]["num_oom_estimated"]
                                                + data["search"]["num_oom_predicted"] + data["search"]["num_over_margin"]
                                                + data["search"]["num_slower_by_estimate"] + data["search"]["num_fitting"])
    new_argv = data["applied"]["argv"]
    assert "would run" in err
    resolved = _explain(new_argv, capsys)
    for key, field in (("tp", "tp"), ("pp", "pp"), ("vpp", "vpp"), ("cp", "cp"), ("micro_batch_size", "micro_batch_size"),
                       ("sequence_parallel", "sequence_parallel"), ("distributed_optimizer", "distributed_optimizer")):
        assert resolved[key] == best[field], (key, resolved[key], best[field])
    assert resolved["global_batch_size"] == 256 and resolved["world_size"] == 16
    assert best["step_time_s"] <= data["baseline"]["step_time_s"] + 1e-9 or not data["baseline"]["fits"]
    # The top candidate's numbers are exactly what `llmperf predict` says for the rewritten command.
    code, pout, perr = run_cli(["predict", "--cluster", "dgx-a100", "--format", "json", "--", *new_argv], capsys)
    assert code == 0, perr
    assert json.loads(pout)["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-5)  # JSON keeps 6 digits


def test_deepspeed_apply_writes_new_config_and_keeps_the_users(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps(DS_CONFIG, indent=1))
    before = (tmp_path / "ds.json").read_bytes()
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds.json"]
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama3-8b", "--apply", "--dry-run", "--",
                           *argv], capsys)
    assert code == 0, err
    assert (tmp_path / "ds.json").read_bytes() == before
    new_argv = _applied_argv(out)
    resolved = _explain(new_argv, capsys, ["--model", "llama3-8b"])
    if new_argv == argv:  # the user's configuration already was the best: nothing to write
        return
    tuned = tmp_path / new_argv[new_argv.index("--deepspeed_config") + 1]
    assert tuned.name.startswith("ds.llmperf-tuned") and tuned.is_file()
    raw = json.loads(tuned.read_text())
    assert resolved["micro_batch_size"] == raw["train_micro_batch_size_per_gpu"]
    assert resolved["zero_stage"] == raw["zero_optimization"]["stage"]
    assert resolved["global_batch_size"] == 64


def test_nothing_fits_exits_3_naming_the_closest(capsys) -> None:
    argv = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "96", "--hidden-size", "12288",
            "--num-attention-heads", "96", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--tokenizer-type", "GPT2BPETokenizer", "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16"]
    code, out, err = run_cli(["tune", "--cluster", "dgx-a100", "--hardware", "a100-sxm4-40gb", "--", *argv], capsys)
    assert code == 3
    assert "nothing fits" in err and "least-memory configuration" in err and "GiB" in err
    assert "Traceback" not in err


def test_bad_search_file_is_exit_2(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "s.yaml"
    bad.write_text("pipeline_parallel: [zero]\n")
    code, _, err = run_cli(["tune", "--cluster", "dgx-a100", "--search", str(bad), "--", *SMALL_MEGATRON], capsys)
    assert code == 2 and "pipeline_parallel" in err


def test_apply_launches_the_rewritten_command(tmp_path: Path) -> None:
    """A real exec: the child records its argv and exits 7; tune's exit code is the child's."""
    script = tmp_path / "pretrain_gpt.py"
    record = tmp_path / "argv.json"
    script.write_text(f"import json, sys\njson.dump(sys.argv[1:], open({str(record)!r}, 'w'))\nsys.exit(7)\n")
    argv = [sys.executable, str(script), "--num-layers", "4", "--hidden-size", "512", "--num-attention-heads", "8",
            "--seq-length", "512", "--max-position-embeddings", "512", "--vocab-size", "1024",
            "--micro-batch-size", "1", "--global-batch-size", "16", "--recompute-granularity", "full",
            "--recompute-method", "uniform", "--recompute-num-layers", "1", "--bf16"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "llmperf_hook", "tune", "--cluster", "dgx-a100", "--apply", "--", *argv],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 7, out.stderr
    child_argv = json.loads(record.read_text())
    assert "llmperf tune: running:" in out.stdout
    assert child_argv != argv[2:]  # a 1-GPU job of a tiny model: larger micro-batches, no recompute win
    assert "--global-batch-size" in child_argv and child_argv[child_argv.index("--global-batch-size") + 1] == "16"


def test_a_repeated_apply_reuses_its_tuned_copy(tmp_path: Path, capsys, monkeypatch) -> None:
    """A dry run, then the same tune again: the second finds the identical tuned copy and points at it instead of
    writing ds.llmperf-tuned-2.json; a tuned name holding other content is never reused."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps(DS_CONFIG, indent=1))  # ZeRO-0: llama3-8b does not fit
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds.json"]
    runs = [_applied_argv(run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama3-8b", "--apply", "--dry-run", "--",
                                *argv], capsys)[1]) for _ in range(2)]
    assert runs[0] == runs[1] and runs[0] != argv
    assert sorted(p.name for p in tmp_path.glob("ds.llmperf-tuned*")) == ["ds.llmperf-tuned.json"]
    (tmp_path / "ds.llmperf-tuned.json").write_text("{}")  # not what tune would write: a fresh name
    third = _applied_argv(run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama3-8b", "--apply", "--dry-run", "--",
                                *argv], capsys)[1])
    assert third[third.index("--deepspeed_config") + 1] == "ds.llmperf-tuned-2.json"


def test_tune_refuses_what_predict_refuses(capsys) -> None:
    """tune resolves the command as predict does (api.resolve_command): FP8 on an A100 exits 2, not a tuned table."""
    code, _, err = run_cli(["tune", "--cluster", "dgx-a100", "--", *SMALL_MEGATRON, "--fp8-format", "hybrid"], capsys)
    assert code == 2 and "8.9 or higher" in err

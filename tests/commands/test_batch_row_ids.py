"""`llmperf predict --batch`: every result names the line it came from and the line's `--id`, so results join back
to their rows (before, only the order did, and an error object's message); `llmperf validate --write-batch` writes
each row's id, and its files predict from any working directory (a relative --write-batch folder wrote ds_config
paths that the batch, reading relative paths from its own folder, looked up one folder too deep: 952 of dev.csv's
1,000 DGX A100 commands failed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmperf_hook.commands.predict import parse_batch_line

SMALL = ("torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 "
         "--num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 "
         "--global-batch-size 8 --vocab-size 51200 --bf16")


def _llmperf(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmperf_hook", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_the_id_option_of_a_line() -> None:
    argv, options = parse_batch_line(f"--id 'run 7' --cluster dgx-a100 -- {SMALL}", {"id": None, "cluster": None})
    assert options["id"] == "run 7" and options["cluster"] == "dgx-a100" and argv[0] == "torchrun"


def test_json_results_carry_line_and_id(tmp_path: Path) -> None:
    (tmp_path / "cmds.txt").write_text(f"# header\n--id a -- {SMALL}\n\n{SMALL} \\\n --tensor-model-parallel-size 3\n"
                                       f"--id c -- {SMALL}\n", encoding="utf-8")
    proc = _llmperf("predict", "--cluster", "dgx-a100", "--batch", "cmds.txt", "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["line"], r["id"]) for r in results] == [(2, "a"), (4, None), (6, "c")]
    assert "step_time_s" in results[0] and "line 4:" in results[1]["error"] and "step_time_s" in results[2]


def test_table_results_are_headed_by_line_and_id(tmp_path: Path) -> None:
    (tmp_path / "cmds.txt").write_text(f"--id first -- {SMALL}\n{SMALL}\n", encoding="utf-8")
    proc = _llmperf("predict", "--cluster", "dgx-a100", "--batch", "cmds.txt", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "== line 1 (id first)" in proc.stdout and "== line 2\n" in proc.stdout


@pytest.mark.parametrize("folder", ["batch", "nested/batch"])
def test_write_batch_files_predict_with_the_rows_ids(tmp_path: Path, folder: str) -> None:
    header = ("row_id,num_layers,hidden_size,seq_length,micro_batch_size,global_batch_size,tp,pp,num_gpus,"
              "zero_stage_or_dist_opt,framework,precision,cluster,iteration_time_s")
    rows = ["z2,12,2048,2048,2,64,1,1,16,zero2,DeepSpeed,bf16,dgx-a100,1.5",
            "m1,12,2048,2048,2,64,2,1,16,,Megatron-LM,bf16,dgx-a100,1.0"]
    (tmp_path / "runs.csv").write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    wrote = _llmperf("validate", "runs.csv", "--no-rows", "--write-batch", folder, cwd=tmp_path)
    assert wrote.returncode == 0, wrote.stderr
    proc = _llmperf("predict", "--cluster", "dgx-a100", "--batch", f"{folder}/commands-dgx-a100.txt", "--format",
                    "json", cwd=tmp_path)
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["id"] for r in results] == ["z2", "m1"]
    assert all("error" not in r for r in results), results


@pytest.mark.parametrize("line", ["torchrun --nnodes 2  pretrain_gpt.py\t--lr 1e-4", "a 'b c' \"d e\" f\\ g",
                                  "x=1 y=$HOME z=a;b (c) *", "  ", "a\u00a0b c"])
def test_split_words_is_shlex_split(line: str) -> None:
    import shlex

    from llmperf_hook.commands.predict import split_words

    assert split_words(line) == shlex.split(line)

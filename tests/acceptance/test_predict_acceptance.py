"""Issues 2-3 (`explain`, `predict`) and issue 5's `predict --batch`, as their acceptance criteria read, through the
real CLI: derived values and their sources for Megatron-LM (torchrun, srun inside an allocation, sbatch) and DeepSpeed
(hostfile with include, ds_config triad) commands; what the frameworks reject exits 2 with one error paragraph; the
memory verdict both ways; the JSON keys; --trace lanes; batch files (order, comments, blank and continued lines, a
failing line as {"error"} with exit 0, relative paths against the file's folder, the command line's own files
against the working directory) agreeing with single predictions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .cli import error_lines, run_cli

SMALL = ["pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16",
         "--seq-length", "2048", "--max-position-embeddings", "2048", "--micro-batch-size", "2",
         "--global-batch-size", "64", "--bf16", "--vocab-size", "50257"]
"""A GPT-1.3B-like Megatron-LM job: fits one 80 GB GPU comfortably."""

GPT3 = ["pretrain_gpt.py", "--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "16", "--num-layers",
        "96", "--hidden-size", "12288", "--num-attention-heads", "96", "--seq-length", "2048",
        "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--global-batch-size", "1536", "--bf16",
        "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "gpt2-vocab.json", "--merge-file", "gpt2-merges.txt",
        "--use-distributed-optimizer", "--sequence-parallel", "--num-layers-per-virtual-pipeline-stage", "2"]
"""GPT-3 175B as Narayanan et al. 2021 laid it out, interleaved: 1,024 GPUs at TP 8 PP 16."""

LLAMA3_8B = ["pretrain_gpt.py", "--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "2",
             "--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32", "--group-query-attention",
             "--num-query-groups", "8", "--swiglu", "--ffn-hidden-size", "14336", "--seq-length", "8192",
             "--max-position-embeddings", "8192", "--micro-batch-size", "1", "--global-batch-size", "128", "--bf16",
             "--vocab-size", "128256", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
             "--untie-embeddings-and-output-weights"]


def _json(args: list[str], capsys) -> dict:
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    return json.loads(out)


def _batch(path: Path, capsys, *options: str) -> tuple[list[dict], str]:
    code, out, err = run_cli(["predict", *options, "--batch", str(path), "--format", "json"], capsys)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()], err


def test_batch_reads_the_command_lines_own_files_from_the_working_directory(tmp_path: Path, monkeypatch,
                                                                           capsys) -> None:
    """`--cluster mine.yaml` names ./mine.yaml; the batch file's folder only anchors paths written in the file."""
    (tmp_path / "mine.yaml").write_text("name: my-a100s\ngpu: a100-sxm4-80gb\ngpus_per_node: 8\n"
                                        "intra_node_bandwidth_GBps: 300\ninter_node_bandwidth_GBps: 25\n")
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "inner.yaml").write_text("name: inner-h100s\ngpu: h100-sxm5-80gb\ngpus_per_node: 8\n"
                                     "intra_node_bandwidth_GBps: 450\ninter_node_bandwidth_GBps: 50\n")
    line = " ".join(["torchrun", "--nproc-per-node", "8", *SMALL])
    (runs / "cmds.txt").write_text(f"{line}\n--cluster inner.yaml -- {line}\n")
    monkeypatch.chdir(tmp_path)
    results, _ = _batch(Path("runs/cmds.txt"), capsys, "--cluster", "mine.yaml")
    assert [r["cluster"]["name"] for r in results] == ["my-a100s", "inner-h100s"]

"""`tune --nproc-per-node N --apply` when the command itself starts another number of processes: the search
sized the layouts for N GPUs, the launch would start the command's own number, so --apply (dry run included)
exits 2 saying so instead of printing or launching a layout tuned for another world size (here a tuned
--micro-batch-size 8 at global batch 48 that Megatron refuses at DP 8). Without --apply the table is shown; an
override equal to the command's size, or one giving a size the command leaves open, applies as before."""

from __future__ import annotations

import json

from .helpers import run_cli

SHAPE = ["pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16",
         "--seq-length", "2048", "--max-position-embeddings", "2048", "--micro-batch-size", "1",
         "--global-batch-size", "48", "--bf16", "--vocab-size", "50257"]
TORCHRUN_8 = ["torchrun", "--nnodes", "1", "--nproc-per-node", "8", *SHAPE]


def _tune(extra: list[str], argv: list[str], capsys) -> tuple[int, str, str]:
    return run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", *extra, "--", *argv], capsys)


def test_apply_refuses_a_layout_tuned_for_another_world_size(capsys) -> None:
    code, out, err = _tune(["--nproc-per-node", "6", "--apply", "--dry-run"], TORCHRUN_8, capsys)
    assert code == 2 and "llmperf tune: would run" not in err
    message = [ln for ln in err.splitlines() if "error" in ln]
    assert len(message) == 1
    assert "searched for 6 GPUs (--nproc-per-node 6 given to llmperf)" in message[0]
    assert "the command starts 8 process(es)" in message[0]
    code, out, err = _tune(["--nnodes", "2", "--nproc-per-node", "8", "--apply", "--dry-run"], ["python", *SHAPE],
                           capsys)
    assert code == 2 and "the command starts 1 process(es)" in err


def test_without_apply_or_with_a_matching_size_nothing_changes(capsys) -> None:
    code, out, err = _tune(["--nproc-per-node", "6"], TORCHRUN_8, capsys)
    assert code == 0 and json.loads(out)["top"], err
    code, out, err = _tune(["--nproc-per-node", "8", "--apply", "--dry-run"], TORCHRUN_8, capsys)
    assert code == 0 and "would run" in err
    open_size = ["torchrun", "--nproc-per-node", "gpu", *SHAPE]  # the override says what 'gpu' means here
    code, out, err = _tune(["--nproc-per-node", "8", "--apply", "--dry-run"], open_size, capsys)
    assert code == 0 and json.loads(out)["applied"]["argv"][:3] == ["torchrun", "--nproc-per-node", "gpu"]


def test_refused_apply_prints_only_the_error_as_json(capsys) -> None:
    """stdout holds one JSON object, the error, not a result with "applied" that is then refused."""
    code, out, err = _tune(["--nproc-per-node", "6", "--apply", "--dry-run"], TORCHRUN_8, capsys)
    body = json.loads(out)
    assert code == 2 and body["exit_code"] == 2 and "applied" not in body
    assert "searched for 6 GPUs" in body["error"]

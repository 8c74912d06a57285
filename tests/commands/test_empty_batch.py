"""`llmperf predict --batch FILE` with no launch command in it (an empty file, only comments and blank lines, or
empty stdin from a pipeline that matched nothing) exits 2 saying so; it exited 0 with no output, which read as
success."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.commands.test_predict_cli import llmperf


@pytest.mark.parametrize("text, held", [("", "(nothing)"), ("\n\n", "(2 line(s), all blank or comments)"),
                                        ("# runs\n  # torchrun ...\n\n", "(3 line(s), all blank or comments)")])
def test_a_batch_file_without_commands_exits_2(text: str, held: str, tmp_path: Path) -> None:
    (tmp_path / "cmds.txt").write_text(text)
    result = llmperf("predict", "--batch", str(tmp_path / "cmds.txt"))
    assert result.returncode == 2 and "Traceback" not in result.stderr and result.stdout == ""
    assert f"the batch file {tmp_path / 'cmds.txt'} holds no launch command {held}" in result.stderr


def test_empty_stdin_exits_2() -> None:
    result = llmperf("predict", "--format", "json", "--batch", "-", stdin="")
    assert result.returncode == 2 and "standard input holds no launch command (nothing)" in result.stderr


def test_one_command_among_comments_is_predicted(tmp_path: Path) -> None:
    (tmp_path / "cmds.txt").write_text("# one\n\ntorchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 "
                                       "--hidden-size 256 --num-attention-heads 4 --seq-length 128 "
                                       "--max-position-embeddings 128 --vocab-size 1000 --micro-batch-size 1\n")
    result = llmperf("predict", "--format", "json", "--batch", str(tmp_path / "cmds.txt"))
    assert result.returncode == 0 and result.stdout.count('"step_time_s"') == 1, result.stderr

"""Regressions from the robustness campaign (issue h17): command-level inputs that used to end in exit 1 or be
silently accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmperf_hook.commands.predict import join_continued_lines
from llmperf_hook.commands.predict import command as predict_command
from llmperf_hook.commands.refine import command as refine_command
from llmperf_hook.commands.validate import command as validate_command

from .test_predict_cli import GPT


def test_batch_lines_continued_with_backslash() -> None:
    lines = ["# a comment \\", "torchrun a \\", "  b", "", "c\\\\", "d \\"]
    assert join_continued_lines(lines) == [(1, "# a comment \\"), (2, "torchrun a    b"), (4, ""), (5, "c\\\\"), (6, "d  ")]


def test_batch_file_with_continuation_and_bad_bytes(tmp_path: Path) -> None:
    good = " ".join(GPT)
    (tmp_path / "cmds.txt").write_text(f"{good[:40]} \\\n{good[40:]}\nfoo bar\n")
    out = CliRunner().invoke(predict_command, ["--batch", str(tmp_path / "cmds.txt"), "--format", "json"])
    rows = [json.loads(line) for line in out.output.splitlines() if line.startswith("{")]
    assert len(rows) == 2 and rows[0]["config"]["tp"] == 2 and rows[1]["error"].startswith("line 3:")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00")
    bad = CliRunner().invoke(predict_command, ["--batch", str(tmp_path / "bin.txt")])
    assert bad.exception is not None and "not UTF-8" in str(bad.exception)


@pytest.mark.parametrize("content", [b"\x00\xff\xfe garbage", b"num_layers,hidden_size\n\xff,1\n"])
def test_validate_binary_csv_is_bad_input(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "runs.csv").write_bytes(content)
    out = CliRunner().invoke(validate_command, [str(tmp_path / "runs.csv")])
    assert getattr(out.exception, "exit_code", None) == 2 and "UTF-8" in str(out.exception)


@pytest.mark.parametrize("lines", [["{bad json", "\x00\x01"], ['{"kind": "step", "step": 1}']])
def test_refine_on_run_dir_without_job_records(tmp_path: Path, lines: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank0.jsonl").write_text("\n".join(lines) + "\n")
    out = CliRunner().invoke(refine_command, [str(run)])
    assert getattr(out.exception, "exit_code", None) == 2 and "nothing to refine" in str(out.exception)
    assert not (tmp_path / "home" / "store.sqlite").exists()


def test_run_hook_options_need_instrument(tmp_path: Path) -> None:
    from llmperf_hook.commands.run import command as run_command

    alone = CliRunner().invoke(run_command, ["--profile-ops", "2", "--dry-run", "--", "python", "train.py"])
    assert getattr(alone.exception, "exit_code", None) == 2 and "--instrument" in str(alone.exception)
    zero = CliRunner().invoke(run_command, ["--instrument", "0", "--dry-run", "--", "python", "train.py"])
    assert getattr(zero.exception, "exit_code", None) == 2


def test_run_dry_run_with_instrument_shows_the_hook_environment(tmp_path: Path) -> None:
    from llmperf_hook.commands.run import command as run_command

    out = CliRunner().invoke(run_command, ["--instrument", "3", "--dry-run", "--format", "json", "--run-dir",
                                           str(tmp_path / "runs"), "--", "python", "train.py"])
    added = json.loads(out.output.strip().splitlines()[-1])["environment_added"]
    assert added["LLMPERF_RUN_DIR"] == str(tmp_path / "runs") and "/hook" in added["PYTHONPATH"]
    assert not (tmp_path / "runs").exists()  # a dry run creates nothing


@pytest.mark.parametrize(("line", "kept"), [
    ("srun --container-image nvcr.io#nvidia/pytorch:24.01 python x.py # run", "srun --container-image nvcr.io#nvidia/pytorch:24.01 python x.py "),
    ("# only a comment", ""), ('x "# quoted" y # c', 'x "# quoted" y '), ("a\\ #b", "a\\ #b"),
])
def test_batch_comment_only_at_word_start(line: str, kept: str) -> None:
    # shlex's comments=True cut `nvcr.io#nvidia/pytorch` (pyxis image names, Megatron's sc21 SRUN.sh) at the '#'.
    from llmperf_hook.commands.predict import strip_shell_comment

    assert strip_shell_comment(line) == kept

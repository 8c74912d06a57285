"""A `--search` file that is not YAML exits 2 with a one-paragraph message: where in the file and what is
wrong, on one line (PyYAML's own text quotes the line with a caret under it over several lines)."""

from __future__ import annotations

import pytest

from .helpers import run_cli
from .test_search_narrowing import MEGATRON


def _tune_with_search(tmp_path, capsys, text: str) -> tuple[int, str, str]:
    """`llmperf tune --search s.yaml` (holding `text`) on a Megatron-LM command."""
    (tmp_path / "s.yaml").write_text(text)
    return run_cli(["tune", "--cluster", "dgx-h100", "--search", str(tmp_path / "s.yaml"), "--", *MEGATRON], capsys)


@pytest.mark.parametrize(("text", "where"), [
    ("micro_batch_size: [1, 2\n", "line 2, column 1: expected ',' or ']'"),
    ("a: [1\n  b: ]]\n", "line 2, column 4"),
    ("recompute:\n\t- full\n", "line 2, column 1: found character '\\t'"),
    ('!!python/object/apply:os.system ["echo hi"]\n', "line 1, column 1: could not determine a constructor"),
])
def test_invalid_yaml_is_one_line_naming_line_and_column(tmp_path, capsys, text: str, where: str) -> None:
    code, out, err = _tune_with_search(tmp_path, capsys, text)
    assert code == 2 and out == ""
    errors = [ln for ln in err.splitlines() if "error" in ln]
    assert len(errors) == 1 and not [ln for ln in err.splitlines() if not ln.startswith("llmperf")], err
    assert f"--search {tmp_path / 's.yaml'}: not valid YAML ({where}" in errors[0]
    assert "Traceback" not in err


@pytest.mark.parametrize(("text", "fix"), [
    ("pipline_parallel: [2]\n", "did you mean pipeline_parallel?"),
    ("micro_batch_size: [0, 2]\n", "Use positive integers"),
    ("zero_stage: [4]\n", "Use ZeRO stages from 0, 1, 2, 3"),
    ("memory_margin: 5\n", "e.g. 0.05 keeps 5 % of the GPU's memory free"),
    ("max_micro_batch_size: 0\n", "Give a positive integer"),
])
def test_a_bad_key_or_value_says_the_fix(tmp_path, capsys, text: str, fix: str) -> None:
    """Each message names the key, the rule and what to write instead (a misspelt key gets the nearest known one)."""
    code, out, err = _tune_with_search(tmp_path, capsys, text)
    assert code == 2 and fix in err and "Traceback" not in err

"""A `--search` file that is not YAML exits 2 with a one-paragraph message: where in the file and what is
wrong, on one line (PyYAML's own text quotes the line with a caret under it over several lines)."""

from __future__ import annotations

import pytest

from .helpers import run_cli
from .test_search_narrowing import MEGATRON


@pytest.mark.parametrize(("text", "where"), [
    ("micro_batch_size: [1, 2\n", "line 2, column 1: expected ',' or ']'"),
    ("a: [1\n  b: ]]\n", "line 2, column 4"),
    ("recompute:\n\t- full\n", "line 2, column 1: found character '\\t'"),
    ('!!python/object/apply:os.system ["echo hi"]\n', "line 1, column 1: could not determine a constructor"),
])
def test_invalid_yaml_is_one_line_naming_line_and_column(tmp_path, capsys, text: str, where: str) -> None:
    (tmp_path / "s.yaml").write_text(text)
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--search", str(tmp_path / "s.yaml"), "--",
                              *MEGATRON], capsys)
    assert code == 2 and out == ""
    errors = [ln for ln in err.splitlines() if "error" in ln]
    assert len(errors) == 1 and not [ln for ln in err.splitlines() if not ln.startswith("llmperf")], err
    assert f"--search {tmp_path / 's.yaml'}: not valid YAML ({where}" in errors[0]
    assert "Traceback" not in err

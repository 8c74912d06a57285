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
    # PyYAML keeps the last of two equal keys: the first list was dropped silently (YAML 1.2 refuses the file)
    ("micro_batch_size: [1, 2]\nrecompute: [none]\nmicro_batch_size: [4]\n",
     "line 3, column 1: key 'micro_batch_size' given twice"),
    ("[1, 2]: auto\n", "line 1, column 1: found unhashable key"),  # a list as a key: not a TypeError traceback
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


@pytest.mark.parametrize("text", ["1: [2]\nmicro_batch_size: [1]\n", "true: auto\nfoo: [1]\n"])
def test_a_key_that_is_not_a_name_says_so(tmp_path, capsys, text: str) -> None:
    """A number or boolean key (YAML reads `1:` and `true:` as such) was compared with the knob names, and sorting or
    matching it against them was a TypeError traceback (exit 1)."""
    code, out, err = _tune_with_search(tmp_path, capsys, text)
    assert code == 2 and "are not knob names" in err and "micro_batch_size: [1, 2, 4]" in err and "Traceback" not in err


def test_an_unreadable_search_file_exits_2_with_the_reason(tmp_path, capsys, monkeypatch) -> None:
    """A file tune may not read (mode 000 for a non-root user) was a PermissionError traceback (exit 1). The
    permission error is raised by a stand-in for the read, so the test means the same when run as root."""
    from pathlib import Path

    (tmp_path / "s.yaml").write_text("micro_batch_size: [1]\n")
    real = Path.read_text

    def denied(self: Path, *args, **kwargs) -> str:
        if self.name == "s.yaml":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", denied)
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--search", str(tmp_path / "s.yaml"), "--", *MEGATRON],
                             capsys)
    assert code == 2 and "cannot read it (Permission denied)" in err and "Traceback" not in err


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero"])
def test_a_device_is_not_a_search_file(capsys, device: str) -> None:
    """A pipe is read as a search file (`--search <(printf ...)`), a device is not: /dev/zero never ends, so reading
    it filled the memory (dce119a4 let anything that exists and is not a folder through), and /dev/null read as an
    empty file, the defaults, without a word. Both exit 2 before any read."""
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--search", device, "--", *MEGATRON], capsys)
    assert code == 2 and f"--search {device}: a device, not a file or a pipe" in err and "Traceback" not in err, err

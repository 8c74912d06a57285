"""Issue 7, round 14: `llmperf tune` used as a demanding user would (H176), on the gaps round 13 left: a `--search`
file that sets nothing, elastic node ranges, HF Trainer's FSDP with gradient checkpointing, accelerate scripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.cli import MEGATRON_16, run_cli


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    """The user's launch folder as the working directory; an empty llmperf store (no calibration moves a figure)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / ".llmperf"))
    return tmp_path


@pytest.mark.parametrize("text", ["", "# micro_batch_size: [2]\n# tensor_parallel: [4]\n", "name: mine\n"])
def test_search_file_that_sets_no_knob_searches_the_defaults_and_says_so(home: Path, capsys, text: str) -> None:
    """An empty `--search` file, one of comments only, or a bare `name:` narrows nothing: tune searched the shipped
    space while its header named the user's file as the space, without a word (an empty `--search <(cmd)` of a
    command that failed looked like a narrowed search). Now the defaults are searched, the header says so and a
    warning names the file."""
    (home / "s.yaml").write_text(text)
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--top", "1", "--search", "s.yaml",
                              "--", *MEGATRON_16], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["search_space"].endswith("configs/search/megatron.yaml (s.yaml sets no knob)"), data["search_space"]
    assert "warning: --search s.yaml sets no knob" in err and "configs/search/megatron.yaml" in err, err
    assert data["knobs"]["searched"]["tp"] == [1, 2, 4, 8], data["knobs"]  # the commented-out [4] too

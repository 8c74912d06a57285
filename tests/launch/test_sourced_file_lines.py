"""A message about a line of a file the script sources (`. conf.sh`, `source conf.sh`) names that file and its own
line number, as bash does (`conf.sh: line 3: ...`), not the script's name with the sourced file's line number."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch

T = "torchrun --nproc_per_node 2 pretrain_gpt.py --num-layers 2"


def _write(tmp_path: Path, main: str, conf: str) -> Path:
    (tmp_path / "conf.sh").write_text(conf)
    script = tmp_path / "main.sh"
    script.write_text(main)
    return script


def test_two_launch_lines_one_in_a_sourced_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = _write(tmp_path, f"A=1\nsource ./conf.sh\n{T}\n", f"# settings\n{T} --lr 1\n")
    with pytest.raises(UsageError) as refused:
        parse_launch(["bash", str(script)], {})
    assert f"2 launch lines ({tmp_path}/conf.sh line 2: torchrun" in str(refused.value)
    assert "; line 3: torchrun" in str(refused.value)


def test_a_function_defined_in_a_sourced_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = _write(tmp_path, ". ./conf.sh\nlaunch\n", f"X=1\nlaunch() {{\n  {T}\n  {T} --lr 1\n}}\n")
    with pytest.raises(UsageError, match=rf"2 launch lines \({tmp_path}/conf.sh line 3: .*; {tmp_path}/conf.sh line 4"):
        parse_launch(["bash", str(script)], {})


def test_dash_refuses_a_line_of_the_sourced_file_by_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = _write(tmp_path, f"A=1\n. ./conf.sh\n{T}\n", "B=1\nC=2\nARGS=(--lr 1)\n")
    with pytest.raises(UsageError) as refused:
        parse_launch(["dash", str(script)], {})
    assert f"{tmp_path}/conf.sh is run by dash" in str(refused.value)
    assert "but line 3 uses a bash array assignment" in str(refused.value)


def test_a_launch_in_the_script_after_it_sources_a_file_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = _write(tmp_path, f". ./conf.sh\n{T} --lr $LR\n", "LR=3\n")
    job = parse_launch(["bash", str(script)], {})
    assert job.script_args[-2:] == ("--lr", "3")

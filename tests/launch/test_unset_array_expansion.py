"""`"${EXTRA[@]}"` of an array the script never set (an `if` that did not run, a flag left off): bash expands it to
no word at all, since no environment passes an array (bash manual 3.7.4, 6.7 Arrays); `${X[@]}` of a plain variable
is its value, as element 0. llmperf kept `${EXTRA[@]}` as written, and Megatron's parser was said to refuse it as a
positional argument. Checked against bash where it is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llmperf_hook.launch.parse import parse_launch

BASH = shutil.which("bash")
ECHO_LAUNCH = "torchrun() { printf '%s\\n' \"$@\"; }; export -f torchrun; "


def _script_args(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> list[str]:
    script = tmp_path / "train.sh"
    script.write_text(f"#!/bin/bash\n{body}\n")
    monkeypatch.chdir(tmp_path)
    words = list(parse_launch(["bash", "train.sh"], dict(env)).script_args)
    if BASH:
        ran = subprocess.run([BASH, "-c", f'{ECHO_LAUNCH}bash "$0"', str(script)], capture_output=True, text=True,
                             env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}, cwd=tmp_path)
        assert ran.stdout.splitlines()[2:] == words, ran
    return words


@pytest.mark.parametrize("body, env, expected", [
    ('torchrun --nproc_per_node=2 pretrain_gpt.py --num-layers 2 "${EXTRA[@]}"', {}, []),
    ("torchrun --nproc_per_node=2 pretrain_gpt.py --num-layers 2 ${EXTRA[@]} ${EXTRA[*]}", {}, []),
    ('FP8=0\nif [ "$FP8" = 1 ]; then EXTRA=(--fp8-format hybrid); fi\n'
     'torchrun --nproc_per_node=2 pretrain_gpt.py --num-layers 2 "${EXTRA[@]}"', {}, []),
    ('torchrun --nproc_per_node=2 pretrain_gpt.py --num-layers 2 ${MORE[@]}', {"MORE": "--tp 2"}, ["--tp", "2"]),
    ('M="--bf16"\ntorchrun --nproc_per_node=2 pretrain_gpt.py --num-layers 2 "${M[@]}" --count ${#E[@]}', {},
     ["--bf16", "--count", "0"]),
])
def test_an_array_never_set_gives_no_word(body: str, env: dict[str, str], expected: list[str], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    assert _script_args(tmp_path, body, monkeypatch, env) == ["--num-layers", "2", *expected]


def test_an_array_set_from_a_commands_output_stays_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An array whose value only running the script tells is kept as written (a refusal then names its line)."""
    script = tmp_path / "train.sh"
    script.write_text('#!/bin/bash\nEXTRA=$(cat extra.txt)\n'
                      'torchrun --nproc_per_node=2 pretrain_gpt.py "${EXTRA[@]}"\n')
    monkeypatch.chdir(tmp_path)
    assert parse_launch(["bash", "train.sh"], {}).script_args == ("${EXTRA[@]}",)

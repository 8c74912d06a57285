"""Arrays assigned in the arms of a `case` (bash manual 3.2.5.2 Conditional Constructs, 6.7 Arrays), on the line of
the arm's pattern: `case $M in 7b) ARGS=(--num-layers 32);; 13b) ARGS=(--num-layers 40);; esac`. The split cuts
`ARGS=(--num-layers 40)` at its blank, and its last word `40)` was read as the end of another arm's pattern when
the array had two elements, so no arm ran and the launch kept `"${ARGS[@]}"` as written. Each checked against bash
where it is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.shell_conditions import _arm_pattern_end

BASH = shutil.which("bash")
ECHO_LAUNCH = "torchrun() { printf '%s\\n' \"$@\"; }; export -f torchrun; "
LAUNCH = "\ntorchrun --nproc_per_node=2 pretrain_gpt.py \"${ARGS[@]}\" --x ${X:-u}"


def _script_args(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    script = tmp_path / "train.sh"
    script.write_text(f"#!/bin/bash\nARGS=(--seq-length 8)\n{body}{LAUNCH}\n")
    monkeypatch.chdir(tmp_path)
    words = list(parse_launch(["bash", "train.sh"], {}).script_args)
    if BASH:
        ran = subprocess.run([BASH, "-c", f'{ECHO_LAUNCH}bash "$0"', str(script)], capture_output=True, text=True,
                             env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, cwd=tmp_path)
        assert ran.stdout.splitlines()[2:] == words, ran
    return words


@pytest.mark.parametrize("body, expected", [
    ("M=13b\ncase $M in 7b) ARGS=(--num-layers 32);; 13b) ARGS=(--num-layers 40);; esac", ["--num-layers", "40", "--x", "u"]),
    ("M=13b\ncase $M in 7b|7B) ARGS=(--num-layers 32);; 13b|13B) ARGS=(--num-layers 40);; esac",
     ["--num-layers", "40", "--x", "u"]),
    ("M=70b\ncase $M in 7b) ARGS=(--num-layers 32);; *) ARGS=(--num-layers 80);; esac", ["--num-layers", "80", "--x", "u"]),
    ("M=13b\ncase $M in (7b) ARGS=(--num-layers 32);; (13b) ARGS=(--num-layers 40);; esac", ["--num-layers", "40", "--x", "u"]),
    ("M=7b\ncase $M in 7b) ARGS=(--num-layers 32); X=1;; 13b) ARGS=(--num-layers 40); X=2;; esac",
     ["--num-layers", "32", "--x", "1"]),
    ("M=13b\ncase $M in\n  7b) ARGS=(--num-layers 32); X=1;;\n  13b) ARGS=(--num-layers 40); X=2;;\nesac",
     ["--num-layers", "40", "--x", "2"]),
    ("M=13b\ncase \"$M\" in 7b) X=1; ARGS=(--num-layers 32 --hidden-size 4096);; 13b) X=2; ARGS=(--num-layers 40 "
     "--hidden-size 5120);; esac", ["--num-layers", "40", "--hidden-size", "5120", "--x", "2"]),
    ("M=13b\nif true; then case $M in 7b) ARGS=(--num-layers 32);; 13b) ARGS=(--num-layers 40);; esac; fi",
     ["--num-layers", "40", "--x", "u"]),
    ("M=30b\ncase $M in 7b) ARGS=(--num-layers 32);; 13b) ARGS=(--num-layers 40);; esac", ["--seq-length", "8", "--x", "u"]),
])
def test_an_array_set_in_a_one_line_case_arm(body: str, expected: list[str], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert _script_args(tmp_path, body, monkeypatch) == expected


def test_where_an_arms_pattern_ends() -> None:
    """A pattern ends at the first word closing more parentheses than the words so far open (bash's `(` before the
    first pattern not counted); an array cut at its blanks closes only what it opened."""
    assert _arm_pattern_end(["13b)", "ARGS=(--num-layers", "40)"]) == 1
    assert _arm_pattern_end(["ARGS=(--num-layers", "40)"]) == 0
    assert _arm_pattern_end(["(13b)", "X=1"]) == 1
    assert _arm_pattern_end(["(7b", "|", "13b)", "X=1"]) == 3
    assert _arm_pattern_end(["X=$(nproc)"]) == 0


@pytest.mark.parametrize("body, expected", [
    ("M=13b\ncase $M in 7b) ARGS=(--num-layers 32);; 13b) ARGS=(--num-layers 40);& 70b) ARGS+=(--hidden-size 1);; "
     "*) X=9;; esac", ["--num-layers", "40", "--hidden-size", "1", "--x", "u"]),
    ("M=13b\ncase $M in 7b) ARGS=(--num-layers 32);; 13b) ARGS=(--num-layers 40);;& 70b) ARGS+=(--hidden-size 1);; "
     "*) X=9;; esac", ["--num-layers", "40", "--x", "9"]),
    ("M=7b\ncase $M in 7b) ARGS=(--num-layers 32);& 13b) X=3;;& 7*) ARGS+=(--hidden-size 2);; *) X=9;; esac",
     ["--num-layers", "32", "--hidden-size", "2", "--x", "3"]),
    ("M=13b\ncase $M in\n  7b) ARGS=(--num-layers 32)\n  ;;\n  13b) ARGS=(--num-layers 40)\n  ;&\n  70b) X=5\n  ;;\nesac",
     ["--num-layers", "40", "--x", "5"]),
    ("M=13b\ncase $M in\n  7b|13b) ARGS=(--num-layers 40);;&\n  1*|2*) X=5;;\nesac", ["--num-layers", "40", "--x", "5"]),
])
def test_an_arm_ending_in_fall_through_operators(body: str, expected: list[str], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """bash 4's `;&` runs the next arm's commands too, and `;;&` tests the next arms' patterns too (bash manual
    3.2.5.2); llmperf read both as `;;`."""
    assert _script_args(tmp_path, body, monkeypatch) == expected

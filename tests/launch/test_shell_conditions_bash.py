"""`if` blocks of a launch script decided as bash runs them: each script here is run by bash itself (its launcher a
shell function that prints the last flag) and read by llmperf, which must find the same value or leave the value
unknown; a decided value bash would not give is a wrong guess."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llmperf_hook.launch.parse import parse_launch

BASH = shutil.which("bash")
LAUNCH = "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $TP\n"


def _bash_tp(script: Path) -> str:
    runner = 'torchrun() { printf "%s\\n" "${@: -1}"; }; export -f torchrun; bash "$0"'
    proc = subprocess.run([BASH or "bash", "-c", runner, str(script)], capture_output=True, text=True,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, cwd=script.parent, check=True)
    return proc.stdout.strip()


def _llmperf_tp(script: Path) -> str:
    return parse_launch(["bash", script.name], {}).script_args[-1]


NESTED_ON_ONE_LINE = {
    "then if": "A=1\nTP=1\nif [ $A = 1 ]; then if [ $A = 2 ]; then TP=2; fi\nfi\n",
    "then if, outer not taken": "A=1\nTP=1\nif [ $A = 2 ]; then if [ $A = 1 ]; then TP=2; fi\nTP=8\nfi\n",
    "else if": "A=1\nTP=1\nif [ $A = 2 ]; then TP=8; else if [ $A = 1 ]; then TP=2; fi; fi\n",
    "else if, not taken": "A=1\nTP=1\nif [ $A = 1 ]; then TP=4; else if [ $A = 1 ]; then TP=2; fi; fi\n",
    "do if": "TP=1\nfor i in 1 2; do if [ 1 = 2 ]; then TP=2; fi; done\n",
}


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("body", NESTED_ON_ONE_LINE.values(), ids=NESTED_ON_ONE_LINE.keys())
def test_an_if_opened_after_then_else_or_do_on_the_same_line(body: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`then if ...; then ...; fi` opens a block bash reads as one: it was read as the outer block's `then` again,
    applying TP=2 that bash never runs."""
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n" + body + LAUNCH)
    monkeypatch.chdir(tmp_path)
    assert _llmperf_tp(script) == _bash_tp(script)

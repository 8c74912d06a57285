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


TEST_WORDS = {
    "$X-x, X unset": 'TP=1\nif [ "$X-x" = "-x" ]; then TP=2; fi\n',
    "$(...) in a test": 'TP=1\nif [ "$(echo 7B)" = 7B ]; then TP=2; fi\n',
    "${#X} in a test": 'X=abc\nTP=1\nif [ "${#X}" = 3 ]; then TP=2; fi\n',
    "${X%.json} in a test": 'X=a.json\nTP=1\nif [ "${X%.json}" = a ]; then TP=2; fi\n',
    "N=$(... | ...)": 'TP=1\nN=$(echo 4 | wc -l)\nif [ -z "$N" ]; then TP=2; else TP=3; fi\n',
    "export N=`...`": 'TP=1\nexport N=`echo 4 | wc -l`\nif [ -z "$N" ]; then TP=2; else TP=3; fi\n',
    "N=1 then N=$(...)": "N=1\nN=$(echo 4)\nTP=1\nif [ $N -gt 2 ]; then TP=2; fi\n",
}


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("body", TEST_WORDS.values(), ids=TEST_WORDS.keys())
def test_test_words_as_bash_expands_them(body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each was decided against bash (TP 1 where bash gives 2, 2 where it gives 3): text after `$X` taken as part
    of the reference, `$(...)` / `${#X}` / `${X%...}` compared as written, and a variable a command sets (cut at its
    blanks, or after a plain value) read as empty or stale. Bash needs only the variables for the first; the rest
    are left undecided, every branch read, as before."""
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n" + body + LAUNCH)
    monkeypatch.chdir(tmp_path)
    assert _llmperf_tp(script) == _bash_tp(script)


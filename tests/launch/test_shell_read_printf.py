"""`read NAME ... <<< WORD` / a here-document, and `printf -v NAME FORMAT ARGS` in a launch script: each script is run
by bash itself (its launcher a shell function that prints its arguments) and read by llmperf, which must give the
launch the same words. Before, `read -r TP PP <<< "$LAYOUT"` left $TP unexpanded ('--tensor-model-parallel-size
expects an integer, got $TP', exit 2) and `printf -v GBS ...` likewise."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.shell_read import ifs_fields, printf_text

BASH = shutil.which("bash")
LAUNCH = 'torchrun --nproc_per_node 8 pretrain_gpt.py "[$A]" "[$B]" "[$C]"\n'


def _bash_words(script: Path) -> list[str]:
    runner = 'torchrun() { printf "%s\\n" "${@:4}"; }; export -f torchrun; bash "$0"'
    proc = subprocess.run([BASH or "bash", "-c", runner, str(script)], capture_output=True, text=True,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, cwd=script.parent, check=True)
    return proc.stdout.rstrip("\n").split("\n")


def _both(body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\nA=-; B=-; C=-\n" + body + "\n" + LAUNCH)
    monkeypatch.chdir(tmp_path)
    return list(parse_launch(["bash", script.name], {}).script_args), _bash_words(script)


READS = {
    "here-string, quoted": 'X="4 8"\nread -r A B <<< "$X"',
    "here-string, unquoted word is not split": 'X="4 8 16"\nread -r A B <<< $X',
    "last name takes the rest": 'read A B <<< "  1  2   3  "',
    "fewer fields than names": 'read A B C <<< "1"',
    "IFS prefix, comma": 'IFS=, read -r A B C <<< "1,2,3,4"',
    "IFS comma keeps blanks": 'X="  1 , 2 , 3 , "\nIFS=, read A B <<< "$X"',
    "IFS trailing delimiter dropped": 'IFS=, read A B <<< "1,2,"',
    "IFS two trailing delimiters kept": 'IFS=, read A B <<< "1,2,,"',
    "IFS colon, empty field": 'IFS=: read A B C <<< "a::b"',
    "IFS set before": 'IFS=x\nread A B <<< "1x2"\nIFS=" "',
    "backslash without -r": 'read A B <<< "x\\ y z"',
    "backslash with -r": 'read -r A B <<< "x\\ y z"',
    "only the first line": 'X="1 2\n3 4"\nread A B <<< "$X"',
    "default REPLY": 'read <<< "7 8"\nA=$REPLY',
    "array": 'read -r -a ARR <<< "5 6 7"\nA=${ARR[0]}\nB=${ARR[2]}\nC=${#ARR[@]}',
    "here-document": 'read -r A B <<EOF\n2 4\n6 8\nEOF',
    "here-document, expanded": 'N=3\nread -r A B <<EOF\n$N x\nEOF',
    "delimiter -d": 'read -d , A B <<< "1 2,3"',
    "printf -v, padded": 'printf -v A "%05d" 42',
    "printf -v, format reused": 'printf -v A "%d," 1 2 3',
    "printf -v, octal and hex": 'printf -v A "%d" 010\nprintf -v B "%x" 255\nprintf -v C "%o" 8',
    "printf -v, strings and floats": 'printf -v A "%s-%s" gpt 3\nprintf -v B "%.2f" 3.14159\nprintf -v C "%-4s|" ab',
    "printf -v, missing argument": 'printf -v A "%s:%d" x',
    "printf -v, escapes and percent": 'printf -v A "a\\tb%%"',
    "printf -v, character constant": "printf -v A '%d' \"'A\"",
    "printf -v from variables": 'N=8\nF="%d nodes"\nprintf -v A "$F" "$N"',
    "IFS blank and comma, delimiters after the last field": "IFS=', ' read -r A B <<< '1, 2 ,'",
    "IFS comma, one empty field left": "IFS=, read -r A B <<< '1,,'",
    "IFS blank and comma, blank then comma": "IFS=', ' read -r A B <<< '1,2 , '",
    "names from variables": 'N=B\nread -r A "$N" <<< "1 2"\nM=C\nprintf -v "$M" "%03d" 7',
    "printf -v, unsigned of a negative": 'printf -v A "%x" -1\nprintf -v B "%u" -2\nprintf -v C "%o" -8',
    "printf -v, backslash-c in the format is text": "printf -v A 'a\\cb'",
}


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("body", READS.values(), ids=READS.keys())
def test_read_and_printf_give_what_bash_gives(body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ours, bash = _both(body, tmp_path, monkeypatch)
    assert ours == bash


def test_a_read_layout_reaches_megatron(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The form a real script uses: one variable holding the layout, split by read."""
    (tmp_path / "train.sh").write_text('#!/bin/bash\nLAYOUT="4 2"\nread -r TP PP <<< "$LAYOUT"\nprintf -v GBS "%d" 64\n'
                                       "torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py "
                                       "--tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP "
                                       "--global-batch-size $GBS\n")
    monkeypatch.chdir(tmp_path)
    args = list(parse_launch(["bash", "train.sh"], {}).script_args)
    assert args == ["--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "2",
                    "--global-batch-size", "64"]


@pytest.mark.parametrize("line", ["read -r TP", "read -r TP < layout.txt",
                                  "shopt -s lastpipe; cat layout.txt | read -r TP",
                                  "for i in $(seq 1 1); do read -r TP <<< 4; done", "printf -v TP '%b' 4",
                                  "printf -v TP '\\101'", "printf -v TP '\\x34'", "read -n 1 TP <<< 4",
                                  'X=$(cat layout); read -r TP PP <<< "$X"', "read -r TP <<EOF\n$(cat layout)\nEOF",
                                  'printf -v TP "%d" "$(cat layout)"', 'X=`cat layout`; printf -v TP "%s" "$X"',
                                  "for i in $(seq 1 1); do printf -v TP '%d' 4; done"])
def test_a_value_only_running_gives_is_left_unknown(line: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """read from the terminal, a file or a pipe, or in a loop over words only running gives (a loop over known words
    is read once per word, launch/shell_loops.py), text that only a command substitution gives, and
    printf formats llmperf does not evaluate: the variable is unknown (it had TP=1 before), so the launch line names it
    instead of using a stale value (or the text `${X}`)."""
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nTP=1\n{line}\n"
                                       "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $TP\n")
    monkeypatch.chdir(tmp_path)
    args = parse_launch(["bash", "train.sh"], {}).script_args
    assert args[-1] == "$TP"


def test_ifs_fields_with_a_count_keeps_the_rest_whole() -> None:
    assert ifs_fields(" a  b c ", " \t\n", 2) == ["a", "b c"]
    assert ifs_fields("a,b,c", ",", None) == ["a", "b", "c"]
    assert ifs_fields("a b", "", 2) == ["a b"]


def test_printf_text_refuses_what_it_does_not_evaluate() -> None:
    assert printf_text("%b", ["x"]) is None
    assert printf_text("%d", ["abc"]) is None
    assert printf_text("%*d", ["3", "4"]) is None
    assert printf_text("%#o", ["8"]) is None  # C prints 010, Python's %#o 0o10
    assert printf_text("%s %s", ["a"]) == "a "


def test_an_unknown_read_value_in_the_launch_exits_2_naming_it(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.frameworks.resolve import resolve_job

    (tmp_path / "train.sh").write_text("#!/bin/bash\nread -r TP\ntorchrun --nproc_per_node 8 pretrain_gpt.py "
                                       "--tensor-model-parallel-size $TP --num-layers 2 --hidden-size 64 "
                                       "--num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
                                       "--micro-batch-size 1 --vocab-size 1000\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"\$TP"):
        resolve_job(["bash", "train.sh"], {})

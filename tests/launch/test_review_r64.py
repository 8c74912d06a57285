"""Review R64 of H177's round 2 of the launch-script reading: what it missed, checked against bash 5.2."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import FrameType

import pytest

from llmperf_hook.launch.parse import parse_launch
from tests.launch.test_scripts_as_the_shell_runs_them import ARGS, _compare

T = "torchrun --nproc_per_node $NP pretrain_gpt.py --num-layers 2"


def _timed_out(signum: int, frame: FrameType | None) -> None:
    pytest.fail("the reading blocked on the script's input")  # not an OSError, which the reading may catch


@pytest.mark.parametrize("target", ["pipe", "/dev/stdin"])
def test_input_that_is_no_regular_file_is_never_opened(target: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`read X < FIFO` (or `< /dev/stdin`): opening a FIFO blocks until a writer comes, and /dev/stdin is llmperf's
    own input, not the job's; what bash reads there only running gives, so X is named, and the reading never waits."""
    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nNP=2\nread -r X < {target}\nmapfile -t L < {target}\n"
                                       + T + " --save $X ${#L[@]}\n")
    previous = signal.signal(signal.SIGALRM, _timed_out)
    signal.alarm(10)
    try:
        job = parse_launch(["bash", "train.sh"], {})
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert job.nproc_per_node == 2 and job.script_args[-2:] == ("$X", "${#L[@]}")


def test_input_from_dev_null_is_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`read -r X < /dev/null` fails and leaves X empty; `mapfile -t L < /dev/null` gives no elements (bash 5.2)."""
    _compare("bash", "dev_null", "NP=2\nX=a\nread -r X < /dev/null\nmapfile -t L < /dev/null\n" + T +
             " --save x$X ${#L[@]}\n", tmp_path, monkeypatch)


NOUNSET_TESTS = {  # set -u: bash expands the test of an `if` / `while` it reaches, and stops at an unset variable there
    "if_test_unset": "set -u\nNP=2\nif [ -n \"$CKPT\" ]; then NP=4; fi\n" + T + "\n",
    "if_test_unset_on_one_line": "set -eu\nNP=2\nif [[ $CKPT == x ]]; then NP=4; else NP=8; fi\n" + T + "\n",
    "while_test_unset": "set -o nounset\nNP=2\nwhile [ -n \"$CKPT\" ]; do break; done\n" + T + "\n",
    "second_test_command_unset": "set -u\nNP=2\nif true; [ -z \"$CKPT\" ]; then NP=4; fi\n" + T + "\n",
    "if_test_with_a_default": "set -u\nNP=2\nif [ -n \"${CKPT:-}\" ]; then NP=4; fi\n" + T + "\n",
    "if_test_in_a_branch_not_taken": "set -u\nNP=2\nif [ 1 = 2 ]; then\n  if [ -n \"$CKPT\" ]; then NP=4; fi\nfi\n"
                                     + T + "\n",
    "if_test_after_a_true_or": "set -u\nNP=2\ntrue || if [ -n \"$CKPT\" ]; then NP=4; fi\n" + T + "\n",
    "if_test_of_a_set_variable": "set -u\nNP=2\nCKPT=/c\nif [ -n \"$CKPT\" ]; then NP=4; fi\n" + T + "\n",
}


@pytest.mark.parametrize("name", NOUNSET_TESTS)
def test_nounset_in_the_test_of_an_if_or_while(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, NOUNSET_TESTS[name], tmp_path, monkeypatch)


STAR_JOINS = {  # bash manual 3.4.2 / 6.7: "${*}" and "${A[*]}" join with the first character of IFS (none if IFS='')
    "argument_slice_with_ifs_comma": ("NP=2\nIFS=,\nX=\"${*:2}\"\nIFS=' '\n" + T + " --save $X\n", ["a", "b", "c"]),
    "array_with_ifs_comma": ("NP=2\nA=(a b c)\nIFS=,\nX=\"${A[*]}\"\nunset IFS\n" + T + " --save $X\n", []),
    "array_with_empty_ifs": ("NP=2\nA=(a b)\nIFS=\nX=\"${A[*]}\"\nunset IFS\n" + T + " --save $X\n", []),
    "array_with_default_ifs": ("NP=2\nA=(a b)\n" + T + " --save \"${A[*]}\" \"${*:1}\"\n", ["c", "d"]),
}


@pytest.mark.parametrize("name", STAR_JOINS)
def test_star_joins_with_the_first_character_of_ifs(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text, args = STAR_JOINS[name]
    monkeypatch.setitem(ARGS, name, args)
    _compare("bash", name, text, tmp_path, monkeypatch)


def test_flags_one_branch_adds_to_a_variable_unset_before_take_the_first_branch(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`if [ "$(hostname)" = big ]; then EXTRA=--use-flash-attn; fi` with EXTRA unset before: unquoted, an unset EXTRA
    expands to no word, so the ways are --use-flash-attn or no flag, and the flag-only rule (the branch read first,
    with its warning) applies, as it does where EXTRA was '' before (H177 left '$EXTRA' as a literal word)."""
    monkeypatch.chdir(tmp_path)
    for before in ("", "EXTRA=\n"):
        (tmp_path / "train.sh").write_text(f"#!/bin/bash\n{before}if [ \"$(hostname)\" = big ]; then "
                                           "EXTRA=--use-flash-attn; fi\n" + T.replace("$NP", "2") + " $EXTRA\n")
        job = parse_launch(["bash", "train.sh"], {})
        assert job.script_args[-1] == "--use-flash-attn", (before, job.script_args)
        assert any("Priced with the branch read first" in w and "--use-flash-attn" in w for w in job.warnings)


def test_an_unexpanded_variable_left_as_a_stray_word_is_named_as_such(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """ARGS='--data-path ...' in one branch of an undecided `if`, unset before: the launch keeps `$ARGS`, which
    Megatron's parser would see as a positional argument. The refusal says the variable is unexpanded (not 'Remove
    it, or give the option whose value it is', which misleads: the script's own variable is the point)."""
    from llmperf_hook.errors import ConfigError
    from llmperf_hook.frameworks.resolve import resolve_job

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(
        "#!/bin/bash\nDATA=\"--data-path /d/text_document\"\nif [ \"$(hostname)\" = login ]; then ARGS=\"$DATA\"; fi\n"
        "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 8 "
        "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 32 $ARGS\n")
    with pytest.raises(ConfigError) as refused:
        resolve_job(["bash", "train.sh"], {})
    message = str(refused.value)
    assert "'$ARGS' reaches the launch line unexpanded" in message and "Remove it" not in message
    assert "line 3 (ARGS='--data-path /d/text_document') or unset" in message


COMMENTED = {  # a name in a comment is assigned by nothing: `set -u` still stops at it (bash 5.2.15)
    "name_in_a_comment": ("set -euo pipefail\n# CKPT_DIR: where checkpoints go\nNP=2\n" + T + " --save $CKPT_DIR\n", []),
    "name_after_a_command": ("set -u\nNP=2  # CKPT_DIR is set by the cluster\n" + T + " --save $CKPT_DIR\n", []),
    "hash_that_starts_no_comment": ("set -u\nNP=2\nX=a#CKPT_DIR\nread -r Y <<< x#CKPT_DIR\n" + T + " --save $Y\n", []),
    "read_target_after_a_length": ("set -u\nNP=2\nN=${#NP}; read -r CKPT_DIR <<< /c\n" + T + " --save $CKPT_DIR\n", []),
}


@pytest.mark.parametrize("name", COMMENTED)
def test_nounset_and_names_in_comments(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text, args = COMMENTED[name]
    monkeypatch.setitem(ARGS, name, args)
    _compare("bash", name, text, tmp_path, monkeypatch)


LOGGED = {  # `echo "NAME=$NAME"` logs a variable and assigns nothing: under `set -u` bash stops at it where it is unset
    "logged_before_use": ("set -u\nNP=2\necho \"CKPT_DIR=$CKPT_DIR\"\n" + T + " --save x\n", []),
    "logged_with_a_default": ("set -u\nNP=2\necho \"CKPT_DIR=${CKPT_DIR:-none}\"\n" + T + " --save $CKPT_DIR\n", []),
    "echo_then_read_on_one_line": ("set -u\nNP=2\necho go; read -r CKPT_DIR <<< /c\n" + T + " --save $CKPT_DIR\n", []),
    "echo_of_a_substitution": ("set -u\nNP=2\necho \"$(read -r CKPT_DIR <<< /c)\"\n" + T + " --save x\n", []),
}


@pytest.mark.parametrize("name", LOGGED)
def test_nounset_and_names_an_echo_prints(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text, args = LOGGED[name]
    monkeypatch.setitem(ARGS, name, args)
    _compare("bash", name, text, tmp_path, monkeypatch)


DECLARED = {  # `declare X` / `local X` / `export X` give X no value, and `unset X` removes it: `set -u` stops at $X
    "declare_without_a_value": ("set -u\ndeclare CKPT_DIR\nNP=2\n" + T + " --save x$CKPT_DIR\n", []),
    "export_without_a_value": ("set -u\nexport CKPT_DIR\nNP=2\n" + T + " --save x$CKPT_DIR\n", []),
    "local_without_a_value": ("set -u\nf() {\n  local CKPT_DIR\n  echo $CKPT_DIR\n}\nNP=2\nf\n" + T + "\n", []),
    "unset_then_used": ("set -u\nunset CKPT_DIR\nNP=2\n" + T + " --save x$CKPT_DIR\n", []),
    "declare_of_a_set_variable": ("set -u\nCKPT_DIR=/c\ndeclare -x CKPT_DIR\nNP=2\n" + T + " --save $CKPT_DIR\n", []),
    "declare_then_read": ("set -u\ndeclare CKPT_DIR\nread -r CKPT_DIR <<< /c\nNP=2\n" + T + " --save $CKPT_DIR\n", []),
    "unset_then_set": ("set -u\nunset CKPT_DIR\nCKPT_DIR=/c\nNP=2\n" + T + " --save $CKPT_DIR\n", []),
}


@pytest.mark.parametrize("name", DECLARED)
def test_nounset_after_declare_without_a_value(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text, args = DECLARED[name]
    monkeypatch.setitem(ARGS, name, args)
    _compare("bash", name, text, tmp_path, monkeypatch)

"""`if` blocks of a launch script decided as bash runs them: each script here is run by bash itself (its launcher a
shell function that prints the last flag) and read by llmperf, which must find the same value or leave the value
unknown; a decided value bash would not give is a wrong guess."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.launch.batch_script import _arithmetic
from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.shell_conditions import _status, decide_test

BASH = shutil.which("bash")
LAUNCH = "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $TP\n"


def _bash_tp(script: Path) -> str:
    runner = 'torchrun() { printf "%s\\n" "${@: -1}"; }; export -f torchrun; bash "$0"'
    proc = subprocess.run([BASH or "bash", "-c", runner, str(script)], capture_output=True, text=True,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, cwd=script.parent, check=True)
    return proc.stdout.strip()


def _llmperf_tp(script: Path) -> str:
    return parse_launch(["bash", script.name], {}).script_args[-1]


def _both_tp(body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """(llmperf's, bash's) last launch word of a train.sh of `body` plus the launch line, run from its folder."""
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n" + body + LAUNCH)
    monkeypatch.chdir(tmp_path)
    return _llmperf_tp(script), _bash_tp(script)


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
    ours, bash = _both_tp(body, tmp_path, monkeypatch)
    assert ours == bash


TEST_WORDS = {
    "[ -n $X ], X unset: bash tests '-n' itself": "TP=1\nif [ -n $X ]; then TP=2; fi\n",
    "test $X, X='-z a': two arguments": "X='-z a'\nTP=1\nif test $X; then TP=2; fi\n",
    "$X-x, X unset": 'TP=1\nif [ "$X-x" = "-x" ]; then TP=2; fi\n',
    "${#X} in a test": 'X=abc\nTP=1\nif [ "${#X}" = 3 ]; then TP=2; fi\n',
    "${X%.json} in a test": 'X=a.json\nTP=1\nif [ "${X%.json}" = a ]; then TP=2; fi\n',
}
ONE_BRANCH_WORDS = {  # H177: TP is 2 or, where the test fails, 1 as before the `if`; it read as the branch's 2
    "$(...) in a test": 'TP=1\nif [ "$(echo 7B)" = 7B ]; then TP=2; fi\n',
    "N=1 then N=$(...)": "N=1\nN=$(echo 4)\nTP=1\nif [ $N -gt 2 ]; then TP=2; fi\n",
}


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("body", TEST_WORDS.values(), ids=TEST_WORDS.keys())
def test_test_words_as_bash_expands_them(body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each was decided against bash (TP 1 where bash gives 2, 2 where it gives 3): an unquoted word of `[` / `test`
    read as if quoted, text after `$X` taken as part of the reference, and `${#X}` / `${X%...}` compared as
    written. Bash needs only the variables for the first three."""
    ours, bash = _both_tp(body, tmp_path, monkeypatch)
    assert ours == bash


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("body", ONE_BRANCH_WORDS.values(), ids=ONE_BRANCH_WORDS.keys())
def test_a_test_on_a_command_s_output_leaves_what_one_branch_sets_undecided(body: str, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """`$(...)` compared as written, or a variable a command sets read as stale, was a wrong guess; undecided, the
    test leaves TP the branch's 2 or the 1 it had before the `if` (undecided_branches: the way through that runs
    no branch), so the launch names it."""
    ours, bash = _both_tp(body, tmp_path, monkeypatch)
    assert (ours, bash) == ("$TP", "2")


UNDECIDED_WORDS = {
    "N=$(... | ...)": 'TP=1\nN=$(echo 4 | wc -l)\nif [ -z "$N" ]; then TP=2; else TP=3; fi\n',
    "export N=`...`": 'TP=1\nexport N=`echo 4 | wc -l`\nif [ -z "$N" ]; then TP=2; else TP=3; fi\n',
}


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("body", UNDECIDED_WORDS.values(), ids=UNDECIDED_WORDS.keys())
def test_a_test_on_a_command_s_output_leaves_what_its_branches_set_undecided(body: str, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The test reads a variable only running the script gives, so both branches are read; they set TP apart, and
    TP is undecided after `fi` (launch/undecided_branches.py). It read as the else's 3, bash's value here only
    because `wc -l` happens to print a non-empty line."""
    ours, bash = _both_tp(body, tmp_path, monkeypatch)
    assert (ours, bash) == ("$TP", "3")


VALUES = st.sampled_from(["", "a", "7", "a b", "-n", "-z", "!", "=", "a*", " 7 "])
REF = st.tuples(st.sampled_from(["$L", "$R"]), st.booleans())  # a reference and whether it is quoted
FORMS = st.one_of(st.tuples(REF), st.tuples(st.sampled_from(["-n", "-z", "!"]), REF),
                  st.tuples(REF, st.sampled_from(["=", "!=", "-eq", "-gt"]), REF))


@pytest.mark.skipif(BASH is None, reason="needs bash")
@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["[", "test"]), FORMS, VALUES, VALUES)
def test_bracket_and_test_never_decide_otherwise_than_bash(tmp_path_factory: pytest.TempPathFactory, command: str,
                                                          form: tuple, left: str, right: str) -> None:
    """`[` / `test` over quoted and unquoted variables holding blanks, operators, globs or nothing: where llmperf
    decides, bash (in an empty folder, so that a glob matches nothing) agrees and reports no error."""
    parts = [p if isinstance(p, tuple) else (p, None) for p in form]
    words = [command, *(w for w, _ in parts), *(["]"] if command == "[" else [])]
    unquoted = [False, *(q is False for _, q in parts), *([False] if command == "[" else [])]
    ours = decide_test(words, lambda w: {"$L": left, "$R": right}.get(w, w), unquoted)
    line = " ".join(w if q is None else (f'"{w}"' if q else w) for w, q in [(command, None), *parts]) + \
        (" ]" if command == "[" else "")
    proc = subprocess.run([BASH or "bash", "-c", f"L={shlex.quote(left)}; R={shlex.quote(right)}; {line}"],
                          capture_output=True, text=True, cwd=tmp_path_factory.mktemp("empty"))
    if ours is not None:
        assert (proc.returncode, proc.stderr) == (0 if ours else 1, ""), (line, left, right, proc.stderr)


def test_decided_where_bash_needs_only_the_variables() -> None:
    values = {"$X": ""}.get
    assert decide_test(["[", "-n", "$X", "]"], lambda w: values(w, w), [False, False, True, False]) is True
    assert decide_test(["[", "-n", "$X", "]"], lambda w: values(w, w), [False, False, False, False]) is False
    assert decide_test(["[", "$X", "!=", "7B", "]"], lambda w: values(w, w), [False, True, False, False, False]) \
        is None  # bash: '[: !=: unary operator expected', status 2


NAMED = {"X": "2+3", "Y": "-3", "BIG": "9223372036854775807", "Z": "7"}


@pytest.mark.skipif(BASH is None, reason="needs bash")
@settings(max_examples=80, deadline=None)
@given(st.recursive(st.sampled_from(["X", "Y", "BIG", "Z", "$Z", "2", "63", "0"]),
                    lambda inner: st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%", "**"]), inner).map(
                        lambda t: f"({t[0]} {t[1]} {t[2]})"), max_leaves=5))
def test_arithmetic_over_named_variables_and_large_values_matches_bash(expr: str) -> None:
    """A bare NAME is its value evaluated on its own (X=2+3: X*2 is 10, not 2+3*2) and bash wraps at 64 bits: a
    value beyond them is left unevaluated, never given as Python's unbounded integer."""
    assigns = "; ".join(f"{name}={value}" for name, value in NAMED.items())
    proc = subprocess.run([BASH or "bash", "-c", f"{assigns}; echo $(( {expr} ))"], capture_output=True, text=True)
    ours = _arithmetic(expr.replace("$Z", NAMED["Z"]), NAMED)
    if not ours.startswith("$(("):
        assert (proc.returncode, ours) == (0, proc.stdout.strip()), expr


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("count", ["$#", "${#}"])
def test_an_argument_loop_bash_does_not_enter(count: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`while [ ${#} -gt 0 ]` with no arguments is skipped as `$#` is: `${#}` alone reached shlex, which cut the
    line at its `#`, and the loop was read as one that may run (TP unknown)."""
    ours, bash = _both_tp(f"TP=1\nwhile [ {count} -gt 0 ]; do TP=$1; shift; done\n", tmp_path, monkeypatch)
    assert ours == bash == "1"


LISTS = {
    "|| past a true test": 'A=MOCK\nB=MOCK\nTP=1\nif [[ "$A" == "MOCK" ]] || [[ "$B" == "MOCK" ]] || [[ -z "$A" ]]; then '
                           "TP=2; else TP=4; fi\n",
    "&& with a false test": "A=a\nTP=1\nif [ $A = a ] && [ $A = b ]; then TP=2; else TP=4; fi\n",
    "; takes the last": "A=a\nTP=1\nif [ $A = b ]; [ $A = a ]; then TP=2; else TP=4; fi\n",
    "|| at the line's end": "A=a\nTP=1\nif [ $A = b ] ||\n   [ $A = a ]; then\n  TP=2\nelse\n  TP=4\nfi\n",
    "&& then ||": "A=a\nTP=1\nif [ $A = b ] && [ $A = a ] || [ $A = a ]; then TP=2; else TP=4; fi\n",
    "elif ||": "A=a\nTP=1\nif [ $A = b ]; then TP=8; elif [ $A = c ] || [ $A = a ]; then TP=2; else TP=4; fi\n",
    "undecided || true": "A=a\nTP=1\nif [ -e nofile ] || [ $A = a ]; then TP=2; else TP=4; fi\n",
    "undecided && false": "A=a\nTP=1\nif [ -e nofile ] && [ $A = b ]; then TP=2; else TP=4; fi\n",
    "false && assign": "A=a\nTP=1\n[[ $A == b ]] && TP=2\n",
    "true || assign": "A=a\nTP=1\ntest $A = a || TP=2\n",
    "false && echo && assign": "A=a\nTP=1\n[ $A = b ] && echo no && TP=2\n",
    "false && assign || assign": "A=a\nTP=1\n[ $A = b ] && TP=2 || TP=4\n",
    "if :": "TP=1\nif :; then TP=2; else TP=4; fi\n",
    "if ! true": "TP=1\nif ! true; then TP=2; else TP=4; fi\n",
    "false ||": "TP=1\nif false || [ 1 = 1 ]; then TP=2; else TP=4; fi\n",
    "in a branch": "A=a\nTP=1\nif [ $A = a ]; then [ $A = b ] && TP=2; fi\n",
}


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("body", LISTS.values(), ids=LISTS.keys())
def test_a_condition_list_decided_as_bash_runs_it(body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`if A || B || C; then` (Megatron-LM's train_llama3_8b_h100_fp8.sh chooses --mock-data or --data-path so): the
    list's status is bash's left-to-right `&&` / `||` (bash manual 3.2.4 Lists). Decided only when all tests agreed,
    this one was undecided and both branches ran, the else's TP=4 last. Outside an `if`, `[ $A = b ] && TP=2` runs
    TP=2 only when the test succeeds (it always ran)."""
    ours, bash = _both_tp(body, tmp_path, monkeypatch)
    assert ours == bash


@pytest.mark.skipif(BASH is None, reason="needs bash")
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["&&", "||", ";"]), st.sampled_from([True, False, None]), st.booleans()),
                min_size=1, max_size=5))
def test_a_list_status_never_differs_from_bash(parts: list[tuple[str, bool | None, bool]]) -> None:
    """Any list of decided and undecided tests (an undecided one is either status in bash): where _status decides,
    bash's list gives that status."""
    line = " ".join(f"{op if k else ''} {'true' if (actual if value is None else value) else 'false'}"
                    for k, (op, value, actual) in enumerate(parts))
    ours = _status([(op if k else "", value) for k, (op, value, _) in enumerate(parts)])
    if ours is not None:
        assert subprocess.run([BASH or "bash", "-c", line]).returncode == (0 if ours else 1), line

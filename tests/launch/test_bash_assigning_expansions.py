"""Parameter expansions with an effect beyond their value (bash manual 3.5.3): `${A:=4}` / `${A=4}` assign A, also
inside another assignment or on the launch line itself; `${A:?msg}` / `${A?msg}` stop the script when A is missing;
and a quoted `}` inside an expansion's word (`${A:-"a}b"}`) closes nothing. Each launch is checked against bash
itself where bash is installed (the script run with torchrun replaced by a print of its arguments)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.argv_words import expand_env_refs, normalise_argv
from llmperf_hook.launch.parse import parse_launch

BASH = shutil.which("bash")
GPT = "pretrain_gpt.py --num-layers 2"
ECHO_LAUNCH = "torchrun() { printf '%s\\n' \"$@\"; }; export -f torchrun; "


def _bash(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BASH or "bash", "-c", f'{ECHO_LAUNCH}bash "$0"', str(script)], capture_output=True,
                          text=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}, cwd=script.parent)


def _launch(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch, env: dict[str, str] | None = None) -> list[str]:
    """torchrun's words as llmperf reads the script, checked against what bash passes where bash is installed."""
    script = tmp_path / "train.sh"
    script.write_text(f"#!/bin/bash\n{body}\n")
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "train.sh"], dict(env or {}))
    words = [f"--nproc_per_node={job.nproc_per_node}", *job.script_args]
    if BASH:
        printed = _bash(script, env or {}).stdout.splitlines()
        assert [printed[0], *printed[2:]] == words  # [1] is the script's path
    return words


def _refused(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """llmperf's refusal of a script bash stops before its launch; bash's own message is checked to be the one it
    quotes."""
    script = tmp_path / "train.sh"
    script.write_text(f"#!/bin/bash\n{body}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as err:
        parse_launch(["bash", "train.sh"], {})
    if BASH:
        ran = _bash(script, {})
        assert ran.returncode != 0 and ran.stdout == ""
        printed = re.search(r"line \d+: (.*)", ran.stderr)
        assert printed and f"'{printed.group(1)}'" in str(err.value), (ran.stderr, err.value)
    return str(err.value)


@pytest.mark.parametrize("assign", ["X=${A:=4}", "X=${A=4}", "A=\nX=${A:=4}", "X=${A:=${B:-4}}", "X=${A:=\"4\"}"])
def test_an_assigning_default_sets_the_variable_too(assign: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`X=${A:=4}` with A unset: bash sets A=4 as well as X (llmperf set only X, and `$A` on the launch line stayed
    unexpanded: a refusal for --nproc_per_node, or an empty value when A was set empty)."""
    words = _launch(tmp_path, f"{assign}\ntorchrun --nproc_per_node=$A {GPT} --tp $X", monkeypatch)
    assert words[0] == "--nproc_per_node=4" and words[-2:] == ["--tp", "4"]


@pytest.mark.parametrize("assign, expected", [("A=\nX=${A=4}", ["", ""]), ("A=2\nX=${A:=4}", ["2", "2"])])
def test_an_assigning_default_leaves_a_set_variable(assign: str, expected: list[str], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`${A=4}` assigns only an unset A (an empty one stays empty); `${A:=4}` only an unset or empty one."""
    words = _launch(tmp_path, f"{assign}\ntorchrun --nproc_per_node=2 {GPT} --a \"$A\" --x \"$X\"", monkeypatch)
    assert words[-4:] == ["--a", expected[0], "--x", expected[1]]


def test_an_assigning_default_on_the_launch_line_reaches_the_words_after_it(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """bash expands a command's words left to right, so `--tp ${TP:=2} --x $TP` gives `--x 2` (llmperf kept `$TP`);
    the variable stays the shell's: the command's environment does not gain it."""
    words = _launch(tmp_path, f"torchrun --nproc_per_node=${{NP:=2}} {GPT} --tp ${{TP:=2}} --x $TP --procs $NP",
                    monkeypatch)
    assert words[0] == "--nproc_per_node=2" and words[-6:] == ["--tp", "2", "--x", "2", "--procs", "2"]
    env: dict[str, str] = {}
    assert normalise_argv(["${TP:=2}", "$TP"], env, {}) == ["2", "2"] and env == {}


def test_an_assigning_default_of_an_undecided_variable_assigns_nothing() -> None:
    env: dict[str, str] = {}
    assert expand_env_refs("${NP:=8}", env, {}, frozenset({"NP"}), assign=True) == "${NP:=8}" and env == {}
    assert expand_env_refs("${NP:=8}", env, {}) == "8" and env == {}  # a look that runs nothing assigns nothing


@pytest.mark.parametrize("default", ['"a}b"', "'a}b'", '"a}}b"', 'x"}"y'])
def test_a_quoted_brace_in_a_default_closes_nothing(default: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """bash's closing brace is the first one not quoted (3.5.3): `${A:-"a}b"}` is `a}b` (llmperf read `ab}`)."""
    expected = default.replace('"', "").replace("'", "")
    words = _launch(tmp_path, f"X=${{A:-{default}}}\ntorchrun --nproc_per_node=2 {GPT} --data-path $X "
                    f"--load ${{A:-{default}}}", monkeypatch)
    assert words[-4:] == ["--data-path", expected, "--load", expected]


def test_a_quoted_nested_expansion_in_a_default_still_closes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    words = _launch(tmp_path, f'X=${{A:-"${{B:-q}}"}}\ntorchrun --nproc_per_node=2 {GPT} --data-path $X',
                    monkeypatch)
    assert words[-1] == "q"


@pytest.mark.parametrize("line", ["X=${A:?need A}", ": \"${A:?need A}\"", "A=\n: ${A:?need A}", ": ${A?}",
                                  ": ${A:?}", ": ${B:-${A:?need A}}"])
def test_a_required_variable_the_script_lacks_stops_it(line: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`${A:?msg}`: bash prints `A: msg` and exits when A is unset or empty (`?`: unset). llmperf read on and priced
    the launch, or gave an option the value `?need A}`."""
    message = _refused(tmp_path, f"{line}\ntorchrun --nproc_per_node=2 {GPT} --data-path $A", monkeypatch)
    assert "stops at line" in message and "set A in the environment" in message


def test_a_required_argument_the_script_was_not_given_stops_it(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    message = _refused(tmp_path, f"torchrun --nproc_per_node=2 {GPT} --data-path ${{1:?usage: train.sh DATA}}",
                       monkeypatch)
    assert "argument 1 after its path" in message


@pytest.mark.parametrize("line, env", [("A=/d\n: ${A:?need A}", {}), (": ${A:?need A}", {"A": "/d"}),
                                       ("A=\n: ${A?need A}", {}), (": ${B:+${A:?need A}}", {}),
                                       ("if [ -n \"$Z\" ]; then : ${C:?}; fi", {}), ("( : ${C:?} )", {})])
def test_a_required_variable_that_is_there_or_a_check_that_may_not_run(line: str, env: dict[str, str],
                                                                       tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A set A passes (`?` without the colon: an empty one too); a check in a branch that does not run, or the
    subshell a failed check ends, stops nothing."""
    words = _launch(tmp_path, f"{line}\ntorchrun --nproc_per_node=2 {GPT} --x \"${{A:?}}\"".replace(
        "${A:?}", "${A?}" if "A=\n" in line else "${A:-/d}"), monkeypatch, env)
    assert words[-2] == "--x"


@pytest.mark.parametrize("line, expected", [('echo "${A:=4}" > /dev/null', "4"), ("mkdir -p ${A:=4}", "4"),
                                            ("cat > /dev/null <<EOF\n${A:=4}\nEOF", "7")])
def test_an_assigning_default_in_another_command(line: str, expected: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """bash expands any command's words in the shell itself, so `echo "${A:=4}"` assigns A; a here-document's body
    is expanded in the process forked for the command, so its `${A:=4}` leaves the script's A unset (bash 5)."""
    words = _launch(tmp_path, f"{line}\ntorchrun --nproc_per_node=${{A:-7}} {GPT}", monkeypatch)
    assert words[0] == f"--nproc_per_node={expected}"


@pytest.mark.parametrize("assign, expected", [('X="${A:-"a b"}"', "a b"), ('X="${A:-"a}b"}"', "a}b"),
                                              ('B=q\nX="${A:-"${B}"}"', "q"),
                                              ('M="${MODEL:-"llama 7b"}"\nX=$M', "llama 7b"),
                                              ('A=z\nX="${A:-"a b"}"', "z")])
def test_quotes_inside_a_double_quoted_expansion(assign: str, expected: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """bash matches the quotes of the word inside a double-quoted `${...}` on their own; the split closed the outer
    quotes at the first inner one, and `X="${A:-"a b"}"` assigned nothing."""
    words = _launch(tmp_path, f'{assign}\ntorchrun --nproc_per_node=2 {GPT} --data-path "$X" --load "${{A:-"a b"}}x"',
                    monkeypatch)
    assert words[-4:] == ["--data-path", expected, "--load", ("z" if "A=z" in assign else "a b") + "x"]


def test_an_assigning_default_of_a_positional_parameter_assigns_nothing() -> None:
    """bash refuses `${1:=4}` ("$1: cannot assign in this way") and the command fails: no variable `1` is made."""
    env: dict[str, str] = {}
    assert expand_env_refs("${1:=4}", env, {}, assign=True) == "${1:=4}" and env == {}


def test_a_required_variable_assigned_earlier_on_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bash expands left to right: `: ${A:=/d} ${A:?}` passes (the check saw A unset and stopped the script)."""
    words = _launch(tmp_path, f': ${{A:=/d}} "${{A:?need A}}"\ntorchrun --nproc_per_node=2 {GPT} --data-path $A',
                    monkeypatch)
    assert words[-2:] == ["--data-path", "/d"]
    _refused(tmp_path, f': ${{A:=}} "${{A:?need A}}"\ntorchrun --nproc_per_node=2 {GPT}', monkeypatch)


@pytest.mark.parametrize("block", ['if true; then :; elif [ -n "${A:=4}" ]; then :; fi',
                                   'if false; then if [ -n "${A:=4}" ]; then :; fi; fi',
                                   'if [ 1 = 1 ]; then :\nelif [ "${A:=4}" = 4 ]; then :\nfi'])
def test_a_test_bash_does_not_run_assigns_nothing(block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An `elif` after a branch that ran, or an `if` inside a branch that does not run, is never tested by bash, so
    its `${A:=4}` is not expanded."""
    words = _launch(tmp_path, f"{block}\ntorchrun --nproc_per_node=${{A:-7}} {GPT}", monkeypatch)
    assert words[0] == "--nproc_per_node=7"


@pytest.mark.parametrize("line, expected", [("X=$(echo ${A:=4})", "7"), ("X=`echo ${A:=4}`", "7"),
                                            ('X="$(basename "${B:-$(echo ${A:=4})}")"', "7"),
                                            (": ${A:=4} | cat", "7"), (": ${A:=4} &", "7"),
                                            (": ${A:=4} & wait", "7"), ("X=$(( ${A:=4} + 1 ))", "4")])
def test_an_assigning_default_in_a_subshell_assigns_nothing(line: str, expected: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A command substitution (bash manual 3.5.4), each command of a pipeline (3.2.3) and an asynchronous `&` command
    (3.2.4) run in a subshell, so their `${A:=4}` leaves the script's A unset; `$(( ))` is expanded in the shell."""
    words = _launch(tmp_path, f"{line}\ntorchrun --nproc_per_node=${{A:-7}} {GPT}", monkeypatch)
    assert words[0] == f"--nproc_per_node={expected}"


@pytest.mark.parametrize("line", ["X=$(: ${A:?need A})", ": ${A:?need A} | cat", ": ${A:?need A} &",
                                  "X=`: ${A:?need A}`"])
def test_a_required_variable_checked_in_a_subshell_stops_only_that(line: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """bash prints `A: need A` there and ends the subshell; the script goes on to its launch (llmperf refused it)."""
    words = _launch(tmp_path, f"{line}\ntorchrun --nproc_per_node=2 {GPT} --x 1", monkeypatch)
    assert words[-2:] == ["--x", "1"]

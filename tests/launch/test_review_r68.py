"""R68's review of H189 (launch front end): more scripts run by the real bash with stub launchers (_compare): `set -u`
on array elements and `$!` where bash goes on (an array a later command may have replaced, a background job started
other than on a plain line), brace expansion next to `${...}`, and `"$@"` / `"$*"` within words with several
arguments. Where bash launches, llmperf reads the same launch; where bash stops, llmperf refuses."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from llmperf_hook.launch.brace_expansion import brace_expand
from tests.launch.test_scripts_as_the_shell_runs_them import ARGS, _compare

T = "torchrun --nproc_per_node $NP pretrain_gpt.py --num-layers 2"

NOUNSET = {  # bash 5.2.15 with `set -u`, each line after `set -u` and `NP=2`
    "rematch_element_after_a_match": "X=node12\n[[ $X =~ node([0-9]+) ]]\necho ${BASH_REMATCH[1]}",
    "array_replaced_where_a_list_may_not_run": "A=(x y)\n[ -f cfg ] && A=(z)\necho ${A[1]}",
    "array_replaced_in_an_undecided_branch": "A=(x y)\nif [ -f cfg ]; then A=(z); fi\necho ${A[1]}",
    "array_replaced_in_an_undecided_case_arm": "A=(x y)\ncase $(hostname) in nohost) A=(z);; esac\necho ${A[1]}",
    "array_set_by_a_function": "f() { A=(a b); }\nA=(x)\nf\necho ${A[1]}",
    "array_set_by_mapfile_from_a_process": "A=(x)\nmapfile -t A < <(printf 'a\\nb\\n')\necho ${A[1]}",
    "array_set_by_read_a": "A=(x)\nread -ra A <<< 'a b'\necho ${A[1]}",
    "array_set_by_eval": "A=(x)\neval 'A=(a b)'\necho ${A[1]}",
    "array_set_by_declare": "A=(x)\ndeclare -a A=(a b)\necho ${A[1]}",
    "array_appended_by_a_while_read_loop": "A=(x)\nprintf 'a\\n' > f\nwhile read l; do A+=($l); done < f\n"
                                           "echo ${A[1]}",
    "array_set_by_a_sourced_file": "A=(x)\necho 'A=(a b)' > s.sh\nsource s.sh\necho ${A[1]}",
    "element_of_a_nameref": "declare -n R=A\nA=(x y)\necho ${R[1]}",
    "element_of_an_array_a_loop_appends_pass_by_pass": "for i in 1 2; do A+=($i); done\necho ${A[1]}",
    "element_in_single_quotes_a_heredoc_or_a_comment": "A=(x)\necho '${A[5]}' # ${A[5]}\ncat <<'EOF'\n${A[5]}\nEOF",
    "element_in_a_function_never_called": "A=(x)\nf() { echo ${A[5]}; }",
    "background_pid_of_a_subshell_on_lines": "(\n  sleep 0\n) &\necho $!",
    "background_pid_of_a_group": "{ sleep 0; } &\necho $!",
    "background_pid_of_a_group_on_lines": "{\n  sleep 0\n} &\necho $!",
    "background_pid_read_by_a_function_called_after": "f() { echo $!; }\nsleep 0 &\nf",
    "background_job_started_by_a_function": "f() { sleep 0 & }\nf\necho $!",
    "background_job_with_redirections": "sleep 0 > /dev/null 2>&1 &\necho $!",
    "background_job_in_a_loop": "for i in 1; do sleep 0 & done\necho $!",
    "coprocess": "coproc sleep 0\necho $!",
    "background_pid_in_a_function_called_before_any_job": "f() { echo $!; }\nf",
    "plain_variable_appended_as_an_array": "X=a\nX+=(b)\necho ${X[1]}",
    "element_assigned_to_a_plain_variable": "X=a\nX[1]=b\necho ${X[1]}",
    "array_from_a_local_in_a_function": "f() { local -a L=(a b); echo ${L[1]}; }\nf",
    "array_of_a_pattern_split": "CSV=a,b\nA=(${CSV//,/ })\necho ${A[1]}",
    "element_appended_at_the_count": "A=(x)\nA[${#A[@]}]=y\necho ${A[1]}",
    "array_of_an_unknown_array_and_more": "B=($(seq 2))\nA=(\"${B[@]}\" z)\necho ${A[2]}",
    "array_sliced": "A=(x y z)\nA=(\"${A[@]:1}\")\necho ${A[1]}",
}


@pytest.mark.parametrize("name", NOUNSET)
def test_nounset_as_bash_runs_it(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, "set -u\nNP=2\n" + NOUNSET[name] + "\n" + T + "\n", tmp_path, monkeypatch)


WORDS = {  # the launch's words as bash makes them, with the script's arguments after the name
    "loop_over_a_default_holding_a_comma": ("A=-\nfor s in ${U:-a,b}; do A=\"$A $s\"; done\n" + T + " \"[$A]\"", []),
    "loop_over_a_default_holding_braces": ("A=-\nfor s in ${U:-{a,b}}; do A=\"$A $s\"; done\n" + T + " \"[$A]\"", []),
    "loop_over_braces_after_a_braced_variable": ("A=-\nX=1\nfor s in ${X}{a,b}; do A=\"$A $s\"; done\n" + T +
                                                 " \"[$A]\"", []),
    "braces_after_a_braced_variable": ("X=1\n" + T + " ${X}{a,b}", []),
    "escaped_braces": (T + " \\{a,b\\} a\\{1..2\\}", []),
    "all_arguments_within_words_three": (T + " \"$@\"x x\"$@\" --y=\"$@\"", ["a", "b c", "d"]),
    "star_quoted_within_words": (T + " \"$*\" \"x$*y\" x\"$*\"", ["a", "b c"]),
    "plain_variable_appended_as_an_array": ("X=a\nX+=(b)\n" + T + " \"${X[@]}\" $X", []),
}


@pytest.mark.parametrize("name", WORDS)
def test_words_as_bash_makes_them(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text, args = WORDS[name]
    monkeypatch.setitem(ARGS, name, args)
    _compare("bash", name, "NP=2\n" + text + "\n", tmp_path, monkeypatch)


BRACED_PARAMETERS = ["${U:-a,b}", "${U:-{a,b}}", "${X}{a,b}", "x${X}y{1..2}", "${U:-x}{a,b}${U:-c,d}", "{a,${X}}",
                     "${X//,/_}{a,b}"]


@pytest.mark.parametrize("word", BRACED_PARAMETERS)
def test_a_parameter_expansion_is_no_brace_expression(word: str) -> None:
    """bash passes over `${...}` in brace expansion (braces.c brace_gobbler: 'treat ${...} like \\{...}'): the words
    brace_expand makes of `word` are as many as bash prints with U unset and X=1 (no blank in either value)."""
    printed = subprocess.run(["bash", "-c", f"printf '<%s>' {word}"], capture_output=True, text=True, check=True,
                             env={"X": "1", "PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert len(brace_expand(word) or []) == printed.stdout.count("<"), word


@pytest.mark.parametrize("word", ["{01..10}", "{1..010}", "{-1..01}", "{a..e..2}", "{1..3}{a,b}", "{0..-010..5}"])
def test_zero_padding_and_steps_as_bash(word: str) -> None:
    printed = subprocess.run(["bash", "-c", f"printf '<%s>' {word}"], capture_output=True, text=True, check=True)
    assert "".join(f"<{w}>" for w in brace_expand(word) or []) == printed.stdout, word


NO_CFG = "[ -f cfg ]"  # a file test llmperf does not decide; false where bash runs the script
BRANCHES = {  # undecided `if`s whose every way past the `fi` agrees: priced as bash launches
    "both_branches_agree": f"if {NO_CFG}; then NP=4; else NP=4; fi\n" + T,
    "inner_branches_agree_with_the_outer_else": f"if {NO_CFG}; then\n  if [ -f b ]; then NP=4; else NP=4; fi\n"
                                                "else\n  NP=4\nfi\n" + T,
    "only_the_else_goes_on": f"if {NO_CFG}; then NP=4; exit 1; else NP=8; fi\n" + T,
    "elif_chain_of_exits": f"if {NO_CFG}; then exit 1; elif [ -f b ]; then NP=1; exit 2; else NP=8; fi\n" + T,
    "array_of_the_branch_that_goes_on": f"A=(--lr 1)\nif {NO_CFG}; then A+=(--x); exit 1; else A+=(--y); fi\n"
                                        + T + " \"${A[@]}\"",
    "value_before_the_if_read_in_the_elif_branch": f"M=3\nif {NO_CFG}; then M=5; exit 1\nelif [ -d . ]; then NP=$M\n"
                                                   "else exit 1\nfi\n" + T,
}


@pytest.mark.parametrize("name", BRANCHES)
def test_undecided_branches_that_agree(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, "NP=2\n" + BRANCHES[name] + "\n", tmp_path, monkeypatch)

"""H189: the launch front end against bash 5.2 itself: each branch of an undecided `if` starts from the values before
it, `set -u` in loop bodies, `elif` tests, array elements and `$!`, `"$@"` within a word and `"$@" $*` without
arguments, and brace expansion (nested, letters, zero-padded). Each script runs in the real bash with stub launchers
(_compare): where bash launches, llmperf reads the same launch; where bash stops, llmperf refuses."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.brace_expansion import brace_expand
from llmperf_hook.launch.parse import parse_launch
from tests.launch.test_scripts_as_the_shell_runs_them import ARGS, _compare

T = "torchrun --nproc_per_node $NP pretrain_gpt.py --num-layers 2"
NO_CFG = "[ -f cfg ]"  # a file test llmperf does not decide; false where the test runs bash (no cfg there)

BRANCHES = {  # where bash takes either branch, llmperf's reading gives the value both ways agree on
    "else_reads_the_value_from_before_the_if": f"NP=2\nif {NO_CFG}; then NP=4; M=2; else M=$NP; fi\nNP=$M\n" + T + "\n",
    "then_taken_by_bash": "NP=2\nif [ -d . ]; then NP=4; M=2; else M=$NP; fi\nNP=$M\n" + T + "\n",
    "elif_test_reads_the_value_from_before_the_if":
        f"NP=2\nif {NO_CFG}; then\n  NP=4\n  N=2\nelif [ \"$NP\" = 4 ]; then\n  N=8\nelse\n  N=2\nfi\n"
        "NP=$N\n" + T + "\n",
    "else_reads_the_array_from_before_the_if":
        f"NP=2\nA=(x)\nif {NO_CFG}; then A=(y z); N=1; else N=${{#A[@]}}; fi\nNP=$((N * 2))\n" + T + "\n",
    "appended_flags_of_the_else_only": f"NP=2\nA=(--lr 1)\nif {NO_CFG}; then A+=(--bf16); B=1; else B=${{#A[@]}}; fi\n"
                                       "[ $B = 2 ] || exit 1\n" + T + " --save x\n",
    "branch_that_appends_and_exits_on_one_line": f"NP=2\nA=(--lr 1)\nif {NO_CFG}; then A+=(--bf16); exit 1; fi\n"
                                                   + T + " \"${A[@]}\"\n",
}


@pytest.mark.parametrize("name", BRANCHES)
def test_each_branch_starts_from_the_values_before_the_if(name: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, BRANCHES[name], tmp_path, monkeypatch)


def _refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text("#!/bin/bash\n" + text)
    with pytest.raises(UsageError) as refused:
        parse_launch(["bash", "train.sh"], {})
    return str(refused.value)


def test_the_refusal_names_the_else_value_from_before_the_if(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`if X; then NP=8; else NN=$NP; fi`: NN is unset or 2 (bash 5.2), never 8, which the `then` branch set."""
    said = _refusal(tmp_path, monkeypatch, f"NP=2\nif {NO_CFG}; then NP=8; else NN=$NP; fi\n"
                                           "torchrun --nproc_per_node $NN pretrain_gpt.py\n")
    assert "NN='2'" in said and "NN='8'" not in said


def test_an_inner_if_that_agrees_still_sets_the_outer_branch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both inner branches set NP=4, the outer `else` leaves it 2: NP is 4 or 2 after the outer `fi` (bash takes the
    `else` here and launches with 2), so llmperf names both ways instead of pricing either."""
    said = _refusal(tmp_path, monkeypatch, f"NP=2\nif {NO_CFG}; then\n  if [ -f b ]; then NP=4; else NP=4; fi\n"
                                           "else\n  M=1\nfi\n" + T + "\n")
    assert "NP='4'" in said and "as before that `if`" in said


def test_a_branch_that_exits_leaves_the_other_ones_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`if [ -d . ]; then NP=4; else NP=8; exit 1; fi`: only the `then` way goes on past the `fi`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text("#!/bin/bash\nNP=2\nif [ -d . ]; then NP=4; else NP=8; exit 1; fi\n" + T + "\n")
    assert parse_launch(["bash", "train.sh"], {}).nproc_per_node == 4


NOUNSET = {  # bash 5.2 with `set -u`: where it stops (unbound variable) llmperf refuses; where it goes on, llmperf does
    "for_loop_after_a_command": "i=0; for j in 1 2; do echo $X; done",
    "while_true_body": "while true; do echo $X; break; done",
    "until_false_body": "until false; do echo $X; break; done",
    "elif_test_after_a_false_test": "if [ 1 = 2 ]; then :\nelif [ -n \"$X\" ]; then :\nfi",
    "elif_test_after_a_true_test": "if [ 1 = 1 ]; then :\nelif [ -n \"$X\" ]; then :\nfi",
    "loop_body_after_a_break_it_takes": "while true; do if [ -d . ]; then break; fi; echo $X; done",
    "loop_over_words_only_running_gives": "for j in $(ls nothing 2>/dev/null); do echo $X; done",
    "loop_bash_never_enters": "while [ 1 = 2 ]; do echo $X; done",
    "element_past_the_end": "A=(x)\necho ${A[5]}",
    "quoted_element_past_the_end": "A=(x)\necho \"${A[5]}\"",
    "element_before_the_start": "A=(x)\necho ${A[-2]}",
    "elements_that_are_there": "A=(x y)\necho ${A[1]} ${A[-2]} ${A[0]}",
    "element_with_a_default_or_its_length": "A=(x)\necho ${A[5]:-} ${#A[5]}",
    "count_of_an_unset_array": "echo ${#B[@]}",  # bash prints 'B: unbound variable' and goes on
    "all_of_an_unset_or_empty_array": "A=()\necho \"${A[@]}\" ${B[@]} ${B[*]}",
    "element_of_an_unset_name": "echo ${B[0]}",
    "element_of_a_plain_variable": "V=1\necho ${V[0]}",
    "second_element_of_a_plain_variable": "V=1\necho ${V[1]}",
    "element_at_a_variable_index_in_a_loop": "A=(x)\nfor i in 0 1; do echo ${A[$i]}; done",
    "element_at_an_arithmetic_name_index": "A=(x)\ni=1\necho ${A[i]}",
    "elements_at_variable_indices_that_are_there": "A=(x y)\ni=0\necho ${A[i]} ${A[$i]} ${A[${i}]}\n"
                                                   "x=0; for i in 0 1; do echo ${A[$i]}; done",
    "associative_key_of_a_variable": "declare -A M=([k]=1)\nk=z\necho ${M[$k]}",
    "associative_key_it_has": "declare -A M=([k]=1)\necho ${M[k]}",
    "associative_key_it_lacks": "declare -A M=([k]=1)\necho ${M[z]}",
    "background_pid_before_any_background_job": "echo $!",
    "braced_background_pid": "echo \"${!}\"",
    "background_pid_after_a_background_job": "sleep 0 &\necho $!",
    "background_pid_with_a_default_or_quoted": "echo ${!:-} '$!' \\$!",
    "default_of_an_unset_variable": "echo ${Y:-}",
    "elements_of_a_command_substitution": "A=($(seq 3))\necho ${A[2]}",
    "elements_of_a_glob": "touch g1 g2\nA=(g*)\necho ${A[1]}",
    "elements_appended_in_a_loop_read_once": "for i in $(seq 3); do A+=($i); done\necho ${A[2]}",
    "elements_of_a_brace_expansion": "A=({1..3})\necho ${A[2]}",
    "quoted_braces_are_one_element": "A=(\"{1..3}\")\necho ${A[1]}",
}


@pytest.mark.parametrize("name", NOUNSET)
def test_nounset_as_bash_runs_it(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, "set -u\nNP=2\n" + NOUNSET[name] + "\n" + T + "\n", tmp_path, monkeypatch)


def test_the_refusal_names_the_element(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said = _refusal(tmp_path, monkeypatch, "set -u\nNP=2\nA=(x)\necho ${A[5]}\n" + T + "\n")
    assert "line 5" in said and "'A[5]: unbound variable'" in said and "`${A[5]:-...}`" in said


WORDS = {  # the launch's words as bash makes them, with the script's arguments after the name
    "all_arguments_twice_without_any": (T + " \"$@\" $*", []),
    "star_then_at_without_any": (T + " $* \"$@\" $@", []),
    "all_arguments_twice": (T + " \"$@\" $*", ["a", "b c"]),
    "all_arguments_within_words": (T + " \"$@\"x x\"$@\" --y=\"$@\" pre\"$@\"post \"$@\"\"$@\"", ["a", "b c"]),
    "all_arguments_within_words_without_any": (T + " \"$@\"x x\"$@\" --y=\"$@\" \"$@\"\"$@\"", []),
    "all_arguments_assigned_are_joined": ("A=\"$@\"\n" + T + " \"$A\"", ["a", "b c"]),
    "quoted_star_without_any": (T + " \"$*\" $@", []),
    "nested_list": (T + " x{a,{b,c}} x{a,b{1,2}}y {{1..2},b}", []),
    "letter_sequences": (T + " {a..e} {e..a..2} pre{A..C}post {a..z..0}", []),
    "zero_padded": (T + " {01..03} {-01..2} {9..007}", []),
    "two_expressions_in_a_word": (T + " {a,b}{1,2} {a..c}{1..2} {a}{b,c}", []),
    "empty_parts": (T + " {,} a{,b} x{,}y", []),
    "not_expressions": (T + " {a} {} {1.5..2} {aa..c} a{}b {1..3..}", []),
    "steps": (T + " {1..10..3} {10..1..-3} {1..10..-3} {+1..3}", []),
    "stray_braces": (T + " {a,b}} {{a,b} }{a,b} {a,b", []),
    "array_of_a_brace_expansion": ("A=(x{1..2} \"{a,b}\" {b..a})\n" + T + " \"${A[@]}\"", []),
    "unset_elements_followed": ("A=(x y z)\nunset 'A[2]'\ndeclare -A M=([k]=1 [j]=2)\nunset 'M[k]'\n"
                                + T + " \"${A[@]}\" \"${M[@]}\" ${#A[@]}", []),
    "loop_words": ("for s in {a..c} x{1,{2,3}}; do A+=\" --s$s\"; done\n" + T + " $A", []),
    "loop_words_on_lines": ("A=-\nfor i in {01..03} {1,2}{a,b}; do\n  A=\"$A $i\"\ndone\n" + T + " \"[$A]\"", []),
}


@pytest.mark.parametrize("name", WORDS)
def test_words_as_bash_makes_them(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text, args = WORDS[name]
    monkeypatch.setitem(ARGS, name, args)
    _compare("bash", name, "NP=2\n" + text + "\n", tmp_path, monkeypatch)


BRACES = ["x{a,{b,c}}", "{a..e}", "{01..03}", "x{a,b{1,2}}y", "{a,b}{1,2}", "{e..a..2}", "{a}{b,c}", "a{,b}",
          "{-01..2}", "{-05..-1}", "{a..c}{1..2}", "--x={a,b}", "{1..10..3}", "{a,b}}", "{{a,b}", "{3..1}", "{1.5..2}",
          "{aa..c}", "a{}b{c,d}", "{}", "{a}", "{1..2x}{a,b}", "{007..9}", "{1,2..3}", "{1..3,4}", "{a..c..-1}",
          "{a,b},c", "}{a,b}", "{a,b", "{..3}", "{1..}", "{x,y}{}"]


@pytest.mark.parametrize("word", BRACES)
def test_brace_expansion_of_one_word_as_bash(word: str) -> None:
    """brace_expand's words (an empty one removed, as bash removes an unquoted empty word) are bash's."""
    printed = subprocess.run(["bash", "-c", f"printf '<%s>' {word}"], capture_output=True, text=True, check=True)
    assert "".join(f"<{w}>" for w in brace_expand(word) or [] if w) == printed.stdout, shlex.quote(word)


def test_brace_expansion_left_as_written() -> None:
    """A backquote glued to more of the word (bash stops: 'bad substitution', H197) or past MAX_WORDS: None."""
    assert brace_expand("{Z..a}x") is None and brace_expand("{1..100000}") is None


def test_an_element_unset_inside_an_array_is_not_priced_as_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`unset 'A[0]'` of `(x y)` leaves a sparse array (bash: `"${A[@]}"` is y; H205 keeps sparse arrays, it was read
    as `${A[@]}` unexpanded), not `x y` as if nothing were unset."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text("#!/bin/bash\nNP=2\nA=(x y)\nunset 'A[0]'\n" + T + ' "${A[@]}"\n')
    assert parse_launch(["bash", "train.sh"], {}).script_args[-2:] == ("2", "y")

"""H197: the shell reader's remaining gaps, each against bash 5.2 itself (the scripts run in the real bash with the
stub launchers of test_scripts_as_the_shell_runs_them: where bash launches, llmperf reads the same launch; where bash
stops, llmperf refuses): an unquoted `$@` / `$*` within a word, `$X` after `unset X`, ..."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.brace_expansion import brace_expand
from llmperf_hook.launch.parse import parse_launch
from tests.launch.test_scripts_as_the_shell_runs_them import _job, _run

T = "torchrun --nproc_per_node 2 pretrain_gpt.py --num-layers 2"
NO_CFG = "[ -f cfg ]"  # a file test llmperf does not decide; false where the test runs bash (no cfg there)


def _same_as_bash(text: str, args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bash runs `text` with `args`: llmperf reads the launch it makes, or refuses where bash stops before one."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n" + text)
    real = _run(bash, script, args, tmp_path)
    monkeypatch.chdir(tmp_path)
    if real is None:
        with pytest.raises(UsageError):
            parse_launch(["bash", str(script), *args], {})
        return
    assert _job(["bash", str(script), *args]) == _job(real), real


ARGUMENT_LISTS = {"two": ["a", "b c"], "none": [], "empty_at_the_ends": ["", "a", ""], "empty_between": ["a", "", "b"],
                  "blanks_around": [" a "]}
UNQUOTED_ALL = {  # bash manual 3.4.2 Special Parameters (`@`, `*`) and 3.5.7 Word Splitting
    "between_quoted_strings": T + ' --tag "x "$@" y" --seed 1\n',
    "braced_between_quoted_strings": T + ' --tag "x "${@}" y" --seed 1\n',
    "glued_unquoted": T + " --tag x$@y --seed 1\n",
    "star_glued": T + ' --tag "x"$*"y" --seed 1\n',
    "after_an_option_sign": T + " --tag=$@ --seed 1\n",
    "in_a_function": 'run() { ' + T + ' --tag "<"$@">" --seed 1; }\nrun "$@"\n',
    # R80: an assignment's word is one word (3.4) also where a quoted blank stands before `$@`, and the word after
    # `case` is not split (3.2.5.2): both were read as split words (`A` unknown, 'no launch line')
    "assigned_after_a_quoted_blank": 'A="x y"$@\n' + T + ' --tag "$A" --seed 1\n',
    "exported_after_a_quoted_blank": 'export A="x y"$@\n' + T + ' --tag "$A" --seed 1\n',
    "local_after_a_quoted_blank": 'f() { local A="x y"$@; ' + T + ' --tag "$A"; }\nf "$@"\n',
    "case_word": 'case x$@ in *) ' + T + ' --tag ok;; esac\n',
}


@pytest.mark.parametrize("args", ARGUMENT_LISTS)
@pytest.mark.parametrize("name", UNQUOTED_ALL)
def test_unquoted_all_arguments_within_a_word(name: str, args: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`"x "$@" y"` with `a` and `b c`: `x a`, `b`, `c y` (the first argument joins the text before, the last the text
    after, each split at blanks); was the single word `x a b c y`."""
    _same_as_bash(UNQUOTED_ALL[name], ARGUMENT_LISTS[args], tmp_path, monkeypatch)


QUOTED_ALL_UNSPLIT = {  # R80: `"$@"` in an assignment after a quoted blank and as a `case` word is one word too (read
    # before as split words: A unknown, 'no launch line')
    "assigned_after_a_quoted_blank": 'A="x y""$@"\n' + T + ' --tag "$A" --seed 1\n',
    "exported_after_a_quoted_blank": 'export A="x y""$@"\n' + T + ' --tag "$A" --seed 1\n',
    "case_word": 'case "$@" in *) ' + T + ' --tag ok;; esac\n',
}


@pytest.mark.parametrize("name", QUOTED_ALL_UNSPLIT)
def test_all_arguments_quoted_in_a_word_bash_does_not_split(name: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _same_as_bash(QUOTED_ALL_UNSPLIT[name], ARGUMENT_LISTS["two"], tmp_path, monkeypatch)


QUOTED_ALL = {  # R80: `"$@"` with text in its quotes or a default (3.4.2, 3.5.3): `"x $@ y"` with a and 'b c' gives
    # 'x a', 'b c y' and `"${@:-x}"` one word per argument (both were the one word 'x a b c y' / 'a b c')
    "text_in_its_quotes": T + ' --tag "x $@ y" --seed 1\n',
    "default": T + ' --tag "${@:-x}" --seed 1\n',
    "empty_default": T + ' --tag "${@:-}" --seed 1\n',
}


@pytest.mark.parametrize("args", [*ARGUMENT_LISTS, "one_empty"])
@pytest.mark.parametrize("name", QUOTED_ALL)
def test_all_arguments_quoted_with_text_or_a_default(name: str, args: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _same_as_bash(QUOTED_ALL[name], ARGUMENT_LISTS.get(args, [""]), tmp_path, monkeypatch)


UNSET = {  # bash manual 4.1 Bourne Shell Builtins `unset`, 3.5.3, 4.3.1 `set -u`
    "unset": f"X=--bf16\nunset X\n{T} $X --a \"$X\" --b=${{X}}c\n",
    "unset_v": f"X=--bf16\nunset -v X\n{T} $X --a \"$X\" --b=${{X}}c\n",
    "unset_f_leaves_the_variable": f"X=--bf16\nunset -f X\n{T} $X --a \"$X\"\n",
    "unset_f_removes_the_function": f"NP=2\nf() {{ NP=8; }}\nunset -f f\nf\n{T} --seed $NP\n",
    "unset_of_a_function_name_removes_it": f"NP=2\nf() {{ NP=8; }}\nunset f\nf\n{T} --seed $NP\n",
    "unset_of_a_variable_keeps_the_function": f"NP=2\nf() {{ NP=8; }}\nf=1\nunset f\nf\n{T} --seed $NP\n",
    "unset_then_default": f"X=--bf16\nunset X\n{T} ${{X:-8}} ${{X-9}} ${{X+--fp16}}\n",
    "assigned_from_an_unset": f"X=8\nunset X\nY=\"--seed=$X\"\nZ=${{X}}4\n{T} $Y --lr $Z\n",
    "unset_in_both_branches": f"X=--bf16\nif {NO_CFG}; then unset X; else unset X; fi\n{T} --a \"$X\" $X\n",
    "unset_in_the_else_and_before": f"if {NO_CFG}; then unset X; else unset X; fi\n{T} --a \"$X\"\n",
    "unset_then_set_again": f"X=--bf16\nunset X\nX=--fp16\n{T} $X\n",
    "unset_then_read": f"X=--bf16\nunset X\nread -r X <<< --fp16\n{T} $X\n",
    "nounset_unset": f"set -u\nX=--bf16\nunset X\n{T} $X\n",
    "nounset_unset_v": f"set -u\nX=--bf16\nunset -v X\n{T} --a \"$X\"\n",
    "nounset_unset_f": f"set -u\nX=--bf16\nunset -f X\n{T} $X\n",
    "nounset_unset_default": f"set -u\nX=--bf16\nunset X\n{T} ${{X:-}} --a ${{X-1}}\n",
    "nounset_unset_then_read": f"set -u\nunset X\nread -r X <<< --fp16\n{T} $X\n",
    "nounset_unset_then_set": f"set -u\nX=1\nunset X\nX=--fp16\n{T} $X\n",
    "nounset_unset_in_a_test": f"set -u\nX=1\nunset X\nif [ -n \"$X\" ]; then :; fi\n{T}\n",
    # R80: bash refuses to unset a readonly variable ('X: cannot unset: readonly variable'): X keeps its value (it was
    # read as unset: an empty word, and under set -u a refusal of a script bash launches)
    "readonly_then_unset": f"readonly X=--bf16\nunset X\n{T} $X --a \"$X\"\n",
    "declare_r_then_unset": f"declare -r X=--bf16\nunset -v X\n{T} $X\n",
    "nounset_readonly_then_unset": f"set -u\nX=--bf16\nreadonly X\nunset X\n{T} $X\n",
    "readonly_in_a_subshell_then_unset": f"X=--bf16\n(readonly X)\nunset X\n{T} --a \"$X\"\n",
    "local_readonly_gone_after_its_function": f"f() {{ local -r X=1; }}\nf\nX=--bf16\nunset X\n{T} --a \"$X\"\n",
}


@pytest.mark.parametrize("name", UNSET)
def test_a_variable_after_unset(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`$X` after `unset X` expands to nothing (was left as written, so the launch held the text `$X`); under set -u
    bash stops there with 'X: unbound variable' (was read as if X were set)."""
    _same_as_bash(UNSET[name], [], tmp_path, monkeypatch)


def test_the_refusal_after_unset_says_to_drop_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The script unsets X itself: setting X in llmperf's environment cannot help, the message says so."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nset -u\nX=1\nunset X\n{T} $X\n")
    with pytest.raises(UsageError) as refused:
        parse_launch(["bash", "train.sh"], {"X": "1"})
    assert "line 5" in str(refused.value) and "drop the script's `unset X`" in str(refused.value)


@pytest.mark.parametrize("nounset", ["", "set -u\n"])
def test_an_unset_that_may_not_run_is_applied_and_named(nounset: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`[ -f cfg ] && unset X`: read as run, as an assignment on an undecided condition is, and named among the
    undecided commands; never a set -u refusal (bash goes on where cfg is missing)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\n{nounset}X=--bf16\n{NO_CFG} && unset X\n{T} $X\n")
    job = parse_launch(["bash", "train.sh"], {})
    where = "line 4" if nounset else "line 3"
    assert job.script_args == ("--num-layers", "2") and job.undecided == (where,)
    assert "--bf16" in job.undecided_options[where]  # the flag `$X` gave: a rule on it softens (parsed_job)


LETTERS_THROUGH_PUNCTUATION = {  # bash manual 3.5.1 (a sequence of letters runs through the characters between),
    # then 3.5.9 quote removal of the backslash; braces.c mkseq
    "command_words": f"{T} --tags {{a..Z}} --seed 1\n",
    "command_words_step": f"{T} --tags --{{Z..a..2}} x{{a..Z..2}}y --seed 1\n",
    "array": f"A=({{Z..a}})\n{T} --count ${{#A[@]}} --tags \"${{A[@]}}\"\n",
    "loop_with_a_step": f"N=0\nfor s in {{Y..b..3}}; do N=$((N + 1)); done\n{T} --count $N\n",
}


@pytest.mark.parametrize("name", LETTERS_THROUGH_PUNCTUATION)
def test_a_letter_sequence_through_punctuation(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`{a..Z}`: a ` _ ^ ] (an empty word: the backslash, quote-removed) [ Z, as bash 5.2 gives them; was left as
    written (`{a..Z}` reached the launch as one word)."""
    _same_as_bash(LETTERS_THROUGH_PUNCTUATION[name], [], tmp_path, monkeypatch)


def test_a_backquote_glued_to_more_of_the_word_is_left_as_written() -> None:
    """`x{a..Z}y` gives x`y, which bash expands again and stops at ('bad substitution: no closing "`"'): not read."""
    assert brace_expand("x{a..Z}y") is None and brace_expand("{A..a}x") is None
    assert brace_expand("--{Z..a..2}") == ["--Z", "--", "--^", "--`"]  # a backquote that ends the word stays


NOUNSET = {  # `set -u` (bash manual 4.3.1), an indexed array's subscript evaluated as arithmetic (6.7), `break N` (4.1)
    "loop_after_an_inner_loops_undecided_break": f"while true; do\n  for j in 1; do\n    {NO_CFG} && break\n  done\n"
                                                 "  echo $X\n  break\ndone",
    "one_line_loop_after_an_inner_loops_undecided_break": f"for i in 1; do for j in 1; do {NO_CFG} && break; done;"
                                                          " echo $X; done",
    "subscript_sum": "A=(a b)\ni=1\necho ${A[i+1]}",
    "subscript_sum_in_range": "A=(a b)\ni=0\necho ${A[i+1]}",
    "subscript_dollar_sum": "A=(a b)\ni=1\necho ${A[$i+1]}",
    "subscript_arithmetic_expansion": "A=(a b)\ni=1\necho ${A[$((i+1))]}",
    "subscript_arithmetic_expansion_in_range": "A=(a b)\ni=0\necho ${A[$((i+1))]}",
    "subscript_difference": "A=(a b)\nn=3\necho ${A[n-1]}",
    "subscript_difference_in_range": "A=(a b)\nn=2\necho ${A[n-1]}",
    "subscript_count": "A=(a b)\necho ${A[${#A[@]}]}",
    "subscript_count_less_one": "A=(a b)\necho ${A[${#A[@]}-1]}",
    "subscript_conditional": "A=(a b)\ni=5\necho ${A[i>1?1:0]}",
    "subscript_reads_an_unset_variable": "A=(a b)\necho ${A[j]}",
    "subscript_behind_an_operator_reads_an_unset_variable": "A=(a b)\necho ${A[j+1]:-x}",
    "counted_element_reads_an_unset_variable": "A=(a b)\necho ${#A[j]}",
    "element_behind_an_operator_past_the_end": "A=(a b)\ni=4\necho ${A[i]:-x} ${#A[i+1]}",
    "random_subscript": "A=(a b)\necho ${A[RANDOM%2]}",
    "element_of_an_unset_array": "A=(a b)\nunset A\necho ${A[0]}",
}


@pytest.mark.parametrize("name", NOUNSET)
def test_nounset_as_bash(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where bash 5.2 stops ('A[i+1]: unbound variable', 'j: unbound variable') llmperf refuses (it priced these);
    where it goes on, llmperf prices."""
    _same_as_bash(f"set -u\n{NOUNSET[name]}\n{T}\n", [], tmp_path, monkeypatch)


@pytest.mark.parametrize("body", [f"for i in 1; do for j in 1; do {NO_CFG} && break 2; done; echo $X; done",
                                  f"while true; do {NO_CFG} && break; echo $X; break; done"])
def test_nounset_after_an_undecided_break_of_its_loop_is_not_refused(body: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`break 2` leaves the outer loop too: whether `echo $X` runs, only the file test tells (bash stops only where
    cfg is missing), so llmperf prices instead of refusing."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nset -u\n{body}\n{T}\n")
    assert parse_launch(["bash", "train.sh"], {}).nproc_per_node == 2



SUB = "mkdir -p sub\necho NP=8 > sub/env.sh\necho NP=2 > env.sh\n"
EACH_BRANCH = {  # bash manual 3.2.5.2: an `elif` / `else` runs only where the branches before it did not; NP is then
    # set apart by the branches, so llmperf refuses, naming each branch's value: the one bash gives, never the other
    "else_reads_the_directory_before_the_if": (f"{SUB}if {NO_CFG}; then cd sub; else . ./env.sh; fi\n", "2", "8"),
    "else_reads_the_arguments_before_the_shift": (f"if {NO_CFG}; then shift; else NP=$1; fi\n", "4", "8"),
    "elif_reads_the_arguments_before_the_shift": (f"if {NO_CFG}; then shift\nelif [ -n \"$1\" ]; then NP=$1\nfi\n",
                                                  "4", "8"),
    "else_does_not_see_the_function_then_defines": (f"f() {{ NP=4; }}\nif {NO_CFG}; then f() {{ NP=8; }}; else f; fi\n",
                                                    "4", "8"),
}


@pytest.mark.parametrize("name", EACH_BRANCH)
def test_each_branch_starts_from_the_shell_before_the_if(name: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`cd`, `shift` and a function definition in an undecided branch are not seen by the next branch (they were: the
    `else` sourced sub/env.sh, read the shifted $1, called the `then`'s function): bash (run here, cfg missing)
    launches with the value the `else` gives."""
    text, value, never = EACH_BRANCH[name]
    script = tmp_path / "train.sh"
    script.write_text(f"#!/bin/bash\n{text}torchrun --nproc_per_node $NP pretrain_gpt.py\n")
    real = _run(shutil.which("bash") or "bash", script, ["4", "8"], tmp_path)
    assert real is not None and real[2] == value
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as refused:
        parse_launch(["bash", str(script), "4", "8"], {})
    assert f"NP='{value}'" in str(refused.value) and f"NP='{never}'" not in str(refused.value)


@pytest.mark.parametrize("text", [f"if {NO_CFG}; then cd sub; else cd sub; fi\n. ./env.sh\n",
                                  f"if {NO_CFG}; then shift; else shift; fi\nNP=$1\n"])
def test_ways_that_agree_go_on_as_bash(text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _same_as_bash(f"NP=4\n{SUB}{text}torchrun --nproc_per_node $NP pretrain_gpt.py\n", ["4", "8"], tmp_path,
                  monkeypatch)


DEFINED_APART = {  # R80: a function the ways through an undecided `if` define apart (or one of them only), called
    # past the `fi`: bash runs the body its branch defined (3.3), so NP is set apart as if the branches set it; was read
    # with the first branch's body (8) and priced, where bash (cfg missing) launches 4 / 3 processes per node
    "both_branches": ("if [ -f cfg ]; then\n  f() {\n    NP=8\n  }\nelse\n  f() {\n    NP=4\n  }\nfi\n", "4"),
    "the_then_over_an_older_one": ("f() { NP=3; }\nif [ -f cfg ]; then\n  f() {\n    NP=8\n  }\nfi\n", "3"),
}


@pytest.mark.parametrize("name", DEFINED_APART)
def test_a_function_the_branches_define_apart_is_undecided(name: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal names each body's value, as for values the branches set themselves."""
    text, other = DEFINED_APART[name]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nNP=2\n{text}f\ntorchrun --nproc_per_node $NP pretrain_gpt.py\n")
    with pytest.raises(UsageError, match="nproc") as refused:
        parse_launch(["bash", "train.sh"], {})
    assert "NP='8'" in str(refused.value) and f"NP='{other}'" in str(refused.value)


def test_an_undecided_if_in_a_called_function_names_its_branches(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The values an undecided `if` in a function sets apart are named where the call leaves them undecided (the
    call's line overwrote the branches: the launch got `$X` with no word of why)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\ng() {{\n  if {NO_CFG}; then\n    X=1\n  else\n    X=2\n  fi\n}}\n"
                                       f"g\n{T} --lr $X\n")
    job = parse_launch(["bash", "train.sh"], {})
    assert any("line 4 (X='1') or line 6 (X='2')" in warning for warning in job.warnings), job.warnings


def test_a_function_the_branches_define_alike_goes_on_as_bash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _same_as_bash(f"NP=2\nif {NO_CFG}; then\n  f() {{\n    NP=8\n  }}\nelse\n  f() {{\n    NP=8\n  }}\nfi\nf\n"
                  "torchrun --nproc_per_node $NP pretrain_gpt.py\n", [], tmp_path, monkeypatch)


def test_ways_that_leave_the_directory_apart_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the `fi` the reading goes on from the branch read first, and says so; a file sourced by a relative path
    is read from either directory (H205: it was read from the first branch's, pricing 8 processes where bash, without
    cfg, starts 2), so what the two files set apart is undecided and the refusal names both."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "env.sh").write_text("NP=8\n")
    (tmp_path / "env.sh").write_text("NP=2\n")
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nif {NO_CFG}; then cd sub; fi\n. ./env.sh\n"
                                       "torchrun --nproc_per_node $NP pretrain_gpt.py\n")
    with pytest.raises(UsageError, match=r"NP='8'\) or line 3 \(NP='2'\)"):
        parse_launch(["bash", "train.sh"], {})
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nif {NO_CFG}; then cd sub; fi\n{T}\n")
    assert any("leave `cd` apart" in warning for warning in parse_launch(["bash", "train.sh"], {}).warnings)


def test_an_unset_in_one_branch_of_a_name_the_script_never_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`if X; then unset CKPT; fi` where the script never set CKPT: the way without the `unset` may read the job's own
    CKPT, so `$CKPT` stays as written for the job's environment (as before H197), not dropped as unset."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nif {NO_CFG}; then unset CKPT; fi\n{T} --load $CKPT\n")
    assert parse_launch(["bash", "train.sh"], {}).script_args[-2:] == ("--load", "$CKPT")

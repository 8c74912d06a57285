"""Subshells and quotes inside `${...}` read as bash 5 runs them: each script below is run by the real bash (with the
stub launchers of test_scripts_as_the_shell_runs_them) and llmperf's reading of it, never run, must give the same job.

What a pipeline's commands, a `( )` group, a piped `{ }` group or a `&` command assign stays in their subshell (bash
manual 3.2.3, 3.2.4, 3.2.5.3; the last command of a pipeline runs in the shell under `shopt -s lastpipe`, 4.3.2).
Inside double quotes (and here-documents) the single quotes of a `${A:-word}` word are literal (`"${A:-'q'}"` is
`'q'`), while those of a `${P/pattern/string}` are removed, and a quoted `/` there is the pattern (`"${P//"/"/_}"`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.launch.parse import parse_launch
from tests.launch.test_scripts_as_the_shell_runs_them import ARGS, _compare

T = "torchrun --nproc_per_node $NP pretrain_gpt.py --num-layers 2"
SUBSHELLS = {
    "assignment_piped": "NP=2\nNP=4 | cat\n" + T + "\n",
    "assignment_after_and_piped": "NP=2\nNP=4 && NN=3 | cat\n" + T + " --nnodes ${NN:-1}\n",
    "parenthesised": "NP=2\n(NP=4)\n( export NP=6; cd /tmp )\n" + T + " --save x\n",
    "braces_piped": "NP=2\n{ NP=4; } | cat\n" + T + "\n",
    "braces_redirected_only": "NP=2\n{ NP=4; } 2>&1\n" + T + "\n",
    "braces_in_the_background": "NP=2\n{ NP=4; } &\nwait\n" + T + "\n",
    "backgrounded": "NP=2\nNP=6 &\nwait\n" + T + "\n",
    "read_from_a_pipe": "NP=2\necho 4 | read NP\n" + T + "\n",
    "function_piped": "NP=2\nsetnp() { NP=8; export NN=2; }\nsetnp | tee log\n" + T + " --nnodes ${NN:-1}\n",
    "function_unpiped": "NP=2\nsetnp() { NP=8; }\nsetnp > log 2>&1\n" + T + "\n",
    "shift_in_a_subshell": "set -- 4 8\n( shift )\nNP=$1\n" + T + "\n",
    "lastpipe_keeps_the_last": "shopt -s lastpipe\nNP=2\necho x | NP=4\n" + T + "\n",
    "lastpipe_not_the_first": "shopt -s lastpipe\nNP=2\nNP=4 | cat\n" + T + "\n",
    "launch_in_a_piped_group": "NP=2\n( export NP=4; " + T + " ) 2>&1 | tee log\n",
    "launch_after_a_piped_cd": "mkdir -p run\ncd run | cat\nNP=2\n" + T + " --save $(pwd)/ckpt\n",
}
QUOTING = {
    "default_single_quotes_in_double_quotes": "NP=2\n" + T + " --save \"${A:-'q'}\" --load ${A:-'q'} "
                                              "--data-path \"${A:-\"d e\"}\"\n",
    "alternative_single_quotes_in_double_quotes": "NP=2\nB=x\n" + T + " --save \"${B:+'w'}\"\n",
    "quoted_slash_pattern": "NP=2\nP=a/b/c\n" + T + " --save \"${P//\"/\"/_}\" --load ${P//\"/\"/-}\n",
    "quoted_pattern_and_string": "NP=2\nX=abc\n" + T + " --save \"${X/'b'/'Y'}\" --load ${X/b/\"Z\"} "
                                 "--data-path \"${X#'a'}\"\n",
    "quoted_glob_pattern": "NP=2\nX='a*b?c'\n" + T + " --save \"${X/'*'/_}\" --load ${X//\"?\"/-} "
                           "--data-path ${X/\\*/+} --vocab-file ${X/*/all}\n",
    "quoted_trim_patterns": "NP=2\nX='a*b/c*'\n" + T + " --save \"${X%'*'}\" --load ${X#\"a*\"} --data-path ${X%/*} "
                            "--vocab-file \"${X%\\*}\" --tokenizer-model ${X##*/}\n",
    "escaped_slash_pattern": "NP=2\nP=a/b/c\n" + T + " --save \"${P//\\//_}\" --load ${P//\\//-}\n",
    "anchored_patterns": "NP=2\nP=a/b/c\n" + T + " --save ${P/#a/z} --load \"${P/%c/y}\" --data-path ${P/#/pre-} "
                         "--tokenizer-model ${P/%/-post} --vocab-file ${P/#b/q}\n",
    "heredoc_default_quotes": "NP=2\ncat > opts.txt <<EOF\nx\nEOF\nX=\"${A:-'q'}\"\n" + T + " --save \"$X\"\n",
}

ARITHMETIC = {
    "let": "X=8\nlet NP=X/2\n" + T + "\n",
    "let_several_words": "NP=8\nlet \"NP = NP * 2\" NP++\n" + T + "\n",
    "compound_assignment": "NP=8\n(( NP /= 2 ))\n" + T + "\n",
    "comma_list_and_decrement": "NP=8\n((NP--, NN=NP-5))\n" + T + " --nnodes $NN\n",
    "shift_assignment_is_no_heredoc": "NP=8\n(( NP <<= 1 ))\n(( NP >>= 2 ))\n" + T + " --save $(( 1 << 3 ))\n",
    "a_comparison_is_no_redirection": "NP=8\n(( NP > 16 )) && NP=4\n(( NP < 16 )) && NN=2\n" + T + " --nnodes ${NN:-1}\n",
    "arithmetic_if": "X=2+3\nNP=8\nif ((X*2 == 10)); then NP=2; else NP=1; fi\n" + T + "\n",
    "negated_arithmetic": "NP=8\n! (( NP > 4 )) || NP=3\n" + T + "\n",
    "dollar_inside": "S=2\n(( NP = $S * 3 ))\n" + T + "\n",
    "conditional_operator": "A=4\nB=9\nNP=$(( A > B ? A : B ))\nNN=$(( 0 ? 1 : A < 5 ? 2 : 3 ))\n(( NP = NP > 8 ? 8 : NP ))\n"
                            + T + " --nnodes $NN\n",
    "bitwise_and_comparisons_in_expansions": "NP=$(( (6 & 3) | 1 ))\nNN=$(( 3 > 2 ))\n" + T + " --nnodes $NN\n",
}
IDIOMS = {
    "array_indices": "A=(a b c)\nfor i in \"${!A[@]}\"; do N=$i; done\nNP=2\n" + T + " --save $((N+1)) --load \"${!A[*]}\" "
                     "--data-path ${!A[@]}\n",
    "indirect_expansion": "V=NP\nNP=4\nX=${!V}\n" + T + " --save \"${!V}\" --load $X\n",
    "negative_index": "L=(1 2 4)\nNP=${L[-1]}\n" + T + " --save ${L[-3]} --load ${#L[-2]}\n",
    "negated_bracket_pattern": "NP=4x; NP=${NP//[^0-9]/}\nS=ab1; S=${S%%[^a-z]*}\n" + T + " --save $S\n",
    "function_return": "NP=2\nfunction setup() {\n  NP=4\n  return 0\n  NP=6\n}\nsetup\n" + T + "\n",
    "return_in_an_if": "NP=2\nsetup() {\n  if [ -z \"$NN\" ]; then\n    NP=4\n    return\n  fi\n  NP=6\n}\nsetup\n" + T + "\n",
    "return_in_a_subshell": "NP=2\nsetup() {\n  ( return; )\n  NP=6\n}\nsetup\n" + T + "\n",
    "return_of_the_inner_function": "NP=2\nouter() { inner; NP=$((NP+1)); }\ninner() { NP=5; return; NP=9; }\nouter\n"
                                    + T + "\n",
    "return_from_a_sourced_file": "printf 'NP=4\\nreturn\\nNP=6\\n' > env.sh\nsource ./env.sh\n" + T + "\n",
    "arrays_chained_on_one_line": "L=(); L+=(--lr 1); L+=(\"--x-y\" \"a;b\" \"c)\")\nNP=2\n" + T + " \"${L[@]}\"\n",
    "array_then_a_launch": "A=(--lr \"a;b\") && NP=2 && " + T + " \"${A[@]}\"\n",
    "local_array_in_a_one_line_function": "f() { local -a A=(--lr 2); NP=2; " + T + " \"${A[@]}\"; }\nf\n",
    "declare_global_array": "declare -ga G=(--seed 3)\nNP=2\n" + T + " \"${G[@]}\"\n",
    "double_bracket_and_or": "NP=2\nif [[ -n \"${X:-}\" && $NP == 2 ]]; then NP=3; fi\n"
                             "[[ -z \"$X\" && $NP == 2 ]] && NN=3 || NN=9\n[[ -n \"$X\" || $NP == 4 ]] || NP=7\n"
                             + T + " --nnodes $NN\n",
    "double_bracket_regex": "NP=2\nM=123\n[[ \"$U\" =~ ^[0-9]+$ ]] && NP=4\n[[ $M =~ ^[[:digit:]]+$ ]] && NN=2\n"
                            + T + " --nnodes $NN\n",
    "array_slices": "L=(1 2 3 4)\nNP=2\n" + T + " --save ${L[@]:1} --load \"${L[@]:1:2}\" --data-path \"${L[*]:2}\" "
                    "--vocab-file ${L[@]: -1} --merge-file ${L[@]: -9} --tokenizer-model ${L[@]:9}\n",
    "array_of_the_arguments": "set -- a 'b c' d\nA=(\"$@\")\nB=($@)\nC=(x \"$@\" y)\nNP=2\n" + T +
                              " --save \"${A[@]}\" --load ${#A[@]} --data-path ${#B[@]} --vocab-file \"${C[@]:1}\"\n",
    "script_dir_idiom": "printf 'NP=4\\n' > env.sh\n"
                        "SCRIPT_DIR=\"$( cd -- \"$( dirname -- \"${BASH_SOURCE[0]}\" )\" &> /dev/null && pwd )\"\n"
                        "source \"$SCRIPT_DIR/env.sh\"\n" + T + "\n",
    "quiet_cd_pwd": "printf 'NP=4\\n' > env.sh\nD=$(cd \"$(dirname \"$0\")\" >/dev/null 2>&1 && pwd -P)\n. $D/env.sh\n"
                    + T + " --save $D\n",
}
WHILE_LOOPS = {  # (script, its arguments)
    "argument_loop": ("NP=8\nwhile [[ $# -gt 0 ]]; do\n  case $1 in\n    --np) NP=$2; shift 2;;\n    *) shift;;\n  esac\n"
                      "done\n" + T + "\n", ["--x", "--np", "4", "--y"]),
    "argument_loop_without_arguments": ("NP=8\nwhile [[ $# -gt 0 ]]; do\n  case $1 in\n    --np) NP=$2; shift 2;;\n"
                                        "  esac\ndone\n" + T + "\n", []),
    "argument_loop_in_main": ("main() {\n  NP=8\n  while [ -n \"$1\" ]; do\n    case \"$1\" in\n      -n) NP=\"$2\"; shift;;\n"
                              "    esac\n    shift\n  done\n  " + T + "\n}\nmain \"$@\"\n", ["-x", "-n", "2"]),
    "arithmetic_test": ("NP=8\nwhile (( $# )); do\n  NP=$1\n  shift\ndone\n" + T + "\n", ["2", "4"]),
    "argument_loop_with_equals": ("NP=8\nNN=1\nwhile [ -n \"$1\" ]; do\n  case \"$1\" in\n    --np) NP=\"$2\"; shift ;;\n"
                                  "    --nn=*) NN=\"${1#*=}\" ;;\n  esac\n  shift\ndone\n" + T + " --nnodes $NN\n",
                                  ["--nn=2", "--np", "4"]),
    "positional_operators": ("NP=2\n" + T + " --save ${0##*/} --load \"${1%%=*}\" --data-path ${#1} "
                             "--vocab-file \"${3:-'q'}\" --merge-file ${2^^}\n", ["a=b", "xy"]),
    "until": ("NP=1\nuntil [ $NP -ge 8 ]; do\n  NP=$((NP*2))\ndone\n" + T + "\n", []),
}
UNKNOWN = {"(( NP = RANDOM % 4 ))": "RANDOM", "(( NP = 2 ** 70 ))": "outside 64 bits",
           "(( NP += UNSET ))": "an unset name", "while [ -e /x ]; do (( NP *= 2 )); done": "a loop that may run"}


@pytest.mark.parametrize("name", ARITHMETIC)
def test_arithmetic_commands(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, ARITHMETIC[name], tmp_path, monkeypatch)


@pytest.mark.parametrize("name", IDIOMS)
def test_idioms_of_launch_scripts(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, IDIOMS[name], tmp_path, monkeypatch)


def test_getopts_leaves_its_names_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`while getopts "n:" opt; do case $opt in n) NP=$OPTARG;; esac; done`: opt was unset, no arm matched, and the
    stale NP=8 was priced (bash gives the argument's 2); now NP is named as unknown."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text("#!/bin/bash\nNP=8\nwhile getopts \"n:\" opt; do\n  case $opt in\n"
                                       "    n) NP=$OPTARG;;\n  esac\ndone\ntorchrun --nproc_per_node 8 pretrain_gpt.py "
                                       "--tensor-model-parallel-size $NP\n")
    assert parse_launch(["bash", "train.sh", "-n", "2"], {}).script_args[-1] == "$NP"


@pytest.mark.parametrize("name", WHILE_LOOPS)
def test_while_loops_read_pass_by_pass(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text, args = WHILE_LOOPS[name]
    monkeypatch.setitem(ARGS, name, args)
    _compare("bash", name, text, tmp_path, monkeypatch)


@pytest.mark.parametrize("loop", ["while [ -e /nonexistent ]; do\n  NP=2\ndone",  # a file: not decided
                                  "while [[ $# -gt 0 ]]; do\n  case $1 in\n    *) NP=$1; break;;\n  esac\ndone",
                                  "while true; do\n  NP=2\ndone"])  # past MAX_PASSES
def test_a_while_loop_not_followed_is_a_body_that_may_run(loop: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nNP=8\n{loop}\n"
                                       "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $NP\n")
    assert parse_launch(["bash", "train.sh", "2"], {}).script_args[-1] == "$NP"


@pytest.mark.parametrize("line", UNKNOWN)
def test_an_arithmetic_assignment_llmperf_cannot_evaluate_is_unknown(line: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch line names $NP (it was 8 before) instead of pricing a stale value."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nNP=8\n{line}\n"
                                       "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $NP\n")
    assert parse_launch(["bash", "train.sh"], {}).script_args[-1] == "$NP"


@pytest.mark.parametrize("name", SUBSHELLS)
def test_subshells_assign_nothing_in_the_script(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, SUBSHELLS[name], tmp_path, monkeypatch)


@pytest.mark.parametrize("name", QUOTING)
def test_quotes_inside_expansions(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, QUOTING[name], tmp_path, monkeypatch)


def test_a_pipe_read_under_lastpipe_is_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`shopt -s lastpipe; cat f | read TP` assigns TP in the script from what only running `cat` gives: the launch
    line names $TP instead of the stale value; without lastpipe bash leaves TP as it was (1)."""
    monkeypatch.chdir(tmp_path)
    for shopt, expected in (("shopt -s lastpipe\n", "$TP"), ("", "1"), ("shopt -s lastpipe\nshopt -u lastpipe\n", "1")):
        (tmp_path / "train.sh").write_text(f"#!/bin/bash\nTP=1\n{shopt}cat layout.txt | read -r TP\n"
                                           "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $TP\n")
        assert parse_launch(["bash", "train.sh"], {}).script_args[-1] == expected, shopt

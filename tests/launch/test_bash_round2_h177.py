"""Launch scripts read as bash 5.2 runs them, round 2 (H177): each script below is run by the real bash (with the stub
launchers of test_scripts_as_the_shell_runs_them) and llmperf's reading of it, never run, must give the same job, or
a refusal where bash stops before its launch.

`set -u` (nounset): bash ends the script at the first expansion of an unset variable ("NAME: unbound variable", bash
manual 4.3.1), so llmperf refuses, naming it, where it surely runs. `if (( NP++ ))` tests NP's old value and changes
NP (6.5). `( cmd ) || { NP=4; }`: the brace group runs in the shell, as the subshell's status says (3.2.4, 3.2.5.3).
`${P//$D/_}`: the pattern's variables are expanded first (3.5.3). `set -m` turns lastpipe off (4.3.2). Associative
arrays and elements by key or computed index (6.7), `mapfile` / `readarray` and `while read ... done < INPUT` over
input the script has (4.2), `declare "$name=value"`, and `$(f)` of a script function that only prints (3.5.4).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch
from tests.launch.test_scripts_as_the_shell_runs_them import ARGS, _compare

T = "torchrun --nproc_per_node $NP pretrain_gpt.py --num-layers 2"
NOUNSET = {  # (script, its arguments)
    "unset_on_the_launch_line": ("set -euo pipefail\nNP=${NP:-2}\n" + T + " --save $UNSET_DIR\n", []),
    "unset_before_the_launch": ("set -u\nNP=2\necho \"$UNSET_DIR\"\n" + T + "\n", []),
    "unset_braced_in_an_assignment": ("set -o nounset\nNP=2\nD=${UNSET_DIR}/ckpt\n" + T + " --save $D\n", []),
    "unset_length_and_trim": ("set -eu\nNP=2\nX=${#UNSET_DIR}\n" + T + " --save ${UNSET_DIR%/}\n", []),
    "argument_not_given": ("set -u\nNP=$1\n" + T + "\n", []),
    "argument_given": ("set -u\nNP=$1\n" + T + " --save \"$@\" $*\n", ["4"]),
    "defaults_and_alternatives": ("set -Eeuo pipefail\nNP=${NP:-2}\nX=${U-}${U:+x}${U+y}${V:=3}\n" + T +
                                  " --save ${V}${U:-} --load \"$#\"\n", []),
    "set_by_bash_itself": ("set -u\nNP=2\nH=$HOSTNAME$BASH_VERSION$RANDOM$PPID\n" + T + " --save ${H:0:0}x\n", []),
    "nounset_turned_off": ("set -u\nset +u\nNP=2\necho x$UNSET_DIR\n" + T + "\n", []),
    "nounset_turned_off_by_name": ("set -o nounset\nset +o nounset\nNP=2\necho $UNSET_DIR\n" + T + "\n", []),
    "read_sets_it": ("set -u\nread -r NP REST <<< '4 x'\n" + T + " --save $REST\n", []),
    "loop_and_local": ("set -u\nf() { local n=$1; NP=$n; }\nfor i in 4; do f $i; done\n" + T + "\n", []),
    "unset_in_an_untaken_branch": ("set -u\nNP=2\nif [ \"$NP\" = 3 ]; then echo $UNSET_DIR; fi\n" + T + "\n", []),
    "unset_in_a_command_substitution": ("set -u\nNP=2\nX=$(echo ${UNSET_DIR:-a})\n" + T + "\n", []),
    "unset_after_the_launch": ("set -u\nNP=2\n" + T + "\necho $UNSET_DIR\n", []),
    "empty_array": ("set -u\nNP=2\nA=()\n" + T + " \"${A[@]}\"\n", []),
    "set_by_builtins": ("set -u\nNP=2\ncd .\necho \"$OLDPWD $_\"\n" + T + "\n", []),
}
ARITHMETIC_TESTS = {
    "post_increment_from_zero": "NP=0\nif (( NP++ )); then NN=2; fi\n" + T + " --nnodes ${NN:-1}\n",
    "post_increment_from_one": "NP=1\nif (( NP++ )); then NN=2; fi\n" + T + " --nnodes ${NN:-1}\n",
    "pre_decrement_negated": "NP=2\nif ! (( --NP )); then NN=2; else NN=3; fi\n" + T + " --nnodes $NN\n",
    "assignment_as_the_test": "NP=8\nif (( NN = NP / 8 )); then NP=4; fi\n" + T + " --nnodes $NN\n",
    "increment_listed": "NP=1\n(( NP++ )) && NN=2\n(( NP-- )) || NN=3\n" + T + " --nnodes ${NN:-1}\n",
    "let_as_the_test": "NP=3\nif let 'NP -= 1'; then NN=1; fi\n" + T + " --nnodes $NN\n",
}
GROUPS = {
    "failed_subshell_or_braces": "NP=2\n( false ) || { NP=4; }\n" + T + "\n",
    "subshell_or_braces_not_run": "NP=2\n( true ) || { NP=4; }\n" + T + "\n",
    "subshell_and_braces": "NP=2\n( true ) && { NP=4; NN=1; }\n" + T + " --nnodes $NN\n",
    "failed_cd_or_braces": "NP=2\n( cd /nonexistent-h177 ) || { NP=4; }\n" + T + "\n",
    "subshell_or_braces_that_exit": "NP=2\n( cd /tmp ) || { echo failed; exit 1; }\n" + T + "\n",
    "subshell_or_piped_braces": "NP=2\n( false ) || { NP=4; } | cat\n" + T + "\n",
}
PATTERNS = {
    "variable_patterns": "NP=2\nP='a*b/c*d'; S=/; Q='b/c'\n" + T + " --save ${P//$S/_} --load \"${P/$Q/$S}\" "
                         "--data-path ${P//${S}/+} --vocab-file ${P##*$S}\n",
    "variable_glob_pattern": "NP=2\nP=abcabc; G='b?'\n" + T + " --save ${P//$G/-} --load ${P%$G*}\n",
    "variable_replacement": "NP=2\nP=a.b.c; R=x/y\n" + T + " --save ${P//./$R} --load \"${P/./${R}}\"\n",
}
LASTPIPE = {
    "job_control_turns_lastpipe_off": "set -m\nshopt -s lastpipe\nNP=2\necho 4 | read NP\n" + T + "\n",
    "job_control_off_again": "set -m\nshopt -s lastpipe\nset +m\nNP=2\necho 4 | NP=6\n" + T + "\n",
    "monitor_by_name": "set -o monitor\nshopt -s lastpipe\nNP=2\necho x | NP=6\n" + T + "\n",
}

TABLES = {
    "associative_lookup": "declare -A TP=([7b]=1 [13b]=2 [\"70 b\"]=8)\nMODEL=13b\nNP=${TP[$MODEL]}\n" + T +
                          " --save ${TP[7b]} --load \"${TP[70 b]}\" --data-path x${TP[none]} --vocab-file ${#TP[@]}\n",
    "associative_elements_assigned": "declare -A M\nM[x]=4\nM+=([y]=8)\nk=y\nNP=${M[x]}\n" + T +
                                     " --save ${M[$k]} --data-path ${#M[x]} --load ${#M[@]}\n",
    "associative_one_element": "declare -A M=([only]=2)\nNP=2\n" + T + " --save \"${!M[@]}\" --load ${M[@]}\n",
    "associative_on_lines": "declare -A PP=(\n  [small]=1\n  [big]=4\n)\nNP=${PP[big]}\n" + T + "\n",
    "local_associative_in_a_function": "f() {\n  local -A G=([a]=4)\n  NP=${G[a]}\n}\nf\n" + T + "\n",
    "indexed_by_variable": "L=(1 2 4 8)\ni=2\nNP=${L[$i]}\nL[4]=16\nL[0]=x\n" + T + " --save ${L[i+2]} "
                           "--load ${L[0]} --data-path ${#L[@]}\n",
}
INPUT = {
    "mapfile_here_string": "mapfile -t L <<< $'2\\n4'\nNP=${L[1]}\n" + T + " --save ${#L[@]}\n",
    "readarray_heredoc_keeps_newlines": "readarray L <<EOF\n4\n8\nEOF\nNP=2\n" + T + " --save \"${#L[1]}\"\n",
    "mapfile_from_a_written_file": "cat > hosts <<EOF\nnode1\nnode2\nEOF\nmapfile -t H < hosts\nNP=2\n" + T +
                                   " --nnodes ${#H[@]} --save ${H[1]}\n",
    "mapfile_count_and_skip": "mapfile -t -s 1 -n 2 L <<EOF\nx\n2\n4\n8\nEOF\nNP=${L[1]}\n" + T + " --save ${L[0]}\n",
    "read_from_a_written_file": "cat > layout <<EOF\n4 2\nEOF\nread -r NP NN < layout\n" + T + " --nnodes $NN\n",
    "while_read_one_line": "while read -r a b; do NP=$b; done <<< 'x 4'\n" + T + " --save \"[$a][$b]\"\n",
    "while_read_a_written_file": "cat > hosts <<EOF\nnode1 slots=4\nnode2 slots=4\nEOF\nNN=0\n"
                                 "while read -r h s; do NN=$((NN+1)); NP=${s#slots=}; done < hosts\n"
                                 + T + " --nnodes $NN --save $h\n",
    "while_read_settings": "while IFS='=' read -r key value; do\n  case $key in\n    np) NP=$value;;\n"
                           "    nn) NN=$value;;\n  esac\ndone <<EOF\nnp=4\nnn=2\nEOF\n" + T + " --nnodes $NN\n",
    "while_read_builds_arguments": "while read -r line; do\n  ARGS+=($line)\ndone <<EOF\n--lr 1e-4\n--seed 3\nEOF\n"
                                   "NP=2\n" + T + " \"${ARGS[@]}\"\n",
    "while_read_last_line_without_newline": "L=$'np 2\\nnp 4'\nwhile read -r k v; do NP=$v; done <<< \"$L\"\n"
                                            "printf 'np 8' > f.txt\n" + T + " --save $v\n",
    "while_read_declares": "while read -r k v; do declare \"$k=$v\"; done <<EOF\nNP 4\nNN 2\nEOF\n" + T +
                           " --nnodes $NN\n",
    "one_line_while_loop": "NP=1\nwhile [ $NP -lt 8 ]; do NP=$((NP*2)); done\n" + T + "\n",
}
DECLARE = {
    "computed_name": "n=NP\ndeclare \"$n=4\"\n" + T + "\n",
    "computed_name_unquoted": "v=NN; value=2\ndeclare $v=\"${value}\"\nNP=2\n" + T + " --nnodes $NN\n",
    "computed_name_in_a_function_is_local": "NP=4\nn=NP\nf() { declare \"$n=2\"; }\nf\n" + T + "\n",
    "argument_loop_declares": "for ARG in \"$@\"; do\n  k=${ARG%%=*}\n  declare \"${k#--}=${ARG#*=}\"\ndone\n"
                              + T + " --nnodes $NN\n",
}
FUNCTION_OUTPUT = {
    "echo": "np() { echo 4; }\nNP=$(np)\n" + T + "\n",
    "arguments_local_and_arithmetic": "nodes() {\n  local n=$1\n  echo $(( n * 2 ))\n}\n"
                                      "gbs() { printf '%d' $(($1 * 8)); }\nNN=$(nodes 1)\nNP=4\n" + T + " --nnodes $NN --global-batch-size $(gbs $NN) "
                                      "--save \"$(nodes 3)\"\n",
    "return_and_quoting": "name() { echo \"$1-$2\"; return; echo no; }\nNP=2\n" + T +
                          " --save $(name a b) --load x$(name c)\n",
    "assignments_stay_in_the_subshell": "X=1\nf() { X=5; echo $X; }\nNP=$(f)\nNP=$((NP - X))\n" + T + "\n",
    "echo_n_and_globals": "G=8\nf() { echo -n $G; }\nNP=$(f)\n" + T + "\n",
}
MORE = {  # found probing the idioms of Megatron-LM, Megatron-DeepSpeed, DeepSpeedExamples and NeMo scripts
    "argument_slices": "NP=2\nset -- a b c d\n" + T + " --save \"${@:2}\" --load ${@:2:1} --data-path \"${*:3}\" "
                       "--vocab-file ${@: -1}\n",
    "function_passes_the_rest": "run() { NP=$1; " + T + " \"${@:2}\"; }\nrun 4 --lr 2 --seed '1 2'\n",
    "extglob_case": "shopt -s extglob\nNP=2\nfor V in gpt-7b llama-70b x-1b 123; do\n  case $V in\n"
                    "    *@(7b|13b)) NN=1;;\n    llama-+([0-9])b) NP=4;;\n    ?(x-)1b) PP=3;;\n    +([0-9])) TP=5;;\n"
                    "  esac\ndone\n" + T + " --nnodes $NN --save $PP --load $TP\n",
    "brace_expansion_in_words": "NP=2\nX={a,b}\n" + T + " --save $X --load p{1..3}q --data-path \"{c,d}\" "
                                "--vocab-file ${U:-{e,f}} --merge-file '{g,h}' --tokenizer-model {x,y}\n",
    "bash_rematch": "NP=2\nM=llama-70b-v2\nif [[ $M =~ ^([a-z]+)-([0-9]+)b(-v([0-9]))?$ ]]; then\n"
                    "  SIZE=${BASH_REMATCH[2]}; V=${BASH_REMATCH[4]}\nfi\n[[ x =~ y ]]\n" + T +
                    " --save $SIZE --load x$V --data-path x${BASH_REMATCH[0]}y --vocab-file ${#BASH_REMATCH[@]}\n",
    "arithmetic_for": "H=\"\"\nfor (( n = 1; n <= 3; n += 1 )); do\n  H+=\"node$n,\"\ndone\nNP=1\n"
                      "for ((i=0; i<3; i++)); do NP=$((NP*2)); done\n" + T + " --save ${H%,} --load $n$i\n",
}
ONE_WAY_THROUGH = {  # an undecided `if` whose other ways through exit, or whose branches agree (cfg.json is there)
    "else_exits": "NP=2\ntouch cfg.json\nif grep -q x cfg.json; then\n  echo has x; exit 1\nelse\n  NP=4\nfi\n" +
                  T + "\n",
    "then_sets_else_exits": "NP=2\necho y > cfg.json\nif [ -f cfg.json ] && grep -qv x cfg.json; then NP=4\n"
                            "else\n  echo missing\n  exit 1\nfi\n" + T + "\n",
    "every_branch_agrees": "touch cfg.json\nif grep -q x cfg.json; then NP=4; elif grep -q y cfg.json; then NP=4; "
                           "else NP=4; fi\n" + T + "\n",
}
ARGS.update({"argument_loop_declares": ["--NN=2", "--NP=4"]})


@pytest.mark.parametrize("name", ONE_WAY_THROUGH)
def test_an_undecided_if_with_one_way_through(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, ONE_WAY_THROUGH[name], tmp_path, monkeypatch)


@pytest.mark.parametrize(("lines", "named"), [
    ("NP=2\nif [ -e /nonexistent-h177 ]; then NP=4; fi", r"line 3 \(NP='4'\) or as before that `if` .*\(NP='2'\)"),
    ("if grep -q x /etc/hostname; then\n  NP=4\nfi", r"line 3 \(NP='4'\) or unset \(as before that `if`"),
    ("NP=2\nif grep -q x /etc/hostname; then NP=4; elif grep -q y /etc/hostname; then NP=8; fi",
     r"\(NP='4'\) or line 3 \(NP='8'\) or as before that `if`"),
])
def test_a_variable_one_undecided_branch_sets_is_named(lines: str, named: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """bash leaves it as it was where no branch that sets it runs: both values are named (it was priced with the
    branch's value, without a word)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\n{lines}\n" + T + "\n")
    with pytest.raises(UsageError, match=named):
        parse_launch(["bash", "train.sh"], {})


@pytest.mark.parametrize("name", MORE)
def test_more_idioms_of_real_scripts(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, MORE[name], tmp_path, monkeypatch)


@pytest.mark.parametrize("name", TABLES)
def test_associative_and_indexed_elements(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, TABLES[name], tmp_path, monkeypatch)


@pytest.mark.parametrize("name", INPUT)
def test_input_the_script_has(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, INPUT[name], tmp_path, monkeypatch)


@pytest.mark.parametrize("name", DECLARE)
def test_declare_of_a_computed_name(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, DECLARE[name], tmp_path, monkeypatch)


@pytest.mark.parametrize("name", FUNCTION_OUTPUT)
def test_what_a_script_function_prints(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, FUNCTION_OUTPUT[name], tmp_path, monkeypatch)


@pytest.mark.parametrize("name", NOUNSET)
def test_nounset(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text, args = NOUNSET[name]
    monkeypatch.setitem(ARGS, name, args)
    _compare("bash", name, text, tmp_path, monkeypatch)


@pytest.mark.parametrize("name", ARITHMETIC_TESTS)
def test_arithmetic_tests_change_their_variables(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, ARITHMETIC_TESTS[name], tmp_path, monkeypatch)


@pytest.mark.parametrize("name", GROUPS)
def test_a_brace_group_after_a_subshell(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, GROUPS[name], tmp_path, monkeypatch)


@pytest.mark.parametrize("name", PATTERNS)
def test_patterns_with_variables(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, PATTERNS[name], tmp_path, monkeypatch)


@pytest.mark.parametrize("name", LASTPIPE)
def test_lastpipe_under_job_control(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, LASTPIPE[name], tmp_path, monkeypatch)


def test_the_nounset_refusal_names_the_variable_and_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text("#!/bin/bash\nset -euo pipefail\nNP=2\n" + T + " --save \"$CKPT_DIR\"\n")
    with pytest.raises(UsageError) as refused:
        parse_launch(["bash", "train.sh"], {})
    message = str(refused.value)
    assert "line 4" in message and "CKPT_DIR: unbound variable" in message and "set -u" in message
    assert "CKPT_DIR=... llmperf" in message and "${CKPT_DIR:-...}" in message
    job = parse_launch(["bash", "train.sh"], {"CKPT_DIR": "/ckpt"})  # set where llmperf reads it: bash goes on
    assert job.script_args[-2:] == ("--save", "/ckpt")


def test_nounset_spares_what_an_unread_sourced_file_may_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sourced file that is not here (the cluster's own setup), or an eval of a command's output, may set the
    variable: no refusal, the launch names it as before."""
    monkeypatch.chdir(tmp_path)
    for setup in ("source /nonexistent-h177/env.sh", 'eval "$(python3 -c \'print(1)\')"'):  # or an eval of output
        (tmp_path / "train.sh").write_text(f"#!/bin/bash\nset -u\n{setup}\nNP=2\n" + T + " --save $CKPT_DIR\n")
        assert parse_launch(["bash", "train.sh"], {}).script_args[-1] == "$CKPT_DIR", setup


def test_an_undecided_arithmetic_test_leaves_its_variable_unknown(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`elif (( NP++ ))` runs only where the `if` before it failed, which llmperf cannot tell here: NP is named."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text("#!/bin/bash\nNP=2\nif [ -e /nonexistent-h177 ]; then :; elif (( NP++ )); "
                                       "then :; fi\ntorchrun --nproc_per_node 8 pretrain_gpt.py "
                                       "--tensor-model-parallel-size $NP\n")
    assert parse_launch(["bash", "train.sh"], {}).script_args[-1] == "$NP"


@pytest.mark.parametrize("lines", [
    "declare -A M=([a]=2 [b]=4)\nNP=2\nX=\"${M[@]}\"",  # bash's hash order
    "mapfile -t L < <(seq 2 4)\nNP=2\nX=${L[0]}",  # a process substitution's output
    "printf '4\\n' > f.txt\nNP=2\nread -r X < f.txt",  # a file another command writes
    "f() { nproc; }\nNP=2\nX=$(f)",  # a function that runs a command
    "f() { echo $(hostname); }\nNP=2\nX=$(f)",
    "NP=2\nwhile read -r X; do :; done < <(ls)",
    "L=8\ndeclare -n X=L\nNP=2",  # a nameref: X reads L, which llmperf does not follow
    "shopt -s extglob\nNP=2\ncase $(hostname) in\n  !(a|b)) X=1;;\nesac",
])
def test_what_only_running_gives_stays_unknown(lines: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch line names $X (or the reference X was set from) instead of pricing a value llmperf guessed."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\n{lines}\n" + T + " --save $X\n")
    assert parse_launch(["bash", "train.sh"], {}).script_args[-1] in ("$X", "${M[@]}", "${L[0]}")


def test_declare_of_a_name_only_running_gives_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NeMo's argument loop (`key=$(echo $ARG | cut -f1 -d=)`, `declare $v="${value}"`): any variable may change."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text("#!/bin/bash\nNP=2\nfor ARG in \"$@\"; do\n  key=$(echo $ARG | cut -f1 -d=)\n"
                                       "  v=\"${key/--/}\"\n  declare $v=\"${ARG#*=}\"\ndone\n" + T + "\n")
    with pytest.raises(UsageError, match=r"line 6 .*declare assigns a variable whose name is \$v"):
        parse_launch(["bash", "train.sh", "--NP=4"], {})
    assert parse_launch(["bash", "train.sh"], {}).nproc_per_node == 2  # no argument: the loop never runs

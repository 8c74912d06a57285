"""H205: the shell reader's bash arrays, IFS and set -u, each against bash 5.2 itself (`_same_as_bash`: the script runs
in the real bash with stub launchers; where bash launches, llmperf reads the same launch, where bash stops, llmperf
refuses): sparse indexed arrays, associative arrays in bash's own order, set -u on array subscripts in the launch
line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.shell_associative import hash_order
from tests.launch.test_front_end_h197 import _same_as_bash
from tests.launch.test_scripts_as_the_shell_runs_them import _run

T = "torchrun --nproc_per_node 2 pretrain_gpt.py --num-layers 2"

SPARSE = {  # bash manual 6.7 Arrays: indexed arrays are sparse; `[N]=value` words, `NAME[N]=value`, `unset 'NAME[N]'`
    "indexed_words": f"A=([0]=a [5]=b)\n{T} --xx ${{A[5]}} --cnt ${{#A[@]}} --keys ${{!A[@]}}\n",
    "element_past_the_end": f"A=(a b)\nA[5]=x\n{T} --xx ${{A[5]}} --cnt ${{#A[@]}} --keys ${{!A[@]}} "
                            "--vals ${A[@]}\n",
    "slice_by_index": f"A=([0]=a [5]=b [7]=c [9]=d)\n{T} --sl \"${{A[@]:1:2}}\" --tl ${{A[@]:6}}\n",
    "negative_slice": f"A=([0]=a [5]=b [7]=c)\n{T} --xx ${{A[@]: -3}} --yy ${{A[@]: -1:1}}\n",
    "plain_words_after_an_index": f"A=(a [4]=b c)\n{T} --sl ${{A[5]}} --keys ${{!A[@]}}\n",
    "unset_element": f"A=(a b c)\nunset 'A[1]'\n{T} --sl ${{A[@]}} --cnt ${{#A[@]}} --keys ${{!A[@]}}\n",
    "unset_element_unquoted": f"A=(a b c)\nunset A[1]\n{T} --sl ${{A[@]}} --cnt ${{#A[@]}} --keys ${{!A[*]}}\n",
    "unset_arithmetic_element": f"A=(a b c d)\ni=1\nunset 'A[i+1]'\n{T} --keys ${{!A[@]}}\n",
    "unset_last_then_append": f"A=(a b c)\nunset 'A[-1]'\nA+=(z)\n{T} --keys ${{!A[@]}} --vals ${{A[@]}}\n",
    "unset_first": f"A=(x y)\nunset 'A[0]'\n{T} \"${{A[@]}}\" --xx ${{A[1]}}\n",
    "negative_subscript": f"A=([0]=a [5]=b)\n{T} --xx ${{A[-1]}}\n",
    "element_length": f"A=([3]=abc)\n{T} --xx ${{#A[3]}}\n",
    "loop_over_the_indices": f"A=([2]=a [5]=b)\nfor i in \"${{!A[@]}}\"; do X+=\"$i-${{A[$i]}},\"; done\n{T} --xx $X\n",
    "append_after_the_highest": f"A=([2]=a)\nA+=(b)\n{T} --keys ${{!A[@]}} --vals ${{A[@]}}\n",
    "declare_a": f"declare -a A=([1]=x [3]=y)\n{T} --keys ${{!A[@]}} --vals ${{A[3]}}\n",
    "arithmetic_element_assigned": f"i=2\nA[i+1]=z\n{T} --keys ${{!A[@]}} --xx ${{A[3]}}\n",
    "star_joined": f"A=([2]=a [4]=b)\n{T} --vals \"${{A[*]}}\"\n",
    "subshell_leaves_it": f"A=(a b)\n(A[5]=x)\n{T} --vals ${{A[@]}}\n",
    "both_branches_alike": f"if [ -f cfg ]; then A=([3]=x); else A=([3]=x); fi\n{T} --vals ${{A[@]}} "
                           "--keys ${!A[@]}\n",
    "nounset_unset_element": f"set -u\nA=(a b c)\nunset 'A[1]'\n{T} --sl ${{A[1]}}\n",
    "nounset_other_elements_stay": f"set -u\nA=(a b c)\nunset 'A[0]'\n{T} --vals ${{A[@]}} --xx ${{A[2]}}\n",
    "nounset_sparse_gap": f"set -u\nA=([0]=a [5]=b)\n{T} --xx ${{A[3]}}\n",
}


@pytest.mark.parametrize("name", SPARSE)
def test_sparse_indexed_arrays(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read before as dense lists: `${A[5]}` of `([0]=a [5]=b)` empty, `${!A[@]}` 0 1, `A[5]=x` and `unset 'A[1]'`
    left the array unknown (its expansions stayed as written in the launch)."""
    _same_as_bash(SPARSE[name], [], tmp_path, monkeypatch)


ASSOCIATIVE = {  # bash manual 6.7 (`declare -A`); the order of `${M[@]}` is bash's hash table's (hashlib.c)
    "literal": f"declare -A M=([tp]=2 [pp]=4 [dp]=8)\n{T} --vals ${{M[@]}} --keys ${{!M[@]}} --cnt ${{#M[@]}}\n",
    "assigned_by_key": f"declare -A M\nM[small]=2\nM[big]=4\nM[a]=1\n{T} --vals ${{M[@]}} --keys ${{!M[@]}}\n",
    "starred": f"declare -A M=([tp]=2 [pp]=4 [dp]=1)\n{T} --vals \"${{M[*]}}\" --keys \"${{!M[*]}}\"\n",
    "loop_over_the_keys": (f"declare -A M\nM[tensor-model-parallel-size]=2\nM[pipeline-model-parallel-size]=2\n"
                           f"M[micro-batch-size]=1\nfor k in \"${{!M[@]}}\"; do A+=(\"--$k\" \"${{M[$k]}}\"); done\n"
                           f"{T} \"${{A[@]}}\"\n"),
    "unset_and_set_again": f"declare -A M=([tp]=2 [pp]=4 [ep]=1)\nunset 'M[tp]'\nM[tp]=8\n{T} --vals ${{M[@]}}\n",
    "key_from_a_variable": f"declare -A M=([tp]=2 [pp]=4)\nk=tp\n{T} --xx ${{M[$k]}} --yy ${{M[pp]}}\n",
    "nounset_missing_key": f"set -u\ndeclare -A M=([tp]=2)\n{T} --pp ${{M[pp]}}\n",
}


@pytest.mark.parametrize("name", ASSOCIATIVE)
def test_associative_arrays(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`${M[@]}` / `${!M[@]}` of more than one key were left as written (their order was not known)."""
    _same_as_bash(ASSOCIATIVE[name], [], tmp_path, monkeypatch)


def test_the_hash_order_is_bash_s() -> None:
    """hashlib.c's FNV-1 buckets, newest first within one: `small a big` as bash 5.2 lists it; two keys of one bucket
    (`tp`, `ep` do not collide, but any later key of a bucket comes first) keep that order."""
    assert hash_order({"small": "2", "big": "4", "a": "1"}) == ["small", "a", "big"]
    assert hash_order({"tp": "", "pp": "", "dp": ""}) == ["dp", "pp", "tp"]


NOUNSET_SUBSCRIPTS = {  # bash manual 4.3.1 `-u`, 6.7 (the subscript is arithmetic: `$1` expands first)
    "unset_name_in_the_launch_line": f"set -u\nA=(a b)\n{T} --xx ${{A[j]}}\n",
    "set_name_in_the_launch_line": f"set -u\nA=(a b)\nj=1\n{T} --xx ${{A[j]}}\n",
    "unset_name_unset_before": f"set -u\nA=(a b)\nj=0\nunset j\n{T} --xx ${{A[j]}}\n",
    "argument_past_the_end": f"set -u\nA=(a b)\n{T} --xx ${{A[$1+1]}}\n",
    "argument_in_a_command": f"set -u\nA=(a b)\nX=${{A[$1+1]}}\n{T} --xx $X\n",
    "argument_in_a_function": f"set -u\nA=(a b)\nf() {{ {T} --xx ${{A[$1]}}; }}\nf \"$@\"\n",
    "argument_without_nounset": f"A=(a b c)\n{T} --xx ${{A[$1+1]}} --yy ${{A[$1]}}\n",
}


@pytest.mark.parametrize("args", [[], ["0"], ["1"], ["5"]], ids=["none", "0", "1", "5"])
@pytest.mark.parametrize("name", NOUNSET_SUBSCRIPTS)
def test_nounset_array_subscripts(name: str, args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`${A[j]}` in the launch line was priced as the text `${A[j]}` (j appeared bare there, so it counted as written);
    `${A[$1+1]}` was not followed under set -u."""
    _same_as_bash(NOUNSET_SUBSCRIPTS[name], args, tmp_path, monkeypatch)


IFS = {  # bash manual 3.5.7 Word Splitting, 4.2 `read`, 3.4.2 (`$*`); bash starts with IFS=<space><tab><newline>
    "read_into_an_array": f"LIST=a,b,c\nIFS=, read -ra P <<< \"$LIST\"\n{T} --xx ${{P[1]}} --cnt ${{#P[@]}}\n",
    "read_blanks_kept": f"LIST='a b,c d'\nIFS=, read -ra PARTS <<< \"$LIST\"\n{T} --vals \"${{PARTS[@]}}\"\n",
    "set_positional": "X=a:b:c\nIFS=:\nset -- $X\n" + T + " --xx $2 --cnt $#\n",
    "set_positional_on_one_line": "X=a:b:c\nIFS=: ; set -- $X\n" + T + " --xx $2 --cnt $#\n",
    "unquoted_variable": f"X=a,b\nIFS=,\n{T} --vals $X\n",
    "array_words": f"X=a,b,c\nIFS=,\nA=($X)\n{T} --cnt ${{#A[@]}} --vals \"${{A[@]}}\"\n",
    "saved_and_restored": f"X=a,b,c\nOLD=$IFS\nIFS=,\nA=($X)\nIFS=$OLD\nY='p q'\n{T} --cnt ${{#A[@]}} --vals $Y\n",
    "saved_quoted_then_a_loop": (f"X='a b'\nOLD_IFS=\"$IFS\"\nIFS=,\nIFS=\"$OLD_IFS\"\nfor v in $X; do Y+=\"<$v>\"; "
                                 f"done\n{T} --vals $X --yy $Y\n"),
    "default_value": f"Y=\"[$IFS]\"\n{T} --yy \"${{#Y}}\"\n",
    "star_joins_with_its_first": f"A=(a b c)\nIFS=,\n{T} --vals \"${{A[*]}}\" --xx \"$*\"\n",
    "local_in_a_function": f"f() {{ local IFS=,; A=($1); }}\nf a,b,c\nX='x y'\n{T} --cnt ${{#A[@]}} --vals $X\n",
    "for_loop_words": f"X=a:b\nIFS=:\nfor p in $X; do Y+=\"<$p>\"; done\n{T} --xx $Y\n",
    "unset": f"X='a b'\nIFS=,\nunset IFS\n{T} --vals $X\n",
    "empty": f"X='a b'\nIFS=\n{T} --vals $X\n",
    "newline": f"X='a b\nc'\nIFS=$'\\n'\nA=($X)\n{T} --cnt ${{#A[@]}}\n",
    "white_and_other": f"X=' a , b ,,c '\nIFS=' ,'\nA=($X)\n{T} --cnt ${{#A[@]}} --vals \"${{A[@]}}\"\n",
    "only_for_one_command": f"X='a b'\nIFS=, true\n{T} --vals $X\n",
    "in_a_subshell": f"X=a,b\n(IFS=,)\n{T} --vals $X\n",
    "a_path_with_blanks": f"IFS=:\nD='1 a:2 b'\n{T} --data-path $D\n",
    "function_arguments": f"IFS=,\nf() {{ {T} --cnt $# --vals $@; }}\nX=a,b\nf $X c\n",
    "unquoted_arguments": f"IFS=,\n{T} --vals $@ --tl $*\n",
    "quoted_arguments": f"IFS=,\n{T} --vals \"$@\"\n",
    "arguments_in_a_word": f"IFS=,\n{T} --vals x$@y\n",
}


@pytest.mark.parametrize("name", IFS)
def test_the_script_s_ifs(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unquoted expansions were split at blanks whatever IFS the script set (`IFS=,; A=($X)` one element), and a loop
    over them was read once, its values unknown."""
    _same_as_bash(IFS[name], ["a,b", "c d"], tmp_path, monkeypatch)


def _both_ways(text: str, args: list[str], tmp_path: Path) -> tuple[list[str] | None, list[str] | None]:
    """What bash launches with `text` where the file test `[ -f cfg ]` fails, and where it holds."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    out = []
    for name, cfg in (("without", False), ("with", True)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "train.sh").write_text("#!/bin/bash\n" + text)
        if cfg:
            (folder / "cfg").write_text("")
        out.append(_run(bash, folder / "train.sh", args, folder))
    return out[0], out[1]


ARGUMENTS_APART = {  # bash manual 3.2.5.2 (one branch runs), 4.1 `shift`, 4.3.1 `set --`
    "shift_in_the_else": "if [ -f cfg ]; then :; else shift; fi\n" + T + " --hidden-size $1\n",
    "shift_in_the_then": "if [ -f cfg ]; then shift; fi\n" + T + " --hidden-size $1\n",
    "through_a_variable": "if [ -f cfg ]; then shift; fi\nH=$1\n" + T + " --hidden-size $H\n",
    "set_in_one_branch": "if [ -f cfg ]; then set -- 16; fi\n" + T + " --hidden-size $1\n",
    "processes_per_node": ("if [ -f cfg ]; then shift; fi\n"
                           "torchrun --nproc_per_node $1 pretrain_gpt.py --num-layers 2\n"),
}


@pytest.mark.parametrize("name", ARGUMENTS_APART)
def test_arguments_a_branch_shifts_are_undecided(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bash launches with another `$1` depending on the test (checked: both runs below differ); the reading took the
    branch read first with a warning, pricing one of them. Now `$1` is undecided, as a variable the branches set
    apart: the launch line leaves it, and a refusal names what each way leaves in it."""
    without, with_cfg = _both_ways(ARGUMENTS_APART[name], ["8", "4"], tmp_path)
    assert without is not None and with_cfg is not None and without != with_cfg
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n" + ARGUMENTS_APART[name])
    monkeypatch.chdir(tmp_path)
    if name == "processes_per_node":
        with pytest.raises(UsageError, match=r"\$1 at `shift` / `set --` in some branch \('(8|4|16)' or"):
            parse_launch(["bash", str(script), "8", "4"], {})
        return
    assert parse_launch(["bash", str(script), "8", "4"], {}).script_args[-2:] == ("--hidden-size", "$1")


ARGUMENTS_ALIKE = {  # the ways agree: read as bash reads them
    "shift_in_both": "if [ -f cfg ]; then shift; else shift; fi\n" + T + " --hidden-size $1\n",
    "not_read_after": "if [ -f cfg ]; then shift; fi\n" + T + " --hidden-size 8\n",
    "an_argument_both_leave_alike": "if [ -f cfg ]; then shift; fi\n" + T + " --hidden-size $2\n",
}


@pytest.mark.parametrize("name", ARGUMENTS_ALIKE)
def test_arguments_the_branches_leave_alike(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _same_as_bash(ARGUMENTS_ALIKE[name], ["8", "8", "8"], tmp_path, monkeypatch)


READONLY_UNSET_ERREXIT = {  # bash manual 4.1 `unset` (a readonly name: the unset fails), 4.3.1 `-e`
    "plain": "set -e\nreadonly X=1\nunset X\n" + T + "\n",
    "declare_r_and_more_names": "set -e\ndeclare -r X=1\nunset -v Y X\n" + T + "\n",
    "in_a_function": "set -e\nreadonly X=1\nf() { unset X; }\nf\n" + T + "\n",
    "in_a_subshell": "set -e\nreadonly X=1\n(unset X)\n" + T + "\n",
    "without_set_e": "readonly X=1\nunset X\n" + T + " --xx $X\n",
    "after_set_plus_e": "set -e\nreadonly X=1\nset +e\nunset X\n" + T + "\n",
    "or_true": "set -e\nreadonly X=1\nunset X || true\n" + T + "\n",
    "subshell_or_true": "set -e\nreadonly X=1\n(unset X) || true\n" + T + "\n",
    "function_or_true": "set -e\nreadonly X=1\nf() { unset X; }\nf || true\n" + T + "\n",
    "and_after": "set -e\nreadonly X=1\nunset X && echo hi\n" + T + "\n",
    "if_test": "set -e\nreadonly X=1\nif unset X; then :; fi\n" + T + "\n",
    "negated": "set -e\nreadonly X=1\n! unset X\n" + T + "\n",
    "in_a_pipe": "set -e\nreadonly X=1\nunset X | cat\n" + T + "\n",
    "unset_f_of_the_name": "set -e\nreadonly X=1\nunset -f X\n" + T + "\n",
    "undecided_branch": "set -e\nreadonly X=1\nif [ -f cfg ]; then unset X; fi\n" + T + "\n",
}


@pytest.mark.parametrize("name", READONLY_UNSET_ERREXIT)
def test_set_e_and_an_unset_of_a_readonly(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the failed `unset` counts, bash stops under set -e; the reading went on and priced the launch."""
    _same_as_bash(READONLY_UNSET_ERREXIT[name], [], tmp_path, monkeypatch)


_FILES = "mkdir -p d; echo H=16 > d/v.sh; echo H=32 > v.sh; echo H=64 > w.sh; cp w.sh d/w.sh\n"
DIRECTORY_APART = {  # a file sourced by a relative path after branches `cd` apart (bash manual 4.1 `.`, `cd`)
    "sourced_after_cd_in_one_branch": _FILES + "if [ -f cfg ]; then :; else cd d; fi\n. ./v.sh\n" + T +
                                      " --hidden-size $H\n",
    "then_a_relative_cd": _FILES + "if [ -f cfg ]; then :; else cd d; fi\ncd .\n. ./v.sh\n" + T +
                          " --hidden-size $H\n",
}


@pytest.mark.parametrize("name", DIRECTORY_APART)
def test_a_file_sourced_from_a_directory_branches_left_apart(name: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """bash reads d/v.sh or v.sh depending on the test (both runs checked); the reading read the first branch's."""
    without, with_cfg = _both_ways(DIRECTORY_APART[name], [], tmp_path)
    assert without is not None and with_cfg is not None and without != with_cfg
    (tmp_path / "train.sh").write_text("#!/bin/bash\n" + DIRECTORY_APART[name])
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "v.sh").write_text("H=16\n")
    (tmp_path / "v.sh").write_text("H=32\n")
    assert parse_launch(["bash", "train.sh"], {}).script_args[-2:] == ("--hidden-size", "$H")


DIRECTORY_ALIKE = {
    "both_files_alike": _FILES + "if [ -f cfg ]; then :; else cd d; fi\n. ./w.sh\n" + T + " --hidden-size $H\n",
    "cd_in_both": _FILES + "if [ -f cfg ]; then cd d; else cd d; fi\n. ./v.sh\n" + T + " --hidden-size $H\n",
    "cd_in_a_subshell_after": _FILES + "if [ -f cfg ]; then :; else cd d; fi\n(cd /)\n. ./w.sh\n" + T +
                              " --hidden-size $H\n",
    "an_absolute_cd_after": _FILES + "if [ -f cfg ]; then :; else cd d; fi\ncd /\n" + T + " --hidden-size 8\n",
}


@pytest.mark.parametrize("name", DIRECTORY_ALIKE)
def test_a_file_sourced_alike_from_either_directory(name: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _same_as_bash(DIRECTORY_ALIKE[name], [], tmp_path, monkeypatch)


READONLY_ASSIGNED = {  # bash manual 4.2 `readonly`: "the values of these names may not be changed by subsequent
    # assignment"; the assignment error discards the rest of its line, and under set -e ends the script even after
    # `||` (bash 5.2.15 checked)
    "plain": "readonly X=1\nX=2\n" + T + " --xx $X\n",
    "appended": "readonly X=1\nX+=2\n" + T + " --xx $X\n",
    "declared": "readonly X=1\ndeclare X=2\n" + T + " --xx $X\n",
    "in_an_undecided_branch": "readonly X=1\nif [ -f cfg ]; then X=2; fi\n" + T + " --xx $X\n",
    "before_or": "readonly X=1\nX=2 || echo alt\n" + T + " --xx $X\n",
    "set_e": "set -e\nreadonly X=1\nX=2\n" + T + " --xx $X\n",
    "set_e_before_or": "set -e\nreadonly X=1\nX=2 || true\n" + T + " --xx $X\n",
    "set_e_exported": "set -e\nreadonly X=1\nexport X=2\n" + T + " --xx $X\n",
    "set_e_readonly_again": "set -e\nreadonly X=1\nreadonly X=2\n" + T + " --xx $X\n",
    "set_e_readonly_without_a_value": "set -e\nreadonly X=1\nreadonly X\n" + T + " --xx $X\n",
    "set_e_in_a_function_or_true": "set -e\nreadonly X=1\nf() { X=2; }\nf || true\n" + T + " --xx $X\n",
}


@pytest.mark.parametrize("name", READONLY_ASSIGNED)
def test_an_assignment_to_a_readonly(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reading assigned the new value (X=2, X+=2 gave 12) and never stopped under set -e."""
    _same_as_bash(READONLY_ASSIGNED[name], [], tmp_path, monkeypatch)


ARITHMETIC_ELEMENTS = {  # bash manual 6.5 (a bare name's value is evaluated), 6.7 (`${name[subscript]}`; in arithmetic
    # the element is written bare)
    "indexed": "A=(2 4)\nB=$((A[1] * 2))\n" + T + " --xx $B\n",
    "indexed_by_a_name": "A=(2 4)\ni=1\nB=$((A[i] + A[0]))\n" + T + " --xx $B\n",
    "associative_by_a_variable": "declare -A M=([tp]=2)\nk=tp\nB=$((M[$k] * 2))\n" + T + " --xx $B\n",
    "in_a_loop_over_the_keys": ("declare -A M=([tp]=2 [pp]=4)\nX=\nfor k in \"${!M[@]}\"; do X+=\"--$k $((M[$k])) \"; "
                                "done\n" + T + " $X\n"),
    "an_element_that_is_an_expression": "A=(1+2 3)\nB=$((A[0] * 2))\n" + T + " --xx $B\n",
}


@pytest.mark.parametrize("name", ARITHMETIC_ELEMENTS)
def test_array_elements_in_arithmetic(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`$((A[1] * 2))` was left to bash (its value unknown)."""
    _same_as_bash(ARITHMETIC_ELEMENTS[name], [], tmp_path, monkeypatch)


def test_an_indexed_word_s_value_is_not_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`A=([3]=$X)` with X='a b': one element (an assignment's value is not split, bash manual 3.4); it gave two."""
    _same_as_bash("X='a b'\nA=([3]=$X [5]=c)\ndeclare -A M=([k]=$X)\n" + T + " --cnt ${#A[@]} --keys ${!A[@]} "
                  "--vals \"${A[@]}\" --xx \"${M[@]}\"\n", [], tmp_path, monkeypatch)

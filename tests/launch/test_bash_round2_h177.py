"""Launch scripts read as bash 5.2 runs them, round 2 (H177): each script below is run by the real bash (with the stub
launchers of test_scripts_as_the_shell_runs_them) and llmperf's reading of it, never run, must give the same job, or
a refusal where bash stops before its launch.

`set -u` (nounset): bash ends the script at the first expansion of an unset variable ("NAME: unbound variable", bash
manual 4.3.1), so llmperf refuses, naming it, where it surely runs. `if (( NP++ ))` tests NP's old value and changes
NP (6.5). `( cmd ) || { NP=4; }`: the brace group runs in the shell, as the subshell's status says (3.2.4, 3.2.5.3).
`${P//$D/_}`: the pattern's variables are expanded first (3.5.3). `set -m` turns lastpipe off (4.3.2).
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
    """A sourced file that is not here (the cluster's own setup) may set the variable: no refusal, the launch names
    it as before."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text("#!/bin/bash\nset -u\nsource /nonexistent-h177/env.sh\nNP=2\n" + T +
                                       " --save $CKPT_DIR\n")
    assert parse_launch(["bash", "train.sh"], {}).script_args[-1] == "$CKPT_DIR"


def test_an_undecided_arithmetic_test_leaves_its_variable_unknown(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`elif (( NP++ ))` runs only where the `if` before it failed, which llmperf cannot tell here: NP is named."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text("#!/bin/bash\nNP=2\nif [ -e /nonexistent-h177 ]; then :; elif (( NP++ )); "
                                       "then :; fi\ntorchrun --nproc_per_node 8 pretrain_gpt.py "
                                       "--tensor-model-parallel-size $NP\n")
    assert parse_launch(["bash", "train.sh"], {}).script_args[-1] == "$NP"

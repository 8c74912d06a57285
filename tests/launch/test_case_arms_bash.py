"""`case` arms read as bash reads them, and a variable a command substitution sets after a plain value: each script is
run by bash itself (tests/launch/test_shell_conditions_bash.py's runner) and through the real `llmperf explain`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.launch.cli_run import llmperf
from tests.launch.test_shell_conditions_bash import _both_tp

BASH = shutil.which("bash")
GPT = ("--num-layers 2 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
       "--micro-batch-size 1 --global-batch-size 8 --tokenizer-type NullTokenizer --vocab-size 1000")

CASE_ARMS = {
    "if ... fi in an arm, inside an if bash does not run":
        "A=1\nTP=1\nif [ $A = 2 ]; then\ncase $M in\n  7B) if [ $A = 1 ]; then X=2; fi ;;\nesac\nTP=8\nfi\n",
    "if ... fi in an arm, then a later arm and an outer if":
        "A=1\nTP=1\nif [ $A = 1 ]; then\ncase $M in\n  7B) if [ $A = 1 ]; then X=2; fi ;;\n  *) X=3 ;;\nesac\n"
        "if [ $A = 2 ]; then TP=8; fi\nfi\n",
    "patterns joined by |, (pattern) form":
        "A=1\nTP=1\nif [ $A = 2 ]; then\ncase $M in\n  7B | 13B) if [ $A = 1 ]; then X=2; fi ;;\n"
        "  (70B) if true; then X=4; fi ;;\nesac\nTP=8\nfi\n",
    "case ... esac on one line": "A=1\nTP=1\nif [ $A = 2 ]; then case $M in 7B) if true; then X=2; fi;; esac; TP=8; fi\n",
    "an arm's command with $(...)": "TP=1\ncase $M in\n  7B) X=$(nproc) ;;\nesac\nif [ 1 = 2 ]; then TP=8; fi\n",
}


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("body", CASE_ARMS.values(), ids=CASE_ARMS.keys())
def test_an_if_inside_a_case_arm_keeps_the_blocks(body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`7B) if ...; then ...; fi ;;` was read as the case's own `then` / `fi`: the `fi` closed the case and `esac` the
    outer `if`, so TP=8, which bash never runs, was applied."""
    ours, bash = _both_tp(body, tmp_path, monkeypatch)
    assert ours == bash


def test_a_variable_assigned_in_an_arm_of_an_unknown_word_is_unknown_afterwards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text("M=$(hostname)\nTP=1\ncase $M in\n  7B) if true; then TP=2; fi ;;\nesac\n"
                                       f"torchrun --nproc_per_node 8 pretrain_gpt.py {GPT} --tensor-model-parallel-size $TP\n")
    out = llmperf(capsys, "explain", "--", "bash", "train.sh")
    assert out.code == 2 and "'$TP'" in out.err and out.err.startswith("llmperf: error: ")


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_a_command_substitution_after_a_plain_value_makes_the_variable_unknown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`TP=2; TP=$(...)`: the launch line used the stale 2; bash gives what the command prints (here 4)."""
    body = "TP=2\nTP=$(echo 4)\n"
    ours, bash = _both_tp(body, tmp_path, monkeypatch)
    assert (ours, bash) == ("$TP", "4")
    out = llmperf(capsys, "explain", "--", "bash", "train.sh")
    assert out.code == 2 and "'$TP'" in out.err, out.err


def test_nproc_from_a_substitution_after_a_plain_value_is_not_statically_known(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(f"N=1; N=$(nproc)\ntorchrun --nproc_per_node $N pretrain_gpt.py {GPT}\n")
    out = llmperf(capsys, "explain", "--", "bash", "train.sh")
    assert out.code == 2 and "only running the launch script gives" in out.err, out.err
    assert "sets $N at line 1" in out.err and "a command's output" in out.err, out.err  # where (unknown_value_note)
    out = llmperf(capsys, "explain", "--nproc-per-node", "4", "--", "bash", "train.sh")
    assert out.code == 0 and "nproc_per_node         4" in out.out, out.err


@pytest.mark.parametrize("body, value", [("X=1\nTP=${X:-$(nproc)}\n", "1"), ("TP=3\nTP=${TP:-$(nproc)}\n", "3")])
def test_a_default_substitution_bash_does_not_run(body: str, value: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    ours, bash = _both_tp(body, tmp_path, monkeypatch)
    assert ours == bash == value


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("body", ["TP=\nTP+=2\n", "TP=$'2'\n", "X=1\nX+=$'\\t'\nTP=2\n", "TP=1\nexport TP+=6\n"])
def test_append_and_ansi_c_quoting_as_bash(body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`TP+=2` appends (it was skipped, the old value kept) and `$'2'` is bash's quoting (it was read as $2, empty)."""
    ours, bash = _both_tp(body, tmp_path, monkeypatch)
    assert ours == bash


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_append_in_a_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `for` loop whose words llmperf knows is read once per word (launch/shell_loops.py, H120); another loop's
    assignments stay unknown."""
    ours, bash = _both_tp("TP=1\nfor i in 1; do TP+=1; done\n", tmp_path, monkeypatch)
    assert (ours, bash) == ("11", "11")
    ours, bash = _both_tp("TP=1\nfor i in $(seq 1 1); do TP+=1; done\n", tmp_path, monkeypatch)
    assert (ours, bash) == ("$TP", "11")


CASE_DECIDED = {
    "Megatron-LM examples/mamba/train.sh's MODEL_SCALE": 'S="800M"\ncase "${S}" in\n    "800M")\n        TP=1\n        ;;\n'
    '    "8B")\n        TP=4\n        ;;\n    *)\n        echo "Invalid"\n        exit 1\n        ;;\nesac\n',
    "the default arm": "S=70B\ncase $S in\n  7B|13B) TP=1 ;;\n  *) TP=8 ;;\nesac\n",
    "globs and |": "S=llama-7b\ncase $S in\n  gpt*|opt*) TP=1 ;;\n  llama-?b | llama-??b) TP=2 ;;\n  *) TP=8 ;;\nesac\n",
    "(pattern) and a bracket": "S=b\ncase $S in\n  ([ab]) TP=2 ;;\n  (*) TP=8 ;;\nesac\n",
    "a pattern from a variable": "P=7B\nS=7B\ncase $S in\n  $P) TP=2 ;;\nesac\n",
    "no arm matches": "TP=3\ncase x in\n  y) TP=2 ;;\nesac\n",
    "an if in the taken arm": "S=a\nTP=1\ncase $S in\n  a) if [ $S = a ]; then TP=2; fi ;;\n  *) TP=8 ;;\nesac\n",
}


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("body", CASE_DECIDED.values(), ids=CASE_DECIDED.keys())
def test_a_case_on_a_known_word_runs_its_first_matching_arm(body: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`case "${MODEL_SCALE}" in "800M") TP=1 ;; "8B") TP=4 ;;`: every arm's assignment made TP unknown, so Megatron-LM's
    mamba example could not be read; a word the script sets selects its arm as bash does."""
    ours, bash = _both_tp(body, tmp_path, monkeypatch)
    assert ours == bash != "$TP"


ARRAYS = {
    "unquoted: an element with blanks splits": 'A=(--schedule "0:16 2.4B:320" --bf16)\ntorchrun x.py ${A[@]}\n',
    "unquoted: an empty $X gives no element": "E=\nA=(--save $E --bf16)\ntorchrun x.py ${A[@]}\n",
    "quoted [@]: one word per element": 'E=\nA=(--schedule "0:16 2.4B:320" "$E" --bf16)\ntorchrun x.py "${A[@]}"\n',
    "quoted [*]: one word": 'A=(a "b c")\ntorchrun x.py --x "${A[*]}" --bf16\n',
    "an unquoted variable with blanks splits": 'F="--lr 1e-4 --bf16"\nA=(--seed 1 $F)\ntorchrun x.py ${A[@]}\n',
    "an empty $X on the launch line (t5 example without $1)": "C=$1\ntorchrun x.py --save $C --load ${C} --bf16\n",
    "a quoted word that looks like a redirection": "torchrun x.py --tokens '<audio>,32002' \"<a\" --bf16 2>&1\n",
    "a quote ends a name": "M=8\nE='mbs_'$M'_gbs'\nA=(--name $E'_x' --mb \"$M\"_1)\ntorchrun x.py ${A[@]} --ee $E'_y'\n",
}


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("body", ARRAYS.values(), ids=ARRAYS.keys())
def test_array_words_as_bash_gives_them(body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Megatron-LM's examples keep their flags in arrays expanded unquoted (`${TRAINING_ARGS[@]}`): bash splits an
    element holding blanks (`--step-batch-size-schedule "0:16 2.4B:320 ..."`) and drops an empty `$CHECKPOINT_PATH`;
    both reached the script as one word / an empty one."""
    import subprocess

    from llmperf_hook.launch.parse import parse_launch

    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n" + body)
    runner = 'torchrun() { printf "%s\\n" "$@"; }; export -f torchrun; bash "$0"'
    proc = subprocess.run([BASH or "bash", "-c", runner, str(script)], capture_output=True, text=True, cwd=tmp_path,
                          check=True)
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "train.sh"], {}, nproc_per_node=1)
    assert [job.script, *job.script_args] == proc.stdout.split("\n")[:-1]


WORDS = {
    "an unquoted variable of several names (DeepSpeed-VisualChat's --dataset_names ${DATA})":
        ('DATA="llava llava_dial otter"\ntorchrun x.py --dataset_names ${DATA} --bf16\n', []),
    "$@ without arguments (HelloDeepSpeed's run_ds.sh)": ("torchrun x.py --checkpoint_dir e $@\n", []),
    "$@ and \"$@\" with an argument holding a blank": ('torchrun x.py $@ --nb "$@" --mb $1\n', ["--tag", "a b"]),
    "${1} and $2 given": ("torchrun x.py --save ${1} --load $2 $3\n", ["ck", "pt"]),
}


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("body, args", WORDS.values(), ids=WORDS.keys())
def test_launch_words_as_bash_splits_them(body: str, args: list[str], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """An unquoted `$DATA` holding several names reached the script as one word; `$@` with no arguments as ''."""
    import subprocess

    from llmperf_hook.launch.parse import parse_launch

    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n" + body)
    runner = 'torchrun() { printf "%s\\n" "$@"; }; export -f torchrun; bash "$0" "$@"'
    proc = subprocess.run([BASH or "bash", "-c", runner, str(script), *args], capture_output=True, text=True,
                          cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "train.sh", *args], {}, nproc_per_node=1)
    assert [job.script, *job.script_args] == proc.stdout.split("\n")[:-1]


def test_the_launch_lines_split_variables_are_the_jobs_environment(tmp_path: Path, monkeypatch) -> None:
    """Unquoted $NAME words are split before the line is read (above); those of the launch line are still listed as
    the variables the launch reads (ParsedJob.env, what `run --dry-run` prints), those of other commands are not."""
    from llmperf_hook.launch.parse import parse_launch

    (tmp_path / "train.sh").write_text('#!/bin/bash\nOUT=/tmp/o\nmkdir -p $OUT\nGPT="--num-layers 2 --bf16"\nTP=2\n'
                                       'torchrun --nproc_per_node $NPROC pretrain_gpt.py $GPT --tp "$TP"\n')
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "train.sh"], {"NPROC": "8"})
    assert job.env == {"NPROC": "8", "GPT": "--num-layers 2 --bf16", "TP": "2"}
    assert job.script_args == ("--num-layers", "2", "--bf16", "--tp", "2")

"""Launch scripts of the public repositories (bigscience train/, Megatron-DeepSpeed examples_deepspeed/, Megatron-LM
examples/) that llmperf refused although bash runs one training launch from them, found by running `llmperf explain`
on each (session H111); each test fails without its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.launch.launch_line import python_code_step
from llmperf_hook.launch.parse import parse_launch

NODE_CHECK = """#!/bin/bash
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:8
# testing for potential faulty nodes
srun --jobid $SLURM_JOBID bash -c 'python -c "import torch, socket; print(socket.gethostname(), {CHECK})"'
export LAUNCHER="python -u -m torch.distributed.launch \\
    --nproc_per_node 8 \\
    --nnodes $SLURM_NNODES \\
    "
export CMD="pretrain_gpt.py --tensor-model-parallel-size 2"
srun --jobid $SLURM_JOBID bash -c '$LAUNCHER --node_rank $SLURM_PROCID $CMD' 2>&1 | tee -a main_log.txt
""".replace("{CHECK}", "torch.cuda.is_available()")


def test_a_node_check_with_python_c_is_not_the_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bigscience tr3/tr5/tr14 .slurm: the `srun ... bash -c 'python -c "import torch ..."'` node check was the
    first launch line, and every later line holding a launcher (`export LAUNCHER="python -u -m
    torch.distributed.launch ...`) another: exit 2, '3 launch lines'."""
    (tmp_path / "job.slurm").write_text(NODE_CHECK)
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["sbatch", "job.slurm"], {})
    assert (job.nnodes, job.nproc_per_node, job.world_size) == (4, 8, 32)
    assert job.script.endswith("pretrain_gpt.py")


@pytest.mark.parametrize("line, inline", [
    ("srun python -c 'import torch'", True),
    ("srun -N 2 --ntasks-per-node=1 python3 -uc 'print(1)'", True),
    ("srun bash -c 'python -c \"import socket\"'", True),
    ("srun python train.py", False),
    ("srun python -m torch.distributed.run train.py", False),
    ("srun bash -c '$LAUNCHER $CMD'", False),
    ("torchrun python -c x", False),
])
def test_python_code_step(line: str, inline: bool) -> None:
    import shlex

    assert python_code_step(shlex.split(line)) is inline


UNDECIDED = """#!/bin/bash
ARGS=(--num-layers 2)
if [ "$(hostname)" = login ]; then
    ARGS+=(--mock-data)
else
    ARGS+=(--data-path /data/text)
fi
[ -n "$(ls /x)" ] && TP=2
if [ "$MODE" = mock ]; then
    ARGS+=(--seed 1)
fi
torchrun --nproc-per-node 8 pretrain_gpt.py "${ARGS[@]}"
"""


def test_the_lines_run_on_undecided_conditions_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ParsedJob.undecided: the commands bash runs only on a condition llmperf cannot decide (a command's output);
    a framework rule on flags that two such branches give is then a warning (frameworks/megatron_data_source.py).
    The decided `if [ "$MODE" = mock ]` (MODE unset) adds nothing."""
    (tmp_path / "train.sh").write_text(UNDECIDED)
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "train.sh"], {})
    assert job.undecided == ("line 4", "line 6", "line 8")
    assert "--seed" not in job.script_args
    (tmp_path / "plain.sh").write_text("#!/bin/bash\ntorchrun --nproc-per-node 8 pretrain_gpt.py --mock-data\n")
    assert parse_launch(["bash", "plain.sh"], {}).undecided == ()


AND_IF = {
    "&& if, test true, if false": 'TP=1\n[ -z "$FOO" ] && if [ 1 = 2 ]; then TP=4; fi\n',
    "&& if, test false": 'TP=1\n[ -n "$FOO" ] && if [ 1 = 1 ]; then TP=8; fi\n',
    "|| if, test true": 'TP=1\n[ -z "$FOO" ] || if [ 1 = 1 ]; then TP=8; else TP=4; fi\n',
    "|| if, test false": 'TP=1\n[ -n "$FOO" ] || if [ 1 = 1 ]; then TP=2; else TP=4; fi\n',
    "&& for, test false": 'TP=1\n[ -n "$FOO" ] && for i in 8; do TP=$i; done\n',
    "&& case, test false": 'TP=1\nM=7B\n[ -n "$FOO" ] && case $M in 7B) TP=8;; esac\n',
    "&& if, nested": 'TP=1\n[ -n "$FOO" ] && if [ 1 = 1 ]; then if [ 2 = 2 ]; then TP=8; fi; fi\n',
}


@pytest.mark.parametrize("body", AND_IF.values(), ids=AND_IF.keys())
def test_a_compound_command_after_and_or_runs_as_bash_runs_it(body: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`[ -n "$X" ] && if ...; fi`: bash runs no part of the `if` when the test fails (bash manual 3.2.4 Lists); llmperf
    read its branches as if it stood alone (TP=8 where bash keeps TP=1)."""
    from tests.launch.test_shell_conditions_bash import BASH, _both_tp

    if BASH is None:
        pytest.skip("needs bash")
    ours, bash = _both_tp(body, tmp_path, monkeypatch)
    assert ours == bash


GPT = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
       "--micro-batch-size 2 --global-batch-size 64 --vocab-size 1000")


def test_a_here_document_inside_bash_c_writes_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`bash -c 'cat > ds.json <<JSON ... JSON\ndeepspeed ... --deepspeed_config ds.json'`: the string is a script
    whose here-document writes the file the launch reads; it was read as one command ('does not know the launcher
    cat')."""
    from llmperf_hook.frameworks.resolve import resolve_job

    (tmp_path / "train.sh").write_text(
        "#!/bin/bash\nbash -c 'cat > ds.json <<JSON\n{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 2,"
        " \"zero_optimization\": {\"stage\": 1}}\nJSON\n"
        f"deepspeed --num_gpus 8 pretrain_gpt.py {GPT} --deepspeed --deepspeed_config ds.json'\n")
    monkeypatch.chdir(tmp_path)
    job, cfg = resolve_job(["bash", "train.sh"], {})
    assert cfg.optimizer.zero_stage == 1 and not (tmp_path / "ds.json").exists()
    assert "ds.json" in job.script_files


@pytest.mark.parametrize("string", [f"\n# don't forget the layout\ntorchrun --nproc-per-node 8 pretrain_gpt.py {GPT} "
                                    "--tensor-model-parallel-size 2\n",
                                    f"torchrun --nproc-per-node 8 pretrain_gpt.py {GPT} --tensor-model-parallel-size 2 "
                                    "# it's TP 2"])
def test_a_comment_with_a_quote_in_sh_c(string: str) -> None:
    """A comment line of an `sh -c "..."` string holding an apostrophe: its quote opens nothing (bash manual 3.1.3
    Comments); llmperf exited 2 'cannot split the command given to sh -c (No closing quotation)'."""
    job = parse_launch(["sh", "-c", string], {})
    assert job.script_args[-2:] == ("--tensor-model-parallel-size", "2") and job.world_size == 8


SELF_LOCATING = {
    "readlink -f $0": 'SCRIPT_DIR="$(dirname "$(readlink -f "$0")")"\nsource "${SCRIPT_DIR}/conf.sh"\n',
    "realpath $0": "SCRIPT_PATH=$(realpath $0)\nsource $(dirname $SCRIPT_PATH)/conf.sh\n",
    "cd BASH_SOURCE && pwd": 'ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)\nsource "$ROOT/sub/conf.sh"\n',
    "export, basename": 'export HERE=$(dirname "$0")\nNAME=$(basename "$HERE/conf.sh" .sh)\nsource "$HERE/$NAME.sh"\n',
}


@pytest.mark.parametrize("body", SELF_LOCATING.values(), ids=SELF_LOCATING.keys())
def test_a_script_that_finds_its_own_folder(body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`SCRIPT_DIR="$(dirname "$(readlink -f "$0")")"; source "$SCRIPT_DIR/conf/arguments.sh"` (Megatron-LM
    examples/post_training/modelopt, examples/rl): the substitution only computes a path from the script's own words,
    so llmperf works it out (shell_substitution.py); it left SCRIPT_DIR unknown, sourced nothing and found no launch
    line. Run from another folder, as bash gives $0; checked against bash."""
    from tests.launch.test_shell_conditions_bash import BASH

    if BASH is None:
        pytest.skip("needs bash")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "conf.sh").write_text("TP=4\n")
    launch = "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $TP\n"
    (tmp_path / "sub" / "train.sh").write_text("#!/bin/bash\n" + body + launch)
    monkeypatch.chdir(tmp_path)
    runner = 'torchrun() { printf "%s\\n" "${@: -1}"; }; export -f torchrun; bash "$0"'
    import subprocess

    bash = subprocess.run([BASH, "-c", runner, "sub/train.sh"], capture_output=True, text=True, cwd=tmp_path,
                          check=True).stdout.strip()
    assert parse_launch(["bash", "sub/train.sh"], {}).script_args[-1] == bash == "4"


def test_other_command_substitutions_stay_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.launch.shell_substitution import substitute_paths

    assert substitute_paths("$(nvidia-smi -L | wc -l)", "/w", lambda w: w) == "$(nvidia-smi -L | wc -l)"
    assert substitute_paths("$(dirname $(hostname))", "/w", lambda w: w) == "$(dirname $(hostname))"
    assert substitute_paths("$(dirname /a/b/c.sh)/x", "/w", lambda w: w) == "/a/b/x"
    assert substitute_paths("$(basename /a/b/c.sh .sh)", "/w", lambda w: w) == "c"


def test_a_path_the_command_would_not_print_is_not_invented(tmp_path: Path) -> None:
    """Checked against bash and coreutils: `cd` to a missing folder prints nothing after && (and the old folder after
    `;`), `cd -` goes to $OLDPWD, readlink -f / realpath of a path under a missing folder print nothing, `pwd -P`
    resolves links, `basename ""` is empty. Each gave a path bash never prints (the missing folder, `DIR/-`, the
    unresolved link, `/`)."""
    from llmperf_hook.launch.shell_substitution import substitute_paths

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    cwd = str(tmp_path)
    for unknown in ["$(cd /no/such/dir && pwd)", "$(cd /no/such/dir; pwd)", "$(cd - && pwd)",
                    "$(readlink -f /no/such/dir/x)", "$(realpath /no/such/dir/x)", "$(readlink -e /no/such/file)"]:
        assert substitute_paths(unknown, cwd, lambda w: w) == unknown
    assert substitute_paths("$(cd link && pwd -P)", cwd, lambda w: w) == str((tmp_path / "real").resolve())
    assert substitute_paths("$(cd link; pwd)", cwd, lambda w: w) == str(tmp_path / "link")
    assert substitute_paths("x$(basename '')y", cwd, lambda w: w) == "xy"
    assert substitute_paths("$(readlink -m /no/such/dir/x)", cwd, lambda w: w) == "/no/such/dir/x"


@pytest.mark.parametrize("guard", ['[ -z "$1" ] && exit 1', 'if [ $# -lt 1 ]; then\n  echo usage\n  exit 2\nfi'])
def test_an_exit_before_the_launch_ends_the_script(guard: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`[ -z "$1" ] && exit 1` (Megatron-LM examples/post_training/modelopt/conf/arguments.sh wants the model name):
    bash stops there; llmperf read on past it and refused the launch for what that left unset. Given the argument,
    the launch is read; an exit only an undecided condition runs is passed over."""
    from llmperf_hook.errors import UsageError

    (tmp_path / "train.sh").write_text(f"#!/bin/bash\n{guard}\nTP=$1\n"
                                       "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $TP\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"train.sh stops at line \d+ \(`.*exit \d`\) before any launch line"):
        parse_launch(["bash", "train.sh"], {})
    assert parse_launch(["bash", "train.sh", "4"], {}).script_args[-1] == "4"
    (tmp_path / "undecided.sh").write_text("#!/bin/bash\n[ -z \"$(ls /x)\" ] && exit 1\n"
                                           "torchrun --nproc_per_node 8 pretrain_gpt.py --seed 1\n")
    assert parse_launch(["bash", "undecided.sh"], {}).script_args[-1] == "1"


GROUPS = {
    "|| { exit } on lines, command status unknown": 'mkdir -p /tmp/x || {\n  echo failed\n  exit 1\n}\nTP=2\n',
    "&& { } test false": 'TP=1\n[ -n "$FOO" ] && {\n  TP=8\n}\n',
    "&& { } test true": 'TP=1\n[ -z "$FOO" ] && {\n  TP=8\n}\n',
    "|| { } one line": 'TP=1\n[ -z "$FOO" ] || { TP=8; }\n',
    "plain group": '{\n  TP=4\n}\n',
    "exit in a subshell": 'TP=1\n( exit 1 )\nTP=2\n',
    "&& assignment || other": 'TP=1\n[ -z "$FOO" ] && TP=4 || TP=8\n',
    "&& assignment || other, test false": 'TP=1\n[ -n "$FOO" ] && TP=4 || TP=8\n',
    "&& export || other": 'TP=1\n[ -z "$FOO" ] && export TP=4 || TP=8\n',
    "two assignments on a line": 'TP=1\nPP=2 TP=$PP\n',
    "two assignments after &&": 'TP=1\n[ -z "$FOO" ] && PP=4 TP=$PP || TP=8\n',
    "&& { } || { }, test true": 'TP=1\n[ -z "$FOO" ] && { TP=4; } || { TP=8; }\n',
    "&& { } || { } on lines, test true": 'TP=1\n[ -z "$FOO" ] && {\n  TP=4\n} || {\n  TP=8\n}\n',
    "&& { } || { }, test false": 'TP=1\n[ -n "$FOO" ] && { TP=4; } || { TP=8; }\n',
    "group ending false": 'TP=1\n[ -z "$FOO" ] && { TP=4; false; } || TP=8\n',
    "exit in a subshell after a test": 'TP=1\n( [ -z "$FOO" ] && exit 0 )\nTP=4\n',
}


@pytest.mark.parametrize("body", GROUPS.values(), ids=GROUPS.keys())
def test_a_brace_group_after_and_or_runs_as_bash_runs_it(body: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`mkdir -p $LOGS || {` newline `exit 1` newline `}` (Megatron-LM examples/megatron_fsdp): the group runs only
    when the list's status says; its exit was taken as surely running (the script 'stops at line ...'). An exit in a
    subshell ends only that. Assignments alone exit 0, so `[ -z "$X" ] && TP=4 || TP=8` keeps 4 (it gave 8), and
    `PP=2 TP=$PP` assigns both in turn (it assigned neither: TP kept its old value). A group's status is its last
    command's, or the list's before it when it does not run: `[ -z "$X" ] && { TP=4; } || { TP=8; }` gave 8."""
    from tests.launch.test_shell_conditions_bash import BASH, _both_tp

    if BASH is None:
        pytest.skip("needs bash")
    ours, bash = _both_tp(body, tmp_path, monkeypatch)
    assert ours == bash

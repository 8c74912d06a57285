"""Launch forms left open by H120/R30 (session H127), each checked against what the real tool does: a variable two
undecided `if` branches set apart, `ssh HOST "cd /w && torchrun ..."` (the remote shell's -c string) and
`#SBATCH --nodes=0` (Slurm refuses the job). Each test fails without its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch
from tests.launch.cli_run import llmperf

BRANCHES = """#!/bin/bash
NP=2
if nvidia-smi -L | grep -q H100; then
    NP={first}
else
    NP={second}
fi
torchrun --nproc_per_node $NP pretrain_gpt.py --num-layers 2
"""


def _write(tmp_path: Path, text: str, name: str = "train.sh") -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


def test_branches_that_set_a_variable_apart_leave_it_undecided(tmp_path: Path) -> None:
    """bash runs one branch; llmperf read both and kept the `else` one (NP=4) as if bash always took it."""
    script = _write(tmp_path, BRANCHES.format(first=8, second=4))
    with pytest.raises(UsageError) as err:
        parse_launch(["bash", script], {})
    message = str(err.value)
    assert "$NP at line 4 (NP='8') or line 6 (NP='4')" in message, message
    assert "branches of an `if` llmperf cannot decide" in message


def test_branches_that_agree_give_their_value(tmp_path: Path) -> None:
    script = _write(tmp_path, BRANCHES.format(first=8, second=8))
    assert parse_launch(["bash", script], {}).nproc_per_node == 8


def test_a_branch_one_arm_sets_is_that_or_as_before(tmp_path: Path) -> None:
    """Only one branch sets it: bash leaves it 8, or 2 where the test fails (H177; read as the branch's 8 before)."""
    script = _write(tmp_path, "#!/bin/bash\nNP=2\nif [ -e /dev/nvidia0 ]; then\n  NP=8\nfi\n"
                              "torchrun --nproc_per_node $NP pretrain_gpt.py\n")
    with pytest.raises(UsageError, match=r"line 4 \(NP='8'\) or as before that `if` .*\(NP='2'\)"):
        parse_launch(["bash", script], {})


def test_elif_chains_and_one_line_forms(tmp_path: Path) -> None:
    text = ("#!/bin/bash\nif [ \"$(hostname)\" = a ]; then NP=8; elif [ \"$(hostname)\" = b ]; then NP=4; else NP=8; fi\n"
            "torchrun --nproc_per_node $NP pretrain_gpt.py\n")
    with pytest.raises(UsageError, match=r"line 2 \(NP='8'\) or line 2 \(NP='4'\) or line 2 \(NP='8'\)"):
        parse_launch(["bash", _write(tmp_path, text)], {})


def test_a_decided_if_inside_an_undecided_one(tmp_path: Path) -> None:
    """The branches of the outer `if` (undecided) set NP apart through an inner `if` bash decides."""
    text = ("#!/bin/bash\nG=8\nif ping -c1 head; then\n  if [ $G = 8 ]; then NP=8; fi\nelse\n  NP=1\nfi\n"
            "torchrun --nproc_per_node $NP pretrain_gpt.py\n")
    with pytest.raises(UsageError, match=r"line 4 \(NP='8'\) or line 6 \(NP='1'\)"):
        parse_launch(["bash", _write(tmp_path, text)], {})


def test_a_branch_setting_from_a_command_is_undecided_too(tmp_path: Path) -> None:
    """`then NP=$(nproc)` then `else NP=8`: the else's plain value used to win over the unknown one."""
    text = ("#!/bin/bash\nif ping -c1 head; then\n  NP=$(nvidia-smi -L | wc -l)\nelse\n  NP=8\nfi\n"
            "torchrun --nproc_per_node $NP pretrain_gpt.py\n")
    with pytest.raises(UsageError, match=r"line 3 \(to what only running it gives\) or line 5 \(NP='8'\)"):
        parse_launch(["bash", _write(tmp_path, text)], {})


def test_the_cli_says_so_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = _write(tmp_path, BRANCHES.format(first=8, second=4))
    outcome = llmperf(capsys, "predict", "--cluster", "dgx-h100", "--", "bash", script)
    assert outcome.code == 2 and "Traceback" not in outcome.err, outcome.err
    assert "line 4 (NP='8') or line 6 (NP='4')" in outcome.err


PRECISION = """#!/bin/bash
if nvidia-smi | grep -q A100; then
    PREC={first}
else
    PREC={second}
fi
torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 {use} --lr 1e-4
"""


MODEL = ("--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
         "--micro-batch-size 2 --global-batch-size 64 --train-iters 10 --mock-data --tokenizer-type NullTokenizer "
         "--vocab-size 32000")


@pytest.mark.parametrize("use", ["$PREC", '"${PREC}"'])
def test_flags_branches_set_apart_price_the_first_branch(tmp_path: Path, use: str) -> None:
    """`PREC=--bf16` / `PREC=--fp16`: left unexpanded, neither flag reached Megatron (priced fp32, which neither
    branch runs); now the branch read first, as megatron_undecided_precision prices `ARGS+=(--bf16)` / `(--fp16)`."""
    script = _write(tmp_path, PRECISION.format(first="--bf16", second="--fp16", use=use))
    job = parse_launch(["bash", script], {})
    assert job.script_args == ("--num-layers", "2", "--bf16", "--lr", "1e-4"), job.script_args
    assert any("Priced with the branch read first (line 3: --bf16)" in w and "line 5 (PREC='--fp16')" in w
               for w in job.warnings), job.warnings


def test_a_branch_value_with_an_option_value_stays_unexpanded(tmp_path: Path) -> None:
    """`--tp 2` / `--tp 4` is a value an option needs: no branch is chosen for it (the refusal / warning stands)."""
    script = _write(tmp_path, PRECISION.format(first='"--tp 2"', second='"--tp 4"', use="$PREC"))
    job = parse_launch(["bash", script], {})
    assert "$PREC" in job.script_args and any("unexpanded" in w for w in job.warnings), job


def test_the_cli_prices_a_precision_variable_as_the_array_form(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    text = PRECISION.replace("--num-layers 2", MODEL)
    scalar = _write(tmp_path, text.format(first="--bf16", second="--fp16", use="$PREC"))
    array = _write(tmp_path, text.format(first="(--bf16)", second="(--fp16)", use='"${ARGS[@]}"').replace(
        "PREC=", "ARGS+="), "array.sh")
    outcomes = [llmperf(capsys, "predict", "--cluster", "dgx-h100", "--", "bash", path) for path in (scalar, array)]
    assert [o.code for o in outcomes] == [0, 0], [o.err for o in outcomes]
    lines = [next(line for line in o.out.splitlines() if "TP1 PP1" in line) for o in outcomes]
    assert lines[0] == lines[1] and "bf16" in lines[0], lines


@pytest.mark.parametrize("argv, world, script_args", [
    (["ssh", "node1", "cd /w && torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2"], 8,
     ("--num-layers", "2")),
    (["ssh", "-p", "2222", "-o", "BatchMode=yes", "node1", "cd", "/w", "&&", "torchrun", "--nproc_per_node", "4",
      "pretrain_gpt.py"], 4, ()),
    (["ssh", "node1", "torchrun --nproc_per_node 2 pretrain_gpt.py --name 'a b'"], 2, ("--name", "a b")),
    (["ssh", "node1", "torchrun", "--nproc_per_node", "2", "pretrain_gpt.py", "--name", "a b"], 2,
     ("--name", "a", "b")),
    (["nohup", "ssh", "-q", "node1", "export NCCL_DEBUG=INFO; torchrun --nproc_per_node 8 pretrain_gpt.py"], 8, ()),
    (["ssh", "node1", "-p", "22", "--", "torchrun", "--nproc_per_node", "2", "pretrain_gpt.py"], 2, ()),  # ssh.c
    (["ssh", "--", "node1", "torchrun --nproc_per_node 4 pretrain_gpt.py -x"], 4, ("-x",)),  # `goto again`, `--`
])
def test_ssh_runs_its_joined_words_in_the_remote_shell(argv: list[str], world: int,
                                                       script_args: tuple[str, ...]) -> None:
    """ssh joins its command words with blanks and the host's shell runs the string as -c (OpenSSH ssh.c, session.c
    do_child): a command list runs, and a locally quoted `"a b"` reaches the remote shell as two words."""
    job = parse_launch(argv, {})
    assert job.world_size == world and job.script_args == script_args


def test_ssh_launch_in_a_script(tmp_path: Path) -> None:
    script = _write(tmp_path, '#!/bin/bash\nNODE=gpu01\nssh $NODE "cd /work/megatron && torchrun --nnodes 1 '
                              '--nproc_per_node 8 pretrain_gpt.py --num-layers 2"\n')
    job = parse_launch(["bash", script], {})
    assert job.world_size == 8 and job.script_args == ("--num-layers", "2")


@pytest.mark.parametrize("where", ["#SBATCH --nodes=0\n", "#SBATCH -N 0\n"])
def test_zero_nodes_is_bad_input_in_the_script(where: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """sbatch accepts -N 0 and slurmctld refuses the job ('Node count specification invalid'); llmperf blamed the
    SLURM_NNODES=0 it derived, as if the environment had it."""
    script = _write(tmp_path, f"#!/bin/bash\n{where}#SBATCH --gpus-per-node=8\nsrun torchrun --nproc_per_node 8 "
                              "pretrain_gpt.py\n", "job.sbatch")
    outcome = llmperf(capsys, "predict", "--cluster", "dgx-h100", "--", "sbatch", script)
    assert outcome.code == 2 and "Traceback" not in outcome.err
    assert "Node count specification invalid" in outcome.err and "environment" not in outcome.err, outcome.err
    assert f"{script} line 2 (`{where.strip()}`)" in outcome.err, outcome.err


def test_zero_nodes_on_the_sbatch_command_line(tmp_path: Path) -> None:
    script = _write(tmp_path, "#!/bin/bash\n#SBATCH --nodes=2\nsrun torchrun --nproc_per_node 8 pretrain_gpt.py\n",
                    "job.sbatch")
    with pytest.raises(UsageError, match=r"--nodes=0 \(sbatch's command line\) asks for no node"):
        parse_launch(["sbatch", "--nodes=0", script], {})


def test_ssh_without_a_command_is_no_launch() -> None:
    with pytest.raises(UsageError, match="gives ssh no command: it opens a login shell"):
        parse_launch(["ssh", "-p", "22", "gpu01"], {})

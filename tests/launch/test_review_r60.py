"""Review R60 of H173's shell reading: each script is run by the real bash (the stub launchers of
test_scripts_as_the_shell_runs_them) and llmperf's reading must give the same job, or name the variable it cannot know.

- A line that begins with a `( )` group (or a piped `{ }` one) and goes on after it: only the group runs in a
  subshell (bash manual 3.2.5.3); `( cd run ) && NP=6` assigned nothing, and `f() { ( return ); NP=4; }` ended f.
- `[[ V =~ "a.c" ]]`: a quoted part of the pattern matches literally (3.2.5.2); it was read as a regular expression.
- An arithmetic expression llmperf does not apply still assigns in bash (`let X=NP++`, `X=$(( NP++ ))`): the names
  it assigns are unknown, where their stale values were priced.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.shell_conditions import decide_test
from tests.launch.test_scripts_as_the_shell_runs_them import ARGS, _compare

T = "torchrun --nproc_per_node $NP pretrain_gpt.py --num-layers 2"
GROUPS_THEN_MORE = {
    "group_then_a_command": "NP=2\n(NP=4); NP=6\n" + T + "\n",
    "group_and_an_assignment": "NP=2\n( cd /tmp ) && NP=6\n( false ) || NN=2\n" + T + " --nnodes ${NN:-1}\n",
    "piped_braces_then_a_command": "NP=2\n{ NP=4; } | cat; NP=6\n" + T + "\n",
    "group_in_the_background_then": "NP=2\n(NP=4) & NP=6\nwait\n" + T + "\n",
    "return_in_a_group_of_a_one_line_function": "NP=2\nf() { ( return ); NP=4; }\nf\n" + T + "\n",
    "return_in_a_group_of_a_sourced_file": "NP=2\necho '( return ); NP=4' > env.sh\nsource ./env.sh\n" + T + "\n",
    "group_with_a_substitution_after": "NP=2\n(NP=4) | grep \"$(echo a; echo b)\"; NP=6\n" + T + "\n",
    "group_or_a_group_that_exits": "NP=2\n( cd /tmp ) || { echo failed; exit 1; }\nNP=6\n" + T + "\n",
}
QUOTED_REGEX = {
    "quoted_literal_without_operators": "NP=2\nV=gpt-7b\n[[ $V =~ \"7b\" ]] && NP=4\n[[ $V =~ '13b' ]] && NN=2\n"
                                        + T + " --nnodes ${NN:-1}\n",
}

NOT_RUN = {  # an arithmetic side effect only where its command runs
    "arithmetic_in_a_branch_that_does_not_run": "NP=2\nif false; then X=$(( NP++ )); fi\n[ -n \"\" ] && : $(( NP++ ))\n"
                                                + T + "\n",
    "arithmetic_in_a_pipe": "NP=2\necho $(( NP++ )) | cat\n( X=$(( NP += 2 )) )\n" + T + "\n",
}
SCRIPTS = {**GROUPS_THEN_MORE, **QUOTED_REGEX, **NOT_RUN}


@pytest.mark.parametrize("name", SCRIPTS)
def test_scripts_read_as_bash_runs_them(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, SCRIPTS[name], tmp_path, monkeypatch)


def _plain(word: str) -> str:
    return word.strip("'\"")


@pytest.mark.parametrize("pattern,quoted,expected", [("a.c", True, None), ("a.c", False, True), ("b", True, True),
                                                     ("x", True, False), ("^'a'.c$", True, None)])
def test_a_quoted_regex_pattern_is_literal(pattern: str, quoted: bool, expected: bool | None) -> None:
    """`[[ abc =~ "a.c" ]]` is false in bash (the quoted `.` is a dot): left undecided, never decided as a regular
    expression; a quoted pattern without operators is the same either way and decided."""
    words = ["[[", "abc", "=~", pattern, "]]"]
    assert decide_test(words, _plain, None, [False, False, False, quoted, False]) is expected


@pytest.mark.parametrize("line", ["let X=NP++", "(( X = NP++ + 1 ))", "(( X = (NP = 4) ))", "X=$(( NP++ ))",
                                  "echo $(( NP += 2 ))", "export X=$(( NP = 6 ))"])
def test_what_an_unapplied_arithmetic_assigns_is_unknown(line: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """bash increments / assigns NP there; the stale NP=8 was priced."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nNP=8\n{line}\n"
                                       "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $NP\n")
    assert parse_launch(["bash", "train.sh"], {}).script_args[-1] == "$NP"


def test_an_applied_arithmetic_keeps_its_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text("#!/bin/bash\nNP=8\n(( NP /= 2 ))\nX=$(( NP * 2 ))\n"
                                       "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $NP "
                                       "--save $X\n")
    assert parse_launch(["bash", "train.sh"], {}).script_args[-3:] == ("4", "--save", "8")


@pytest.mark.parametrize("nproc,expected", [("$SLURM_GPUS_PER_NODE", None), ("${SLURM_GPUS_PER_NODE##*:}", (2, 4, 8))])
def test_a_typed_gpus_per_node_reaches_torchrun_as_written(nproc: str, expected: tuple[int, int, int] | None,
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sbatch sets SLURM_GPUS_PER_NODE to --gpus-per-node as written (slurm src/common/env.c set_env_from_opts), so
    `h100:4` reaches torchrun, which stops ('Unsupported nproc_per_node value': torch/distributed/run.py
    determine_local_world_size); it was priced as 4 per node."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --gpus-per-node=h100:4\n"
                                     f"srun torchrun --nnodes $SLURM_NNODES --nproc_per_node {nproc} pretrain_gpt.py\n")
    if expected is None:
        with pytest.raises(UsageError, match="Unsupported nproc_per_node value: h100:4.*SLURM_GPUS_PER_NODE"):
            parse_launch(["sbatch", "job.sh"], {})
        return
    job = parse_launch(["sbatch", "job.sh"], {})
    assert (job.nnodes, job.nproc_per_node, job.world_size) == expected


def test_nested_while_loops_spend_the_scripts_pass_budget_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two nested while loops of 200 passes: an inner loop given up on restored the passes it had read, so every outer
    pass read it again (7,146 loop tests, 4.4 s); its passes now stay spent, a while pass counting WHILE_PASS_COST."""
    from llmperf_hook.launch import batch_script
    from llmperf_hook.launch.shell_blocks import WHILE_PASS_COST
    from llmperf_hook.launch.shell_loops import MAX_TOTAL_PASSES
    tests: list[str] = []
    loop_test = batch_script._Reading.loop_test
    monkeypatch.setattr(batch_script._Reading, "loop_test",
                        lambda self, text: tests.append(text) or loop_test(self, text))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text("#!/bin/bash\nI=0\nwhile [ $I -lt 200 ]; do\n  J=0\n  while [ $J -lt 200 ]; do\n"
                                       "    J=$((J+1))\n  done\n  I=$((I+1))\ndone\nNP=4\n" + T + " --save $I\n")
    job = parse_launch(["bash", "train.sh"], {})
    assert len(tests) <= MAX_TOTAL_PASSES // WHILE_PASS_COST + 400, len(tests)
    assert job.nproc_per_node == 4 and job.script_args[-1] in ("200", "$I")  # past the budget: unknown, never wrong


EXIT_ARMS = ("NP=2\nwhile [[ $# -gt 0 ]]; do\n  case $1 in\n    --np) NP=$2; shift 2;;\n    -h|--help) echo usage; exit 0;;\n"
             "    *) echo \"Unknown option $1\"; exit 1;;\n  esac\ndone\n" + T + "\n")


@pytest.mark.parametrize("args", [["--np", "4"], [], ["--np", "4", "--bogus"], ["-h"]])
def test_an_argument_loop_with_exit_arms_is_read_pass_by_pass(args: list[str], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Every argument loop of Megatron-LM's examples/ (gptoss/02_train.sh, multimodal/*, inference/*) has an arm that
    exits (help, unknown option): the loop was read once as a body that may run (`--np 4` left $NP unknown);
    now an exit that runs in a pass is refused as bash ends there, and one that does not run changes nothing."""
    monkeypatch.setitem(ARGS, "exit_arms", args)
    _compare("bash", "exit_arms", EXIT_ARMS, tmp_path, monkeypatch)

"""Regressions from the robustness campaign (issue h17): launch forms real sbatch scripts use."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.slurm import tasks_per_node

SCRIPT = ["pretrain_gpt.py", "--num-layers", "2"]


def _size(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, int, int]:
    job = parse_launch(argv, env or {})
    return job.nnodes, job.nproc_per_node, job.world_size


@pytest.mark.parametrize(("text", "counts"), [("8", [8]), ("8(x2)", [8, 8]), ("8(x2),4", [8, 8, 4]), ("2,3(x2)", [2, 3, 3])])
def test_slurm_tasks_per_node_format(text: str, counts: list[int]) -> None:
    assert tasks_per_node(text) == counts


def test_srun_sized_by_slurm_tasks_per_node() -> None:
    # Slurm always exports SLURM_TASKS_PER_NODE (SLURM_NTASKS_PER_NODE only with --ntasks-per-node): it was ignored,
    # and `srun python pretrain_gpt.py` in a 2-node allocation was sized as one process.
    env = {"SLURM_NNODES": "2", "SLURM_TASKS_PER_NODE": "8(x2)", "SLURM_JOB_ID": "7"}
    assert _size(["srun", "python", *SCRIPT], env) == (2, 8, 16)
    assert _size(["python", *SCRIPT], env) == (2, 8, 16)
    uneven = parse_launch(["srun", "python", *SCRIPT], {"SLURM_TASKS_PER_NODE": "8(x2),4"})
    assert (uneven.nnodes, uneven.world_size) == (3, 20) and any("uneven" in w for w in uneven.warnings)


def test_srun_sh_c_command_is_parsed_inside() -> None:
    # Megatron-LM examples/academic_paper_scripts/sc21/SRUN.sh: srun ... sh -c "${CMD}".
    cmd = "python -u pretrain_gpt.py --num-layers 2 --tensor-model-parallel-size 2"
    env = {"SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "8"}
    job = parse_launch(["srun", "-l", "--container-image", "img", "sh", "-c", cmd], env)
    assert (job.world_size, job.script) == (16, "pretrain_gpt.py")
    assert "--tensor-model-parallel-size" in job.script_args
    inner = parse_launch(["bash", "-c", "torchrun --nproc-per-node 4 " + " ".join(SCRIPT)], {})
    assert (inner.launcher, inner.world_size) == ("torchrun", 4)


def test_srun_python_options_are_not_the_script() -> None:
    job = parse_launch(["srun", "-N", "2", "--ntasks-per-node", "4", "python", "-u", "-X", "dev", *SCRIPT], {})
    assert job.script == "pretrain_gpt.py" and job.script_args[:2] == ("--num-layers", "2")


def test_env_variable_holding_several_flags_is_split() -> None:
    env = {"MEGATRON_PARAMS": "--num-layers 2 --tensor-model-parallel-size 4"}
    job = parse_launch(["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "${MEGATRON_PARAMS}"], env)
    assert job.script_args == ("--num-layers", "2", "--tensor-model-parallel-size", "4")


@pytest.mark.parametrize("argv", [["bash", "-c", ""], ["sh", "-c", "torchrun 'x"], ["srun", "-N", "2", "python"]])
def test_bad_shell_forms_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(UsageError):
        parse_launch(argv, {})


def test_shell_default_expansions() -> None:
    # Megatron's mixtral example: NNODES=${SLURM_NNODES:-"1"}; a pasted line keeps the reference.
    argv = ["torchrun", "--nnodes", '${SLURM_NNODES:-"1"}', "--nproc-per-node", "${GPUS:-8}", *SCRIPT]
    assert _size(argv) == (1, 8, 8)
    assert _size(argv, {"SLURM_NNODES": "4"}) == (4, 8, 32)
    assert _size(argv, {"GPUS": ""}) == (1, 8, 8)  # ':-' also replaces an empty value

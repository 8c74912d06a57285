"""sbatch without `-N/--nodes`: the node count Slurm gives the job and the SLURM_NNODES / SLURM_JOB_NUM_NODES its
script sees (launch/slurm_default_nodes.py; sbatch(1) -N, src/sbatch/opt.c _opt_verify)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.slurm_default_nodes import default_node_count, hostlist_count

TORCHRUN = "srun torchrun --nnodes $SLURM_NNODES --nproc_per_node 8 pretrain_gpt.py --num-layers 2\n"


@pytest.mark.parametrize("header,nnodes,warned", [
    ("#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=8\n", 1, False),  # nothing asks for more: one node
    ("#SBATCH --ntasks=2\n#SBATCH --ntasks-per-node=1\n", 2, False),  # ceil(2 / 1)
    ("#SBATCH -n 3\n#SBATCH --ntasks-per-node=2\n", 2, False),  # ceil(3 / 2): --ntasks-per-node is a maximum
    ("#SBATCH --gpus=32\n#SBATCH --gpus-per-node=8\n#SBATCH --ntasks-per-node=1\n", 4, False),
    ("#SBATCH -w gpu[01-03],gpu02,cpu7\n#SBATCH --ntasks-per-node=1\n", 4, False),  # distinct hosts
    ("#SBATCH --ntasks=2\n", 1, True),  # the cluster's CPUs per node decide
    ("#SBATCH --nodelist=./hosts.txt\n#SBATCH --ntasks-per-node=1\n", 1, True),  # a file sbatch reads
    ("#SBATCH -N 3\n#SBATCH --ntasks=16\n#SBATCH --ntasks-per-node=8\n#SBATCH -w n[1-2]\n", 3, False),  # -N wins
])
def test_the_job_sees_the_node_count_slurm_gives(header: str, nnodes: int, warned: bool, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text("#!/bin/bash\n" + header + "export NN=$SLURM_JOB_NUM_NODES\n" + TORCHRUN)
    job = parse_launch(["sbatch", "job.sh"], {})
    assert (job.nnodes, job.world_size) == (nnodes, nnodes * 8)
    assert any("no --nodes" in warning for warning in job.warnings) == warned


def test_tasks_over_nodes_give_the_srun_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """16 tasks at most 8 per node: 2 nodes, srun starts 8 on each (before, 8 on one node)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH --ntasks=16\n#SBATCH --ntasks-per-node=8\n"
                                     "#SBATCH --gpus-per-node=8\nsrun python pretrain_gpt.py --num-layers 2\n")
    job = parse_launch(["sbatch", "job.sh"], {})
    assert (job.nnodes, job.nproc_per_node, job.world_size) == (2, 8, 16)


@pytest.mark.parametrize("text,count", [("node1", 1), ("node[1-4]", 4), ("n[01-02,07],m1", 4), ("r[1-2]n[1-3]", 6),
                                        ("a,a,b", 2), ("/etc/hosts", None), ("n[x-2]", None)])
def test_hostlist_count(text: str, count: int | None) -> None:
    assert hostlist_count(text) == count


def test_no_options_at_all_is_one_node() -> None:
    assert default_node_count({})[:2] == (1, "the default")


@pytest.mark.parametrize("header,launch,expected", [
    ("#SBATCH -N 2\n#SBATCH --gpus-per-node=8\n#SBATCH --ntasks-per-node=1\n",
     "srun torchrun --nnodes $SLURM_JOB_NUM_NODES --nproc_per_node $SLURM_GPUS_PER_NODE pretrain_gpt.py", (2, 8, 16)),
    ("#SBATCH --nodes=2\n#SBATCH -G 16\n#SBATCH --ntasks-per-node=1\n",
     "srun torchrun --nnodes 2 --nproc_per_node $((SLURM_GPUS / SLURM_NNODES)) pretrain_gpt.py", (2, 8, 16)),
    ("#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=4\n",  # SLURM_NTASKS: nodes x --ntasks-per-node
     "torchrun --nnodes 1 --nproc_per_node $SLURM_NTASKS pretrain_gpt.py", (1, 8, 8)),
])
def test_the_gpu_and_task_variables_sbatch_sets(header: str, launch: str, expected: tuple[int, int, int],
                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sbatch(1) OUTPUT ENVIRONMENT VARIABLES: SLURM_GPUS_PER_NODE only with --gpus-per-node, SLURM_GPUS only with
    -G/--gpus, SLURM_NTASKS the -n value or, with a --ntasks-per-* option, the job's task count (they were unset, and
    a launch reading them was refused)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text("#!/bin/bash\n" + header + launch + " --num-layers 2\n")
    job = parse_launch(["sbatch", "job.sh"], {})
    assert (job.nnodes, job.nproc_per_node, job.world_size) == expected

"""H127's audit corpus: launch commands and batch scripts as users write them, each sized as the real tool sizes it
(torchrun's and deepspeed's argparse, Slurm's sbatch/srun, bash and dash), or refused with exit 2 naming what is
wrong. The cases marked FIXED gave a wrong size or a wrong message before this session's changes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch

S = "pretrain_gpt.py --num-layers 2"

SCRIPTS = {
    "gpus-per-node": ("sbatch", f"""
        #!/bin/bash
        #SBATCH --nodes=2
        #SBATCH --ntasks-per-node=1
        #SBATCH --gpus-per-node=8
        srun torchrun --nnodes $SLURM_NNODES --nproc_per_node 8 --rdzv_endpoint $MASTER_ADDR:29500 {S}
        """, (2, 8, 16)),
    "gres gpu:8 read back as SLURM_GPUS_ON_NODE": ("sbatch", f"""
        #!/bin/bash
        #SBATCH -N 2
        #SBATCH --gres=gpu:8
        srun torchrun --nnodes $SLURM_JOB_NUM_NODES --nproc_per_node $SLURM_GPUS_ON_NODE {S}
        """, (2, 8, 16)),
    "ntasks-per-node, srun python": ("sbatch", f"""
        #!/bin/bash
        #SBATCH --nodes=2 --ntasks-per-node=8 --gpus-per-node=8
        srun python {S}
        """, (2, 8, 16)),
    "gres with a type": ("sbatch", f"""
        #!/bin/bash
        #SBATCH --nodes=2 --ntasks-per-node=4 --gres=gpu:a100:4
        srun python {S}
        """, (2, 4, 8)),
    "srun's --ntasks-per-node over the allocation's GPUs": ("sbatch", f"""
        #!/bin/bash
        #SBATCH --nodes=4
        #SBATCH --gpus-per-node=4
        srun --ntasks-per-node=4 python {S}
        """, (4, 4, 16)),
    "FIXED: hetjob, srun --het-group=1 runs on the second component": ("sbatch", f"""
        #!/bin/bash
        #SBATCH --nodes=1 --ntasks-per-node=1
        #SBATCH hetjob
        #SBATCH --nodes=2 --ntasks-per-node=8 --gpus-per-node=8
        srun --het-group=1 python {S}
        """, (2, 8, 16)),
    "hetjob, srun without --het-group runs on the first component": ("sbatch", f"""
        #!/bin/bash
        #SBATCH --nodes=1 --ntasks-per-node=4
        #SBATCH hetjob
        #SBATCH --nodes=2 --ntasks-per-node=8
        srun python {S}
        """, (1, 4, 4)),
    "exec, line continuations, set -euo pipefail": ("bash", f"""
        #!/bin/bash
        set -euo pipefail
        GPUS=4
        exec torchrun \\
          --nproc_per_node $GPUS \\
          {S}
        """, (1, 4, 4)),
    "a sourced file that is not there, without set -e (bash goes on)": ("bash", f"""
        #!/bin/bash
        source /nonexistent/env.sh
        torchrun --nproc_per_node 2 {S}
        """, (1, 2, 2)),
    "a sourced file that is not there, with set -e but `|| true`": ("bash", f"""
        #!/bin/bash
        set -e
        source /nonexistent/env.sh || true
        torchrun --nproc_per_node 2 {S}
        """, (1, 2, 2)),
    "env assignments and bash -c in a script": ("bash", f"""
        #!/bin/bash
        export NP=4
        NCCL_DEBUG=INFO bash -c 'torchrun --nproc_per_node $NP {S}'
        """, (1, 4, 4)),
    "FIXED: ssh HOST with a command list": ("bash", f"""
        #!/bin/bash
        ssh gpu01 "cd /work && torchrun --nproc_per_node 8 {S}"
        """, (1, 8, 8)),
}

COMMANDS = {
    "srun --ntasks 16 --ntasks-per-node 8": (["srun", "--ntasks", "16", "--ntasks-per-node", "8", "python", *S.split()],
                                              {}, (2, 8, 16)),
    "srun -n 4": (["srun", "-n", "4", "python", *S.split()], {}, (1, 4, 4)),
    "SLURM_* environment only, srun": (["srun", "python", *S.split()],
                                       {"SLURM_NTASKS": "16", "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2",
                                        "SLURM_NTASKS_PER_NODE": "8", "SLURM_JOB_ID": "1"}, (2, 8, 16)),
    "SLURM_* environment only, python": (["python", *S.split()],
                                         {"SLURM_NTASKS": "16", "SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "8",
                                          "SLURM_PROCID": "0"}, (2, 8, 16)),
    "torchrun --standalone": (["torchrun", "--standalone", "--nproc_per_node", "8", *S.split()], {}, (1, 8, 8)),
    "torchrun --nnodes 2:4 (the most)": (["torchrun", "--nnodes", "2:4", "--nproc_per_node", "8", "--rdzv_backend",
                                          "c10d", "--rdzv_endpoint", "h:29400", *S.split()], {}, (4, 8, 32)),
    "torchrun --nproc-per-node gpu": (["torchrun", "--nproc-per-node", "gpu", *S.split()], {}, (1, 8, 8)),
    "torchrun --nproc-per-node auto": (["torchrun", "--nproc-per-node", "auto", *S.split()], {}, (1, 8, 8)),
    "deepspeed --include localhost:0,1": (["deepspeed", "--include", "localhost:0,1", *S.split()], {}, (1, 2, 2)),
    "python -m deepspeed.launcher.runner": (["python", "-m", "deepspeed.launcher.runner", "--num_gpus", "2",
                                             *S.split()], {}, (1, 2, 2)),
    "mpirun -np 16 -npernode 8": (["mpirun", "-np", "16", "-npernode", "8", "python", *S.split()], {}, (2, 8, 16)),
    "mpirun -np 8 -H n1:4,n2:4": (["mpirun", "-np", "8", "-H", "n1:4,n2:4", "python", *S.split()], {}, (2, 4, 8)),
    "env assignments before the command": (["NCCL_DEBUG=INFO", "CUDA_VISIBLE_DEVICES=0,1,2,3", "torchrun",
                                            "--nproc_per_node", "4", *S.split()], {}, (1, 4, 4)),
    "bash -c with a command list": (["bash", "-c", f"cd /tmp && NP=2; torchrun --nproc_per_node $NP {S}"], {},
                                    (1, 2, 2)),
    "FIXED: ssh -p PORT HOST words": (["ssh", "-p", "2222", "gpu01", "cd", "/w", "&&", "torchrun",
                                       "--nproc_per_node", "4", *S.split()], {}, (1, 4, 4)),
}


def _size(argv: list[str], env: dict[str, str]) -> tuple[int, int, int]:
    job = parse_launch(argv, env, cluster_gpus_per_node=8)
    return job.nnodes, job.nproc_per_node, job.world_size


@pytest.mark.parametrize("launcher, text, size", SCRIPTS.values(), ids=SCRIPTS.keys())
def test_scripts_resolve_as_the_tools_run_them(launcher: str, text: str, size: tuple[int, int, int],
                                               tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(textwrap.dedent(text).lstrip())
    assert _size([launcher, str(script)], {}) == size


@pytest.mark.parametrize("argv, env, size", COMMANDS.values(), ids=COMMANDS.keys())
def test_commands_resolve_as_the_tools_run_them(argv: list[str], env: dict[str, str],
                                                size: tuple[int, int, int]) -> None:
    assert _size(argv, env) == size


def test_hostfile_slots_and_filters(tmp_path: Path) -> None:
    """deepspeed's runner: the hostfile's slots, then --num_nodes (the first N), --num_gpus (the first N slots of
    each), --include / --exclude (runner.py parse_resource_filter)."""
    hosts = tmp_path / "hosts"
    hosts.write_text("n1 slots=8\nn2 slots=8\n")
    base = ["deepspeed", "--hostfile", str(hosts)]
    assert _size([*base, *S.split()], {}) == (2, 8, 16)
    assert _size([*base, "--num_nodes", "1", *S.split()], {}) == (1, 8, 8)
    assert _size([*base, "--num_gpus", "2", *S.split()], {}) == (2, 2, 4)
    assert _size([*base, "--include", "n1:0,1@n2:0,1", *S.split()], {}) == (2, 2, 4)
    assert _size([*base, "--exclude", "n2", *S.split()], {}) == (1, 8, 8)


REFUSED = {
    "torchrun --nnodes 0": (["torchrun", "--nnodes", "0", "--nproc_per_node", "8", *S.split()],
                            "--nnodes 0 from launcher --nnodes must be at least 1"),
    "torchrun --nnodes 3:2": (["torchrun", "--nnodes", "3:2", "--nproc_per_node", "8", *S.split()],
                              "is not a valid MIN:MAX range"),
    "FIXED: torchrun --nproc-per-node cpu (one per core, not per GPU)":
        (["torchrun", "--nproc-per-node", "cpu", *S.split()], "one process per CPU core of the node"),
    "deepspeed --num_nodes 2 without a hostfile": (["deepspeed", "--num_nodes", "2", "--num_gpus", "8", *S.split()],
                                                   "needs a hostfile"),
    "mpirun -np 0": (["mpirun", "-np", "0", "python", *S.split()], "must be at least 1"),
    "srun -N 0": (["srun", "-N", "0", "python", *S.split()], "must be at least 1"),
    "deepspeed --include localhost:1 --exclude localhost:0 (runner.py parse_resource_filter)":
        (["deepspeed", "--include", "localhost:1", "--exclude", "localhost:0", *S.split()], "mutually exclusive"),
    "srun --het-group=-1 (src/srun/opt.c: each item >= 0)": (["srun", "--het-group=-1", "python", *S.split()],
                                                             "Invalid --het-group value: -1"),
}


@pytest.mark.parametrize("argv, said", REFUSED.values(), ids=REFUSED.keys())
def test_bad_launches_are_exit_2(argv: list[str], said: str) -> None:
    with pytest.raises(UsageError, match=said) as err:
        _size(argv, {})
    assert err.value.exit_code == 2


REFUSED_SCRIPTS = {
    "FIXED: srun --het-group=2 of a job with two components": ("sbatch", """
        #!/bin/bash
        #SBATCH --nodes=1
        #SBATCH hetjob
        #SBATCH --nodes=2
        srun --het-group=2 python pretrain_gpt.py
        """, "has components 0 to 1"),
    "FIXED: srun --het-group=0,1 (one step over two components)": ("sbatch", """
        #!/bin/bash
        #SBATCH --nodes=1
        #SBATCH hetjob
        #SBATCH --nodes=2
        srun --het-group=0,1 python pretrain_gpt.py
        """, "over several components"),
}


@pytest.mark.parametrize("launcher, text, said", REFUSED_SCRIPTS.values(), ids=REFUSED_SCRIPTS.keys())
def test_bad_scripts_are_exit_2_naming_the_line(launcher: str, text: str, said: str, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(textwrap.dedent(text).lstrip())
    with pytest.raises(UsageError, match=said) as err:
        _size([launcher, str(script)], {})
    assert err.value.exit_code == 2


def test_a_launcher_per_task_warns(tmp_path: Path) -> None:
    """FIXED: `#SBATCH --ntasks-per-node=8` then `srun torchrun --nproc_per_node 8`: srun starts 8 torchrun agents per
    node (64 processes on 8 GPUs), priced silently as one."""
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=8\n#SBATCH --gpus-per-node=8\n"
                      f"srun torchrun --nnodes 2 --nproc_per_node 8 {S}\n")
    job = parse_launch(["sbatch", str(script)], {})
    assert any("srun starts 8 tasks on each node" in w and "8 launchers per node" in w for w in job.warnings)
    one = tmp_path / "one.sh"
    one.write_text(script.read_text().replace("--ntasks-per-node=8", "--ntasks-per-node=1"))
    assert not any("launchers per node" in w for w in parse_launch(["sbatch", str(one)], {}).warnings)


def test_a_job_array_warns_that_each_index_is_a_job(tmp_path: Path) -> None:
    """FIXED: `#SBATCH --array=0-3` submits four jobs of this allocation; priced one, and said so."""
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --array=0-3\n#SBATCH --nodes=1 --gpus-per-node=8\n"
                      f"srun torchrun --nproc_per_node 8 {S} --seed $SLURM_ARRAY_TASK_ID\n")
    job = parse_launch(["sbatch", str(script)], {})
    assert job.world_size == 8 and any("--array=0-3" in w and "job array" in w for w in job.warnings)


MISSING_SOURCES = {
    "set -e, then the missing file": ("bash", "set -euo pipefail\nsource /nonexistent/env.sh\n", "line 3",
                                      "bash (`set -e` is on) stops the script there"),
    "set -e, a test that holds, then the missing file": ("bash", "set -e\nM=full; [ $M = full ] && . /nonexistent/env.sh\n",
                                                         "line 3", "bash (`set -e` is on) stops"),
    "set -e, but `|| true`": ("bash", "set -e\nsource /nonexistent/env.sh || true\n", "line 3", None),
    "no set -e": ("bash", "source /nonexistent/env.sh\n", "line 2", None),
    "dash, whatever follows": ("dash", ". /nonexistent/env.sh || true\n", "line 2", "dash stops the script there"),
}


@pytest.mark.parametrize("shell, body, where, stops", MISSING_SOURCES.values(), ids=MISSING_SOURCES.keys())
def test_a_sourced_file_that_is_not_here_is_read_on_with_a_warning(shell: str, body: str, where: str,
                                                                   stops: str | None, tmp_path: Path) -> None:
    """FIXED (silent before): most such files are the cluster's own setup (bigscience's `source
    $six_ALL_CCFRWORK/start-prod` under set -e), there where the job runs; the launch is read, and a warning names the
    line and says whether bash (set -e, checked: bash 5 exits, `|| true` keeps it) or dash would stop there."""
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/{shell}\n{body}torchrun --nproc_per_node 2 {S}\n")
    job = parse_launch([shell, str(script)], {})
    assert job.world_size == 2
    warning = next(w for w in job.warnings if "/nonexistent/env.sh, which is not here" in w)
    assert warning.startswith(where) and ((stops in warning) if stops else "stops" not in warning), warning


def test_deepspeed_exclude_on_the_local_machine_uses_the_cluster_s_gpus() -> None:
    """FIXED: `deepspeed --exclude localhost:0,1 train.py` without a hostfile: runner.py's pool is localhost's slots 0
    .. device_count() - 1 less the excluded ones; --cluster says the node has 8 (it asked for the count)."""
    job = parse_launch(["deepspeed", "--exclude", "localhost:0,1", *S.split()], {}, cluster_gpus_per_node=8)
    assert job.nproc_per_node == 6 and "--exclude localhost:0,1" in str(job.sources["nproc_per_node"])
    for exclude, said in (("localhost", "leaves none of the node's 8 GPUs"), ("localhost:9", "slot 9"),
                          ("node7:0", "host 'node7'")):
        with pytest.raises(UsageError, match=said):
            parse_launch(["deepspeed", "--exclude", exclude, *S.split()], {}, cluster_gpus_per_node=8)
    with pytest.raises(UsageError, match="give the number left"):  # no --cluster: the count is the machine's
        parse_launch(["deepspeed", "--exclude", "localhost:0", *S.split()], {})

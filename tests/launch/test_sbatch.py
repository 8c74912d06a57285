"""`sbatch [options] job.sh`: the script's launch line in the allocation its #SBATCH lines and options ask for
(sbatch.html: command-line options override #SBATCH directives, which end at the first command)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch

GPT = ("--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
       "--vocab-size 50257 --micro-batch-size 2 --global-batch-size 64 --bf16")
SCRIPT = f"""#!/bin/bash
#SBATCH --job-name=gpt
#SBATCH -N 4
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:h100:8   # eight per node
set -euo pipefail
export GPUS_PER_NODE=8
MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)
#SBATCH --nodes=64
GPT_ARGS="{GPT}"
srun torchrun --nnodes $SLURM_NNODES --nproc-per-node $GPUS_PER_NODE \\
   --rdzv-endpoint $MASTER_ADDR:29500 pretrain_gpt.py --tensor-model-parallel-size 2 $GPT_ARGS
"""


def _write(tmp_path: Path, text: str, name: str = "job.sh") -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


def test_header_sizes_the_launch_line_and_the_command_line_wins(tmp_path: Path) -> None:
    path = _write(tmp_path, SCRIPT)
    job = parse_launch(["sbatch", path], {})
    # #SBATCH after the first command (--nodes=64) is not a directive; $GPT_ARGS splits into flags.
    assert (job.launcher, job.nnodes, job.nproc_per_node, job.world_size) == ("torchrun", 4, 8, 32)
    assert job.script == "pretrain_gpt.py" and "--global-batch-size" in job.script_args
    assert parse_launch(["sbatch", "-N", "2", "--parsable", path], {}).world_size == 16


def test_srun_tasks_take_the_allocation(tmp_path: Path) -> None:
    path = _write(tmp_path, f"#!/bin/bash\n#SBATCH --nodes 2\n#SBATCH --ntasks-per-node 8\n#SBATCH --gpus-per-node h100:8\n"
                            f"srun python pretrain_gpt.py {GPT}\n")
    job = parse_launch(["sbatch", path], {})
    assert (job.launcher, job.nnodes, job.nproc_per_node) == ("srun", 2, 8)
    wrapped = parse_launch(["sbatch", "-N", "2", "--ntasks-per-node", "4", "--wrap", f"srun python pretrain_gpt.py {GPT}"], {})
    assert wrapped.world_size == 8


@pytest.mark.parametrize("text, fragment", [
    ("#!/bin/bash\necho hello\n", "no launch line"),
    ("#!/bin/bash\nsrun python a.py\nsrun python b.py\n", "2 launch lines"),
])
def test_scripts_without_one_launch_line(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        parse_launch(["sbatch", _write(tmp_path, text)], {})
    with pytest.raises(UsageError, match="does not exist"):
        parse_launch(["sbatch", str(tmp_path / "missing.sh")], {})
    with pytest.raises(UsageError, match="no script"):
        parse_launch(["sbatch", "-N", "2"], {})


def test_tune_apply_refuses_to_rewrite_a_batch_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from llmperf_hook.cli import main

    path = _write(tmp_path, SCRIPT)
    with pytest.raises(SystemExit) as ex:
        main(["tune", "--apply", "--dry-run", "--cluster", "dgx-h100", "--", "sbatch", path])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and "cannot rewrite an sbatch script" in err and "Traceback" not in err


def test_a_bare_python_line_runs_once_and_a_launcher_line_wins_over_it(tmp_path: Path) -> None:
    single = _write(tmp_path, "#!/bin/bash\n#SBATCH -N 1\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=1\n"
                              f"source venv/bin/activate\npython -u pretrain_gpt.py {GPT}\n")
    job = parse_launch(["sbatch", single], {})
    assert (job.launcher, job.world_size) == ("python", 1)
    both = _write(tmp_path, f"#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=8\npython prepare.py\n"
                            f"srun python pretrain_gpt.py {GPT}\n", "both.sh")
    assert parse_launch(["sbatch", both], {}).world_size == 16


def test_gpus_per_node_from_total_gpus_or_gpus_per_task(tmp_path: Path) -> None:
    total = _write(tmp_path, f"#!/bin/bash\n#SBATCH -N 2\n#SBATCH --gpus=16\n"
                             f"torchrun --nproc-per-node gpu pretrain_gpt.py {GPT}\n")
    assert parse_launch(["sbatch", total], {}).nproc_per_node == 8  # 16 GPUs over 2 nodes
    per_task = _write(tmp_path, f"#!/bin/bash\n#SBATCH --ntasks-per-node=4\n#SBATCH --gpus-per-task=2\n"
                                f"torchrun --nproc-per-node gpu pretrain_gpt.py {GPT}\n", "t.sh")
    assert parse_launch(["sbatch", per_task], {}).nproc_per_node == 8

"""nvidia-resiliency-ext's ft_launcher (the launcher of Megatron-LM's CI jobs, tests/functional_tests/shell_test_utils/
_run_training.sh, LAUNCHER: ft_launcher): torchrun's options and sizing plus fault-tolerance options, every --ft-*
one valued except --ft-ignore-missing-cfg. It exited 2 ('llmperf does not know the launcher ft_launcher')."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.launch.parse import parse_launch

TAIL = ["pretrain_gpt.py", "--num-layers", "2"]


@pytest.mark.parametrize("head", [["ft_launcher"], ["/opt/venv/bin/ft_launcher"],
                                  ["python", "-m", "nvidia_resiliency_ext.fault_tolerance.launcher"]])
def test_sized_as_torchrun(head: list[str]) -> None:
    job = parse_launch([*head, "--nproc_per_node", "8", "--nnodes", "4", "--max-restarts=3", "--tee", "0:3,7:3",
                        "--redirects", "3", "--log-dir", "/logs", *TAIL], {})
    assert (job.launcher, job.nnodes, job.nproc_per_node, job.world_size, job.script) == \
        ("ft_launcher", 4, 8, 32, "pretrain_gpt.py")
    assert job.script_args == ("--num-layers", "2")


def test_fault_tolerance_options_take_values_and_warn_once() -> None:
    job = parse_launch(["ft_launcher", "--ft-cfg-path", "ft.yaml", "--ft-rank-heartbeat-timeout", "450",
                        "--ft-enable-nic-monitor", "false", "--ft-ignore-missing-cfg", "--ft-param-rank_heartbeat_timeout",
                        "60", "--term-timeout", "30", "--nproc-per-node", "8", *TAIL], {})
    assert (job.world_size, job.script) == (8, "pretrain_gpt.py")
    notes = [w for w in job.warnings if "fault-tolerance options" in w]
    assert len(notes) == 1 and "--ft-cfg-path" in notes[0] and "--ft-ignore-missing-cfg" not in notes[0]
    assert not any("unknown ft_launcher option" in w for w in job.warnings)


def test_pet_variables_and_the_ft_switch_before_the_script() -> None:
    job = parse_launch(["ft_launcher", "--ft-ignore-missing-cfg", *TAIL], {"PET_NPROC_PER_NODE": "4", "PET_NNODES": "2"})
    assert (job.world_size, job.script) == (8, "pretrain_gpt.py")


def test_a_batch_script_launching_with_ft_launcher(tmp_path: Path) -> None:
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH -N 2\nft_launcher --nproc_per_node 8 --nnodes $SLURM_NNODES "
                                     "--max-restarts=3 pretrain_gpt.py --num-layers 2\n")
    job = parse_launch(["sbatch", str(tmp_path / "job.sh")], {})
    assert (job.launcher, job.world_size) == ("ft_launcher", 16)

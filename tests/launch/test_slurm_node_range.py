"""Slurm node ranges (`srun -N 2-4`, `#SBATCH --nodes=2-4`): the step gets some count in the range (sbatch(1) -N), so
the parsed job carries the fewest as ParsedJob.elastic_min_nnodes, where its world follows the node count (H188)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.launch.parse import parse_launch

SCRIPT = ["python", "pretrain_gpt.py", "--num-layers", "2"]


@pytest.mark.parametrize("srun, least, nnodes", [
    (["srun", "-N", "2-4", "--ntasks-per-node", "8"], 2, 4),
    (["srun", "--nodes=2-4", "--gpus-per-node", "8"], 2, 4),  # one task per GPU: the world follows the nodes
    (["srun", "-N", "-3", "--ntasks-per-node", "8"], 1, 3),  # an empty MIN is 1 (verify_node_count)
    (["srun", "-N", "4", "--ntasks-per-node", "8"], None, 4),
    (["srun", "-N", "2-4", "-n", "32"], None, 4),  # the task count fixes the world, whatever the nodes
])
def test_srun_range_minimum(srun: list[str], least: int | None, nnodes: int) -> None:
    job = parse_launch([*srun, *SCRIPT], {})
    assert (job.elastic_min_nnodes, job.nnodes) == (least, nnodes), job


@pytest.mark.parametrize("nodes, least, counts, nnodes", [
    ("1,4", 1, (1,), 4),  # a size string: Slurm gives 1 or 4 nodes, never 2 or 3 (sbatch(1) -N size_string)
    ("1-15:4", 1, (1, 5, 9), 13),  # "--nodes=1-15:4" is equivalent to "--nodes=1,5,9,13"
    ("2-4", 2, (), 4),  # a range: every count from 2 (ParsedJob.elastic_node_counts empty)
])
def test_srun_size_string_counts(nodes: str, least: int, counts: tuple[int, ...], nnodes: int) -> None:
    job = parse_launch(["srun", "-N", nodes, "--ntasks-per-node", "8", *SCRIPT], {})
    assert (job.elastic_min_nnodes, job.elastic_node_counts, job.nnodes) == (least, counts, nnodes), job


def test_sbatch_size_string_reaches_the_step(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("a.sh").write_text("#!/bin/bash\n#SBATCH --nodes=2,4\n#SBATCH --ntasks-per-node=8\nsrun " + " ".join(SCRIPT)
                            + "\n")
    job = parse_launch(["sbatch", "a.sh"], {})
    assert (job.elastic_min_nnodes, job.elastic_node_counts, job.nnodes) == (2, (2,), 4), job


def test_sbatch_range_reaches_a_step_sized_by_the_allocation(tmp_path: Path, monkeypatch) -> None:
    """`srun` without -N takes SLURM_NNODES (the most of the range, as llmperf prices it) and the range's fewest; a
    launcher given its own count does not (torchrun --nnodes 4 waits for 4 nodes), nor does llmperf's own variable
    reach the job's environment."""
    monkeypatch.chdir(tmp_path)
    head = "#!/bin/bash\n#SBATCH --nodes=2-4\n#SBATCH --ntasks-per-node=8\n"
    Path("a.sh").write_text(head + "srun " + " ".join(SCRIPT) + "\n")
    Path("b.sh").write_text(head + "srun --ntasks-per-node=1 torchrun --nnodes 4 --nproc-per-node 8 pretrain_gpt.py\n")
    job = parse_launch(["sbatch", "a.sh"], {})
    assert (job.elastic_min_nnodes, job.nnodes, job.world_size) == (2, 4, 32), job
    assert not any(name.startswith("LLMPERF_") for name in job.env), job.env
    assert parse_launch(["sbatch", "b.sh"], {}).elastic_min_nnodes is None


def test_llmperf_nnodes_drops_the_range() -> None:
    job = parse_launch(["srun", "-N", "2-4", "--ntasks-per-node", "8", *SCRIPT], {}, nnodes=3)
    assert (job.elastic_min_nnodes, job.nnodes) == (None, 3)

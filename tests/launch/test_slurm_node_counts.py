"""`sbatch --nodes` / `srun -N` as Slurm reads them (src/common/proc_args.c verify_node_count): a count, MIN-MAX, or a
size string (`1,4`, `2-8:2`). Slurm accepts all three and allocates as many nodes as the value allows without
delaying the start; llmperf refused `2-8:2` ('not a valid node count'), passed `1,4` on as SLURM_NNODES=1,4, and
took MAX of a range silently. Now it prices the largest count and warns which it assumed."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.slurm_node_count import parse_node_counts

GPT = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
       "--micro-batch-size 1 --vocab-size 1000")


@pytest.mark.parametrize("value, low, high, listed", [
    ("4", 4, 4, None), ("2-8", 2, 8, None), ("2k", 2048, 2048, None), ("4-0", 4, 4, None),
    ("-4", 1, 4, None), ("0-4", 1, 4, None), (" 3", 3, 3, None),
    ("2-8:2", 2, 8, (2, 4, 6, 8)), ("1,4", 1, 4, (1, 4)), ("1-15:4", 1, 13, (1, 5, 9, 13)), ("8,2-3", 2, 8, (2, 3, 8)),
])
def test_node_counts_as_slurm_reads_them(value: str, low: int, high: int, listed: tuple[int, ...] | None) -> None:
    counts = parse_node_counts(value)
    assert (counts.low, counts.high, counts.listed) == (low, high, listed)


@pytest.mark.parametrize("value, said", [("4-2", "Maximum node count 2 is less than minimum node count 4"),
                                         ("abc", '"abc" is not a valid node count'),
                                         ("4-", "Maximum node count -1 is less than minimum node count 4"),
                                         ("-", "Maximum node count -1 is less than minimum node count 1"),
                                         ("2x-4", '"2x" is not a valid node count'),
                                         ("1,x", "is not a valid node count"), ("1,20000", "is not a valid node count"),
                                         ("2k,4", "is not a valid node count")])
def test_values_slurm_refuses(value: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse_node_counts(value)


def _sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nodes: str, *cli: str):  # type: ignore[no-untyped-def]
    (tmp_path / "job.sh").write_text(f"#!/bin/bash\n#SBATCH --nodes={nodes}\n#SBATCH --ntasks-per-node=8\n"
                                     f"srun python pretrain_gpt.py {GPT}\n")
    monkeypatch.chdir(tmp_path)
    return parse_launch(["sbatch", *cli, "job.sh"], {})


@pytest.mark.parametrize("nodes, assumed, listed", [("2-8:2", 8, "2, 4, 6, 8"), ("1,4", 4, "1, 4"),
                                                    ("2-4", 4, "2 to 4"), ("-4", 4, "1 to 4")])
def test_sbatch_range_allocates_the_most_and_says_so(nodes: str, assumed: int, listed: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    job = _sbatch(tmp_path, monkeypatch, nodes)
    assert (job.nnodes, job.world_size) == (assumed, assumed * 8)
    warning = next(w for w in job.warnings if w.startswith(f"--nodes={nodes}"))
    assert f"allocate {listed} nodes: llmperf assumes {assumed}" in warning and "#SBATCH in job.sh" in warning


def test_sbatch_single_count_does_not_warn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _sbatch(tmp_path, monkeypatch, "4")
    assert job.nnodes == 4 and not any("--nodes" in w for w in job.warnings)


def test_the_command_line_wins_and_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _sbatch(tmp_path, monkeypatch, "4", "--nodes=1-2")
    assert job.nnodes == 2 and any("sbatch's command line" in w for w in job.warnings)


def test_llmperf_nnodes_prices_another_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "job.sh").write_text(f"#!/bin/bash\n#SBATCH --nodes=2-8:2\n#SBATCH --ntasks-per-node=8\n"
                                     f"srun python pretrain_gpt.py {GPT}\n")
    monkeypatch.chdir(tmp_path)
    assert parse_launch(["sbatch", "job.sh"], {}, nnodes=2).nnodes == 2


@pytest.mark.parametrize("nodes, said", [("4-2", "Maximum node count 2"), ("2-8:x", "not a valid node count")])
def test_sbatch_refuses_what_slurm_refuses(nodes: str, said: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match=f"sbatch would stop: --nodes={nodes}.*{said}"):
        _sbatch(tmp_path, monkeypatch, nodes)


def test_srun_range() -> None:
    job = parse_launch(["srun", "-N", "1,2", "--ntasks-per-node", "8", "python", "pretrain_gpt.py", *GPT.split()], {})
    assert (job.nnodes, job.world_size) == (2, 16)
    assert any("srun -N 1,2" in w and "llmperf assumes 2" in w for w in job.warnings)
    with pytest.raises(UsageError, match="srun would stop: -N 3-1"):
        parse_launch(["srun", "-N", "3-1", "python", "pretrain_gpt.py"], {})

"""Round-4 campaign: srun -n with --ntasks-per-node (srun.html: -n wins, the per-node count is a maximum) and
mpirun/mpiexec (Open MPI, MPICH, Intel MPI option spellings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.errors import LlmperfError, UsageError
from llmperf_hook.launch.parse import parse_launch

SCRIPT = ["python", "pretrain_gpt.py", "--num-layers", "2"]


def _size(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, int, int]:
    job = parse_launch(argv, env or {})
    return job.nnodes, job.nproc_per_node, job.world_size


def test_srun_ntasks_with_a_per_node_cap_spans_nodes() -> None:
    assert _size(["srun", "--ntasks", "16", "--ntasks-per-node", "8", *SCRIPT]) == (2, 8, 16)
    assert _size(["srun", "-n", "16", "--ntasks-per-node=4", *SCRIPT], {"SLURM_NNODES": "8"}) == (4, 4, 16)
    assert _size(["srun", "-N", "2", "-n", "16", "--ntasks-per-node", "8", *SCRIPT]) == (2, 8, 16)
    assert _size(["srun", "-n", "4", "--ntasks-per-node", "8", *SCRIPT]) == (1, 4, 4)  # fewer tasks than the cap


@pytest.mark.parametrize(("launch", "expected"), [
    (["mpirun", "-np", "16", "-H", "a:8,b:8"], (2, 8, 16)),
    (["mpirun", "-n", "16", "--npernode", "8", "-x", "NCCL_DEBUG=INFO"], (2, 8, 16)),
    (["mpiexec", "-n", "8"], (1, 8, 8)),
    (["mpiexec", "-n", "8", "-ppn", "4", "-genv", "OMP_NUM_THREADS", "1"], (2, 4, 8)),
    (["mpirun", "-np", "16", "--map-by", "ppr:8:node", "--bind-to", "none", "--mca", "btl", "^openib"], (2, 8, 16)),
    (["mpirun", "-np", "12", "-H", "a:8,b:8,c:8"], (2, 6, 12)),
    (["mpirun", "-np", "4", "--npernode", "8"], (1, 4, 4)),
])
def test_mpirun_sizes(launch: list[str], expected: tuple[int, int, int]) -> None:
    assert _size([*launch, *SCRIPT]) == expected


def test_mpirun_hostfiles_and_env(tmp_path: Path) -> None:
    ompi, mpich = tmp_path / "ompi", tmp_path / "mpich"
    ompi.write_text("a slots=8  # first\nb slots=8\n")
    mpich.write_text("a:4\nb:4\n")
    assert _size(["mpirun", "--hostfile", str(ompi), *SCRIPT]) == (2, 8, 16)
    assert _size(["mpiexec", "-f", str(mpich), "-n", "8", *SCRIPT]) == (2, 4, 8)
    job = parse_launch(["mpirun", "-np", "2", "-x", "CUDA_VISIBLE_DEVICES=0,1", "train.py"], {})
    assert (job.launcher, job.script, job.world_size) == ("mpirun", "train.py", 2)


@pytest.mark.parametrize(("argv", "fragment"), [
    (["mpirun", *SCRIPT], "give -np"),
    (["mpirun", "-np", "0", *SCRIPT], "at least 1"),
    (["mpirun", "-np", "8"], "names no program"),
    (["mpirun", "-np", "8", "--hostfile", "/nonexistent/hosts", *SCRIPT], "cannot read"),
])
def test_mpirun_usage_errors(argv: list[str], fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        parse_launch(argv, {})


_MPI_WORDS = st.sampled_from(["mpirun", "mpiexec", "-np", "-n", "-N", "-ppn", "--npernode", "-H", "a:8,b", "a:x",
                              "--hostfile", "--map-by", "ppr:8:node", "ppr:x:node", "-x", "A=1", "-genv", "--mca",
                              "0", "-2", "8", "python", "torchrun", "train.py", "--", "="])


@settings(max_examples=300, deadline=None)
@given(st.lists(_MPI_WORDS, max_size=10))
def test_random_mpirun_argv_never_crashes(argv: list[str]) -> None:
    try:
        job = parse_launch(["mpirun", *argv], {})
    except LlmperfError:
        return
    assert job.world_size >= 1 and job.nnodes >= 1 and job.nproc_per_node >= 1


@pytest.mark.parametrize("prefix", [
    ["env", "-u", "FOO", "NCCL_DEBUG=INFO"], ["nohup"], ["time", "-p"], ["nice", "-n", "10"], ["numactl", "--interleave=all"],
    ["nohup", "numactl", "-N", "0", "-m", "0"], ["taskset", "-c", "0-7"], ["uv", "run", "--with", "x"],
    ["conda", "run", "-n", "env", "--no-capture-output"], ["apptainer", "exec", "--nv", "-B", "/d:/d", "img.sif"],
    # Megatron-LM examples/megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh: uv run nsys profile ... python -m ...
    ["uv", "run", "nsys", "profile", "--sample=none", "--trace=cuda,nvtx", "-f", "true", "-x", "true", "-o", "prof"],
])
def test_wrappers_before_the_launcher_are_skipped(prefix: list[str]) -> None:
    assert _size([*prefix, "torchrun", "--nnodes", "2", "--nproc-per-node", "4", *SCRIPT[1:]]) == (2, 4, 8)


def test_wrappers_between_srun_or_mpirun_and_the_script() -> None:
    job = parse_launch(["srun", "-N", "2", "--ntasks-per-node", "8", "numactl", "--cpunodebind=0", *SCRIPT], {})
    assert (job.world_size, job.script) == (16, "pretrain_gpt.py")
    job = parse_launch(["mpirun", "-np", "8", "taskset", "-c", "0-7", *SCRIPT], {})
    assert (job.world_size, job.script) == (8, "pretrain_gpt.py")


_WRAP_WORDS = st.sampled_from(["nohup", "time", "nice", "-n", "numactl", "-N", "taskset", "-c", "uv", "run", "conda",
                               "apptainer", "exec", "env", "-u", "X", "torchrun", "python", "train.py", "0", "--"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_WRAP_WORDS, max_size=8))
def test_random_wrapper_chains_never_crash(argv: list[str]) -> None:
    try:
        job = parse_launch(argv, {})
    except LlmperfError:
        return
    assert job.world_size >= 1


def test_deepspeed_exclude_without_hostfile_ignores_cuda_visible_devices() -> None:
    # runner.py: with --include/--exclude/--num_gpus/--num_nodes, CUDA_VISIBLE_DEVICES is ignored (and deleted).
    script = ["deepspeed", "--exclude", "localhost:0", "pretrain_gpt.py"]
    with pytest.raises(UsageError, match="ignores CUDA_VISIBLE_DEVICES"):
        parse_launch(script, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert parse_launch(script, {}, nproc_per_node=7).world_size == 7
    assert parse_launch(["deepspeed", "pretrain_gpt.py"], {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}).world_size == 4


def test_every_gpu_of_the_node_is_the_clusters_count_when_given() -> None:
    argv = ["torchrun", "--nnodes", "2", "--nproc-per-node", "gpu", "pretrain_gpt.py"]
    with pytest.raises(UsageError, match="--cluster"):
        parse_launch(argv, {})
    job = parse_launch(argv, {}, cluster_gpus_per_node=4)
    assert (job.nproc_per_node, job.world_size) == (4, 8)
    assert parse_launch(argv, {"CUDA_VISIBLE_DEVICES": "0,1"}, cluster_gpus_per_node=4).nproc_per_node == 2
    assert parse_launch(["deepspeed", "pretrain_gpt.py"], {}, cluster_gpus_per_node=8).world_size == 8


def test_env_assignments_after_a_wrapper_or_inside_srun_and_mpirun() -> None:
    job = parse_launch(["nohup", "env", "CUDA_VISIBLE_DEVICES=0,1,2,3", "deepspeed", "pretrain_gpt.py"], {})
    assert job.world_size == 4
    for launch in (["srun", "-N", "2", "--ntasks-per-node", "4"], ["mpirun", "-np", "8", "--npernode", "4"]):
        job = parse_launch([*launch, "env", "OMP_NUM_THREADS=1", *SCRIPT], {})
        assert (job.script, job.world_size) == ("pretrain_gpt.py", 8)  # the script was read as 'env'

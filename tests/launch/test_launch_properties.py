"""Random argv fed to the launcher parsers never crashes: a ParsedJob or a user-facing error, nothing else."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.errors import LlmperfError
from llmperf_hook.launch.parse import parse_launch

_WORDS = st.sampled_from([
    "torchrun", "deepspeed", "srun", "python", "python3", "-m", "torch.distributed.run", "torch.distributed.launch",
    "--nnodes", "--nproc-per-node", "--nproc_per_node", "--num_gpus", "--num_nodes", "--hostfile", "-H", "--include",
    "--exclude", "-N", "-n", "--ntasks-per-node", "--standalone", "gpu", "auto", "1:4", "0", "-1", "2", "8", "x",
    "train.py", "--", "=", "--nnodes=", "--nnodes=3:2", "-N4", "w0@w1:0,1", "$X", "A=1", "env", "--split '1,2'", "",
])
_ENV = st.dictionaries(st.sampled_from(["PET_NNODES", "PET_NPROC_PER_NODE", "WORLD_SIZE", "SLURM_NNODES", "SLURM_NTASKS",
                                        "SLURM_NTASKS_PER_NODE", "SLURM_PROCID", "CUDA_VISIBLE_DEVICES", "X"]),
                       st.sampled_from(["0", "1", "8", "2(x3)", "0,1", "", "abc", "-3"]), min_size=1, max_size=4)


def _check(argv: list[str], env: dict[str, str]) -> None:
    try:
        job = parse_launch(argv, env)
    except LlmperfError:
        return
    assert job.world_size >= 1 and job.nnodes >= 1 and job.nproc_per_node >= 1


@settings(max_examples=500, deadline=None)
@given(st.lists(_WORDS, max_size=10), _ENV)
def test_structured_random_argv_never_crashes(argv: list[str], env: dict[str, str]) -> None:
    _check(argv, env)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=12), max_size=8), _ENV)
def test_arbitrary_text_never_crashes(argv: list[str], env: dict[str, str]) -> None:
    _check(argv, env)

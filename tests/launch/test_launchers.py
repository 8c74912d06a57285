"""Stage [1]: launchers -> ParsedJob, each case checked against the launcher's documented behaviour."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.provenance import SourceKind

SCRIPT = ["pretrain_gpt.py", "--num-layers", "2"]


def _size(argv: list[str], env: dict[str, str] | None = None, **overrides: int) -> tuple[int, int, int]:
    job = parse_launch(argv, env or {}, overrides.get("nnodes"), overrides.get("nproc"))
    return job.nnodes, job.nproc_per_node, job.world_size


@pytest.mark.parametrize("argv", [
    ["torchrun", "--nnodes", "2", "--nproc-per-node", "8"],
    ["torchrun", "--nnodes=2", "--nproc_per_node=8"],
    ["python", "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "8"],
    ["python3", "-u", "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "8"],
    ["/usr/bin/python3.11", "-m", "torch.distributed.launch", "--nnodes=2", "--nproc_per_node=8", "--use_env"],
])
def test_torchrun_spellings(argv: list[str]) -> None:
    assert _size(argv + SCRIPT) == (2, 8, 16)


def test_torchrun_defaults_and_script_args() -> None:
    job = parse_launch(["torchrun", *SCRIPT], {})
    assert (job.nnodes, job.nproc_per_node, job.world_size) == (1, 1, 1)
    assert job.script == "pretrain_gpt.py" and job.script_args == ("--num-layers", "2")
    assert job.sources["nproc_per_node"].kind is SourceKind.DEFAULT


def test_torchrun_elastic_range_uses_max_and_warns() -> None:
    job = parse_launch(["torchrun", "--nnodes", "1:3", "--nproc-per-node", "4", *SCRIPT], {})
    assert job.world_size == 12 and any("elastic" in w for w in job.warnings)


def test_torchrun_pet_env_only_when_flag_absent() -> None:
    env = {"PET_NNODES": "4", "PET_NPROC_PER_NODE": "2"}
    assert _size(["torchrun", *SCRIPT], env) == (4, 2, 8)
    assert _size(["torchrun", "--nnodes", "3", *SCRIPT], env) == (3, 2, 6)


def test_nproc_gpu_needs_the_target_machine() -> None:
    with pytest.raises(UsageError, match="--nproc-per-node N"):
        parse_launch(["torchrun", "--nproc-per-node", "gpu", *SCRIPT], {})
    assert _size(["torchrun", "--nproc-per-node", "gpu", *SCRIPT], {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}) == (1, 4, 4)
    assert _size(["torchrun", "--nproc-per-node", "auto", *SCRIPT], {}, nproc=8) == (1, 8, 8)
    assert _size(["torchrun", "--nproc-per-node", "$SLURM_GPUS_PER_NODE", *SCRIPT], {"SLURM_GPUS_PER_NODE": "4"}) == (1, 4, 4)


@pytest.mark.parametrize("value", ["h100:4", "cuda", "4gpu"])
def test_nproc_torchrun_rejects_is_refused(value: str) -> None:
    """torch/distributed/run.py determine_local_world_size: int(value), else gpu / cpu / auto / xpu / the privateuse1
    name, else 'Unsupported nproc_per_node value' (R60: `h100:4`, what SLURM_GPUS_PER_NODE holds for
    --gpus-per-node=h100:4, was priced as 4, `cuda` as every GPU)."""
    with pytest.raises(UsageError, match="Unsupported nproc_per_node value"):
        parse_launch(["torchrun", "--nproc-per-node", "$SLURM_GPUS_PER_NODE", *SCRIPT], {"SLURM_GPUS_PER_NODE": value})


def test_overrides_win() -> None:
    assert _size(["torchrun", "--nnodes", "2", "--nproc-per-node", "8", *SCRIPT], {}, nnodes=4) == (4, 8, 32)
    job = parse_launch(["torchrun", *SCRIPT], {}, 2, 4)
    assert job.world_size == 8 and job.sources["nnodes"].kind is SourceKind.OVERRIDE


def test_unknown_options_keep_their_values() -> None:
    """Launchers whose option list plugins extend (ft_launcher's --ft-*, srun's SPANK options) skip unknown options
    with their values; torchrun's argparse refuses them (tests/launch/test_launcher_parsers.py)."""
    job = parse_launch(["ft_launcher", "--future-opt", "v", "--nproc-per-node", "2", "train.py", "--x"], {})
    assert job.script == "train.py" and job.world_size == 2 and any("--future-opt" in w for w in job.warnings)
    job = parse_launch(["srun", "--container-env", "A", "-N", "2", "--ntasks-per-node", "4", "python", "t.py"], {})
    assert job.world_size == 8 and job.script == "t.py"
    assert parse_launch(["ft_launcher", "--future-flag", "train.py", "--x"], {}).script == "train.py"
    with pytest.raises(UsageError, match="defines no option --future-opt"):
        parse_launch(["torchrun", "--future-opt", "v", "--nproc-per-node", "2", "train.py", "--x"], {})


def test_module_script_and_env_prefix() -> None:
    job = parse_launch(["env", "PET_NNODES=2", "torchrun", "--nproc-per-node", "2", "-m", "my.train", "--x"], {})
    assert job.script == "-m my.train" and job.world_size == 4 and job.env == {"PET_NNODES": "2"}


def test_unexpanded_variables_and_joined_words() -> None:
    job = parse_launch(["torchrun", "--nnodes", "$NN", "--nproc-per-node", "${GPUS}", "t.py", "--split '99,1,0'"],
                       {"NN": "2", "GPUS": "4"})
    assert job.world_size == 8 and job.script_args == ("--split", "99,1,0")
    with pytest.raises(UsageError, match="unexpanded"):
        parse_launch(["torchrun", "--nnodes", "$UNSET", "t.py"], {})


def test_deepspeed_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert _size(["deepspeed", "--num_gpus", "4", "train.py"]) == (1, 4, 4)
    assert _size(["deepspeed", "--num_accelerators=2", "train.py"]) == (1, 2, 2)
    assert _size(["deepspeed", "train.py"], {"CUDA_VISIBLE_DEVICES": "0,1,2"}) == (1, 3, 3)
    assert _size(["deepspeed", "--include", "localhost:0,1,2,3", "train.py"]) == (1, 4, 4)
    with pytest.raises(UsageError, match="--nproc-per-node"):
        parse_launch(["deepspeed", "train.py"], {})
    with pytest.raises(UsageError, match="hostfile"):
        parse_launch(["deepspeed", "--num_nodes", "2", "--num_gpus", "8", "train.py"], {})


def test_deepspeed_hostfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts").write_text("# pool\nw0 slots=8\nw1 slots=8\n\nw2 slots=4\n")
    assert _size(["deepspeed", "--hostfile", "hosts", "train.py"]) == (3, 8, 20)
    assert _size(["deepspeed", "-H", "hosts", "--num_nodes", "2", "train.py"]) == (2, 8, 16)
    assert _size(["deepspeed", "-H", "hosts", "--num_gpus", "2", "train.py"]) == (3, 2, 6)
    assert _size(["deepspeed", "-H", "hosts", "--include", "w0:0,1@w2", "train.py"]) == (2, 4, 6)
    assert _size(["deepspeed", "-H", "hosts", "--exclude", "w1@w2:0", "train.py"]) == (2, 8, 11)
    job = parse_launch(["deepspeed", "-H", "hosts", "train.py"], {})
    assert job.sources["world_size"].kind is SourceKind.HOSTFILE
    with pytest.raises(UsageError, match="mutually exclusive|cannot combine"):
        parse_launch(["deepspeed", "-H", "hosts", "--include", "w0", "--num_gpus", "2", "train.py"], {})
    with pytest.raises(UsageError, match="lacks"):
        parse_launch(["deepspeed", "-H", "hosts", "--include", "w9", "train.py"], {})


def test_deepspeed_bad_or_missing_hostfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="does not exist"):
        parse_launch(["deepspeed", "--hostfile", "nope", "train.py"], {})
    (tmp_path / "bad").write_text("w0 8\n")
    with pytest.raises(UsageError, match="bad entry"):
        parse_launch(["deepspeed", "--hostfile", "bad", "train.py"], {})


def test_srun_flags_and_env() -> None:
    assert _size(["srun", "-N", "4", "--ntasks-per-node=8", "python", "train.py"]) == (4, 8, 32)
    assert _size(["srun", "-N4", "-n32", "python", "train.py"]) == (4, 8, 32)
    env = {"SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "4(x2)"}
    assert _size(["srun", "python", "train.py"], env) == (2, 4, 8)
    assert _size(["srun", "python", "train.py"], {"SLURM_NNODES": "2", "SLURM_NTASKS": "16"}) == (2, 8, 16)
    job = parse_launch(["srun", "python", "train.py"], {"SLURM_NNODES": "2", "SLURM_GPUS_ON_NODE": "8"})
    assert job.world_size == 16 and any("one task per GPU" in w for w in job.warnings)


def test_srun_runs_a_launcher() -> None:
    job = parse_launch(["srun", "-N", "2", "torchrun", "--nnodes", "2", "--nproc-per-node", "4", "t.py"], {})
    assert job.launcher == "torchrun" and job.world_size == 8


def test_plain_python() -> None:
    assert _size(["python", "train.py"]) == (1, 1, 1)
    assert _size(["python", "train.py"], {"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}) == (2, 8, 16)  # 16 ranks, 8 a node
    assert _size(["python", "train.py"], {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_NNODES": "1"}) == (1, 4, 4)
    assert _size(["python", "train.py"], {"SLURM_NNODES": "4", "SLURM_NTASKS_PER_NODE": "8"}) == (4, 8, 32)
    assert _size(["python", "train.py"], {"SLURM_JOB_ID": "1"}) == (1, 1, 1)


@pytest.mark.parametrize(("argv", "env"), [
    (["srun", "python", "t.py"], {"SLURM_NTASKS_PER_NODE": "0"}), (["srun", "-N", "0", "python", "t.py"], {}),
    (["python", "t.py"], {"WORLD_SIZE": "0"}), (["torchrun", "--nproc-per-node", "gpu", "t.py"], {"CUDA_VISIBLE_DEVICES": ","}),
    (["srun", "-n", "0", "python", "t.py"], {}), (["torchrun", "--nnodes", "0", "t.py"], {}),
])
def test_zero_counts_are_usage_errors(argv: list[str], env: dict[str, str]) -> None:
    with pytest.raises(UsageError, match="at least 1"):
        parse_launch(argv, env)


@pytest.mark.parametrize("argv", [[], ["accelerate", "launch", "t.py"], ["torchrun"], ["torchrun", "--nnodes"],
                                  ["deepspeed", "--num_gpus", "x", "t.py"], ["srun"], ["python"], ["python", "-m"]])
def test_bad_commands_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(UsageError):
        parse_launch(argv, {})

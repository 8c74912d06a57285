"""A `python train.py` told its world by WORLD_SIZE (torch env://): node counts that disagree are re-derived."""

from __future__ import annotations

from llmperf_hook.launch.parse import parse_launch


def test_world_size_wins_over_a_disagreeing_slurm_layout() -> None:
    env = {"SLURM_JOB_ID": "1", "SLURM_NNODES": "4", "SLURM_NTASKS_PER_NODE": "8(x4)", "WORLD_SIZE": "16"}
    job = parse_launch(["python", "train.py"], env)
    assert (job.world_size, job.nnodes, job.nproc_per_node) == (16, 2, 8)
    assert any("sized from WORLD_SIZE" in w for w in job.warnings)
    agree = parse_launch(["python", "train.py"], {"NNODES": "2", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"})
    assert (agree.nnodes, agree.nproc_per_node, agree.warnings) == (2, 8, ())
    uneven = parse_launch(["python", "train.py"], {"SLURM_NNODES": "4", "WORLD_SIZE": "6"})
    assert (uneven.world_size, uneven.nnodes, uneven.nproc_per_node) == (6, 4, 2)


def test_deepspeed_launcher_args_value_is_kept_whole(tmp_path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("worker-0 slots=8\nworker-1 slots=8\n")
    for words in (["--launcher_args", "--qos high"], ["--launcher_args=-x NCCL_DEBUG=INFO --bind-to none"]):
        job = parse_launch(["deepspeed", "--hostfile", str(hostfile), "--launcher", "slurm", *words, "train.py", "--x", "1"], {})
        assert (job.script, job.world_size, job.nnodes) == ("train.py", 16, 2)
